// Package mailboxtest runs real mail servers for tests: an SMTP server
// (emersion/go-smtp, PLAIN auth over plain text) that delivers each message
// it accepts into the IMAP mailboxes of its local recipients, and an IMAP
// server (go-imap v2's imapserver over imapmemserver) with IDLE. Both speak
// the real wire protocol on 127.0.0.1. It is for tests only.
package mailboxtest

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/choirhq/choir/config"
)

// Envelope is one message the SMTP server accepted.
type Envelope struct {
	From string
	To   []string
	Data []byte
}

// Server is a pair of SMTP and IMAP servers sharing their users.
type Server struct {
	SMTPPort, IMAPPort int

	mem *imapmemserver.Server

	mu    sync.Mutex
	users map[string]*user
	sent  []Envelope
}

type user struct {
	password string
	mem      *imapmemserver.User
}

// Start runs both servers until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{mem: imapmemserver.New(), users: map[string]*user{}}

	iln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	isrv := imapserver.New(&imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return s.mem.NewSession(), nil, nil
		},
		Caps:         imap.CapSet{imap.CapIMAP4rev1: {}, imap.CapIMAP4rev2: {}, imap.CapIdle: {}},
		InsecureAuth: true,
		Logger:       log.New(io.Discard, "", 0),
	})
	go func() { _ = isrv.Serve(iln) }()
	t.Cleanup(func() { _ = isrv.Close() })
	s.IMAPPort = iln.Addr().(*net.TCPAddr).Port

	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ssrv := smtp.NewServer(backend{s})
	ssrv.Domain = "localhost"
	ssrv.AllowInsecureAuth = true
	ssrv.ReadTimeout, ssrv.WriteTimeout = time.Minute, time.Minute
	ssrv.MaxMessageBytes = 64 << 20
	go func() { _ = ssrv.Serve(sln) }()
	t.Cleanup(func() { _ = ssrv.Close() })
	s.SMTPPort = sln.Addr().(*net.TCPAddr).Port
	return s
}

// AddUser creates a mailbox user (an address) with a password and an INBOX.
func (s *Server) AddUser(t testing.TB, address, password string) {
	t.Helper()
	u := imapmemserver.NewUser(address, password)
	if err := u.Create("INBOX", nil); err != nil {
		t.Fatal(err)
	}
	s.mem.AddUser(u)
	s.mu.Lock()
	s.users[strings.ToLower(address)] = &user{password: password, mem: u}
	s.mu.Unlock()
}

// Account is a config.json email account on these servers for address,
// in plain text.
func (s *Server) Account(address string) config.EmailAccount {
	return config.EmailAccount{SMTPHost: "127.0.0.1", SMTPPort: s.SMTPPort, IMAPHost: "127.0.0.1", IMAPPort: s.IMAPPort,
		Sharing: config.EmailExclusive, Secret: "mail-secret",
		EmailPolicy: config.EmailPolicy{Address: address, TLS: config.EmailTLSNone}}
}

// Deliver appends a raw message to a user's folder, as mail arriving.
func (s *Server) Deliver(t testing.TB, address, folder string, raw []byte) imap.UID {
	t.Helper()
	s.mu.Lock()
	u := s.users[strings.ToLower(address)]
	s.mu.Unlock()
	if u == nil {
		t.Fatalf("deliver: no user %s", address)
	}
	d, err := u.mem.Append(folder, bytes.NewReader(raw), &imap.AppendOptions{})
	if err != nil {
		t.Fatalf("deliver to %s %s: %v", address, folder, err)
	}
	return d.UID
}

// Sent returns the envelopes the SMTP server accepted.
func (s *Server) Sent() []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Envelope(nil), s.sent...)
}

type backend struct{ s *Server }

func (b backend) NewSession(*smtp.Conn) (smtp.Session, error) { return &session{s: b.s}, nil }

type session struct {
	s      *Server
	authed bool
	env    Envelope
}

var errAuth = &smtp.SMTPError{Code: 535, EnhancedCode: smtp.EnhancedCode{5, 7, 8}, Message: "authentication failed"}

func (ss *session) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, username, password string) error {
		ss.s.mu.Lock()
		u := ss.s.users[strings.ToLower(username)]
		ss.s.mu.Unlock()
		if u == nil || u.password != password {
			return errAuth
		}
		ss.authed = true
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if !ss.authed {
		return smtp.ErrAuthRequired
	}
	ss.env = Envelope{From: from}
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.env.To = append(ss.env.To, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	ss.env.Data = data
	ss.s.mu.Lock()
	ss.s.sent = append(ss.s.sent, ss.env)
	var errs []error
	for _, to := range ss.env.To {
		if u := ss.s.users[strings.ToLower(to)]; u != nil {
			if _, err := u.mem.Append("INBOX", bytes.NewReader(data), &imap.AppendOptions{}); err != nil {
				errs = append(errs, err)
			}
		}
	}
	ss.s.mu.Unlock()
	return errors.Join(errs...)
}

func (ss *session) Reset()        { ss.env = Envelope{} }
func (ss *session) Logout() error { return nil }
