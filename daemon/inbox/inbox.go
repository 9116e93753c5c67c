// Package inbox is choird's durable ingress, the outbox's twin: every
// message from a DM, from choirctl chat, from a schedule's fire and from
// the mail watch is an inbox row, written through this package (Insert,
// AddNotice) and nowhere else, before it is pushed to the bound agent's
// live session, and is pushed again (at the next session's hello, or by
// the sweep) until the agent's replicated log holds it. It also shows the
// typing indicator while an agent works on a message, and removes the
// received files the agents are done with (recvclean.go, the periodic
// recv_clean job): inbox rows name those files, so the inbox judges them.
package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Inbound delivery (DESIGN.md journey 1). Every message from a DM is an
// inbox row before the gateway moves past its update. The row is pushed to
// the bound agent's live session at once; the agent's edge lane queues it
// until it is IDLE. The row counts as delivered only when the agent's
// replicated log holds it (a user_msg or injected_instruction event naming
// its inbox_id), so a message pushed to an agent that then died, or pushed
// while choird went down, is pushed again: at the next session's hello, or
// by the sweep when a push seems lost. The agent drops a message its log
// already holds, so the user's message is answered exactly once.

const (
	// inboxRepushAfter is how long a pushed row may stay undelivered
	// before the sweep pushes it again.
	inboxRepushAfter = 20 * time.Second
	// inboxSweepEvery is how often the sweep looks for such rows.
	inboxSweepEvery = 2 * time.Second
	// maxInboxPush bounds the rows pushed to a session at once.
	maxInboxPush = 500
)

// Inbox is the durable ingress of DMs and choirctl chat.
type Inbox struct {
	ctl    *control.Control
	pool   *pgxpool.Pool
	logger *slog.Logger
	// gateway runs the Telegram bots; nil when none is configured. It is
	// set once, before the bots poll (SetGateway).
	gateway *gateway.Gateway
	typing  *Typing
	// announce are the OnUserMessage hooks.
	announce []AnnounceFunc
}

var (
	_ gateway.Inbox      = (*Inbox)(nil)
	_ gateway.Workspaces = (*Inbox)(nil)
)

// New makes the inbox of choird's DMs.
func New(ctl *control.Control, pool *pgxpool.Pool, logger *slog.Logger) *Inbox {
	return &Inbox{ctl: ctl, pool: pool, logger: logger, typing: &Typing{}}
}

// SetGateway sets the Telegram bots, through which notices and typing
// indicators go.
func (ib *Inbox) SetGateway(g *gateway.Gateway) {
	ib.gateway = g
	ib.typing.g = g
}

// Typing is the typing indicator of sessions' chats.
func (ib *Inbox) Typing() *Typing { return ib.typing }

// Receive stores a DM's message in the inbox, bound to the DM's agent, and
// pushes it if the agent runs. A message for an agent that is not running
// waits in the inbox for its next session; the user is told so.
func (ib *Inbox) Receive(ctx context.Context, msg gateway.InboundMessage) error {
	return ib.receive(ctx, msg, "message")
}

func (ib *Inbox) receive(ctx context.Context, msg gateway.InboundMessage, kind string) error {
	b, err := ib.ctl.DMBindingOf(ctx, msg.DM.Name)
	bound := err == nil
	var busy *control.BoundElsewhereError
	if err != nil && !errors.Is(err, control.ErrNotBound) {
		return err
	}
	var agentID *string
	switch {
	case bound:
		agentID = &b.AgentID
	case errors.As(err, &busy) && len(busy.AgentIDs) == 1:
		// Kept for the agent, but never pushed into its session on the
		// other DM: InboxPending gives a session only the rows of its
		// own DM, so this one waits until the agent runs bound here.
		agentID = &busy.AgentIDs[0]
	}
	rows, err := ib.insertMessage(ctx, msg, kind, agentID)
	if err != nil {
		return err
	}
	row := rows[len(rows)-1]
	switch {
	case busy != nil:
		ib.logger.InfoContext(ctx, "message not passed on: the dm's agent runs bound to another dm",
			append(busy.LogAttrs(), slog.Int64("inbox_id", row.InboxID), slog.Bool("kept", agentID != nil))...)
		if agentID != nil {
			ib.notice(ctx, msg, fmt.Sprintf("%s is busy on another chat, so your message was not passed on. "+
				"It is kept and delivered when %s is back on this chat.", *agentID, *agentID))
		} else {
			ib.notice(ctx, msg, busy.Error()+", so nobody will read this message.")
		}
	case !bound:
		ib.notice(ctx, msg, "No agent is bound to this chat, so nobody will read this. An admin can start one with /start <agent-id>.")
	case !b.Live():
		ib.notice(ctx, msg, fmt.Sprintf("%s is not running; your message is kept and delivered when it starts.", b.AgentID))
	default:
		for _, r := range rows {
			ib.pushInbox(ctx, b.SessionID, r)
		}
	}
	return nil
}

// AnnounceFunc stores, through tx, what a user's message to an agent's DM
// brings with it, in the transaction that stores the message: rows that
// wait for the user's next turn (held mail, announced in a digest). It
// returns the rows it stored, to be pushed just before the message.
type AnnounceFunc func(ctx context.Context, tx db.DBTX, agentID, dm string) ([]db.ChoirControlInbox, error)

// OnUserMessage registers f, called for every message a user sends to a
// bound agent. Register before the gateway polls.
func (ib *Inbox) OnUserMessage(f AnnounceFunc) { ib.announce = append(ib.announce, f) }

// insertMessage stores a message of kind from a user, and, for a message
// to an agent, what the registered AnnounceFuncs bring with it, in one
// transaction: either all of it is stored or none, so a held notice is
// announced with exactly one message. It returns the rows in the order
// they are pushed, the message last.
func (ib *Inbox) insertMessage(ctx context.Context, msg gateway.InboundMessage, kind string, agentID *string) ([]db.ChoirControlInbox, error) {
	if agentID == nil || kind != "message" || len(ib.announce) == 0 {
		row, err := Insert(ctx, ib.pool, msg, kind, agentID)
		return []db.ChoirControlInbox{row}, err
	}
	tx, err := ib.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store message of gateway %s update %d: %w", msg.DM.Gateway, msg.UpdateID, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var rows []db.ChoirControlInbox
	for _, f := range ib.announce {
		more, err := f(ctx, tx, *agentID, msg.DM.Name)
		if err != nil {
			return nil, fmt.Errorf("store what the message of gateway %s update %d brings: %w", msg.DM.Gateway, msg.UpdateID, err)
		}
		rows = append(rows, more...)
	}
	row, err := Insert(ctx, tx, msg, kind, agentID)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("store message of gateway %s update %d: %w", msg.DM.Gateway, msg.UpdateID, err)
	}
	return append(rows, row), nil
}

// Insert stores one message of a DM (or of choirctl chat, or a command)
// in the inbox through pool, bound to agentID when not nil. Storing the
// same gateway update twice is refused with gateway.ErrDuplicate.
func Insert(ctx context.Context, pool db.DBTX, msg gateway.InboundMessage, kind string, agentID *string) (db.ChoirControlInbox, error) {
	atts := msg.Attachments
	if atts == nil {
		atts = []gateway.Attachment{}
	}
	raw, err := json.Marshal(atts)
	if err != nil {
		return db.ChoirControlInbox{}, fmt.Errorf("encode attachments: %w", err)
	}
	row, err := seam.Queries(pool).InboxInsert(ctx, db.InboxInsertParams{Gateway: msg.DM.Gateway, UpdateID: msg.UpdateID,
		Dm: msg.DM.Name, AgentID: agentID, ChatID: msg.ChatID, UserID: msg.DM.UserID, Kind: kind, Text: msg.Text,
		Attachments: raw})
	if errors.Is(err, choirsql.ErrNotFound) {
		return row, fmt.Errorf("gateway %s update %d: %w", msg.DM.Gateway, msg.UpdateID, gateway.ErrDuplicate)
	}
	if err != nil {
		return row, fmt.Errorf("store message of gateway %s update %d in the inbox: %w", msg.DM.Gateway, msg.UpdateID, err)
	}
	return row, nil
}

// KindScheduled is the inbox kind of a schedule's fire (daemon/schedule).
const KindScheduled = "scheduled"

// Notice is a message to an agent that no chat sent it: a schedule's fire
// or a new-mail notice. It reaches the agent as a message of its DM, whose
// origin its kind says (inboxPush).
type Notice struct {
	// Source fills the row's gateway column ("schedule", or the mail
	// watch's), and UpdateID is unique within it: storing a notice twice
	// is refused.
	Source   string
	UpdateID int64
	DM       string
	AgentID  string
	// ChatID is the DM's chat, which is its user's: the row's chat and
	// user both.
	ChatID string
	// Kind is KindScheduled, InboxMail, InboxMailHeld or InboxMailDigest.
	Kind string
	Text string
	// Sources are the provenance of Text that choird pushes with it
	// ("mail:bob@ext.test"), kept on the row for every push.
	Sources []string
}

// AddNotice stores n in the inbox through q (a pool, or the transaction
// that decided to send it). A notice already stored under its Source and
// UpdateID is refused with an error wrapping choirsql.ErrNotFound.
func AddNotice(ctx context.Context, q db.DBTX, n Notice) (db.ChoirControlInbox, error) {
	row, err := seam.Queries(q).InboxInsert(ctx, db.InboxInsertParams{Gateway: n.Source, UpdateID: n.UpdateID,
		Dm: n.DM, AgentID: &n.AgentID, ChatID: n.ChatID, UserID: n.ChatID, Kind: n.Kind, Text: n.Text,
		Attachments: []byte("[]"), Sources: n.Sources})
	if err != nil {
		return row, fmt.Errorf("store %s notice %d in the inbox: %w", n.Source, n.UpdateID, err)
	}
	return row, nil
}

// notice tells a DM something at once, outside the outbox: a hint about the
// message just received, worth nothing if lost.
func (ib *Inbox) notice(ctx context.Context, msg gateway.InboundMessage, text string) {
	if ib.gateway == nil || !ib.gateway.Serves(msg.DM.Gateway) {
		return
	}
	if _, err := ib.gateway.SendText(ctx, msg.DM.Gateway, msg.ChatID, text); err != nil {
		ib.logger.InfoContext(ctx, "notice not sent", slog.String("dm", msg.DM.Name), slog.String("error", err.Error()))
	}
}

// pushInbox pushes one inbox row to a session and records the push. A
// failed push is logged; the sweep tries again.
func (ib *Inbox) pushInbox(ctx context.Context, sessionID uuid.UUID, row db.ChoirControlInbox) {
	p, err := inboxPush(row)
	if err == nil {
		_, err = ib.ctl.Push(sessionID.String(), p)
	}
	if err == nil {
		err = seam.Queries(ib.pool).InboxMarkPushed(ctx, db.InboxMarkPushedParams{InboxID: row.InboxID, SessionID: &sessionID})
	}
	if err != nil {
		ib.logger.WarnContext(ctx, "inbox row not pushed; it is retried", slog.Int64("inbox_id", row.InboxID),
			slog.String("session_id", sessionID.String()), slog.String("error", err.Error()))
		return
	}
	if row.Kind == "message" {
		ib.typing.Start(row.Gateway, row.ChatID, sessionID)
	}
}

// The inbox kinds of mail (daemon/mailwatch). Each reaches the agent as a
// message of origin mail, never as the user's words, with its sources.
const (
	// InboxMail is new mail that may start a turn: it is pushed at once.
	InboxMail = "mail"
	// InboxMailHeld is new mail that may not start a turn: it is never
	// pushed itself, but announced by a digest (OnUserMessage).
	InboxMailHeld = "mail_held"
	// InboxMailDigest announces held mail, pushed just before the user's
	// message that took it.
	InboxMailDigest = "mail_digest"
)

func inboxPush(row db.ChoirControlInbox) (rpc.Push, error) {
	switch row.Kind {
	case "inject":
		return rpc.Push{Kind: rpc.PushInjection, Injection: &rpc.Injection{InboxID: row.InboxID, Text: row.Text,
			ReceivedAt: row.ReceivedAt}}, nil
	case KindScheduled:
		// A schedule's fire reaches the agent as its own earlier note,
		// never as the user's words: its text starts with its bracketed
		// header ("[scheduled #3, due ...]", schedule.Message), and it
		// carries the sources of the lane that made it (issue 30).
		return rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: row.InboxID, Gateway: row.Gateway,
			ChatID: row.ChatID, UserID: row.UserID, Text: row.Text, ReceivedAt: row.ReceivedAt, Origin: rpc.OriginSchedule,
			Sources: row.Sources}}, nil
	case InboxMail, InboxMailDigest:
		// Mail is a stranger's words: the agent renders origin mail as
		// untrusted content, and its lane holds the senders as sources.
		return rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: row.InboxID, Gateway: row.Gateway,
			ChatID: row.ChatID, UserID: row.UserID, Text: row.Text, ReceivedAt: row.ReceivedAt, Origin: rpc.OriginMail,
			Sources: row.Sources}}, nil
	case "message":
		var atts []gateway.Attachment
		if err := json.Unmarshal(row.Attachments, &atts); err != nil {
			return rpc.Push{}, fmt.Errorf("inbox row %d attachments: %w", row.InboxID, err)
		}
		m := &rpc.UserMessage{InboxID: row.InboxID, Gateway: row.Gateway, ChatID: row.ChatID, UserID: row.UserID,
			Text: row.Text, ReceivedAt: row.ReceivedAt}
		for _, a := range atts {
			m.Attachments = append(m.Attachments, rpc.Attachment{Kind: a.Kind,
				FilePath: strings.TrimPrefix(a.Path, gateway.RecvDir+"/"), Name: a.Name, MimeType: a.MIME, Size: a.Size})
		}
		return rpc.Push{Kind: rpc.PushUserMessage, UserMessage: m}, nil
	}
	return rpc.Push{}, fmt.Errorf("inbox row %d has kind %q, which is not pushed", row.InboxID, row.Kind)
}

// RedeliverInbox pushes every undelivered row of the session's agent and
// DM whose last push is older than before: all of them at a hello, the
// stale ones from the sweep. Rows from another DM wait for a session bound
// to it.
func (ib *Inbox) RedeliverInbox(ctx context.Context, agentID string, sessionID uuid.UUID, before time.Time) {
	rows, err := seam.Queries(ib.pool).InboxPending(ctx, db.InboxPendingParams{AgentID: &agentID, SessionID: sessionID,
		PushedBefore: &before, MaxRows: maxInboxPush})
	if err != nil {
		ib.logger.WarnContext(ctx, "list undelivered inbox rows", slog.String("agent_id", agentID), slog.String("error", err.Error()))
		return
	}
	for _, r := range rows {
		ib.pushInbox(ctx, sessionID, r)
	}
	if len(rows) > 0 {
		ib.logger.InfoContext(ctx, "undelivered messages pushed again", slog.String("agent_id", agentID),
			slog.String("session_id", sessionID.String()), slog.Int("messages", len(rows)))
	}
}

// PushPending pushes the rows of agentID never pushed yet (a schedule's
// message, just fired) to its live session, once that has said hello (the
// hello pushes them otherwise). It reports whether the agent has a live
// session at all.
func (ib *Inbox) PushPending(ctx context.Context, agentID string) bool {
	s, err := seam.Queries(ib.pool).SessionGetLiveByAgent(ctx, agentID)
	if err != nil {
		return false
	}
	if s.HelloAt != nil {
		// Rows pushed before are the sweep's: a zero time picks only the
		// rows never pushed.
		ib.RedeliverInbox(ctx, agentID, s.SessionID, time.Time{})
	}
	return true
}

// SweepInbox runs until ctx ends, pushing again the rows whose push seems
// lost, and pushing rows stored while their agent was between sessions.
func (ib *Inbox) SweepInbox(ctx context.Context) {
	t := time.NewTicker(inboxSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := time.Now().Add(-inboxRepushAfter)
		q := seam.Queries(ib.pool)
		agents, err := q.InboxAgentsWithPending(ctx, &before)
		if err != nil {
			if ctx.Err() == nil {
				ib.logger.WarnContext(ctx, "inbox sweep", slog.String("error", err.Error()))
			}
			continue
		}
		for _, id := range agents {
			s, err := q.SessionGetLiveByAgent(ctx, id)
			if err != nil || s.HelloAt == nil {
				continue // not running, or not yet said hello: the hello pushes
			}
			ib.RedeliverInbox(ctx, id, s.SessionID, before)
		}
	}
}

// InboxInject queues /inject <text> from a DM for its agent: durable like a
// message, pushed as an injection the edge takes at its next safe point.
func (ib *Inbox) InboxInject(ctx context.Context, sc control.Scope, cmd gateway.Command) error {
	b, err := ib.ctl.DMBindingOf(ctx, cmd.DM.Name)
	if err != nil {
		return err
	}
	if err := sc.Allow(b.AgentID); err != nil {
		return err
	}
	if strings.TrimSpace(cmd.Text) == "" {
		return errors.New("usage: /inject <message>: the message is empty")
	}
	if !b.Live() {
		return fmt.Errorf("%s is not running: an injection goes into a running turn; send a plain message instead", b.AgentID)
	}
	row, err := Insert(ctx, ib.pool, gateway.InboundMessage{DM: cmd.DM, UpdateID: cmd.UpdateID, ChatID: cmd.ChatID,
		MessageID: cmd.MessageID, Text: cmd.Text}, "inject", &b.AgentID)
	if errors.Is(err, gateway.ErrDuplicate) {
		return nil
	}
	if err != nil {
		return err
	}
	ib.pushInbox(ctx, b.SessionID, row)
	return nil
}

// WorkspaceDir implements gateway.Workspaces: the host path of the
// workspace of the agent bound to dm, where its received files go.
func (ib *Inbox) WorkspaceDir(ctx context.Context, dm gateway.DM) (string, error) {
	b, err := ib.ctl.DMBindingOf(ctx, dm.Name)
	var busy *control.BoundElsewhereError
	if errors.As(err, &busy) {
		ib.logger.InfoContext(ctx, "file not stored: the dm's agent runs bound to another dm", busy.LogAttrs()...)
	}
	if errors.Is(err, control.ErrNotBound) {
		return "", notBound{err}
	}
	if err != nil {
		return "", err
	}
	cfg := ib.ctl.Snapshot().Config
	name := cfg.Agents[b.AgentID].Defaults.Workspace
	if b.Live() {
		if s, err := seam.Queries(ib.pool).SessionGetByID(ctx, b.SessionID); err == nil {
			var rb rpc.ResourceBindings
			if json.Unmarshal(s.ResourceBindings, &rb) == nil && rb.Workspace != "" {
				name = rb.Workspace
			}
		}
	}
	ws, ok := cfg.Workspaces[name]
	if !ok {
		return "", fmt.Errorf("agent %s has no workspace for received files: %w", b.AgentID, gateway.ErrNotBound)
	}
	return ws.Path, nil
}

// notBound is the control layer's ErrNotBound in the gateway's words: it
// keeps control's text and matches both sentinels.
type notBound struct{ err error }

func (e notBound) Error() string   { return e.err.Error() }
func (e notBound) Unwrap() []error { return []error{e.err, gateway.ErrNotBound} }
