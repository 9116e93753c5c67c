// Package email is the agent's email family (spec 8.7, 18.3):
// choir.email.send over SMTP (wneessen/go-mail), and choir.email.receive
// and choir.email.check over IMAP (emersion/go-imap v2), on the email
// account the session leased. Each tool declares the account's secret,
// and only that one, in its secret_resources, so the registry hands it to
// these tools and to no other. Everything that goes wrong (no account, a
// missing secret, a refused login, an unreachable server, an attachment
// outside the workspace or too big, a recipient the account may not
// write to) is a result with status error whose output names the problem
// and the fix, and a log line; nothing here ends the agent.
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
	// Secret names the leased account's secret: the one secret the tools
	// declare, and so the only one they receive. Empty when the session
	// has no account.
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
	// DialFunc, when set, opens the connections to the mail servers (the
	// agent's way out through choird's egress gateway); nil dials
	// directly.
	DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxMessageBytes bounds what choir.email.receive reads of one
	// message (0: DefaultMaxMessageBytes, or more when the account's
	// attachment limit needs it); MaxPageBytes bounds what one call reads
	// of all its messages together (0: DefaultMaxPageBytes).
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

// secrets is the secret_resources of every email tool.
func (c Config) secrets() []string {
	if c.Secret == "" {
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
	CodeFolder             = "folder_error"
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

// session resolves the leased account and its password, or the problem.
func (c Config) session(env tool.Env) (string, config.EmailAccount, string, *Problem) {
	name, acct, ok := c.AccountFunc()
	if !ok {
		return "", acct, "", &Problem{Error: CodeNoAccount, Message: "this session has no email account",
			Fix: "ask the user to start the agent with an email account (--email=<name>, or defaults.email in config.json)"}
	}
	pw, ok := env.Secret(acct.Secret)
	if !ok || pw == "" || acct.Secret != c.Secret {
		return name, acct, "", &Problem{Error: CodeMissingSecret,
			Message: fmt.Sprintf("the secret %q of email account %q is not available", acct.Secret, name),
			Fix:     "ask the admin to put the account's password in secrets.json under that name and run choirctl secret apply"}
	}
	return name, acct, pw, nil
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
