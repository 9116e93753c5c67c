package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/db"
)

// InboxInsert writes msg as an inbox row of kind message, for an Inbox
// implementation to call inside its transaction. agentID is the agent bound
// to the DM, nil when none is. A message already in the inbox (the same
// gateway and update id) returns ErrDuplicate.
func InboxInsert(ctx context.Context, q *db.Queries, msg InboundMessage, agentID *string) (db.ChoirControlInbox, error) {
	atts := msg.Attachments
	if atts == nil {
		atts = []Attachment{}
	}
	raw, err := json.Marshal(atts)
	if err != nil {
		return db.ChoirControlInbox{}, fmt.Errorf("encode attachments: %w", err)
	}
	row, err := q.InboxInsert(ctx, db.InboxInsertParams{Gateway: msg.DM.Gateway, UpdateID: msg.UpdateID, Dm: msg.DM.Name,
		AgentID: agentID, ChatID: msg.ChatID, UserID: msg.DM.UserID, Kind: "message", Text: msg.Text, Attachments: raw})
	if errors.Is(err, pgx.ErrNoRows) {
		return db.ChoirControlInbox{}, fmt.Errorf("gateway %s update %d: %w", msg.DM.Gateway, msg.UpdateID, ErrDuplicate)
	}
	if err != nil {
		return db.ChoirControlInbox{}, fmt.Errorf("insert inbox row for gateway %s update %d: %w", msg.DM.Gateway, msg.UpdateID, err)
	}
	return row, nil
}
