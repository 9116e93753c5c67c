package mailroute

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/mail"
	"slices"
	"strings"

	_ "github.com/emersion/go-message/charset" // decode the charsets mail uses besides UTF-8
	gmail "github.com/emersion/go-message/mail"
	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/mailbox"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// maxRecipients bounds a mail's envelope recipients (the tool's 50 To,
// 50 Cc and 50 Bcc).
const maxRecipients = 150

// Statuses of a choir_control.mail_sends row.
const (
	statusSending = "sending"
	statusSent    = "sent"
	statusFailed  = "failed"
)

// written is what choird reads of a mail before it sends it.
type written struct {
	from      string
	messageID string
	subject   string
	text      string
	html      string
	// digests are the SHA-256 of each attachment, hex, sorted.
	digests []string
}

// send checks sub against the account's policy, and submits it once.
func (h *Handler) send(ctx context.Context, acct account, sub mailbox.Submission) (any, *refusal) {
	m, ref := check(acct, sub)
	if ref != nil {
		return nil, ref
	}
	var approvalID *uuid.UUID
	if acct.cfg.NeedsApproval() {
		id, ref := h.approved(ctx, acct, sub, m)
		if ref != nil {
			return nil, ref
		}
		approvalID = &id
	}
	key := sendKey{agent: acct.caller.AgentID, messageID: sub.MessageID}
	q := seam.Queries(h.pool)
	_, err := q.MailSendClaim(ctx, db.MailSendClaimParams{AgentID: key.agent, MessageID: key.messageID, Account: acct.name,
		SessionID: acct.session, ApprovalID: approvalID, Recipients: sub.Recipients})
	switch {
	case errors.Is(err, choirsql.ErrNotFound):
		return h.repeat(ctx, acct, sub, approvalID)
	case err != nil:
		return nil, refuse(http.StatusServiceUnavailable, mailbox.CodeServer, "try again in a moment", "record the mail: %v", err)
	}
	return h.submit(ctx, acct, key, sub)
}

// repeat answers a mail whose Message-ID, or approval, choird recorded
// before: with the first outcome, or, for one a crash cut short, with
// what the Sent folder says.
func (h *Handler) repeat(ctx context.Context, acct account, sub mailbox.Submission, approvalID *uuid.UUID) (any, *refusal) {
	key := sendKey{agent: acct.caller.AgentID, messageID: sub.MessageID}
	q := seam.Queries(h.pool)
	row, err := q.MailSendGet(ctx, db.MailSendGetParams{AgentID: key.agent, MessageID: key.messageID})
	if errors.Is(err, choirsql.ErrNotFound) && approvalID != nil {
		// Another mail holds the approval.
		prev, err := q.MailSendByApproval(ctx, approvalID)
		switch {
		case err == nil && prev.Status == statusSent:
			return mailbox.Sent{Status: mailbox.StatusAlreadySent, MessageID: "<" + prev.MessageID + ">"}, nil
		case err == nil:
			return nil, refuse(http.StatusConflict, "approval_in_use", "wait for the first mail's outcome; do not send it again",
				"approval %s is being used by mail <%s>; a person approved one mail", approvalID, prev.MessageID)
		}
	}
	if err != nil {
		return nil, refuse(http.StatusServiceUnavailable, mailbox.CodeServer, "try again in a moment", "read the mail's record: %v", err)
	}
	if row.Account != acct.name {
		return nil, refuse(http.StatusConflict, "message_id_in_use", "write a new mail: its Message-ID is taken",
			"Message-ID <%s> was sent from email account %q", row.MessageID, row.Account)
	}
	switch row.Status {
	case statusSent:
		return mailbox.Sent{Status: mailbox.StatusAlreadySent, MessageID: "<" + row.MessageID + ">"}, nil
	case statusFailed:
		code, msg := mailbox.CodeServer, "the mail was not sent"
		if row.ErrorCode != nil {
			code = *row.ErrorCode
		}
		if row.Error != nil {
			msg = *row.Error
		}
		return nil, refuse(http.StatusBadGateway, code, "this mail failed before; write it again to send it anew", "%s", msg)
	}
	h.mu.Lock()
	busy := h.sending[key]
	h.mu.Unlock()
	if busy {
		return nil, refuse(http.StatusConflict, "send_in_progress", "wait for the first call's outcome",
			"mail <%s> is being sent now", row.MessageID)
	}
	// Recorded, neither sent nor failed, and no one sending it: a crash
	// cut its submission short. The Sent folder says whether it went.
	sub.CheckSent = true
	return h.submit(ctx, acct, key, sub)
}

// submit sends a recorded mail and records the outcome. A mail in doubt
// stays 'sending', so that the next repeat looks again.
func (h *Handler) submit(ctx context.Context, acct account, key sendKey, sub mailbox.Submission) (any, *refusal) {
	h.mu.Lock()
	if h.sending[key] {
		h.mu.Unlock()
		return nil, refuse(http.StatusConflict, "send_in_progress", "wait for the first call's outcome", "mail <%s> is being sent now", key.messageID)
	}
	h.sending[key] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.sending, key)
		h.mu.Unlock()
	}()
	sent, err := acct.direct.Send(ctx, sub)
	fin := db.MailSendFinishParams{AgentID: key.agent, MessageID: key.messageID, Status: statusSent}
	var me *mailbox.Error
	switch {
	case errors.As(err, &me) && me.Code == mailbox.CodeInDoubt:
		return serverAnswer(sent, err)
	case err != nil:
		code, msg := mailbox.CodeServer, err.Error()
		if me != nil {
			code, msg = me.Code, fmt.Sprintf("%s: %v", me.Server, me.Err)
		}
		fin.Status, fin.ErrorCode, fin.Error = statusFailed, &code, &msg
	}
	// The outcome is recorded even if the agent went away meanwhile.
	if ferr := seam.Queries(h.pool).MailSendFinish(context.WithoutCancel(ctx), fin); ferr != nil {
		h.logger.ErrorContext(ctx, "mail route: outcome not recorded; a repeat will look in the Sent folder",
			slog.String("agent_id", key.agent), slog.String("message_id", key.messageID), slog.String("error", ferr.Error()))
	}
	if err != nil {
		return serverAnswer(sent, err)
	}
	h.logger.InfoContext(ctx, "mail sent for agent", slog.String("agent_id", key.agent), slog.String("account", acct.name),
		slog.String("message_id", key.messageID), slog.String("status", sent.Status), slog.Int("recipients", len(sub.Recipients)))
	return sent, nil
}

// check re-enforces the account's policy on sub, whatever the agent
// checked, and reads what the approval check needs.
func check(acct account, sub mailbox.Submission) (written, *refusal) {
	own := acct.cfg.Address
	if own == "" {
		own = acct.cfg.Login()
	}
	bad := func(code, hint, format string, args ...any) (written, *refusal) {
		return written{}, refuse(http.StatusForbidden, code, hint, format, args...)
	}
	if len(sub.Raw) > mailbox.MaxSubmitBytes {
		return written{}, refuse(http.StatusRequestEntityTooLarge, "too_large", "send fewer or smaller attachments",
			"the mail is %d bytes, over choird's bound of %d", len(sub.Raw), mailbox.MaxSubmitBytes)
	}
	if !validID(sub.MessageID) {
		return bad("invalid_input", "", "message_id %q is not a Message-ID without its angle brackets", sub.MessageID)
	}
	if !sameAddress(sub.From, own) {
		return bad("sender_not_allowed", "", "the envelope sender %q is not the account's address %s", sub.From, own)
	}
	if len(sub.Recipients) == 0 || len(sub.Recipients) > maxRecipients {
		return bad("invalid_input", "", "%d recipients: between 1 and %d", len(sub.Recipients), maxRecipients)
	}
	for _, rcpt := range sub.Recipients {
		a, err := mail.ParseAddress(rcpt)
		if err != nil || a.Address != rcpt {
			return bad("invalid_address", "", "recipient %q is not a bare email address", rcpt)
		}
		if !acct.cfg.MaySendTo(a.Address) {
			return bad("recipient_not_allowed", fmt.Sprintf("send only to %s", strings.Join(acct.cfg.AllowedRecipients, ", ")),
				"email account %q may not send to %s", acct.name, a.Address)
		}
	}
	m, err := read(sub.Raw)
	if err != nil {
		return bad("invalid_input", "", "the mail cannot be read: %v", err)
	}
	if !sameAddress(m.from, own) {
		return bad("sender_not_allowed", "", "the From header %q is not the account's address %s", m.from, own)
	}
	if m.messageID != "<"+sub.MessageID+">" {
		return bad("invalid_input", "", "the Message-ID header %q is not <%s>", m.messageID, sub.MessageID)
	}
	return m, nil
}

// validID reports whether id is a Message-ID's inside: printable, no
// space or angle bracket, with an @.
func validID(id string) bool {
	if len(id) < 3 || len(id) > 250 || !strings.Contains(id, "@") {
		return false
	}
	for _, r := range id {
		if r <= ' ' || r > '~' || r == '<' || r == '>' {
			return false
		}
	}
	return true
}

// sameAddress reports whether raw is exactly the address own (a display
// name aside).
func sameAddress(raw, own string) bool {
	a, err := mail.ParseAddress(raw)
	return err == nil && strings.EqualFold(a.Address, own)
}

// read parses a mail: its From (one address, and no other Sender),
// Message-ID, subject, bodies and attachments' digests.
func read(raw []byte) (written, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return written{}, err
	}
	var m written
	from, err := msg.Header.AddressList("From")
	if err != nil || len(from) != 1 {
		return written{}, fmt.Errorf("the From header names %d addresses, want one (%v)", len(from), err)
	}
	m.from = from[0].Address
	if s := msg.Header.Get("Sender"); s != "" && !sameAddress(s, m.from) {
		return written{}, fmt.Errorf("the Sender header %q is not the From address", s)
	}
	m.messageID = strings.TrimSpace(msg.Header.Get("Message-Id"))
	if m.subject, err = new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject")); err != nil {
		return written{}, fmt.Errorf("subject: %w", err)
	}
	r, err := gmail.CreateReader(bytes.NewReader(raw))
	if err != nil {
		return written{}, err
	}
	for {
		part, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return written{}, err
		}
		data, err := io.ReadAll(part.Body)
		if err != nil {
			return written{}, err
		}
		switch h := part.Header.(type) {
		case *gmail.InlineHeader:
			ct, _, _ := h.ContentType()
			switch ct {
			case "text/plain", "":
				m.text += string(data)
			case "text/html":
				m.html += string(data)
			}
		case *gmail.AttachmentHeader:
			sum := sha256.Sum256(data)
			m.digests = append(m.digests, hex.EncodeToString(sum[:]))
		}
	}
	slices.Sort(m.digests)
	return m, nil
}

// approved checks that a person approved exactly this mail for this
// agent, and returns the approval.
func (h *Handler) approved(ctx context.Context, acct account, sub mailbox.Submission, m written) (uuid.UUID, *refusal) {
	const hint = "file the mail for approval with choir.email.send and wait for a person to approve it"
	if sub.ApprovalID == "" {
		return uuid.Nil, refuse(http.StatusForbidden, "approval_required", hint,
			"email account %q sends only mail a person approved, and this one names no approval", acct.name)
	}
	id, err := uuid.Parse(sub.ApprovalID)
	if err != nil {
		return uuid.Nil, refuse(http.StatusForbidden, "approval_required", hint, "approval %q is no approval id", sub.ApprovalID)
	}
	row, err := seam.Queries(h.pool).ApprovalGet(ctx, id)
	if errors.Is(err, choirsql.ErrNotFound) {
		return uuid.Nil, refuse(http.StatusForbidden, "approval_required", hint, "no approval %s", id)
	}
	if err != nil {
		return uuid.Nil, refuse(http.StatusServiceUnavailable, mailbox.CodeServer, "try again in a moment", "read approval %s: %v", id, err)
	}
	a := approval.Of(row)
	if a.AgentID != acct.caller.AgentID || a.Type != mailbox.ApprovalType {
		return uuid.Nil, refuse(http.StatusForbidden, "approval_mismatch", hint, "approval %s is not one of this agent's mails", id)
	}
	if a.Status != string(rpc.ApprovalApproved) {
		return uuid.Nil, refuse(http.StatusForbidden, "approval_not_granted", "wait for a person to approve it",
			"approval %s is %s, not approved", id, a.Status)
	}
	var p mailbox.ApprovalPayload
	if err := json.Unmarshal(a.Payload, &p); err != nil {
		return uuid.Nil, refuse(http.StatusForbidden, "approval_mismatch", hint, "approval %s: payload: %v", id, err)
	}
	if why := differs(acct.name, p, sub.Recipients, m); why != "" {
		return uuid.Nil, refuse(http.StatusForbidden, "approval_mismatch", "send exactly the mail that was approved, or file this one",
			"this mail is not the one approved in %s: %s", id, why)
	}
	return id, nil
}

// differs says how the mail differs from what was approved; "" when it
// does not.
func differs(account string, p mailbox.ApprovalPayload, rcpts []string, m written) string {
	if p.Account != account {
		return fmt.Sprintf("the approval is for account %q", p.Account)
	}
	var want []string
	for _, raw := range slices.Concat(p.To, p.Cc, p.Bcc) {
		a, err := mail.ParseAddress(raw)
		if err != nil {
			return fmt.Sprintf("approved recipient %q: %v", raw, err)
		}
		want = append(want, strings.ToLower(a.Address))
	}
	got := make([]string, len(rcpts))
	for i, r := range rcpts {
		got[i] = strings.ToLower(r)
	}
	slices.Sort(want)
	slices.Sort(got)
	var digests []string
	for _, a := range p.Attachments {
		digests = append(digests, strings.ToLower(a.SHA256))
	}
	slices.Sort(digests)
	switch {
	case !slices.Equal(slices.Compact(want), slices.Compact(got)):
		return "its recipients differ"
	case p.Subject != m.subject:
		return "its subject differs"
	case body(p.Text) != body(m.text):
		return "its text differs"
	case body(p.HTML) != body(m.html):
		return "its HTML differs"
	case !slices.Equal(digests, m.digests):
		return "its attachments differ"
	}
	return ""
}

// body is a body as compared: line ends and the space around it aside.
func body(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n")) }
