package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/rpc/admin"
	"maps"
	"slices"
	"time"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// choirctl chat is the same conversation as a DM, from the terminal: a
// message goes into the inbox of the agent's DM like a Telegram update and
// is pushed the same way; the agent's replies are the outbox rows of the
// agent, read back by cursor. The rows go to the DM's own gateway as well,
// so a Telegram user bound to the agent sees the exchange too.

// ChatGateway is the inbox's gateway column for messages from choirctl
// chat; their update ids are the client's message ids, so a retried send
// is stored once.
const ChatGateway = "choirctl"

// ChatSend sends a message to an agent as its DM's user.
func (ib *Inbox) ChatSend(ctx context.Context, sc control.Scope, agentID string, req admin.ChatSendRequest) (admin.ChatSent, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.ChatSent{}, err
	}
	if err := req.Validate(); err != nil {
		return admin.ChatSent{}, err
	}
	cfg := ib.ctl.Snapshot().Config
	a, ok := cfg.Agents[agentID]
	if !ok {
		return admin.ChatSent{}, fmt.Errorf("%w: agent %q is not in config.json (agents: %v)", session.ErrUnknownResource, agentID, slices.Sorted(maps.Keys(cfg.Agents)))
	}
	q := seam.Queries(ib.pool)
	dmName := a.Defaults.DM
	s, err := q.SessionGetLiveByAgent(ctx, agentID)
	live := err == nil
	if err != nil && !errors.Is(err, choirsql.ErrNotFound) {
		return admin.ChatSent{}, fmt.Errorf("look up the session of %s: %w", agentID, err)
	}
	if live {
		var b rpc.ResourceBindings
		if err := json.Unmarshal(s.ResourceBindings, &b); err == nil && b.DM != "" {
			dmName = b.DM
		}
	}
	dm, ok := cfg.DMs[dmName]
	if !ok {
		return admin.ChatSent{}, fmt.Errorf("%w: agent %s has no DM to talk through; set defaults.dm in config.json", session.ErrUnknownResource, agentID)
	}
	var after int64
	if err := choirsql.Interpreted(ib.pool).QueryRow(ctx, `SELECT coalesce(max(outbox_id), 0) FROM choir_control.outbox WHERE agent_id = $1`,
		agentID).Scan(&after); err != nil {
		return admin.ChatSent{}, fmt.Errorf("read the outbox cursor of %s: %w", agentID, err)
	}
	msg := gateway.InboundMessage{DM: gateway.DM{Gateway: ChatGateway, Name: dmName, UserID: dm.UserID, Admin: dm.Admin},
		UpdateID: req.MessageID, ChatID: dm.UserID, Text: req.Text, SentAt: time.Now()}
	rows, err := ib.insertMessage(ctx, msg, "message", &agentID)
	if errors.Is(err, gateway.ErrDuplicate) {
		prev, err := q.InboxGetByUpdate(ctx, db.InboxGetByUpdateParams{Gateway: ChatGateway, UpdateID: req.MessageID})
		if err != nil {
			return admin.ChatSent{}, fmt.Errorf("load chat message %d: %w", req.MessageID, err)
		}
		return admin.ChatSent{InboxID: prev.InboxID, Pushed: prev.PushedAt != nil, Duplicate: true, After: after}, nil
	}
	if err != nil {
		return admin.ChatSent{}, err
	}
	row := rows[len(rows)-1]
	if live && s.HelloAt != nil {
		for _, r := range rows {
			ib.pushInbox(ctx, s.SessionID, r)
		}
	}
	return admin.ChatSent{InboxID: row.InboxID, Pushed: live, After: after}, nil
}

// chatPollEvery is how often a waiting poll looks at the outbox.
const chatPollEvery = 50 * time.Millisecond

// ChatPoll returns the agent's messages after the cursor, waiting up to
// WaitMS for the first one.
func (ib *Inbox) ChatPoll(ctx context.Context, sc control.Scope, agentID string, req admin.ChatPollRequest) ([]admin.ChatMessage, error) {
	if err := sc.Allow(agentID); err != nil {
		return nil, err
	}
	wait := min(time.Duration(req.WaitMS)*time.Millisecond, 30*time.Second)
	deadline := time.Now().Add(wait)
	q := seam.Queries(ib.pool)
	for {
		rows, err := q.OutboxAfter(ctx, db.OutboxAfterParams{AgentID: agentID, After: req.After, MaxRows: 100})
		if err != nil {
			return nil, fmt.Errorf("read the outbox of %s: %w", agentID, err)
		}
		if len(rows) > 0 || time.Now().After(deadline) {
			out := make([]admin.ChatMessage, 0, len(rows))
			for _, r := range rows {
				out = append(out, admin.ChatMessage{OutboxID: r.OutboxID, Kind: r.Kind, Text: r.Text, FilePath: r.FilePath,
					Status: r.Status, CreatedAt: r.CreatedAt})
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(chatPollEvery):
		}
	}
}
