package email

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/internal/mailbox"
)

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

type checkOutput struct {
	Account string                `json:"account"`
	Folders []mailbox.FolderCount `json:"folders"`
	Folder  string                `json:"folder"`
	Newest  []message             `json:"newest"`
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
	name, _, tr, p := k.cfg.session(env)
	if p != nil {
		return k.cfg.fail(ctx, NameCheck, *p), nil
	}
	sum, err := tr.Check(ctx, mailbox.CheckQuery{Folder: in.Folder, Newest: newest})
	if err != nil {
		return k.cfg.failErr(ctx, NameCheck, err), nil
	}
	out := checkOutput{Account: name, Folder: sum.Folder, Folders: sum.Folders, Newest: []message{}}
	if out.Folders == nil {
		out.Folders = []mailbox.FolderCount{}
	}
	for _, b := range sum.Newest {
		m := message{UID: b.UID, Size: b.Size, Seen: b.Seen}
		envelope(&m, b.Header)
		out.Newest = append(out.Newest, m)
	}
	var unseen uint32
	for _, f := range out.Folders {
		unseen += f.Unseen
	}
	return tool.SuccessResult(fmt.Sprintf("%d folders, %d unread messages", len(out.Folders), unseen), out), nil
}
