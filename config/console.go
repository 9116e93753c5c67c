package config

import (
	"net"
	"strconv"
	"time"
)

// Console is the operator's web console, served by choird on a listener
// of its own (issue 32). Without a console block in config.json there is
// no console; choirctl init --local writes one.
type Console struct {
	// Listen is the TCP address it serves on (default 127.0.0.1:7780).
	Listen string `json:"listen,omitempty"`
	// TLS, when set, serves it over HTTPS with this certificate and key;
	// its session cookie is then Secure.
	TLS *ConsoleTLS `json:"tls,omitempty"`
	// SessionLifetimeMS is how long a login lasts (default 12 hours, at
	// least a minute, at most 30 days).
	SessionLifetimeMS int64 `json:"session_lifetime_ms,omitempty"`
}

// ConsoleTLS names the console's certificate and key files (PEM).
type ConsoleTLS struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// Defaults and bounds of the console.
const (
	DefaultConsoleListen          = "127.0.0.1:7780"
	DefaultConsoleSessionLifetime = 12 * time.Hour
	minConsoleSessionLifetime     = time.Minute
	maxConsoleSessionLifetime     = 30 * 24 * time.Hour
)

// Address is where the console listens.
func (c Console) Address() string {
	if c.Listen == "" {
		return DefaultConsoleListen
	}
	return c.Listen
}

// SessionLifetime is how long a console login lasts.
func (c Console) SessionLifetime() time.Duration {
	if c.SessionLifetimeMS <= 0 {
		return DefaultConsoleSessionLifetime
	}
	return time.Duration(c.SessionLifetimeMS) * time.Millisecond
}

// console validates the console block, when there is one.
func (v *validator) console() {
	c := v.c.Console
	if c == nil {
		return
	}
	if c.Listen != "" {
		host, port, err := net.SplitHostPort(c.Listen)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			v.add(path("console", "listen"), "want host:port, e.g. %q", DefaultConsoleListen)
		} else if host == "" {
			v.add(path("console", "listen"), "name the host to listen on, e.g. %q; an empty host listens on every interface",
				DefaultConsoleListen)
		}
	}
	if c.TLS != nil {
		if c.TLS.Cert == "" {
			v.add(path("console", "tls", "cert"), "name the certificate file (PEM)")
		}
		if c.TLS.Key == "" {
			v.add(path("console", "tls", "key"), "name the private key file (PEM)")
		}
	}
	if ms := c.SessionLifetimeMS; ms != 0 {
		if d := time.Duration(ms) * time.Millisecond; ms < 0 || d < minConsoleSessionLifetime || d > maxConsoleSessionLifetime {
			v.add(path("console", "session_lifetime_ms"), "must be between %d (a minute) and %d (30 days); 0 takes the default, 12 hours",
				minConsoleSessionLifetime.Milliseconds(), maxConsoleSessionLifetime.Milliseconds())
		}
	}
}
