package email

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/mailbox"
)

// AttachmentDir is where choir.email.receive saves attachments, relative to
// the workspace: AttachmentDir/<folder>/<uid>/<file name>.
const AttachmentDir = "mail"

var receiveParams = json.RawMessage(`{
  "type": "object",
  "properties": {
    "folder": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Folder to read; default INBOX."},
    "uid": {"type": "integer", "minimum": 1, "description": "Read just this message."},
    "unseen": {"type": "boolean", "description": "Only messages not yet read."},
    "since": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}", "description": "Only messages from this day on, YYYY-MM-DD."},
    "from": {"type": "string", "minLength": 1, "maxLength": 320, "description": "Only messages whose From contains this."},
    "subject": {"type": "string", "minLength": 1, "maxLength": 998, "description": "Only messages whose Subject contains this."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Messages per page, newest first; default 10."},
    "before_uid": {"type": "integer", "minimum": 1, "description": "Paging: only messages with a UID below this (next_before_uid of the previous page)."},
    "max_chars": {"type": "integer", "minimum": 100, "maximum": 100000, "description": "Body characters kept per message; default 8000."},
    "mark_seen": {"type": "boolean", "description": "Mark the messages read; default true."},
    "save_attachments": {"type": "boolean", "description": "Save attachments under mail/ in the workspace; default true."}
  },
  "additionalProperties": false
}`)

type receiveInput struct {
	Folder          string `json:"folder"`
	UID             uint32 `json:"uid"`
	Unseen          bool   `json:"unseen"`
	Since           string `json:"since"`
	From            string `json:"from"`
	Subject         string `json:"subject"`
	Limit           int    `json:"limit"`
	BeforeUID       uint32 `json:"before_uid"`
	MaxChars        int    `json:"max_chars"`
	MarkSeen        *bool  `json:"mark_seen"`
	SaveAttachments *bool  `json:"save_attachments"`
}

type receiveOutput struct {
	Account       string    `json:"account"`
	Folder        string    `json:"folder"`
	Matching      int       `json:"matching"`
	Messages      []message `json:"messages"`
	NextBeforeUID uint32    `json:"next_before_uid,omitempty"`
	// NotRead are the page's messages left unread because the call's
	// byte cap was reached; Note says so.
	NotRead []uint32 `json:"not_read,omitempty"`
	Note    string   `json:"note,omitempty"`
}

type receiver struct{ cfg Config }

// SideEffectOf says that receiving only reads, for the untrusted-input
// policy: what it writes is the attachments it brings in, under mail/.
func (receiver) SideEffectOf(json.RawMessage) tool.SideEffect { return tool.SideEffectRead }

func (r receiver) Spec() tool.Spec {
	return tool.Spec{
		LLM: tool.LLMView{Name: NameReceive, Parameters: receiveParams,
			Description: "Read email from your email account: messages of a folder (default INBOX) matching unseen, since, from " +
				"and subject, newest first, with the body as text. Attachments are saved under mail/<folder>/<uid>/ in the " +
				"workspace. Page with before_uid = next_before_uid."},
		Runtime: tool.Runtime{TimeoutMS: 120_000, Network: true, SideEffect: tool.SideEffectWrite, Version: "1.0",
			SecretResources: r.cfg.secrets(), Locks: []tool.LockTemplate{{Resource: "file:" + AttachmentDir, Mode: tool.ModeExclusive}}},
	}
}

func (r receiver) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	in, err := decode[receiveInput](input)
	if err != nil {
		return r.cfg.fail(ctx, NameReceive, Problem{Error: CodeBadInput, Message: err.Error()}), nil
	}
	in.Folder = cmp(in.Folder, "INBOX")
	if in.MaxChars == 0 {
		in.MaxChars = 8000
	}
	if in.Since != "" {
		if _, err := time.Parse(time.DateOnly, in.Since[:min(10, len(in.Since))]); err != nil {
			return r.cfg.fail(ctx, NameReceive, Problem{Error: CodeBadInput, Message: fmt.Sprintf("since %q: %v", in.Since, err),
				Fix: "write the day as YYYY-MM-DD"}), nil
		}
	}
	name, acct, tr, p := r.cfg.session(env)
	if p != nil {
		return r.cfg.fail(ctx, NameReceive, *p), nil
	}
	msgCap, pageCap := r.cfg.caps(acct)
	q := mailbox.Query{Folder: in.Folder, UID: in.UID, Unseen: in.Unseen, Since: in.Since, From: in.From, Subject: in.Subject,
		Limit: in.Limit, BeforeUID: in.BeforeUID, MarkSeen: in.MarkSeen == nil || *in.MarkSeen,
		MaxMessageBytes: msgCap, MaxPageBytes: pageCap}
	page, err := tr.Fetch(ctx, q)
	if err != nil {
		return r.cfg.failErr(ctx, NameReceive, err), nil
	}
	out := receiveOutput{Account: name, Folder: page.Folder, Matching: page.Matching, Messages: []message{},
		NextBeforeUID: page.NextBeforeUID, NotRead: page.NotRead}
	if len(page.Messages) == 0 && len(page.NotRead) == 0 {
		return tool.SuccessResult(fmt.Sprintf("no messages in %s match", in.Folder), out), nil
	}
	save := in.SaveAttachments == nil || *in.SaveAttachments
	for _, f := range page.Messages {
		pm := parseMessage(f, in.MaxChars)
		if f.Cut {
			pm.Cut = fmt.Sprintf("the message is %d bytes; only its first %d were read (the per-message cap): "+
				"the text and attachments after that are missing", f.Size, page.MaxMessageBytes)
		}
		if save && len(pm.parts) > 0 {
			if prob := saveAttachments(env.Workspace, in.Folder, &pm, acct.AttachmentLimit()); prob != nil {
				return r.cfg.fail(ctx, NameReceive, *prob), nil
			}
		}
		out.Messages = append(out.Messages, pm.message)
	}
	summary := fmt.Sprintf("%d of %d matching messages from %s", len(out.Messages), out.Matching, in.Folder)
	if len(out.NotRead) > 0 {
		out.Note = fmt.Sprintf("%d message(s) not read: one call reads at most %d bytes of mail (its cap); "+
			"read them with before_uid %d, or one at a time with uid", len(out.NotRead), page.MaxPageBytes, out.NextBeforeUID)
		summary += fmt.Sprintf("; %d not read (over this call's %d-byte cap)", len(out.NotRead), page.MaxPageBytes)
		r.cfg.Logger.Info("email receive capped", slog.String("folder", in.Folder), slog.Any("not_read", out.NotRead))
	}
	return tool.SuccessResult(summary, out), nil
}

// caps are the most read of one message and of one call's messages: the
// configured caps or mailbox's, the message's raised to hold an
// attachment of the account's limit.
func (c Config) caps(acct config.EmailAccount) (msgCap, pageCap int64) {
	return mailbox.Query{MaxMessageBytes: c.MaxMessageBytes, MaxPageBytes: c.MaxPageBytes}.Caps(acct.AttachmentLimit(), mailbox.Query{})
}

func cmp(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
