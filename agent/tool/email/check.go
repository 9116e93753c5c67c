package email

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/emersion/go-imap/v2"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/internal/mailbox"
)

// maxFolders bounds the folders choir.email.check counts.
const maxFolders = 100

var checkParams = json.RawMessage(`{
  "type": "object",
  "properties": {
    "folder": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Folder whose newest messages to summarise; default INBOX."},
    "newest": {"type": "integer", "minimum": 0, "maximum": 20, "description": "How many of the newest messages to summarise; default 5."}
  },
  "additionalProperties": false
}`)

type checkInput struct {
	Folder string `json:"folder"`
	Newest *int   `json:"newest"`
}

type folderCount struct {
	Name     string `json:"name"`
	Messages uint32 `json:"messages"`
	Unseen   uint32 `json:"unseen"`
}

type checkOutput struct {
	Account string        `json:"account"`
	Folders []folderCount `json:"folders"`
	Folder  string        `json:"folder"`
	Newest  []message     `json:"newest"`
}

type checker struct{ cfg Config }

func (k checker) Spec() tool.Spec {
	return tool.Spec{
		LLM: tool.LLMView{Name: NameCheck, Parameters: checkParams,
			Description: "Check your email account: message and unread counts per folder, and a short summary (sender, " +
				"subject, date, uid, read or not) of the newest messages of a folder. Read them with choir.email.receive."},
		Runtime: tool.Runtime{TimeoutMS: 60_000, Network: true, SideEffect: tool.SideEffectRead, Idempotent: true,
			Version: "1.0", SecretResources: k.cfg.secrets()},
	}
}

func (k checker) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	in, err := decode[checkInput](input)
	if err != nil {
		return k.cfg.fail(ctx, NameCheck, Problem{Error: CodeBadInput, Message: err.Error()}), nil
	}
	newest := 5
	if in.Newest != nil {
		newest = *in.Newest
	}
	name, acct, pw, p := k.cfg.session(env)
	if p != nil {
		return k.cfg.fail(ctx, NameCheck, *p), nil
	}
	c, err := mailbox.DialIMAP(ctx, k.cfg.mailboxAccount(acct), pw, nil)
	if err != nil {
		return k.cfg.failErr(ctx, NameCheck, err), nil
	}
	defer c.Close()
	out := checkOutput{Account: name, Folder: cmp(in.Folder, "INBOX"), Folders: []folderCount{}, Newest: []message{}}
	list, err := c.List("", "*", nil).Collect()
	if err != nil {
		return k.cfg.failErr(ctx, NameCheck, err), nil
	}
	for _, l := range list {
		if len(out.Folders) == maxFolders {
			break
		}
		if slices.Contains(l.Attrs, imap.MailboxAttrNoSelect) || slices.Contains(l.Attrs, imap.MailboxAttrNonExistent) {
			continue
		}
		st, err := c.Status(l.Mailbox, &imap.StatusOptions{NumMessages: true, NumUnseen: true}).Wait()
		if err != nil {
			continue // a folder the server will not count is left out
		}
		fc := folderCount{Name: l.Mailbox}
		if st.NumMessages != nil {
			fc.Messages = *st.NumMessages
		}
		if st.NumUnseen != nil {
			fc.Unseen = *st.NumUnseen
		}
		out.Folders = append(out.Folders, fc)
	}
	if newest > 0 {
		sel, err := c.Select(out.Folder, &imap.SelectOptions{ReadOnly: true}).Wait()
		if err != nil {
			return k.cfg.fail(ctx, NameCheck, Problem{Error: CodeFolder, Message: fmt.Sprintf("folder %q: %v", out.Folder, err),
				Fix: "use one of the folders listed in folders"}), nil
		}
		if n := sel.NumMessages; n > 0 {
			first := uint32(max(1, int64(n)-int64(newest)+1))
			var seq imap.SeqSet
			seq.AddRange(first, n)
			msgs, err := c.Fetch(seq, &imap.FetchOptions{UID: true, Flags: true, Envelope: true, RFC822Size: true}).Collect()
			if err != nil {
				return k.cfg.failErr(ctx, NameCheck, err), nil
			}
			for _, b := range msgs {
				m := message{UID: uint32(b.UID), Size: b.RFC822Size, Seen: slices.Contains(b.Flags, imap.FlagSeen)}
				envelope(&m, b.Envelope)
				out.Newest = append(out.Newest, m)
			}
			slices.SortFunc(out.Newest, func(a, b message) int { return int(int64(b.UID) - int64(a.UID)) })
		}
	}
	var unseen uint32
	for _, f := range out.Folders {
		unseen += f.Unseen
	}
	return tool.SuccessResult(fmt.Sprintf("%d folders, %d unread messages", len(out.Folders), unseen), out), nil
}
