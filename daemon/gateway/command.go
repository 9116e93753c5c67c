package gateway

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	tele "gopkg.in/telebot.v3"
)

// maxCommandName is Telegram's limit on a command name.
const maxCommandName = 32

// ParseCommand parses a slash command: "/name args..." or
// "/name@botname args...". The name comes back in lower case without the
// slash; args are the words after it; rest is everything after the name and
// the blank that follows it, verbatim.
//
// ok is false for text that is not a command ("/etc/hosts is gone" is
// text: command names are letters, digits and underscores) and for a
// command addressed to another bot; in the latter case name is set.
func ParseCommand(text, botUsername string) (name string, args []string, rest string, ok bool) {
	if !strings.HasPrefix(text, "/") {
		return "", nil, "", false
	}
	body := text[1:]
	head := body
	if end := strings.IndexFunc(body, unicode.IsSpace); end >= 0 {
		_, size := utf8.DecodeRuneInString(body[end:])
		head, rest = body[:end], body[end+size:]
	}
	name, target, addressed := strings.Cut(head, "@")
	if name == "" || len(name) > maxCommandName || !validCommandName(name) {
		return "", nil, "", false
	}
	name = strings.ToLower(name)
	if addressed && (botUsername == "" || !strings.EqualFold(target, botUsername)) {
		return name, nil, "", false
	}
	return name, strings.Fields(rest), rest, true
}

func validCommandName(s string) bool {
	for _, r := range s {
		// Telegram's own command names have no '-', but spec 19.3's
		// /update-all does, and a user will type it.
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// ErrMalformedCallback is returned by ParseCallback for data that names no
// approval.
var ErrMalformedCallback = errors.New("malformed callback data")

// Callback actions.
const (
	actionApprove = "approve"
	actionReject  = "reject"
)

// ParseCallback parses an approval button's data: "approve:<id>" or
// "reject:<id>" as ApprovalButtons makes them, or telebot's unique-button
// form "\f<approve|reject>|<id>". The id must be a UUID.
func ParseCallback(data string) (approvalID string, approve bool, err error) {
	var action, id string
	if rest, ok := strings.CutPrefix(data, "\f"); ok {
		action, id, ok = strings.Cut(rest, "|")
		if !ok {
			return "", false, fmt.Errorf("%w: %q has no data", ErrMalformedCallback, data)
		}
	} else {
		var found bool
		action, id, found = strings.Cut(data, ":")
		if !found {
			return "", false, fmt.Errorf("%w: %q has no action", ErrMalformedCallback, data)
		}
	}
	switch action {
	case actionApprove, actionReject:
	default:
		return "", false, fmt.Errorf("%w: unknown action %q", ErrMalformedCallback, action)
	}
	// uuid.Parse also takes braces and urn: forms; only the canonical
	// form is ours.
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 || u.String() != strings.ToLower(id) {
		return "", false, fmt.Errorf("%w: %q is not an approval id", ErrMalformedCallback, id)
	}
	return u.String(), action == actionApprove, nil
}

// ApprovalButtons is the inline keyboard [Approve] [Reject] for an approval.
func ApprovalButtons(approvalID string) *tele.ReplyMarkup {
	return &tele.ReplyMarkup{InlineKeyboard: [][]tele.InlineButton{{
		{Text: "Approve", Data: actionApprove + ":" + approvalID},
		{Text: "Reject", Data: actionReject + ":" + approvalID},
	}}}
}

// actionResend is the [Send again] button's action.
const actionResend = "resend"

// ResendButton is the inline keyboard [Send again] under the notice that
// a message may not have arrived: it asks to send outbox row outboxID
// again.
func ResendButton(outboxID int64) *tele.ReplyMarkup {
	return &tele.ReplyMarkup{InlineKeyboard: [][]tele.InlineButton{{
		{Text: "Send again", Data: actionResend + ":" + strconv.FormatInt(outboxID, 10)},
	}}}
}

// ParseResendCallback parses a [Send again] button's data, "resend:<id>"
// as ResendButton makes it, or telebot's form "\fresend|<id>". ok is false
// for data of any other button; err reports a resend button whose id is
// not an outbox id.
func ParseResendCallback(data string) (outboxID int64, ok bool, err error) {
	var id string
	if rest, found := strings.CutPrefix(data, "\f"+actionResend+"|"); found {
		id = rest
	} else if rest, found := strings.CutPrefix(data, actionResend+":"); found {
		id = rest
	} else {
		return 0, false, nil
	}
	n, perr := strconv.ParseInt(id, 10, 64)
	if perr != nil || n <= 0 || strconv.FormatInt(n, 10) != id {
		return 0, true, fmt.Errorf("%w: %q is not a message number", ErrMalformedCallback, id)
	}
	return n, true, nil
}
