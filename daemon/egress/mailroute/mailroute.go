// Package mailroute is the egress gateway's mail route (issue 34): the
// agent's email tools call /svc/mail/<account>/<send|fetch|check> on the
// gateway, and choird does the SMTP submission and the IMAP reads with the
// account's password from secrets.json, which never enters the agent.
// Only the account the caller's session is bound to answers.
//
// The agent is taken to be compromised, so a send is checked again here,
// whatever the agent checked: the envelope sender and the From header are
// the account's own address, every recipient is one the account may write
// to, the Message-ID header is the one the request names, and on an
// account that needs approval, the mail is exactly the one a person
// approved for this agent (recipients, subject, bodies and attachments),
// and one mail per approval. Each mail is recorded under its Message-ID in
// choir_control.mail_sends before it is submitted: a request repeated
// after a crash is answered with the first outcome and never sent twice.
package mailroute

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/daemon/mailwatch"
	"github.com/choirhq/choir/internal/mailbox"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/sql/seam"
)

// Prefix is the path prefix of the mail route.
const Prefix = "/svc/" + mailbox.Service + "/"

// maxQueryBytes bounds the body of a fetch or a check.
const maxQueryBytes = 64 << 10

// maxSendBytes bounds the body of a send: the mail in base64, and its
// envelope.
const maxSendBytes = mailbox.MaxSubmitBytes*4/3 + 1<<20

// maxNewest bounds the messages a check lists.
const maxNewest = 20

// Options configure a Handler.
type Options struct {
	// Pool reads the caller's session and the approvals, and records the
	// mails sent.
	Pool *pgxpool.Pool
	// Config returns the running config.json and secrets.json.
	Config func() (*config.Config, config.Secrets)
	Logger *slog.Logger
}

// Handler serves the mail route. It is safe for concurrent use.
type Handler struct {
	pool   *pgxpool.Pool
	config func() (*config.Config, config.Secrets)
	logger *slog.Logger

	mu sync.Mutex
	// sending are the mails this choird is submitting now, by agent and
	// Message-ID: a row 'sending' that is not among them was cut short.
	sending map[sendKey]bool
}

type sendKey struct{ agent, messageID string }

// New returns a Handler.
func New(o Options) *Handler {
	h := &Handler{pool: o.Pool, config: o.Config, logger: o.Logger, sending: map[sendKey]bool{}}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	return h
}

// refusal is an answer other than success: an HTTP status and the body.
type refusal struct {
	status int
	mailbox.ErrorDetail
}

func refuse(status int, code, hint, format string, args ...any) *refusal {
	return &refusal{status: status, ErrorDetail: mailbox.ErrorDetail{Code: code, Message: fmt.Sprintf(format, args...), Hint: hint}}
}

// account is the caller's bound account, resolved.
type account struct {
	name    string
	cfg     config.EmailAccount
	session uuid.UUID
	caller  egress.Caller
	direct  mailbox.Direct
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller, ok := egress.CallerFrom(r.Context())
	if !ok {
		writeRefusal(w, refuse(http.StatusForbidden, "no_caller", "", "the gateway knows no session for this connection"))
		return
	}
	name, call, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), Prefix), "/")
	if !strings.HasPrefix(r.URL.EscapedPath(), Prefix) || (call != mailbox.CallSend && call != mailbox.CallFetch && call != mailbox.CallCheck) {
		writeRefusal(w, refuse(http.StatusNotFound, "no_route", "", "no mail route %s: the routes are POST %s<account>/<send|fetch|check>",
			r.URL.Path, Prefix))
		return
	}
	if r.Method != http.MethodPost {
		writeRefusal(w, refuse(http.StatusMethodNotAllowed, "no_route", "", "%s %s: the mail route takes POST", r.Method, r.URL.Path))
		return
	}
	acct, ref := h.resolve(r.Context(), caller, name)
	if ref != nil {
		h.logger.WarnContext(r.Context(), "mail route refused", slog.String("agent_id", caller.AgentID),
			slog.String("session_id", caller.SessionID), slog.String("account", name), slog.String("call", call),
			slog.String("code", ref.Code), slog.String("message", ref.Message))
		writeRefusal(w, ref)
		return
	}
	var out any
	switch call {
	case mailbox.CallSend:
		var sub mailbox.Submission
		if ref = decode(w, r, maxSendBytes, &sub); ref == nil {
			out, ref = h.send(r.Context(), acct, sub)
		}
	case mailbox.CallFetch:
		var q mailbox.Query
		if ref = decode(w, r, maxQueryBytes, &q); ref == nil {
			out, ref = h.fetch(r.Context(), acct, q)
		}
	case mailbox.CallCheck:
		var q mailbox.CheckQuery
		if ref = decode(w, r, maxQueryBytes, &q); ref == nil {
			q.Newest = min(max(q.Newest, 0), maxNewest)
			out, ref = serverAnswer(mailbox.Check(r.Context(), acct.direct.Account, acct.direct.Password, q))
		}
	}
	if ref != nil {
		h.logger.WarnContext(r.Context(), "mail route refused", slog.String("agent_id", caller.AgentID),
			slog.String("account", name), slog.String("call", call), slog.String("code", ref.Code), slog.String("message", ref.Message))
		writeRefusal(w, ref)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// resolve finds the caller's session's account: only the one it is bound
// to, with its password.
func (h *Handler) resolve(ctx context.Context, caller egress.Caller, name string) (account, *refusal) {
	sid, err := uuid.Parse(caller.SessionID)
	if err != nil {
		return account{}, refuse(http.StatusForbidden, "no_caller", "", "caller session %q is no session id", caller.SessionID)
	}
	st, err := seam.Queries(h.pool).SessionDynamicState(ctx, sid)
	if err != nil {
		h.logger.WarnContext(ctx, "mail route: session not read", slog.String("session_id", caller.SessionID),
			slog.String("error", err.Error()))
		return account{}, refuse(http.StatusForbidden, "not_bound", "", "session %s: not found", caller.SessionID)
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(st.ResourceBindings, &b); err != nil {
		return account{}, refuse(http.StatusInternalServerError, "not_bound", "", "session %s bindings: %v", sid, err)
	}
	if b.Email == "" || b.Email != name {
		return account{}, refuse(http.StatusForbidden, "not_bound", "use only the session's own email account",
			"email account %q is not bound to agent %s's session", name, caller.AgentID)
	}
	cfg, secrets := h.config()
	ea, ok := cfg.EmailAccounts[name]
	if !ok {
		return account{}, refuse(http.StatusNotFound, "unknown_account", "ask the admin to restore the account in config.json",
			"no email account %q in config.json", name)
	}
	pw, ok := secrets[ea.Secret]
	if !ok || pw == "" {
		return account{}, refuse(http.StatusServiceUnavailable, "missing_secret",
			fmt.Sprintf("ask the admin to run choirctl secret set %s, then choirctl secret apply", ea.Secret),
			"the secret %q of email account %q is not in secrets.json", ea.Secret, name)
	}
	return account{name: name, cfg: ea, session: sid, caller: caller,
		direct: mailbox.Direct{Account: mailwatch.MailboxAccount(ea), Password: pw}}, nil
}

// fetch reads a page of a folder, within choird's own bounds on what it
// reads for an agent.
func (h *Handler) fetch(ctx context.Context, acct account, q mailbox.Query) (any, *refusal) {
	most := mailbox.Query{}
	most.MaxMessageBytes, most.MaxPageBytes = most.Caps(acct.cfg.AttachmentLimit(), mailbox.Query{})
	q.MaxMessageBytes, q.MaxPageBytes = q.Caps(acct.cfg.AttachmentLimit(), most)
	q.Limit = min(max(q.Limit, 0), 50)
	page, err := mailbox.Fetch(ctx, acct.direct.Account, acct.direct.Password, q)
	if errors.Is(err, mailbox.ErrQuery) {
		return nil, refuse(http.StatusBadRequest, "invalid_input", "write the day as YYYY-MM-DD", "%v", err)
	}
	return serverAnswer(page, err)
}

// serverAnswer is v, or the refusal of a server's failure.
func serverAnswer[T any](v T, err error) (any, *refusal) {
	if err == nil {
		return v, nil
	}
	var me *mailbox.Error
	if errors.As(err, &me) {
		status := http.StatusBadGateway
		switch me.Code {
		case mailbox.CodeFolder:
			status = http.StatusNotFound
		case mailbox.CodeInDoubt:
			status = http.StatusConflict
		}
		return nil, &refusal{status: status, ErrorDetail: mailbox.ErrorDetail{Code: me.Code,
			Message: fmt.Sprintf("%s: %v", me.Server, me.Err), Hint: me.Hint}}
	}
	return nil, refuse(http.StatusBadGateway, mailbox.CodeServer, "try again later", "%v", err)
}

// decode reads a JSON body of at most limit bytes.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) *refusal {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return refuse(http.StatusRequestEntityTooLarge, "too_large", "send a smaller mail: fewer or smaller attachments",
				"the request is over %d bytes", limit)
		}
		return refuse(http.StatusBadRequest, "invalid_input", "", "read the request: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return refuse(http.StatusBadRequest, "invalid_input", "", "read the request: data after the JSON value")
	}
	return nil
}

func writeRefusal(w http.ResponseWriter, r *refusal) {
	writeJSON(w, r.status, mailbox.ErrorBody{Error: r.ErrorDetail})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the caller went away
}
