package dmcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/outbox"
	choirsql "github.com/choirhq/choir/sql"
)

// /resend and the [Send again] button send again a reply whose send choird
// could not confirm (outbox.Resends). Every DM, admin or not, sees and
// resends only the messages sent to itself, in the chat they were sent
// to: only the person there can tell whether one arrived, and a reply is
// never shown in another chat. Bare /resend sends the one unconfirmed
// reply there is; with several it lists them, newest first, to pick by
// number (/resend <number>), as a bare /approve does with approvals.

var _ gateway.Resends = (*Commands)(nil)

// errNoResends answers when choird runs without the resends.
var errNoResends = usageError{"Sending a reply again is not available in this choird."}

// resend is /resend [number].
func (c *Commands) resend(_ context.Context, _ control.Scope, cmd gateway.Command) (action, error) {
	if c.resends == nil {
		return action{}, errNoResends
	}
	chat := outbox.Chat{Gateway: cmd.DM.Gateway, DM: cmd.DM.Name, ChatID: cmd.ChatID}
	by := "telegram:" + cmd.DM.Name
	switch len(cmd.Args) {
	case 0:
		return cmdChange(func(ctx context.Context) (string, error) {
			rows, err := c.resends.Unconfirmed(ctx, chat)
			if err != nil {
				return "", err
			}
			switch len(rows) {
			case 0:
				return "No reply to this chat is waiting to be sent again: every one choird sent here was confirmed, " +
					"or has been sent again already.", nil
			case 1:
				return c.resendOne(ctx, chat, rows[0].OutboxID, by)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%d replies may not have arrived (newest first). Send /resend <number> for the one you want:", len(rows))
			for _, r := range rows {
				fmt.Fprintf(&b, "\n%d (%s): %s", r.OutboxID, r.CreatedAt.UTC().Format("Jan 2 15:04 MST"), outbox.Excerpt(r))
			}
			return b.String(), nil
		}), nil
	case 1:
		id, err := strconv.ParseInt(cmd.Args[0], 10, 64)
		if err != nil || id <= 0 {
			return action{}, usagef("%q is not a message number: send /resend to list the replies that may not have arrived.", cmd.Args[0])
		}
		return cmdChange(func(ctx context.Context) (string, error) { return c.resendOne(ctx, chat, id, by) }), nil
	}
	return action{}, usagef("Usage: /resend [number]")
}

// resendOne sends message id again and words the outcome for the chat.
func (c *Commands) resendOne(ctx context.Context, chat outbox.Chat, id int64, by string) (string, error) {
	row, err := c.resends.Resend(ctx, chat, id, by)
	if err == nil {
		return fmt.Sprintf("Sending reply %d again:\n%s", id, outbox.Excerpt(row)), nil
	}
	answer, err := resendAnswer(err)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Reply %d: %s.", id, answer), nil
}

// resendAnswer words a refused resend; only a failure to look at all is
// an error.
func resendAnswer(err error) (string, error) {
	switch {
	case errors.Is(err, outbox.ErrResent):
		return "already sent again", nil
	case errors.Is(err, outbox.ErrNotText):
		return "it is a file, which choird does not keep once it has tried to send it: ask the agent to send it again", nil
	case errors.Is(err, outbox.ErrConfirmed):
		return "its delivery was confirmed, so there is nothing to send again", nil
	case errors.Is(err, outbox.ErrNotYours), errors.Is(err, choirsql.ErrNotFound):
		// A message to another chat is answered as if there were none:
		// a DM learns nothing of the others.
		return "no such reply in this chat", nil
	}
	return "", err
}

// Resend implements gateway.Resends: a [Send again] press. The button
// is taken off the notice once the reply is sent again.
func (c *Commands) Resend(ctx context.Context, p gateway.ResendPress) (string, error) {
	if c.resends == nil {
		return errNoResends.msg, nil
	}
	chat := outbox.Chat{Gateway: p.DM.Gateway, DM: p.DM.Name, ChatID: p.ChatID}
	_, err := c.resends.Resend(ctx, chat, p.OutboxID, "telegram:"+p.DM.Name)
	if err != nil {
		answer, err := resendAnswer(err)
		if err != nil {
			return "", err
		}
		c.logger.InfoContext(ctx, "send again refused", slog.String("dm", p.DM.Name), slog.Int64("outbox_id", p.OutboxID),
			slog.String("answer", answer))
		return answer, nil
	}
	c.logger.InfoContext(ctx, "reply sent again on request", slog.String("dm", p.DM.Name), slog.Int64("outbox_id", p.OutboxID))
	if g := c.gateway; g != nil && p.MessageID != 0 {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := g.ClearButtons(cctx, p.DM.Gateway, p.ChatID, p.MessageID); err != nil {
			c.logger.DebugContext(ctx, "clear the send-again button", slog.String("error", err.Error()))
		}
	}
	return "Sending it again", nil
}
