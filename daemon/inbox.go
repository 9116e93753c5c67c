package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
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

// DMBinding is the agent a DM talks to.
type DMBinding struct {
	AgentID string
	// SessionID is the agent's live session holding the DM's lease; zero
	// when the agent is not running.
	SessionID uuid.UUID
}

// Live reports whether the agent is running with the DM bound.
func (b DMBinding) Live() bool { return b.SessionID != uuid.Nil }

// DMBindingOf is the one place that decides which agent a DM controls
// (DESIGN.md: a DM is bound to an agent only through a live lease). It is
// the live session holding the DM's lease; else the one agent whose
// defaults name the DM (spec 19.4: the binding a start without overrides
// makes), but only while that agent has no live session: an agent running
// bound to another DM belongs to that DM until it stops. ErrNotBound wraps
// the error when there is no such agent, or when several agents default to
// the DM; a *BoundElsewhereError (which wraps ErrNotBound too) says that
// the DM's default agent runs bound to another DM.
func (d *Daemon) DMBindingOf(ctx context.Context, dm string) (DMBinding, error) {
	q := db.New(d.pool)
	h, err := q.DMHolder(ctx, dm)
	if err == nil {
		return DMBinding{AgentID: h.AgentID, SessionID: h.SessionID}, nil
	}
	if !errNoRows(err) {
		return DMBinding{}, fmt.Errorf("look up the agent bound to dm %s: %w", dm, err)
	}
	cfg, _ := d.config()
	var free []string
	busy := &BoundElsewhereError{DM: dm}
	for _, id := range sortedKeys(cfg.Agents) {
		if cfg.Agents[id].Defaults.DM != dm {
			continue
		}
		s, err := q.SessionGetLiveByAgent(ctx, id)
		if errNoRows(err) {
			free = append(free, id)
			continue
		}
		if err != nil {
			return DMBinding{}, fmt.Errorf("look up the session of %s, which defaults to dm %s: %w", id, dm, err)
		}
		if other := sessionDM(s); other != dm {
			busy.AgentIDs, busy.OtherDMs = append(busy.AgentIDs, id), append(busy.OtherDMs, other)
			continue
		}
		// Its session took the DM's lease after DMHolder looked.
		return DMBinding{AgentID: id, SessionID: s.SessionID}, nil
	}
	switch {
	case len(free) == 1:
		return DMBinding{AgentID: free[0]}, nil
	case len(free) > 1:
		return DMBinding{}, fmt.Errorf("dm %s: %w: agents %s all default to it and none is running; start one with /start <agent-id>",
			dm, gateway.ErrNotBound, strings.Join(free, ", "))
	case len(busy.AgentIDs) > 0:
		return DMBinding{}, busy
	}
	return DMBinding{}, fmt.Errorf("dm %s: %w; an admin can bind one with /start <agent-id>", dm, gateway.ErrNotBound)
}

// BoundElsewhereError reports a DM whose default agents all run bound to
// other DMs: the DM controls, sees and reaches none of them until they
// stop, or are started bound to it. Its text is for the DM's user and does
// not name the other DMs; OtherDMs are for choird's log.
type BoundElsewhereError struct {
	DM       string
	AgentIDs []string
	OtherDMs []string
}

func (e *BoundElsewhereError) Error() string {
	if len(e.AgentIDs) == 1 {
		return fmt.Sprintf("%s, the agent of this DM, is running on another DM; this DM controls it again once it stops, or is started here",
			e.AgentIDs[0])
	}
	return fmt.Sprintf("agents %s, which default to this DM, are running on other DMs; this DM controls one again once it stops, or is started here",
		strings.Join(e.AgentIDs, ", "))
}

// Unwrap makes a DM whose agent is elsewhere a DM bound to no agent.
func (e *BoundElsewhereError) Unwrap() error { return gateway.ErrNotBound }

// logAttrs are the error's fields for choird's log.
func (e *BoundElsewhereError) logAttrs() []any {
	return []any{slog.String("dm", e.DM), slog.String("agent_id", strings.Join(e.AgentIDs, ",")),
		slog.String("bound_dm", strings.Join(e.OtherDMs, ","))}
}

// sessionDM is the DM a session is bound to; empty if none.
func sessionDM(s db.ChoirControlSession) string {
	var b rpc.ResourceBindings
	if json.Unmarshal(s.ResourceBindings, &b) != nil {
		return ""
	}
	return b.DM
}

// DMScope is the scope of a command from a DM: admin, or its bound agent.
// A regular DM bound to no agent gets a scope that allows nothing, and
// says why.
func (d *Daemon) DMScope(ctx context.Context, dm gateway.DM) (Scope, error) {
	sc := Scope{Admin: dm.Admin, DM: dm.Name, Actor: "telegram:" + dm.Name}
	if dm.Admin {
		return sc, nil
	}
	b, err := d.DMBindingOf(ctx, dm.Name)
	var busy *BoundElsewhereError
	if errors.As(err, &busy) {
		sc.Unbound = busy
		return sc, nil
	}
	if errors.Is(err, gateway.ErrNotBound) {
		return sc, nil
	}
	if err != nil {
		return Scope{}, err
	}
	sc.Agent = b.AgentID
	return sc, nil
}

// gatewayHooks are the control layer's side of the Telegram gateway.
type gatewayHooks struct{ d *Daemon }

var (
	_ gateway.Inbox      = gatewayHooks{}
	_ gateway.Workspaces = gatewayHooks{}
	_ gateway.Approvals  = gatewayHooks{}
)

// Receive stores a DM's message in the inbox, bound to the DM's agent, and
// pushes it if the agent runs. A message for an agent that is not running
// waits in the inbox for its next session; the user is told so.
func (h gatewayHooks) Receive(ctx context.Context, msg gateway.InboundMessage) error {
	return h.d.receive(ctx, msg, "message")
}

func (d *Daemon) receive(ctx context.Context, msg gateway.InboundMessage, kind string) error {
	b, err := d.DMBindingOf(ctx, msg.DM.Name)
	bound := err == nil
	var busy *BoundElsewhereError
	if err != nil && !errors.Is(err, gateway.ErrNotBound) {
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
	row, err := inboxInsert(ctx, d.pool, msg, kind, agentID)
	if errors.Is(err, gateway.ErrDuplicate) {
		return err
	}
	if err != nil {
		return err
	}
	switch {
	case busy != nil:
		d.logger.InfoContext(ctx, "message not passed on: the dm's agent runs bound to another dm",
			append(busy.logAttrs(), slog.Int64("inbox_id", row.InboxID), slog.Bool("kept", agentID != nil))...)
		if agentID != nil {
			d.notice(ctx, msg, fmt.Sprintf("%s is busy on another chat, so your message was not passed on. "+
				"It is kept and delivered when %s is back on this chat.", *agentID, *agentID))
		} else {
			d.notice(ctx, msg, busy.Error()+", so nobody will read this message.")
		}
	case !bound:
		d.notice(ctx, msg, "No agent is bound to this chat, so nobody will read this. An admin can start one with /start <agent-id>.")
	case !b.Live():
		d.notice(ctx, msg, fmt.Sprintf("%s is not running; your message is kept and delivered when it starts.", b.AgentID))
	default:
		d.pushInbox(ctx, b.SessionID, row)
	}
	return nil
}

func inboxInsert(ctx context.Context, pool db.DBTX, msg gateway.InboundMessage, kind string, agentID *string) (db.ChoirControlInbox, error) {
	atts := msg.Attachments
	if atts == nil {
		atts = []gateway.Attachment{}
	}
	raw, err := json.Marshal(atts)
	if err != nil {
		return db.ChoirControlInbox{}, fmt.Errorf("encode attachments: %w", err)
	}
	row, err := db.New(pool).InboxInsert(ctx, db.InboxInsertParams{Gateway: msg.DM.Gateway, UpdateID: msg.UpdateID,
		Dm: msg.DM.Name, AgentID: agentID, ChatID: msg.ChatID, UserID: msg.DM.UserID, Kind: kind, Text: msg.Text,
		Attachments: raw})
	if errNoRows(err) {
		return row, fmt.Errorf("gateway %s update %d: %w", msg.DM.Gateway, msg.UpdateID, gateway.ErrDuplicate)
	}
	if err != nil {
		return row, fmt.Errorf("store message of gateway %s update %d in the inbox: %w", msg.DM.Gateway, msg.UpdateID, err)
	}
	return row, nil
}

// notice tells a DM something at once, outside the outbox: a hint about the
// message just received, worth nothing if lost.
func (d *Daemon) notice(ctx context.Context, msg gateway.InboundMessage, text string) {
	if d.gateway == nil || !d.gateway.Serves(msg.DM.Gateway) {
		return
	}
	if _, err := d.gateway.SendText(ctx, msg.DM.Gateway, msg.ChatID, text); err != nil {
		d.logger.InfoContext(ctx, "notice not sent", slog.String("dm", msg.DM.Name), slog.String("error", err.Error()))
	}
}

// pushInbox pushes one inbox row to a session and records the push. A
// failed push is logged; the sweep tries again.
func (d *Daemon) pushInbox(ctx context.Context, sessionID uuid.UUID, row db.ChoirControlInbox) {
	p, err := inboxPush(row)
	if err == nil {
		_, err = d.rpc.Push(sessionID.String(), p)
	}
	if err == nil {
		err = db.New(d.pool).InboxMarkPushed(ctx, db.InboxMarkPushedParams{InboxID: row.InboxID, SessionID: &sessionID})
	}
	if err != nil {
		d.logger.WarnContext(ctx, "inbox row not pushed; it is retried", slog.Int64("inbox_id", row.InboxID),
			slog.String("session_id", sessionID.String()), slog.String("error", err.Error()))
		return
	}
	if row.Kind == "message" {
		d.typing.start(row.Gateway, row.ChatID, sessionID)
	}
}

func inboxPush(row db.ChoirControlInbox) (rpc.Push, error) {
	switch row.Kind {
	case "inject":
		return rpc.Push{Kind: rpc.PushInjection, Injection: &rpc.Injection{InboxID: row.InboxID, Text: row.Text,
			ReceivedAt: row.ReceivedAt}}, nil
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

// redeliverInbox pushes every undelivered row of the session's agent and
// DM whose last push is older than before: all of them at a hello, the
// stale ones from the sweep. Rows from another DM wait for a session bound
// to it.
func (d *Daemon) redeliverInbox(ctx context.Context, agentID string, sessionID uuid.UUID, before time.Time) {
	rows, err := db.New(d.pool).InboxPending(ctx, db.InboxPendingParams{AgentID: &agentID, SessionID: sessionID,
		PushedBefore: &before, MaxRows: maxInboxPush})
	if err != nil {
		d.logger.WarnContext(ctx, "list undelivered inbox rows", slog.String("agent_id", agentID), slog.String("error", err.Error()))
		return
	}
	for _, r := range rows {
		d.pushInbox(ctx, sessionID, r)
	}
	if len(rows) > 0 {
		d.logger.InfoContext(ctx, "undelivered messages pushed again", slog.String("agent_id", agentID),
			slog.String("session_id", sessionID.String()), slog.Int("messages", len(rows)))
	}
}

// sweepInbox runs until ctx ends, pushing again the rows whose push seems
// lost, and pushing rows stored while their agent was between sessions.
func (d *Daemon) sweepInbox(ctx context.Context) {
	t := time.NewTicker(inboxSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before := time.Now().Add(-inboxRepushAfter)
		q := db.New(d.pool)
		agents, err := q.InboxAgentsWithPending(ctx, &before)
		if err != nil {
			if ctx.Err() == nil {
				d.logger.WarnContext(ctx, "inbox sweep", slog.String("error", err.Error()))
			}
			continue
		}
		for _, id := range agents {
			s, err := q.SessionGetLiveByAgent(ctx, id)
			if err != nil || s.HelloAt == nil {
				continue // not running, or not yet said hello: the hello pushes
			}
			d.redeliverInbox(ctx, id, s.SessionID, before)
		}
	}
}

// deliveredInboxIDs returns the inbox rows that events name: the user
// messages and injections the agent took from its inbox. HeartbeatApply
// marks them delivered in the statement that appends the events: from then
// on they are in the agent's durable log and are never pushed again.
func deliveredInboxIDs(events []rpc.Event) []int64 {
	var ids []int64
	for _, e := range events {
		if e.Type != rpc.EventUserMsg && e.Type != rpc.EventInjectedInstruction {
			continue
		}
		// Most such events name no inbox row (an approval outcome, a
		// test's message): skip the decoding, which is most of the cost.
		if !bytes.Contains(e.Payload, []byte(`"inbox_id"`)) && !bytes.Contains(e.Payload, []byte(`"message_id"`)) {
			continue
		}
		var p struct {
			InboxID   int64  `json:"inbox_id"`
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal(e.Payload, &p) != nil {
			continue
		}
		if p.InboxID == 0 {
			// Agents before inbox_id named the row in message_id.
			p.InboxID, _ = strconv.ParseInt(p.MessageID, 10, 64)
		}
		if p.InboxID > 0 {
			ids = append(ids, p.InboxID)
		}
	}
	return ids
}

// InboxInject queues /inject <text> from a DM for its agent: durable like a
// message, pushed as an injection the edge takes at its next safe point.
func (d *Daemon) InboxInject(ctx context.Context, sc Scope, cmd gateway.Command) error {
	b, err := d.DMBindingOf(ctx, cmd.DM.Name)
	if err != nil {
		return err
	}
	if err := sc.allow(b.AgentID); err != nil {
		return err
	}
	if strings.TrimSpace(cmd.Text) == "" {
		return errors.New("usage: /inject <message>: the message is empty")
	}
	if !b.Live() {
		return fmt.Errorf("%s is not running: an injection goes into a running turn; send a plain message instead", b.AgentID)
	}
	row, err := inboxInsert(ctx, d.pool, gateway.InboundMessage{DM: cmd.DM, UpdateID: cmd.UpdateID, ChatID: cmd.ChatID,
		MessageID: cmd.MessageID, Text: cmd.Text}, "inject", &b.AgentID)
	if errors.Is(err, gateway.ErrDuplicate) {
		return nil
	}
	if err != nil {
		return err
	}
	d.pushInbox(ctx, b.SessionID, row)
	return nil
}

// WorkspaceDir implements gateway.Workspaces: the host path of the
// workspace of the agent bound to dm, where its received files go.
func (h gatewayHooks) WorkspaceDir(ctx context.Context, dm gateway.DM) (string, error) {
	d := h.d
	b, err := d.DMBindingOf(ctx, dm.Name)
	var busy *BoundElsewhereError
	if errors.As(err, &busy) {
		d.logger.InfoContext(ctx, "file not stored: the dm's agent runs bound to another dm", busy.logAttrs()...)
	}
	if err != nil {
		return "", err
	}
	cfg, _ := d.config()
	name := cfg.Agents[b.AgentID].Defaults.Workspace
	if b.Live() {
		if s, err := db.New(d.pool).SessionGetByID(ctx, b.SessionID); err == nil {
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

// Decide implements gateway.Approvals: an [Approve] or [Reject] press.
func (h gatewayHooks) Decide(ctx context.Context, dec gateway.Decision) (string, error) {
	sc, err := h.d.DMScope(ctx, dec.DM)
	if err != nil {
		return "", err
	}
	a, err := h.d.ApprovalDecide(ctx, sc, dec.ApprovalID, dec.Approve)
	if errors.Is(err, ErrForbidden) {
		h.d.logger.InfoContext(ctx, "approval button press refused", slog.String("dm", dec.DM.Name),
			slog.String("approval_id", dec.ApprovalID), slog.String("reason", err.Error()))
	}
	return decisionAnswer(a, err)
}

// decisionAnswer is what a DM is told of its decision. Errors the user
// should read are answers; only a failure to decide at all is an error.
func decisionAnswer(a Approval, err error) (string, error) {
	switch {
	case err == nil && a.Status == "approved":
		return "Approved", nil
	case err == nil:
		return "Rejected", nil
	case errors.Is(err, ErrApprovalResolved):
		if a.ResolvedBy == "timeout" {
			return "already rejected: it timed out", nil
		}
		return "already " + a.Status, nil
	case errors.Is(err, ErrForbidden):
		return "not your approval: " + err.Error(), nil
	case errors.Is(err, ErrNotFound):
		return "no such approval", nil
	}
	return "", err
}

// outboundAddress is where a session's messages go: its bound DM.
func outboundAddress(cfg *config.Config, b rpc.ResourceBindings) (gatewayName, chatID string, err error) {
	gatewayName, chatID, ok := dmAddressIn(cfg, b.DM)
	if !ok {
		return "", "", fmt.Errorf("the session's DM %q is no longer configured: %w", b.DM, rpc.ErrNotFound)
	}
	return gatewayName, chatID, nil
}

// dmAddressIn locates a DM of cfg: its gateway and chat (for Telegram, a
// private chat's id is the user's).
func dmAddressIn(cfg *config.Config, dm string) (gatewayName, chatID string, ok bool) {
	c, ok := cfg.DMs[dm]
	return c.Gateway, c.UserID, ok
}
