package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"

	"github.com/choirhq/choir/daemon/audit"
	"github.com/choirhq/choir/daemon/console"
	"github.com/choirhq/choir/daemon/console/login"
)

// consoleHost is the web console as choird serves it: its listener, its
// logins (which the admin API issues) and its pages.
type consoleHost struct {
	ln     net.Listener
	url    string
	logins *login.Store
	pages  *console.Console
}

// ConsoleURL is the web console's address as bound (http://127.0.0.1:7780),
// or "" when config.json asks for none.
func (d *Daemon) ConsoleURL() string {
	if d.console == nil {
		return ""
	}
	return d.console.url
}

// listenConsole listens for the web console when config.json has a console
// block: on its address, with TLS when it names a certificate. It returns
// nil, nil without one.
func (d *Daemon) listenConsole(ctx context.Context) (*consoleHost, error) {
	cfg := d.Snapshot().Config.Console
	if cfg == nil {
		return nil, nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Address())
	if err != nil {
		return nil, fmt.Errorf("console: listen on %s (config.json console.listen): %w", cfg.Address(), err)
	}
	scheme := "http"
	if cfg.TLS != nil {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("console: load config.json console.tls: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	h := &consoleHost{ln: ln, url: scheme + "://" + ln.Addr().String()}
	h.logins = login.New(d.pool, cfg.SessionLifetime(), h.url)
	logger := d.logger.With(slog.String("component", "console"))
	h.pages = console.New(console.Options{Control: d.Control, Approvals: d.approvals, Usage: d.newUsage(),
		Audit: &audit.Reader{Pool: d.pool, Control: d.Control}, Logins: h.logins,
		Proposals: d.proposer, Logger: logger, TLS: cfg.TLS != nil})
	logger.InfoContext(ctx, "console listening", slog.String("url", h.url))
	return h, nil
}
