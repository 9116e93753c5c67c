package mailwatch

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/sql/seam"
)

// Mail is a stranger's words (issue 30). Whether a new message may start a
// turn is decided here, by choird, from the message's header and the
// account's policy, never by the model: mail from a sender wake_from does
// not name, mail the loop guard stops and mail over the wake limit is
// held, and announced in the user's next turn (digest.go).

// headerFields are the header fields the watch fetches beside the
// envelope: what the loop guard reads.
var headerFields = []string{"Auto-Submitted", "Precedence", "List-Id", "In-Reply-To", "References"}

// headerSection is the FETCH item of headerFields. It peeks, so the watch
// never marks a message seen.
var headerSection = &imap.FetchItemBodySection{Specifier: imap.PartSpecifierHeader, HeaderFields: headerFields, Peek: true}

// fetchOptions is what the watch fetches of each new message.
var fetchOptions = &imap.FetchOptions{UID: true, Envelope: true, BodySection: []*imap.FetchItemBodySection{headerSection}}

// wakeWindow is the window of the account's wake limit.
const wakeWindow = time.Hour

// Mail is what the watch reads of a new message.
type Mail struct {
	UID imap.UID
	// From is the sender's bare address in lower case, "" when the
	// message names no single sender.
	From string
	// FromName is the sender's display name, as the sender wrote it.
	FromName string
	Subject  string
	// Header holds headerFields, as the message has them.
	Header textproto.MIMEHeader
	// HeaderErr says why the header could not be read, if it could not.
	HeaderErr error
}

// mailOf reads a fetched message.
func mailOf(m *imapclient.FetchMessageBuffer) Mail {
	out := Mail{UID: m.UID}
	if e := m.Envelope; e != nil {
		out.Subject = e.Subject
		if len(e.From) == 1 {
			out.From, out.FromName = strings.ToLower(e.From[0].Addr()), e.From[0].Name
		}
	}
	raw := m.FindBodySection(headerSection)
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw))).ReadMIMEHeader()
	if err != nil && len(bytes.TrimSpace(raw)) > 0 {
		out.HeaderErr = err
	}
	out.Header = h
	return out
}

// Source is the provenance of the message's text: "mail:" and its sender.
func (m Mail) Source() string {
	if m.From == "" {
		return "mail:unknown sender"
	}
	return "mail:" + oneLine(m.From)
}

// sender is the sender's address as the agent is shown it: bare when it
// is plainly an address, quoted when it holds anything that could pass
// for more of the notice.
func (m Mail) sender() string {
	if m.From == "" {
		return "an unknown sender"
	}
	if plainAddress.MatchString(m.From) {
		return m.From
	}
	return strconv.Quote(oneLine(m.From))
}

var plainAddress = regexp.MustCompile(`^[a-z0-9.!#$%&'*+/=?^_{|}~-]+@[a-z0-9.-]+$`)

// messageIDs are the Message-IDs the message answers or refers to: its
// In-Reply-To and References, without angle brackets.
func (m Mail) messageIDs() []string {
	var ids []string
	for _, f := range []string{"In-Reply-To", "References"} {
		for _, v := range m.Header.Values(f) {
			found := msgIDPattern.FindAllStringSubmatch(v, -1)
			for _, id := range found {
				ids = append(ids, id[1])
			}
			if len(found) == 0 {
				// A sender that forgot the brackets still names the ids.
				ids = append(ids, strings.Fields(v)...)
			}
		}
	}
	return ids
}

var msgIDPattern = regexp.MustCompile(`<([^<>\s]+)>`)

// callKeys are the idempotency keys among the Message-IDs the message
// answers: choir.email.send sends as <ck-...@domain>, the key of its call.
func (m Mail) callKeys() []string {
	var keys []string
	for _, id := range m.messageIDs() {
		local, _, ok := strings.Cut(id, "@")
		if ok && strings.HasPrefix(local, "ck-") {
			keys = append(keys, local)
		}
	}
	return keys
}

// loopGuard says why a message must not start a turn whoever sent it, or
// "": the account's own mail, automatic mail (RFC 3834 Auto-Submitted),
// bulk and list mail, and a header that cannot be read. own is the
// account's address.
func loopGuard(m Mail, own string) string {
	switch {
	case m.HeaderErr != nil:
		return "its header could not be read"
	case m.From == "":
		return "it names no single sender"
	case strings.EqualFold(m.From, own):
		return "it is from the account's own address"
	}
	if v := headerToken(m.Header.Get("Auto-Submitted")); v != "" && v != "no" {
		return "it is automatic (Auto-Submitted: " + oneLine(v) + ")"
	}
	switch v := headerToken(m.Header.Get("Precedence")); v {
	case "bulk", "list", "junk":
		return "it is bulk mail (Precedence: " + v + ")"
	}
	if strings.TrimSpace(m.Header.Get("List-Id")) != "" {
		return "it is from a mailing list (List-Id)"
	}
	return ""
}

// headerToken is a header field's first token in lower case: "auto-replied"
// of "Auto-Replied; owner-email=...".
func headerToken(v string) string {
	v, _, _ = strings.Cut(v, ";")
	return strings.ToLower(strings.TrimSpace(v))
}

// holdReason says why a message may not start a turn of the target's
// agent, or "" when it may: the loop guard, the sender not in wake_from,
// a reply to mail the agent sent, and the account's wake limit. The
// cheap reasons are tried first.
func (w *Watcher) holdReason(ctx context.Context, t Target, acct config.EmailAccount, m Mail) (string, error) {
	own := acct.Address
	if own == "" {
		own = acct.Login()
	}
	if why := loopGuard(m, own); why != "" {
		return why, nil
	}
	if !acct.MayWake(m.From) {
		return "the sender is not in the account's wake_from", nil
	}
	q := seam.Queries(w.opts.Pool)
	if keys := m.callKeys(); len(keys) > 0 {
		// The intent of every choir.email.send is in choird's replica
		// before the mail leaves (issue 31), so a reply, which can only
		// come after, always finds it.
		sent, err := q.SessionEventsHaveCallKey(ctx, db.SessionEventsHaveCallKeyParams{Keys: keys, AgentID: t.AgentID})
		if err != nil {
			return "", fmt.Errorf("look for the mail uid %d answers: %w", m.UID, err)
		}
		if sent {
			return "it answers mail the agent sent", nil
		}
	}
	wakes, err := q.InboxMailWakesSince(ctx, db.InboxMailWakesSinceParams{Gateway: t.Gateway(), WindowSecs: wakeWindow.Seconds()})
	if err != nil {
		return "", fmt.Errorf("count the mail that woke %s: %w", t.AgentID, err)
	}
	if int(wakes) >= acct.WakeLimit() {
		return fmt.Sprintf("the account's wake limit of %d an hour was reached", acct.WakeLimit()), nil
	}
	return "", nil
}
