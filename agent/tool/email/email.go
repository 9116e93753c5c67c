// Package email is the agent's email family (spec 8.7, 18.3):
// choir.email.send, choir.email.receive and choir.email.check, on the
// email account the session leased. The tools write the mail (MIME, with
// wneessen/go-mail), read it back (attachments in and out of the
// workspace), and check the account's policy early; a [Transport] carries
// it. Under choird the transport is choird's mail route on the egress
// gateway (issue 34): choird does the SMTP and IMAP with the password,
// which never enters the agent, and checks the policy again. Without a
// gateway (tests, an agent run by hand) the tools reach the servers
// themselves: each declares the account's secret, and only that one, in
// its secret_resources, so the registry hands it to these tools and to no
// other. Everything that goes wrong (no account, a missing secret, a
// refused login, an unreachable server, an attachment outside the
// workspace or too big, a recipient the account may not write to) is a
// result with status error whose output names the problem and the fix,
// and a log line; nothing here ends the agent.
package email

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/mailbox"
	"github.com/choirhq/choir/rpc"
)

// Names of the email tools.
const (
	NameSend    = "choir.email.send"
	NameReceive = "choir.email.receive"
	NameCheck   = "choir.email.check"
)

// Approver files an approval request with choird (REQUEST_APPROVAL); a
// second request with the same ID returns the first approval and its
// current status.
type Approver interface {
	RequestApproval(ctx context.Context, requestID string, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error)
}

// Config binds the email tools to a session.
type Config struct {
	// AccountFunc returns the session's leased account, read at call time
	// so a configuration reload applies to the next call; ok is false when
	// the session has none.
	AccountFunc func() (name string, acct config.EmailAccount, ok bool)
	// Transport, when set, carries the mail (choird's mail route through
	// the egress gateway, a mailbox.Remote): the tools then need and
	// declare no secret. Nil reaches the servers with the password.
	Transport Transport
	// Secret names the leased account's secret when Transport is nil:
	// the one secret the tools declare, and so the only one they
	// receive. Empty when the session has no account or a Transport.
	Secret string
	// Approvals files the approvals of accounts that need them (NeedsApproval);
	// nil makes such an account refuse to send.
	Approvals Approver
	// Decisions are the outcomes choird pushed (approval_resolved). A
	// second REQUEST_APPROVAL with the same request ID is a replay that
	// answers the first outcome, pending, so the decision is learnt here.
	Decisions *Decisions
	// Logger receives a line per refused or failed call; nil discards.
	Logger *slog.Logger
	// DialFunc, when set, opens the connections to the mail servers
	// when Transport is nil; nil dials directly.
	DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxMessageBytes bounds what choir.email.receive reads of one
	// message (0: mailbox.DefaultMaxMessageBytes, or more when the
	// account's attachment limit needs it); MaxPageBytes bounds what one
	// call reads of all its messages together (0:
	// mailbox.DefaultMaxPageBytes). choird's route bounds them again.
	MaxMessageBytes int64
	MaxPageBytes    int64
}

// Tools returns the three email tools bound to cfg.
func Tools(cfg Config) []tool.Tool {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AccountFunc == nil {
		cfg.AccountFunc = func() (string, config.EmailAccount, bool) { return "", config.EmailAccount{}, false }
	}
	if cfg.Decisions == nil {
		cfg.Decisions = NewDecisions()
	}
	s := &sender{cfg: cfg, sent: map[string]string{}}
	// What a mailbox holds is strangers' words (issue 30).
	return []tool.Tool{s, tool.WithSources(receiver{cfg: cfg}, catalog.MailSources),
		tool.WithSources(checker{cfg: cfg}, catalog.MailSources)}
}

// Transport carries the tools' mail to and from the account:
// mailbox.Direct with the password, or mailbox.Remote to choird's route.
type Transport interface {
	Send(ctx context.Context, sub mailbox.Submission) (mailbox.Sent, error)
	Fetch(ctx context.Context, q mailbox.Query) (mailbox.Page, error)
	Check(ctx context.Context, q mailbox.CheckQuery) (mailbox.Summary, error)
}

// secrets is the secret_resources of every email tool.
func (c Config) secrets() []string {
	if c.Secret == "" || c.Transport != nil {
		return nil
	}
	return []string{c.Secret}
}

// Problem is the output of a refused or failed call: a code the model can
// branch on, what is wrong and what to do.
type Problem struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Codes of [Problem] besides those of the mailbox package.
const (
	CodeNoAccount          = "no_email_account"
	CodeMissingSecret      = "missing_secret"
	CodeInvalidAddress     = "invalid_address"
	CodeRecipientForbidden = "recipient_not_allowed"
	CodeAttachmentOutside  = "attachment_outside_workspace"
	CodeAttachmentTooLarge = "attachment_too_large"
	CodeAttachmentUnusable = "attachment_unreadable"
	CodeApprovalRejected   = "approval_rejected"
	CodeApprovalNeeded     = "approval_unavailable"
	CodeBadInput           = "invalid_input"
	CodeFolder             = mailbox.CodeFolder
)

// fail logs a refused call and returns its result for the model.
func (c Config) fail(ctx context.Context, name string, p Problem) tool.Result {
	c.Logger.WarnContext(ctx, "email tool refused", slog.String("tool", name), slog.String("code", p.Error),
		slog.String("message", p.Message))
	b, err := tool.MarshalNoEscape(p)
	if err != nil {
		return tool.ErrorResult("%s: %s", p.Error, p.Message)
	}
	return tool.Result{Status: tool.StatusError, Summary: p.Error + ": " + p.Message, Output: b}
}

// failErr turns a server failure into a result.
func (c Config) failErr(ctx context.Context, name string, err error) tool.Result {
	var me *mailbox.Error
	if errors.As(err, &me) {
		return c.fail(ctx, name, Problem{Error: me.Code, Message: fmt.Sprintf("%s: %v", me.Server, me.Err), Fix: me.Hint})
	}
	return c.fail(ctx, name, Problem{Error: mailbox.CodeServer, Message: err.Error()})
}

// session resolves the leased account and the transport that reaches
// it, or the problem.
func (c Config) session(env tool.Env) (string, config.EmailAccount, Transport, *Problem) {
	name, acct, ok := c.AccountFunc()
	if !ok {
		return "", acct, nil, &Problem{Error: CodeNoAccount, Message: "this session has no email account",
			Fix: "ask the user to start the agent with an email account (--email=<name>, or defaults.email in config.json)"}
	}
	if c.Transport != nil {
		return name, acct, c.Transport, nil
	}
	pw, ok := env.Secret(acct.Secret)
	if !ok || pw == "" || acct.Secret != c.Secret {
		return name, acct, nil, &Problem{Error: CodeMissingSecret,
			Message: fmt.Sprintf("the secret %q of email account %q is not available", acct.Secret, name),
			Fix:     "ask the admin to put the account's password in secrets.json under that name and run choirctl secret apply"}
	}
	return name, acct, mailbox.Direct{Account: c.mailboxAccount(acct), Password: pw}, nil
}

// mailboxAccount is what package mailbox needs of the account.
func (c Config) mailboxAccount(a config.EmailAccount) mailbox.Account {
	return mailbox.Account{IMAPHost: a.IMAPHost, IMAPPort: a.IMAPPort, SMTPHost: a.SMTPHost, SMTPPort: a.SMTPPort,
		Login: a.Login(), PlainText: a.TLS == config.EmailTLSNone, DialFunc: c.DialFunc}
}

// decode unmarshals a validated input.
func decode[T any](input json.RawMessage) (T, error) {
	var v T
	err := json.Unmarshal(input, &v)
	return v, err
}

// Decisions remembers the outcomes of approvals that choird pushed to the
// session (approval_resolved). It is safe for concurrent use.
type Decisions struct {
	mu sync.Mutex
	m  map[string]rpc.ApprovalStatus
}

// NewDecisions returns an empty set of decisions.
func NewDecisions() *Decisions { return &Decisions{m: map[string]rpc.ApprovalStatus{}} }

// Resolve records the outcome of approval id.
func (d *Decisions) Resolve(id string, status rpc.ApprovalStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m[id] = status
}

func (d *Decisions) status(id string) (rpc.ApprovalStatus, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.m[id]
	return s, ok
}
