package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	tele "gopkg.in/telebot.v3"
)

// allowedUpdates are the update kinds the gateway asks for; Telegram drops
// the others before they reach us.
var allowedUpdates = []string{"message", "callback_query"}

// run is the bot's update loop. It confirms an update (by asking for the
// next offset) only after handling it, so an update is never lost: if choird
// stops or dies before then, Telegram delivers it again on the next start.
func (b *bot) run(ctx context.Context) {
	log := b.g.logger.With(slog.String("gateway", b.name))
	for n := 0; ; n++ {
		err := b.getMe(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		log.ErrorContext(ctx, "telegram bot unreachable", slog.String("error", err.Error()))
		if !sleep(ctx, backoff(b.g.opts.RetryBase, n)) {
			return
		}
	}
	log.InfoContext(ctx, "telegram bot polling", slog.String("bot", b.botUsername()))
	b.pollingOnce.Do(func() { close(b.polling) })

	var offset int64
	failures := 0
	for {
		updates, err := b.getUpdates(ctx, offset)
		if ctx.Err() != nil {
			b.stopped(ctx, offset)
			return
		}
		if err != nil {
			var api *APIError
			if errors.As(err, &api) && api.Code == http.StatusConflict {
				log.ErrorContext(ctx, "another process polls this bot: stop it, only one choird may run a bot",
					slog.String("error", err.Error()))
			} else {
				log.WarnContext(ctx, "get updates", slog.String("error", err.Error()))
			}
			if !sleep(ctx, backoff(b.g.opts.RetryBase, failures)) {
				return
			}
			failures++
			continue
		}
		failures = 0
		for _, raw := range updates {
			u, id, err := decodeUpdate(raw)
			if err != nil {
				log.WarnContext(ctx, "undecodable update skipped", slog.Int64("update_id", id), slog.String("error", err.Error()))
				offset = id + 1
				continue
			}
			if !b.handleWithRetry(ctx, u) {
				// Stopping: the offset stays before this update, so
				// Telegram delivers it again.
				b.stopped(ctx, offset)
				return
			}
			offset = id + 1
		}
	}
}

// decodeUpdate decodes one update; the id is returned even when the rest
// does not decode, so the update can be skipped.
func decodeUpdate(raw json.RawMessage) (u tele.Update, id int64, err error) {
	var head struct {
		ID int64 `json:"update_id"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return tele.Update{}, 0, err
	}
	// telebot's decoders index without checking (an empty photo array
	// panics): an odd update must not take choird down.
	defer func() {
		if r := recover(); r != nil {
			u, err = tele.Update{}, fmt.Errorf("decode update %d: %v", head.ID, r)
		}
	}()
	err = json.Unmarshal(raw, &u)
	return u, head.ID, err
}

func (b *bot) getUpdates(ctx context.Context, offset int64) ([]json.RawMessage, error) {
	timeout := b.g.opts.PollTimeout
	ctx, cancel := context.WithTimeout(ctx, timeout+15*time.Second)
	defer cancel()
	params := map[string]any{"timeout": int(timeout / time.Second), "limit": 100, "allowed_updates": allowedUpdates}
	if offset > 0 {
		params["offset"] = offset
	}
	var updates []json.RawMessage
	err := b.call(ctx, "getUpdates", params, &updates)
	return updates, err
}

// confirm tells Telegram that every update below offset was handled, when
// the loop stops, so a restart does not see them again. It is best effort:
// without it the updates come back and are recognised as duplicates.
func (b *bot) confirm(ctx context.Context, offset int64) {
	if offset <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	// Timeout 0 and limit 1: the call returns at once; the update it may
	// return is not confirmed and is left for the next start.
	err := b.call(ctx, "getUpdates", map[string]any{"offset": offset, "timeout": 0, "limit": 1,
		"allowed_updates": allowedUpdates}, nil)
	if err != nil {
		b.g.logger.DebugContext(ctx, "confirm offset on stop", slog.String("gateway", b.name),
			slog.String("error", err.Error()))
	}
}

// handleWithRetry handles u until it succeeds or has failed
// MaxUpdateAttempts times, then dead-letters it, reporting false only if
// ctx ended first (the update is then left for the next start).
func (b *bot) handleWithRetry(ctx context.Context, u tele.Update) bool {
	for n := 0; ; n++ {
		err := b.handle(ctx, u)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if n+1 >= b.g.opts.MaxUpdateAttempts {
			b.deadLetter(ctx, u, n+1, err)
			return true
		}
		b.g.logger.ErrorContext(ctx, "handle update; retrying", slog.String("gateway", b.name),
			slog.Int("update_id", u.ID), slog.Int("attempt", n+1), slog.String("error", err.Error()))
		if !sleep(ctx, backoff(b.g.opts.RetryBase, n)) {
			return false
		}
	}
}

// deadLetter gives up on an update that kept failing: the loop moves past
// it, so one bad update (a file Telegram will not serve, a hook that fails
// on it every time) cannot hold up every later one. The log line keeps
// what is needed to find it, and the sender, if allowed, is asked to send
// it again, since the update is not redelivered.
func (b *bot) deadLetter(ctx context.Context, u tele.Update, attempts int, err error) {
	attrs := []any{slog.String("gateway", b.name), slog.Int("update_id", u.ID), slog.Int("attempts", attempts),
		slog.String("error", err.Error())}
	var chatID int64
	var user *tele.User
	var chat *tele.Chat
	switch {
	case u.Message != nil:
		user, chat = u.Message.Sender, u.Message.Chat
	case u.Callback != nil:
		user = u.Callback.Sender
		if u.Callback.Message != nil {
			chat = u.Callback.Message.Chat
		}
	}
	dm, ok := DM{}, false
	if user != nil {
		dm, ok = b.g.lookupDM(b.name, strconv.FormatInt(user.ID, 10))
	}
	if ok {
		attrs = append(attrs, slog.String("dm", dm.Name))
	}
	if chat != nil {
		chatID = chat.ID
		attrs = append(attrs, slog.Int64("chat_id", chatID))
	}
	b.g.logger.ErrorContext(ctx, "update dead-lettered: it kept failing and is skipped", attrs...)
	if !ok {
		return
	}
	const notTaken = "Your last message could not be processed, so the agent did not get it. Send it again in a moment."
	switch {
	case u.Callback != nil:
		b.answer(ctx, u.Callback.ID, "This could not be processed. Press the button again in a moment.")
	case chat != nil && chat.Type == tele.ChatPrivate:
		b.reply(ctx, strconv.FormatInt(chatID, 10), notTaken)
	}
}

// handle hands one update to its consumer. A nil return means the update is
// done with and may be confirmed.
func (b *bot) handle(ctx context.Context, u tele.Update) error {
	switch {
	case u.Message != nil:
		return b.handleMessage(ctx, int64(u.ID), u.Message)
	case u.Callback != nil:
		return b.handleCallback(ctx, int64(u.ID), u.Callback)
	}
	return nil
}

// sender returns the DM of the user behind an update, or false after
// logging the drop: strangers get no reply at all.
func (b *bot) sender(ctx context.Context, updateID int64, user *tele.User, chat *tele.Chat) (DM, bool) {
	if user == nil {
		return DM{}, false
	}
	userID := strconv.FormatInt(user.ID, 10)
	dm, ok := b.g.lookupDM(b.name, userID)
	if !ok {
		b.g.logger.InfoContext(ctx, "update from a user no dm names dropped", slog.String("gateway", b.name),
			slog.Int64("update_id", updateID), slog.String("user_id", userID))
		return DM{}, false
	}
	if chat != nil && chat.Type != tele.ChatPrivate {
		b.g.logger.InfoContext(ctx, "update from a group chat dropped: dms are private chats",
			slog.String("gateway", b.name), slog.Int64("update_id", updateID), slog.String("dm", dm.Name),
			slog.Int64("chat_id", chat.ID))
		return DM{}, false
	}
	return dm, true
}

func (b *bot) handleMessage(ctx context.Context, updateID int64, m *tele.Message) error {
	dm, ok := b.sender(ctx, updateID, m.Sender, m.Chat)
	if !ok {
		return nil
	}
	chatID := strconv.FormatInt(m.Chat.ID, 10)
	if m.Text != "" {
		if name, args, rest, ok := ParseCommand(m.Text, b.botUsername()); ok {
			cmd := Command{DM: dm, UpdateID: updateID, ChatID: chatID, MessageID: int64(m.ID), Name: name,
				Args: args, Text: rest}
			if m.ReplyTo != nil {
				cmd.ReplyToMessageID = int64(m.ReplyTo.ID)
			}
			return b.runCommand(ctx, cmd)
		} else if name != "" {
			b.g.logger.InfoContext(ctx, "command for another bot ignored", slog.String("gateway", b.name),
				slog.Int64("update_id", updateID), slog.String("dm", dm.Name))
			return nil
		}
	}
	msg := InboundMessage{DM: dm, UpdateID: updateID, ChatID: chatID, MessageID: int64(m.ID), Text: m.Text,
		SentAt: m.Time()}
	if f, ok := mediaOf(m); ok {
		att, err := b.receiveFile(ctx, dm, updateID, chatID, f)
		if errors.Is(err, errRefused) {
			return nil // the user was told why
		}
		if err != nil {
			return err
		}
		msg.Text = m.Caption
		msg.Attachments = []Attachment{att}
	}
	if msg.Text == "" && len(msg.Attachments) == 0 {
		b.reply(ctx, chatID, "This kind of message is not supported: send text, a file, a photo, a voice message or a video.")
		return nil
	}
	err := b.g.opts.Inbox.Receive(ctx, msg)
	if errors.Is(err, ErrDuplicate) {
		b.g.logger.DebugContext(ctx, "duplicate update ignored", slog.String("gateway", b.name),
			slog.Int64("update_id", updateID))
		return nil
	}
	return err
}

func (b *bot) runCommand(ctx context.Context, cmd Command) error {
	reply, err := b.g.opts.Commands.Command(ctx, cmd)
	if err != nil {
		return err
	}
	if reply != "" {
		b.reply(ctx, cmd.ChatID, reply)
	}
	return nil
}

// reply sends text to a chat directly (not through the outbox), paced by the
// shared limiter. A failure is logged, not returned: the update it answers
// has been handled, and handling it again would run a command twice.
func (b *bot) reply(ctx context.Context, chatID, text string) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := b.sendText(ctx, chatID, text, nil); err != nil {
		b.g.logger.WarnContext(ctx, "reply not sent", slog.String("gateway", b.name), slog.String("chat_id", chatID),
			slog.String("error", err.Error()))
	}
}

// answerMalformed answers a callback whose data names no approval.
const answerMalformed = "This button carries no valid approval, so nothing was done. Use /approvals to list pending approvals."

func (b *bot) handleCallback(ctx context.Context, updateID int64, cb *tele.Callback) error {
	var chat *tele.Chat
	if cb.Message != nil {
		chat = cb.Message.Chat
	}
	dm, ok := b.sender(ctx, updateID, cb.Sender, chat)
	if !ok {
		return nil
	}
	if outboxID, ok, err := ParseResendCallback(cb.Data); ok {
		return b.handleResend(ctx, updateID, dm, cb, chat, outboxID, err)
	}
	id, approve, err := ParseCallback(cb.Data)
	if err != nil {
		b.g.logger.InfoContext(ctx, "malformed callback", slog.String("gateway", b.name),
			slog.Int64("update_id", updateID), slog.String("dm", dm.Name), slog.String("error", err.Error()))
		b.answer(ctx, cb.ID, answerMalformed)
		return nil
	}
	d := Decision{DM: dm, UpdateID: updateID, ApprovalID: id, Approve: approve}
	if chat != nil {
		d.ChatID = strconv.FormatInt(chat.ID, 10)
	}
	if cb.Message != nil {
		d.MessageID = int64(cb.Message.ID)
	}
	answer, err := b.g.opts.Approvals.Decide(ctx, d)
	if err != nil {
		return err
	}
	b.answer(ctx, cb.ID, answer)
	return nil
}

// answerResendMalformed answers a [Send again] press whose data names no
// message.
const answerResendMalformed = "This button names no message, so nothing was sent. Send /resend to list the replies that may not have arrived."

// handleResend hands a [Send again] press to the Resends hook.
func (b *bot) handleResend(ctx context.Context, updateID int64, dm DM, cb *tele.Callback, chat *tele.Chat, outboxID int64,
	parseErr error) error {
	if parseErr != nil {
		b.g.logger.InfoContext(ctx, "malformed callback", slog.String("gateway", b.name),
			slog.Int64("update_id", updateID), slog.String("dm", dm.Name), slog.String("error", parseErr.Error()))
		b.answer(ctx, cb.ID, answerResendMalformed)
		return nil
	}
	if b.g.opts.Resends == nil || chat == nil {
		b.answer(ctx, cb.ID, "This button cannot be served here, so nothing was sent.")
		return nil
	}
	p := ResendPress{DM: dm, UpdateID: updateID, ChatID: strconv.FormatInt(chat.ID, 10), OutboxID: outboxID}
	if cb.Message != nil {
		p.MessageID = int64(cb.Message.ID)
	}
	answer, err := b.g.opts.Resends.Resend(ctx, p)
	if err != nil {
		return err
	}
	b.answer(ctx, cb.ID, answer)
	return nil
}

// answer answers a callback query. A failure is only logged: Telegram
// refuses answers to queries older than a few minutes, as after a restart.
func (b *bot) answer(ctx context.Context, callbackID, text string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	params := map[string]any{"callback_query_id": callbackID}
	if text != "" {
		params["text"] = text
	}
	if err := b.call(ctx, "answerCallbackQuery", params, nil); err != nil {
		b.g.logger.DebugContext(ctx, "answer callback", slog.String("gateway", b.name), slog.String("error", err.Error()))
	}
}
