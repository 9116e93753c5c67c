// Package mailbox reaches the servers of a configured email account: it
// dials and logs in to IMAP (implicit TLS, STARTTLS, or plain text when the
// account says tls "none"), builds the SMTP client, and sorts what goes
// wrong into a few codes (an unreachable server, refused credentials, a
// server error) that the email tools hand to the model and choird's mail
// watcher logs. It reads a folder's page (Fetch) and its counts (Check),
// and submits a written mail once under its Message-ID (Submit).
//
// Both ends of choird's mail route (issue 34) use it: choird reaches the
// servers with the password ([Direct]); the agent's email tools reach
// choird's route through the egress gateway ([Remote]), or the servers
// themselves when they run without a gateway, and so hold the same
// methods either way. It imports nothing of the project, so each side
// translates config.json's account into an [Account].
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
