// Package mailbox reaches the servers of a configured email account: it
// dials and logs in to IMAP (implicit TLS, STARTTLS, or plain text when the
// account says tls "none"), builds the SMTP client, and sorts what goes
// wrong into a few codes (an unreachable server, refused credentials, a
// server error) that the email tools hand to the model and choird's mail
// watcher logs. The agent's email tools and choird's watcher share it; it
// imports nothing of the project, so each translates config.json's account
// into an [Account].
package mailbox

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	gomail "github.com/wneessen/go-mail"
)

// Account is where an email account's servers are and how to log in to
// them: what this package needs of config.json's email account.
type Account struct {
	IMAPHost string
	IMAPPort int
	SMTPHost string
	SMTPPort int
	// Login is the user name for both servers.
	Login string
	// PlainText speaks without TLS (the account's tls "none"): only for a
	// relay on the same host or a test server.
	PlainText bool
	// DialFunc, when set, opens the TCP connections (the agent's egress
	// gateway); nil dials directly.
	DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Codes of an [*Error]: what kind of failure the model or the log is told.
const (
	CodeUnreachable = "server_unreachable"
	CodeAuth        = "auth_failed"
	CodeServer      = "server_error"
)

// Error is a failure to reach or use an account's server, with a code and a
// hint saying what to do.
type Error struct {
	Code string
	// Server is "smtp" or "imap", with the address.
	Server string
	Hint   string
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s %s: %s: %v", e.Code, e.Server, e.Hint, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// dialTimeout bounds one connection attempt when ctx has no sooner end.
const dialTimeout = 30 * time.Second

func addr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// unreachable wraps a failure to connect.
func unreachable(server string, err error) *Error {
	return &Error{Code: CodeUnreachable, Server: server, Err: err,
		Hint: "the server did not answer; check the account's host and port in config.json, or try again later"}
}

// DialIMAP connects to the account's IMAP server and logs in. The
// connection is closed when ctx ends, so a hung server cannot outlive the
// call; opts may carry a unilateral-data handler (IDLE).
func DialIMAP(ctx context.Context, acct Account, password string, opts *imapclient.Options) (*imapclient.Client, error) {
	server := "imap " + addr(acct.IMAPHost, acct.IMAPPort)
	if opts == nil {
		opts = &imapclient.Options{}
	}
	d := net.Dialer{Timeout: dialTimeout}
	dial := d.DialContext
	if acct.DialFunc != nil {
		dial = acct.DialFunc
	}
	conn, err := dial(ctx, "tcp", addr(acct.IMAPHost, acct.IMAPPort))
	if err != nil {
		return nil, unreachable(server, err)
	}
	var c *imapclient.Client
	switch {
	case acct.PlainText:
		c = imapclient.New(conn, opts)
	case acct.IMAPPort == 993:
		c = imapclient.New(tls.Client(conn, &tls.Config{ServerName: acct.IMAPHost, MinVersion: tls.VersionTLS12}), opts)
	default:
		o := *opts
		o.TLSConfig = &tls.Config{ServerName: acct.IMAPHost, MinVersion: tls.VersionTLS12}
		if c, err = imapclient.NewStartTLS(conn, &o); err != nil {
			conn.Close()
			return nil, &Error{Code: CodeServer, Server: server, Err: err,
				Hint: "STARTTLS failed; use port 993 for implicit TLS, or tls \"none\" for a local server"}
		}
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	go func() { <-c.Closed(); stop() }()
	if err := c.WaitGreeting(); err != nil {
		c.Close()
		return nil, unreachable(server, err)
	}
	if err := c.Login(acct.Login, password).Wait(); err != nil {
		c.Close()
		var ie *imap.Error
		if errors.As(err, &ie) {
			return nil, &Error{Code: CodeAuth, Server: server, Err: err,
				Hint: "the server refused the login; check the username in config.json and the password in the account's secret, then choirctl secret apply"}
		}
		return nil, unreachable(server, err)
	}
	return c, nil
}

// SMTPClient builds the client that sends from the account.
func SMTPClient(acct Account, password string) (*gomail.Client, error) {
	opts := []gomail.Option{gomail.WithPort(acct.SMTPPort), gomail.WithTimeout(dialTimeout),
		gomail.WithUsername(acct.Login), gomail.WithPassword(password)}
	if acct.DialFunc != nil {
		opts = append(opts, gomail.WithDialContextFunc(acct.DialFunc))
	}
	switch {
	case acct.PlainText:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS), gomail.WithSMTPAuth(gomail.SMTPAuthPlainNoEnc))
	case acct.SMTPPort == 465:
		opts = append(opts, gomail.WithSSL(), gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover))
	default:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory), gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover))
	}
	c, err := gomail.NewClient(acct.SMTPHost, opts...)
	if err != nil {
		return nil, fmt.Errorf("smtp client for %s: %w", addr(acct.SMTPHost, acct.SMTPPort), err)
	}
	return c, nil
}

// Send dials the account's SMTP server, logs in and sends msg.
func Send(ctx context.Context, acct Account, password string, msg *gomail.Msg) error {
	server := "smtp " + addr(acct.SMTPHost, acct.SMTPPort)
	c, err := SMTPClient(acct, password)
	if err != nil {
		return &Error{Code: CodeServer, Server: server, Err: err, Hint: "check the account's smtp_host and smtp_port"}
	}
	sc, err := c.DialToSMTPClientWithContext(ctx)
	if err != nil {
		var ne net.Error
		var oe *net.OpError
		if errors.As(err, &oe) || errors.As(err, &ne) || ctx.Err() != nil {
			return unreachable(server, err)
		}
		return &Error{Code: CodeAuth, Server: server, Err: err,
			Hint: "the server refused the connection or the login; check the username in config.json and the password in the account's secret, then choirctl secret apply"}
	}
	defer func() { _ = c.CloseWithSMTPClient(sc) }()
	if err := c.SendWithSMTPClient(sc, msg); err != nil {
		return &Error{Code: CodeServer, Server: server, Err: err,
			Hint: "the server did not accept the message; read its answer above"}
	}
	return nil
}
