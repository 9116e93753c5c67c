package email

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/choirhq/choir/agent/tool"
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
}

type receiver struct{ cfg Config }

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
	if in.Limit == 0 {
		in.Limit = 10
	}
	if in.MaxChars == 0 {
		in.MaxChars = 8000
	}
	markSeen := in.MarkSeen == nil || *in.MarkSeen
	save := in.SaveAttachments == nil || *in.SaveAttachments
	crit := imap.SearchCriteria{}
	if in.Unseen {
		crit.NotFlag = []imap.Flag{imap.FlagSeen}
	}
	if in.Since != "" {
		t, err := time.Parse(time.DateOnly, in.Since[:10])
		if err != nil {
			return r.cfg.fail(ctx, NameReceive, Problem{Error: CodeBadInput, Message: fmt.Sprintf("since %q: %v", in.Since, err),
				Fix: "write the day as YYYY-MM-DD"}), nil
		}
		crit.Since = t
	}
	if in.From != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "From", Value: in.From})
	}
	if in.Subject != "" {
		crit.Header = append(crit.Header, imap.SearchCriteriaHeaderField{Key: "Subject", Value: in.Subject})
	}
	if in.UID != 0 {
		crit.UID = []imap.UIDSet{imap.UIDSetNum(imap.UID(in.UID))}
	}

	name, acct, pw, p := r.cfg.session(env)
	if p != nil {
		return r.cfg.fail(ctx, NameReceive, *p), nil
	}
	c, err := mailbox.DialIMAP(ctx, acct, pw, nil)
	if err != nil {
		return r.cfg.failErr(ctx, NameReceive, err), nil
	}
	defer c.Close()
	if _, err := c.Select(in.Folder, &imap.SelectOptions{ReadOnly: !markSeen}).Wait(); err != nil {
		return r.cfg.fail(ctx, NameReceive, Problem{Error: CodeFolder, Message: fmt.Sprintf("folder %q: %v", in.Folder, err),
			Fix: "list the folders with choir.email.check"}), nil
	}
	data, err := c.UIDSearch(&crit, nil).Wait()
	if err != nil {
		return r.cfg.failErr(ctx, NameReceive, err), nil
	}
	uids := data.AllUIDs()
	slices.SortFunc(uids, func(a, b imap.UID) int { return int(int64(b) - int64(a)) })
	out := receiveOutput{Account: name, Folder: in.Folder, Matching: len(uids), Messages: []message{}}
	if in.BeforeUID != 0 {
		i, _ := slices.BinarySearchFunc(uids, imap.UID(in.BeforeUID), func(a, b imap.UID) int { return int(int64(b) - int64(a)) })
		if i < len(uids) && uids[i] == imap.UID(in.BeforeUID) {
			i++
		}
		uids = uids[i:]
	}
	page := uids[:min(in.Limit, len(uids))]
	if len(uids) > len(page) {
		out.NextBeforeUID = uint32(page[len(page)-1])
	}
	if len(page) == 0 {
		return tool.SuccessResult(fmt.Sprintf("no messages in %s match", in.Folder), out), nil
	}
	msgs, err := fetchFull(c, page, !markSeen)
	if err != nil {
		return r.cfg.failErr(ctx, NameReceive, err), nil
	}
	for _, m := range msgs {
		pm := parseMessage(m, in.MaxChars)
		if save && len(pm.parts) > 0 {
			if prob := saveAttachments(env.Workspace, in.Folder, &pm, acct.AttachmentLimit()); prob != nil {
				return r.cfg.fail(ctx, NameReceive, *prob), nil
			}
		}
		out.Messages = append(out.Messages, pm.message)
	}
	slices.SortFunc(out.Messages, func(a, b message) int { return int(int64(b.UID) - int64(a.UID)) })
	return tool.SuccessResult(fmt.Sprintf("%d of %d matching messages from %s", len(out.Messages), out.Matching, in.Folder), out), nil
}

// fetchFull fetches whole messages by UID.
func fetchFull(c *imapclient.Client, uids []imap.UID, peek bool) ([]*imapclient.FetchMessageBuffer, error) {
	body := &imap.FetchItemBodySection{Peek: peek}
	return c.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, Flags: true, Envelope: true, RFC822Size: true,
		BodySection: []*imap.FetchItemBodySection{body}}).Collect()
}

func cmp(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
