package email

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"

	gomail "github.com/wneessen/go-mail"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/mailbox"
	"github.com/choirhq/choir/rpc"
)

// sendLock is the lock choir.email.send holds: an external side effect
// takes an X lock (spec 8.4), one per session's mailbox, so two sends of
// one agent never interleave.
const sendLock = "ext:email"

var sendParams = json.RawMessage(`{
  "type": "object",
  "properties": {
    "to": {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": 320}, "minItems": 1, "maxItems": 50,
           "description": "Recipients, as bob@example.com or \"Bob <bob@example.com>\"."},
    "cc": {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": 320}, "maxItems": 50},
    "bcc": {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": 320}, "maxItems": 50},
    "subject": {"type": "string", "maxLength": 998},
    "text": {"type": "string", "maxLength": 1000000, "description": "The plain-text body."},
    "html": {"type": "string", "maxLength": 2000000, "description": "An optional HTML body, sent beside the text."},
    "attachments": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 20,
                    "description": "Workspace paths of files to attach."},
    "in_reply_to": {"type": "string", "maxLength": 998, "description": "Message-ID this mail answers."}
  },
  "required": ["to", "subject", "text"],
  "additionalProperties": false
}`)

type sendInput struct {
	To          []string `json:"to"`
	Cc          []string `json:"cc"`
	Bcc         []string `json:"bcc"`
	Subject     string   `json:"subject"`
	Text        string   `json:"text"`
	HTML        string   `json:"html"`
	Attachments []string `json:"attachments"`
	InReplyTo   string   `json:"in_reply_to"`
}

type sendOutput struct {
	Status      string       `json:"status"`
	MessageID   string       `json:"message_id,omitempty"`
	From        string       `json:"from"`
	To          []string     `json:"to"`
	Cc          []string     `json:"cc,omitempty"`
	Bcc         []string     `json:"bcc,omitempty"`
	Attachments []attachment `json:"attachments,omitempty"`
	ApprovalID  string       `json:"approval_id,omitempty"`
	// Request and OnApproved are read back by the edge lane when the
	// approval is decided, to tell the model what was decided and what to
	// do next.
	Request    string `json:"request,omitempty"`
	OnApproved string `json:"on_approved,omitempty"`
	Note       string `json:"note,omitempty"`
}

type attachment struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// SHA256 is the content's digest, as the approver is shown it: a file
	// changed after the approval needs another.
	SHA256 string `json:"sha256"`
	data   []byte
}

// sender is choir.email.send. sent remembers, per approval request, the
// Message-ID of mail already sent, so that calling again after an
// approval never sends the same approved mail twice.
type sender struct {
	cfg  Config
	mu   sync.Mutex
	sent map[string]string
}

// AsksApproval says that a send from an account that needs approval waits
// for a person's approval of the mail itself, whose card names the lane's
// untrusted sources.
func (s *sender) AsksApproval(json.RawMessage) bool {
	_, acct, ok := s.cfg.AccountFunc()
	return ok && acct.NeedsApproval()
}

func (s *sender) Spec() tool.Spec {
	return tool.Spec{
		LLM: tool.LLMView{Name: NameSend, Parameters: sendParams,
			Description: "Send an email from your email account: to, cc, bcc, subject, a text body, an optional HTML body, " +
				"and workspace files as attachments. If the account requires approval, the first call files the request and " +
				"returns status pending_approval; once a person approves it, Choir sends exactly that mail for you and tells you the result."},
		Runtime: tool.Runtime{TimeoutMS: 120_000, Network: true, SideEffect: tool.SideEffectExternal, Idempotency: tool.IdempotencyKeyed, Version: "1.0",
			SecretResources: s.cfg.secrets(), Locks: []tool.LockTemplate{{Resource: sendLock, Mode: tool.ModeExclusive}}},
	}
}

func (s *sender) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	in, err := decode[sendInput](input)
	if err != nil {
		return s.cfg.fail(ctx, NameSend, Problem{Error: CodeBadInput, Message: err.Error()}), nil
	}
	name, acct, tr, p := s.cfg.session(env)
	if p != nil {
		return s.cfg.fail(ctx, NameSend, *p), nil
	}
	from := acct.Address
	if from == "" {
		from = acct.Login()
	}
	out := sendOutput{From: from}
	if p := addressees(name, acct, &in, &out); p != nil {
		return s.cfg.fail(ctx, NameSend, *p), nil
	}
	atts, p := readAttachments(env.Workspace, in.Attachments, acct.AttachmentLimit())
	if p != nil {
		return s.cfg.fail(ctx, NameSend, *p), nil
	}
	for _, a := range atts {
		sum := sha256.Sum256(a.data)
		out.Attachments = append(out.Attachments, attachment{Path: a.Path, Size: a.Size, SHA256: hex.EncodeToString(sum[:])})
	}

	// A call that wrote its intent ahead sends under a Message-ID made of
	// its idempotency key; run again after a restart, it is not sent
	// twice (issue 31): choird answers a Message-ID it already sent with
	// the first outcome, and the direct path first looks for it in the
	// account's Sent folder.
	msgID := ""
	ck := tool.CallKey(ctx)
	if ck != "" {
		msgID = ck + "@" + domainOf(from)
	}
	key := requestKey(name, input, atts)
	if acct.NeedsApproval() {
		// An approval is for one mail: once sent, calling again sends
		// nothing more.
		s.mu.Lock()
		prev, done := s.sent[key]
		s.mu.Unlock()
		if done {
			out.Status, out.MessageID, out.Note = "already_sent", prev, "This approved mail was already sent; nothing was sent again."
			return tool.SuccessResult("email already sent as "+prev, out), nil
		}
		res, ok := s.approve(ctx, name, key, &in, &out)
		if !ok {
			return res, nil
		}
	}

	msg, err := s.message(from, msgID, &in, &out, atts)
	if err != nil {
		return s.cfg.fail(ctx, NameSend, Problem{Error: CodeBadInput, Message: err.Error()}), nil
	}
	sub, err := submission(msg, out.ApprovalID)
	if err != nil {
		return s.cfg.fail(ctx, NameSend, Problem{Error: CodeBadInput, Message: err.Error()}), nil
	}
	sub.CheckSent = ck != "" && tool.Rerun(ctx)
	res, err := tr.Send(ctx, sub)
	if err != nil {
		var me *mailbox.Error
		if errors.As(err, &me) && me.Code == mailbox.CodeInDoubt {
			s.cfg.Logger.WarnContext(ctx, "email in doubt after a restart", "account", name, "message_id", sub.MessageID,
				"error", err.Error())
			return tool.Result{Status: tool.StatusInDoubt, Summary: fmt.Sprintf("this mail may or may not have been sent "+
				"before a restart, and it could not be found out (%v); it was not sent again", me.Err)}, nil
		}
		return s.cfg.failErr(ctx, NameSend, err), nil
	}
	out.MessageID = res.MessageID
	if acct.NeedsApproval() {
		s.mu.Lock()
		s.sent[key] = out.MessageID
		if out.ApprovalID != "" {
			s.sent[approvalKey(out.ApprovalID)] = out.MessageID
		}
		s.mu.Unlock()
	}
	if res.Status == mailbox.StatusAlreadySent {
		out.Status, out.Note = "already_sent", "This mail was sent before (a restart, or the same approved mail); it was not sent again."
		return tool.SuccessResult("email already sent as "+out.MessageID, out), nil
	}
	out.Status = "sent"
	s.cfg.Logger.InfoContext(ctx, "email sent", "account", name, "message_id", out.MessageID,
		"recipients", len(out.To)+len(out.Cc)+len(out.Bcc), "attachments", len(atts))
	return tool.SuccessResult(fmt.Sprintf("email sent to %s", strings.Join(out.To, ", ")), out), nil
}

// addressees checks each recipient's address and the account's policy,
// and fills out's lists with them as written.
func addressees(name string, acct config.EmailAccount, in *sendInput, out *sendOutput) *Problem {
	for _, list := range []struct {
		field string
		in    []string
		out   *[]string
	}{{"to", in.To, &out.To}, {"cc", in.Cc, &out.Cc}, {"bcc", in.Bcc, &out.Bcc}} {
		for _, raw := range list.in {
			a, err := mail.ParseAddress(raw)
			if err != nil {
				return &Problem{Error: CodeInvalidAddress,
					Message: fmt.Sprintf("%s: %q is not an email address (%v)", list.field, raw, err),
					Fix:     "write it as bob@example.com or \"Bob <bob@example.com>\""}
			}
			if !acct.MaySendTo(a.Address) {
				return &Problem{Error: CodeRecipientForbidden,
					Message: fmt.Sprintf("email account %q may not send to %s", name, a.Address),
					Fix:     fmt.Sprintf("send only to %s, or ask the admin to add the address to allowed_recipients", strings.Join(acct.AllowedRecipients, ", "))}
			}
			*list.out = append(*list.out, a.String())
		}
	}
	return nil
}

// submission is msg as it goes out: its envelope, its Message-ID and its
// bytes (Bcc in the envelope only).
func submission(msg *gomail.Msg, approvalID string) (mailbox.Submission, error) {
	from, err := msg.GetSender(false)
	if err != nil {
		return mailbox.Submission{}, fmt.Errorf("sender: %w", err)
	}
	rcpts, err := msg.GetRecipients()
	if err != nil {
		return mailbox.Submission{}, fmt.Errorf("recipients: %w", err)
	}
	// The envelope holds bare addresses; go-mail gives them bracketed.
	for i, r := range append(rcpts, from) {
		a, err := mail.ParseAddress(r)
		if err != nil {
			return mailbox.Submission{}, fmt.Errorf("address %q: %w", r, err)
		}
		if i == len(rcpts) {
			from = a.Address
		} else {
			rcpts[i] = a.Address
		}
	}
	var id string
	if ids := msg.GetGenHeader(gomail.HeaderMessageID); len(ids) > 0 {
		id = strings.Trim(ids[0], "<>")
	}
	var raw bytes.Buffer
	if _, err := msg.WriteTo(&raw); err != nil {
		return mailbox.Submission{}, fmt.Errorf("write the message: %w", err)
	}
	return mailbox.Submission{MessageID: id, From: from, Recipients: rcpts, Raw: raw.Bytes(), ApprovalID: approvalID}, nil
}

// message builds the MIME message.
//
// msgID, when not empty, is the Message-ID (without angle brackets);
// otherwise one is made up.
func (s *sender) message(from, msgID string, in *sendInput, out *sendOutput, atts []attachment) (*gomail.Msg, error) {
	m := gomail.NewMsg()
	if err := m.From(from); err != nil {
		return nil, fmt.Errorf("from %q: %w", from, err)
	}
	if err := m.To(out.To...); err != nil {
		return nil, fmt.Errorf("to: %w", err)
	}
	if len(out.Cc) > 0 {
		if err := m.Cc(out.Cc...); err != nil {
			return nil, fmt.Errorf("cc: %w", err)
		}
	}
	if len(out.Bcc) > 0 {
		if err := m.Bcc(out.Bcc...); err != nil {
			return nil, fmt.Errorf("bcc: %w", err)
		}
	}
	m.Subject(in.Subject)
	m.SetDate()
	if msgID != "" {
		m.SetMessageIDWithValue(msgID)
	} else {
		m.SetMessageID()
	}
	if in.InReplyTo != "" {
		id := bracketed(in.InReplyTo)
		m.SetGenHeader(gomail.HeaderInReplyTo, id)
		m.SetGenHeader(gomail.HeaderReferences, id)
	}
	m.SetBodyString(gomail.TypeTextPlain, in.Text)
	if in.HTML != "" {
		m.AddAlternativeString(gomail.TypeTextHTML, in.HTML)
	}
	for _, a := range atts {
		if err := m.AttachReader(path.Base(a.Path), bytes.NewReader(a.data)); err != nil {
			return nil, fmt.Errorf("attach %s: %w", a.Path, err)
		}
	}
	return m, nil
}

// bracketed is a Message-ID in its angle brackets, as In-Reply-To and
// References need it (RFC 5322): choir.email.receive shows the model the
// bare id, which the model passes back as it is.
func bracketed(id string) string {
	id = strings.TrimSpace(id)
	if strings.HasPrefix(id, "<") && strings.HasSuffix(id, ">") {
		return id
	}
	return "<" + strings.Trim(id, "<>") + ">"
}

// sentFor returns the Message-ID of the mail sent under key, if any.
func (s *sender) sentFor(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.sent[key]
	return id, ok
}

// approvalKey keys sender.sent by approval: the run Choir made of an
// approved mail has an input of its own making (InputFromApproval), so
// the model calling again with its first input must find it sent.
func approvalKey(approvalID string) string { return "approval:" + approvalID }

// InputFromApproval turns the payload a person approved back into a
// send's input (tool.ApprovalInput), so that Choir sends an approved mail
// at once. The send files the same payload again from it, and goes out
// only if it is exactly the approved one (attachments with the same
// digests among it).
func (s *sender) InputFromApproval(payload json.RawMessage) (json.RawMessage, error) {
	var p mailbox.ApprovalPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("read the approved mail: %w", err)
	}
	in := map[string]any{"to": p.To, "subject": p.Subject, "text": p.Text}
	for k, v := range map[string][]string{"cc": p.Cc, "bcc": p.Bcc} {
		if len(v) > 0 {
			in[k] = v
		}
	}
	if p.HTML != "" {
		in["html"] = p.HTML
	}
	if p.InReplyTo != "" {
		in["in_reply_to"] = p.InReplyTo
	}
	if len(p.Attachments) > 0 {
		paths := make([]string, len(p.Attachments))
		for i, a := range p.Attachments {
			paths[i] = a.Path
		}
		in["attachments"] = paths
	}
	return json.Marshal(in)
}

// approve files the approval of a send, or finds it. It reports ok when
// the mail may go out; otherwise res is the call's answer.
func (s *sender) approve(ctx context.Context, account, key string, in *sendInput, out *sendOutput) (tool.Result, bool) {
	if s.cfg.Approvals == nil {
		return s.cfg.fail(ctx, NameSend, Problem{Error: CodeApprovalNeeded,
			Message: fmt.Sprintf("email account %q requires approval, and no approval channel is connected", account),
			Fix: "ask the admin to run the agent under choird, or to list the account's allowed_recipients and turn off " +
				"require_approval (an account that may send to anyone always needs approval)"}), false
	}
	// The summary is one line; the payload is everything that will be
	// sent, and choird shows it whole (recipients, both bodies, each
	// attachment's digest) before the question.
	summary := fmt.Sprintf("Send email from %s to %d recipient(s), %d of them by Bcc: %q", out.From,
		len(out.To)+len(out.Cc)+len(out.Bcc), len(out.Bcc), in.Subject)
	if len(out.Attachments) > 0 {
		summary += fmt.Sprintf(" with %d attachment(s)", len(out.Attachments))
	}
	payload, _ := json.Marshal(map[string]any{"account": account, "from": out.From, "to": out.To, "cc": out.Cc, "bcc": out.Bcc,
		"subject": in.Subject, "text": in.Text, "html": in.HTML, "in_reply_to": in.InReplyTo, "attachments": out.Attachments})
	// The run the edge lane makes once a person approved the mail carries
	// the approval: it sends only exactly what the person was shown.
	if a, ok := tool.ApprovedFor(ctx, NameSend, payload); ok {
		out.ApprovalID = a.ID
		return tool.Result{}, true
	}
	resp, err := s.cfg.Approvals.RequestApproval(ctx, key, rpc.ApprovalRequest{RequestType: NameSend, Summary: summary, Payload: payload,
		Sources: tool.LaneSources(ctx)})
	if err != nil {
		return s.cfg.fail(ctx, NameSend, Problem{Error: CodeApprovalNeeded, Message: "file the approval request: " + err.Error(),
			Fix: "try again in a moment"}), false
	}
	out.ApprovalID = resp.ApprovalID
	if prev, done := s.sentFor(approvalKey(resp.ApprovalID)); done {
		out.Status, out.MessageID, out.Note = "already_sent", prev, "This approved mail was already sent; nothing was sent again."
		return tool.SuccessResult("email already sent as "+prev, out), false
	}
	status := resp.Status
	if d, ok := s.cfg.Decisions.status(resp.ApprovalID); ok {
		status = d
	}
	switch status {
	case rpc.ApprovalApproved:
		return tool.Result{}, true
	case rpc.ApprovalRejected:
		return s.cfg.fail(ctx, NameSend, Problem{Error: CodeApprovalRejected,
			Message: fmt.Sprintf("approval %s of this mail was rejected; it was not sent", resp.ApprovalID),
			Fix:     "do not send it; ask the user what to change"}), false
	}
	out.Status, out.Request = "pending_approval", summary
	// OnApproved is shown only when Choir cannot send the approved mail
	// itself (a choird that pushes outcomes without their payload).
	out.OnApproved = "Nothing was sent yet: call choir.email.send again with exactly the same input to send it now."
	out.Note = "Filed for a person to approve; nothing was sent. Once the approval is granted, Choir sends exactly this mail " +
		"for you and the result appears in your context; do not call choir.email.send for it again."
	s.cfg.Logger.InfoContext(ctx, "email awaits approval", "account", account, "approval_id", resp.ApprovalID)
	return tool.SuccessResult("email awaits approval "+resp.ApprovalID, out), false
}

// requestKey is the approval request ID of a send: the same for the same
// account, input and attachment contents, so a second call finds the first
// approval, and a file changed after the approval needs another.
func requestKey(account string, input json.RawMessage, atts []attachment) string {
	var v any
	canon := []byte(input)
	if json.Unmarshal(input, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canon = b // map keys sorted: the same input, the same key
		}
	}
	h := sha256.New()
	h.Write([]byte(account + "\x00"))
	h.Write(canon)
	for _, a := range atts {
		sum := sha256.Sum256(a.data)
		h.Write(sum[:])
	}
	return "email-send:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// readAttachments reads the attachments from the workspace, refusing a path
// outside it, anything but a regular file, and a file over limit.
func readAttachments(ws string, paths []string, limit int64) ([]attachment, *Problem) {
	if len(paths) == 0 {
		return nil, nil
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, &Problem{Error: CodeAttachmentUnusable, Message: "open the workspace: " + tool.ErrText(err)}
	}
	defer root.Close()
	var out []attachment
	for _, p := range paths {
		rel, err := tool.ResolvePath(ws, p)
		if err != nil {
			var pe *tool.PathError
			if errors.As(err, &pe) && errors.Is(err, tool.ErrPathEscape) {
				return nil, &Problem{Error: CodeAttachmentOutside, Message: fmt.Sprintf("attachment %q is outside the workspace", p),
					Fix: "attach only files inside the workspace; copy the file there first"}
			}
			return nil, &Problem{Error: CodeAttachmentUnusable, Message: fmt.Sprintf("attachment %q: %v", p, err)}
		}
		a, prob := readOne(root, p, rel, limit)
		if prob != nil {
			return nil, prob
		}
		out = append(out, a)
	}
	return out, nil
}

// readOne reads one attachment. It opens without blocking (a FIFO would
// otherwise hold the tool until something writes to it) and reads only a
// regular file.
func readOne(root *os.Root, p, rel string, limit int64) (attachment, *Problem) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return attachment{}, &Problem{Error: CodeAttachmentUnusable, Message: fmt.Sprintf("attachment %q: %s", p, tool.ErrText(err)),
			Fix: "check the path with choir.fs.search or choir.exec ls"}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		kind := "unknown"
		if err == nil {
			kind = fi.Mode().Type().String()
		}
		return attachment{}, &Problem{Error: CodeAttachmentUnusable,
			Message: fmt.Sprintf("attachment %q is not a regular file (mode %s): only files can be attached", p, kind),
			Fix:     "write the content to a file in the workspace and attach that"}
	}
	if fi.Size() > limit {
		return attachment{}, &Problem{Error: CodeAttachmentTooLarge,
			Message: fmt.Sprintf("attachment %q is %d bytes, over the account's limit of %d", p, fi.Size(), limit),
			Fix:     "compress or split the file, or share it another way"}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return attachment{}, &Problem{Error: CodeAttachmentUnusable, Message: fmt.Sprintf("read attachment %q: %s", p, tool.ErrText(err))}
	}
	if int64(len(data)) > limit {
		return attachment{}, &Problem{Error: CodeAttachmentTooLarge, Message: fmt.Sprintf("attachment %q grew over the limit of %d bytes", p, limit)}
	}
	return attachment{Path: rel, Size: int64(len(data)), data: data}, nil
}

// domainOf is the domain of an address, for a Message-ID; "choir" when it
// has none.
func domainOf(addr string) string {
	if a, err := mail.ParseAddress(addr); err == nil {
		addr = a.Address
	}
	if i := strings.LastIndexByte(addr, '@'); i >= 0 && i < len(addr)-1 {
		return addr[i+1:]
	}
	return "choir"
}
