// Package mailboxtest runs real mail servers for tests: an SMTP server
// (emersion/go-smtp, PLAIN auth over plain text) that delivers each message
// it accepts into the IMAP mailboxes of its local recipients and keeps a
// copy in the sender's Sent folder, as providers do, and an IMAP
// server (go-imap v2's imapserver over imapmemserver) with IDLE. Both speak
// the real wire protocol on 127.0.0.1. It is for tests only.
//
// The IMAP server's IDLE reports the changes that came before it, as
// servers such as Dovecot do by looking at the mailbox as IDLE starts.
// imapmemserver's own IDLE reports only what changes after it has started:
// a message delivered between a client's last command and its IDLE was
// never announced, which is what made the mail watcher's tests flaky under
// load. ForgetfulIdle brings that behaviour back, for the client's tests.
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

// SentFolder is where the server keeps a copy of every message a user
// submits, as Gmail and other providers do: the sender finds it there.
const SentFolder = "Sent"

// Envelope is one message the SMTP server accepted.
type Envelope struct {
	From string
	To   []string
	Data []byte
}

// Server is a pair of SMTP and IMAP servers sharing their users.
type Server struct {
	SMTPPort, IMAPPort int

	mu    sync.Mutex
	users map[string]*user
	sent  []Envelope
	// changed is closed, and replaced, whenever a mailbox changes: an IDLE
	// waiting on it looks again (see imapSession.Idle).
	changed chan struct{}
	// onIdle are the deliveries the next IDLE commands make as they
	// start, one each (DeliverOnIdle).
	onIdle []func()
	// forgetful IDLEs report only what changes after they began
	// (ForgetfulIdle).
	forgetful bool
}

type user struct {
	password string
	mem      *imapmemserver.User
}

// Start runs both servers until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{users: map[string]*user{}, changed: make(chan struct{})}

	iln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	isrv := imapserver.New(&imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return &imapSession{s: s}, nil, nil
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

// AddUser creates a mailbox user (an address) with a password, an INBOX
// and a Sent folder.
func (s *Server) AddUser(t testing.TB, address, password string) {
	t.Helper()
	u := imapmemserver.NewUser(address, password)
	for _, name := range []string{"INBOX", SentFolder} {
		if err := u.Create(name, nil); err != nil {
			t.Fatal(err)
		}
	}
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
	uid, err := s.deliver(u, folder, raw)
	if err != nil {
		t.Fatalf("deliver to %s %s: %v", address, folder, err)
	}
	return uid
}

func (s *Server) deliver(u *user, folder string, raw []byte) (imap.UID, error) {
	defer s.change()
	d, err := u.mem.Append(folder, bytes.NewReader(raw), &imap.AppendOptions{})
	if err != nil {
		return 0, err
	}
	return d.UID, nil
}

// DeliverOnIdle delivers raw to a user's folder as an IDLE command of any
// client starts, before the server has reported anything: the mail arrives
// between the client's last look at the folder and its IDLE. Each IDLE
// takes one such delivery, in the order they were asked for. The channel
// receives the message's UID once it is delivered.
func (s *Server) DeliverOnIdle(t testing.TB, address, folder string, raw []byte) <-chan imap.UID {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[strings.ToLower(address)]
	if u == nil {
		t.Fatalf("deliver: no user %s", address)
	}
	done := make(chan imap.UID, 1)
	s.onIdle = append(s.onIdle, func() {
		uid, err := s.deliver(u, folder, raw)
		if err != nil {
			t.Errorf("deliver to %s %s as IDLE starts: %v", address, folder, err)
		}
		done <- uid
	})
	return done
}

// ForgetfulIdle makes the server's IDLE report only the changes that come
// after it began, as imapmemserver's own IDLE does and as a careless server
// might: a client that trusts IDLE alone never hears of mail that arrived
// just before it.
func (s *Server) ForgetfulIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetful = true
}

// change wakes every IDLE to look at its mailbox again.
func (s *Server) change() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

// idleStarts takes the next IDLE hook, if any, the channel that says a
// mailbox changed since, and whether IDLE is forgetful.
func (s *Server) idleStarts() (func(), <-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hook func()
	if len(s.onIdle) > 0 {
		hook, s.onIdle = s.onIdle[0], s.onIdle[1:]
	}
	return hook, s.changed, s.forgetful
}

func (s *Server) changedSince() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// imapSession is imapmemserver's session with an IDLE that reports what
// changed before it started, and with every change that can concern
// another session's IDLE announced to it.
type imapSession struct {
	*imapmemserver.UserSession // nil until Login
	s                          *Server
}

// Login logs in as one of the server's users.
func (ss *imapSession) Login(username, password string) error {
	ss.s.mu.Lock()
	u := ss.s.users[strings.ToLower(username)]
	ss.s.mu.Unlock()
	if u == nil {
		return imapserver.ErrAuthFailed
	}
	if err := u.mem.Login(username, password); err != nil {
		return err
	}
	ss.UserSession = imapmemserver.NewUserSession(u.mem)
	return nil
}

// Fetch reads messages, and marks them seen unless asked to peek.
func (ss *imapSession) Fetch(w *imapserver.FetchWriter, numSet imap.NumSet, options *imap.FetchOptions) error {
	defer ss.s.change()
	return ss.UserSession.Fetch(w, numSet, options)
}

// Idle reports the session's pending updates, then again after each change,
// until stop. A change is queued for this session (imapmemserver does so
// while it makes the change) before it is announced, and the channel is
// taken before each look, so no change falls between the two.
func (ss *imapSession) Idle(w *imapserver.UpdateWriter, stop <-chan struct{}) error {
	hook, changed, forgetful := ss.s.idleStarts()
	if hook != nil {
		hook()
	}
	if forgetful {
		return ss.UserSession.Idle(w, stop)
	}
	for {
		if err := ss.Poll(w, true); err != nil {
			return err
		}
		select {
		case <-stop:
			return nil
		case <-changed:
			changed = ss.s.changedSince()
		}
	}
}

// Append appends through IMAP (a client saving a sent message, say).
func (ss *imapSession) Append(mailbox string, r imap.LiteralReader, options *imap.AppendOptions) (*imap.AppendData, error) {
	defer ss.s.change()
	return ss.UserSession.Append(mailbox, r, options)
}

// Copy copies messages to another mailbox.
func (ss *imapSession) Copy(numSet imap.NumSet, dest string) (*imap.CopyData, error) {
	defer ss.s.change()
	return ss.UserSession.Copy(numSet, dest)
}

// Move moves messages to another mailbox.
func (ss *imapSession) Move(w *imapserver.MoveWriter, numSet imap.NumSet, dest string) error {
	defer ss.s.change()
	return ss.UserSession.Move(w, numSet, dest)
}

// Expunge removes deleted messages.
func (ss *imapSession) Expunge(w *imapserver.ExpungeWriter, uids *imap.UIDSet) error {
	defer ss.s.change()
	return ss.UserSession.Expunge(w, uids)
}

// Store changes flags.
func (ss *imapSession) Store(w *imapserver.FetchWriter, numSet imap.NumSet, flags *imap.StoreFlags, options *imap.StoreOptions) error {
	defer ss.s.change()
	return ss.UserSession.Store(w, numSet, flags, options)
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
	authed string // the user logged in, or ""
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
		ss.authed = strings.ToLower(username)
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.authed == "" {
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
	defer ss.s.change()
	ss.s.mu.Lock()
	ss.s.sent = append(ss.s.sent, ss.env)
	var errs []error
	if u := ss.s.users[ss.authed]; u != nil {
		if _, err := u.mem.Append(SentFolder, bytes.NewReader(data), &imap.AppendOptions{Flags: []imap.Flag{imap.FlagSeen}}); err != nil {
			errs = append(errs, err)
		}
	}
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
