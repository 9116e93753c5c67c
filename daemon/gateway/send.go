package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	tele "gopkg.in/telebot.v3"

	"github.com/choirhq/choir/daemon/outbox/message"
)

// Parts implements outbox.Sender: a text is cut by SplitText; a file
// keeps its text as caption when it fits in 1024 characters, else the file
// goes without caption and the text follows as messages of its own.
func (g *Gateway) Parts(msg message.Part) []message.Part {
	if msg.Kind == message.Text {
		var parts []message.Part
		for _, t := range SplitText(msg.Text, MaxMessageLength) {
			p := msg
			p.Text = t
			parts = append(parts, p)
		}
		return parts
	}
	if utf16Len(msg.Text) <= MaxCaptionLength {
		return []message.Part{msg}
	}
	file := msg
	file.Text = ""
	parts := []message.Part{file}
	for _, t := range SplitText(msg.Text, MaxMessageLength) {
		parts = append(parts, message.Part{Gateway: msg.Gateway, ChatID: msg.ChatID, Kind: message.Text, Text: t})
	}
	return parts
}

// Send implements outbox.Sender: it sends one part, returning
// Telegram's message id. It does not pace: the caller holds a reservation
// of the shared limiter. Errors are *RateLimitError (429, with RetryAfter),
// errors whose Temporary() reports false (the part can never be sent), or
// errors worth retrying.
func (g *Gateway) Send(ctx context.Context, part message.Part) (int64, error) {
	b, err := g.bot(part.Gateway)
	if err != nil {
		return 0, err
	}
	if part.Kind == message.Text {
		var markup *tele.ReplyMarkup
		switch {
		case part.ApprovalID != "":
			markup = ApprovalButtons(part.ApprovalID)
		case part.ResendOf != 0:
			markup = ResendButton(part.ResendOf)
		}
		return b.sendMessage(ctx, part.ChatID, part.Text, markup)
	}
	return b.sendFile(ctx, part)
}

func (b *bot) sendMessage(ctx context.Context, chatID, text string, markup *tele.ReplyMarkup) (int64, error) {
	params := map[string]any{"chat_id": chatID, "text": text}
	if markup != nil {
		raw, err := json.Marshal(markup)
		if err != nil {
			return 0, fmt.Errorf("encode reply markup: %w", err)
		}
		params["reply_markup"] = string(raw)
	}
	var m tele.Message
	if err := b.call(ctx, "sendMessage", params, &m); err != nil {
		return 0, err
	}
	return int64(m.ID), nil
}

func (b *bot) sendFile(ctx context.Context, part message.Part) (int64, error) {
	chatID, err := strconv.ParseInt(part.ChatID, 10, 64)
	if err != nil {
		return 0, permanent(fmt.Errorf("chat id %q is not a Telegram chat", part.ChatID))
	}
	f, _, err := openSendFile(part.File)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	file := tele.FromReader(f)
	name := part.File.Name()
	var what tele.Sendable
	var method string
	switch part.Kind {
	case message.Photo:
		what, method = &tele.Photo{File: file, Caption: part.Text}, "sendPhoto"
	case message.Voice:
		if !isOggOpus(f) {
			// Telegram plays only OGG Opus as a voice message; anything
			// else still reaches the user, as a file.
			b.g.logger.WarnContext(ctx, "voice file is not OGG Opus: sent as a document",
				slog.String("gateway", b.name), slog.String("file", name))
			what, method = &tele.Document{File: file, FileName: name, Caption: part.Text}, "sendDocument"
		} else {
			what, method = &tele.Voice{File: file, Caption: part.Text, MIME: "audio/ogg"}, "sendVoice"
		}
	case message.Video:
		what, method = &tele.Video{File: file, FileName: name, Caption: part.Text}, "sendVideo"
	case message.Document:
		what, method = &tele.Document{File: file, FileName: name, Caption: part.Text}, "sendDocument"
	default:
		return 0, permanent(fmt.Errorf("unknown outbound kind %q", part.Kind))
	}
	m, err := b.tele(ctx).Send(&tele.Chat{ID: chatID}, what)
	if err != nil {
		return 0, b.classify(method, err)
	}
	return int64(m.ID), nil
}

// sendText sends text to a chat, cut by SplitText, waiting for the shared
// limiter before each message.
func (b *bot) sendText(ctx context.Context, chatID, text string, markup *tele.ReplyMarkup) ([]int64, error) {
	parts := SplitText(text, MaxMessageLength)
	ids := make([]int64, 0, len(parts))
	for i, p := range parts {
		if err := b.g.opts.Limiter.Wait(ctx, b.name, chatID); err != nil {
			return ids, err
		}
		var m *tele.ReplyMarkup
		if i == len(parts)-1 {
			m = markup // buttons go under the last message
		}
		id, err := b.sendMessage(ctx, chatID, p, m)
		var rl *RateLimitError
		if errors.As(err, &rl) {
			b.g.opts.Limiter.Backoff(b.name, chatID, rl.After)
			if !sleep(ctx, rl.After) {
				return ids, ctx.Err()
			}
			id, err = b.sendMessage(ctx, chatID, p, m)
		}
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// SendText sends text to a chat at once, not through the outbox, paced by
// the shared limiter and cut by SplitText; for replies to commands and
// notices of the control layer that need no durability. It returns the
// Telegram message ids.
func (g *Gateway) SendText(ctx context.Context, gateway, chatID, text string) ([]int64, error) {
	b, err := g.bot(gateway)
	if err != nil {
		return nil, err
	}
	return b.sendText(ctx, chatID, text, nil)
}

// ErrMessageGone reports an edit of a message that can no longer be
// edited: the user deleted it, or Telegram refuses to edit it any more.
var ErrMessageGone = errors.New("the message to edit is gone")

// EditText replaces the text of a text message the bot sent to chatID
// (editMessageText), paced by the shared limiter like a new message, since
// Telegram counts edits against a chat's limits too. An edit that changes
// nothing is no error. A message that cannot be edited any more returns an
// error wrapping ErrMessageGone; a 429 is honoured once, as for SendText.
func (g *Gateway) EditText(ctx context.Context, gateway, chatID string, messageID int64, text string) error {
	b, err := g.bot(gateway)
	if err != nil {
		return err
	}
	if utf16Len(text) > MaxMessageLength {
		return permanent(fmt.Errorf("edit message %d: the text is %d characters, over Telegram's %d", messageID,
			utf16Len(text), MaxMessageLength))
	}
	edit := func() error {
		if err := g.opts.Limiter.Wait(ctx, b.name, chatID); err != nil {
			return err
		}
		return b.call(ctx, "editMessageText", map[string]any{"chat_id": chatID, "message_id": messageID, "text": text}, nil)
	}
	err = edit()
	var rl *RateLimitError
	if errors.As(err, &rl) {
		g.opts.Limiter.Backoff(b.name, chatID, rl.After)
		if !sleep(ctx, rl.After) {
			return ctx.Err()
		}
		err = edit()
	}
	var api *APIError
	if errors.As(err, &api) && api.Code == http.StatusBadRequest {
		switch d := strings.ToLower(api.Description); {
		case strings.Contains(d, "message is not modified"):
			return nil
		case strings.Contains(d, "message to edit not found"), strings.Contains(d, "message can't be edited"),
			strings.Contains(d, "no text in the message"):
			return fmt.Errorf("%w: %w", ErrMessageGone, err)
		}
	}
	return err
}

// SendApproval sends an approval request with the inline keyboard
// [Approve] [Reject] under it and returns the id of the message carrying
// the keyboard.
func (g *Gateway) SendApproval(ctx context.Context, gateway, chatID, text, approvalID string) (int64, error) {
	b, err := g.bot(gateway)
	if err != nil {
		return 0, err
	}
	ids, err := b.sendText(ctx, chatID, text, ApprovalButtons(approvalID))
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, permanent(fmt.Errorf("approval %s: empty text", approvalID))
	}
	return ids[len(ids)-1], nil
}

// ClearButtons removes the inline keyboard of a message, once its approval
// is resolved.
func (g *Gateway) ClearButtons(ctx context.Context, gateway, chatID string, messageID int64) error {
	b, err := g.bot(gateway)
	if err != nil {
		return err
	}
	return b.call(ctx, "editMessageReplyMarkup", map[string]any{"chat_id": chatID, "message_id": messageID,
		"reply_markup": `{"inline_keyboard":[]}`}, nil)
}

// Typing shows "typing…" in a chat until ctx ends, repeating the chat
// action every TypingInterval (Telegram shows it for about five seconds).
// It blocks; run it in a goroutine for as long as the agent works. Errors
// are logged and the loop goes on; a 429 is honoured.
func (g *Gateway) Typing(ctx context.Context, gateway, chatID string) {
	b, err := g.bot(gateway)
	if err != nil {
		g.logger.WarnContext(ctx, "typing indicator", slog.String("error", err.Error()))
		return
	}
	for {
		wait := g.opts.TypingInterval
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := b.call(cctx, "sendChatAction", map[string]any{"chat_id": chatID, "action": "typing"}, nil)
		cancel()
		var rl *RateLimitError
		if errors.As(err, &rl) {
			wait = max(wait, rl.After)
		} else if err != nil && ctx.Err() == nil {
			g.logger.DebugContext(ctx, "typing indicator", slog.String("gateway", gateway), slog.String("error", err.Error()))
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}
