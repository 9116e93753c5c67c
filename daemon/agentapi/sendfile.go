package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/strictjson"
)

// SendFileTool is the host tool through which an agent sends a file it
// wrote to .choirtmp/send to its user (spec 19.5): choird queues it in the
// outbox, delivers it as a document, photo, voice message or video, and
// deletes it once delivered.
const SendFileTool = "choir.send.file"

// hostCall is the session and call a host tool runs for.
//
// key is the call's idempotency key when it wrote ahead; empty for an
// older agent, whose call is then known by session and call ID.
type hostCall struct {
	sessionID uuid.UUID
	agentID   string
	callID    string
	key       string
	// sources are the calling lane's untrusted sources (issue 30).
	sources []string
}

// callRef is what a host tool keeps its effect under, so that a call run
// again after a restart (in a new session) finds it: the idempotency key,
// or the session and call ID.
func (c hostCall) callRef() string {
	if c.key != "" {
		return c.key
	}
	return c.sessionID.String() + ":" + c.callID
}

type hostCallKey struct{}

func withHostCall(ctx context.Context, c hostCall) context.Context {
	return context.WithValue(ctx, hostCallKey{}, c)
}

// sendFileInput is the tool's input.
type sendFileInput struct {
	// Path is relative to .choirtmp/send ("report.pdf"), or to the
	// workspace (".choirtmp/send/report.pdf").
	Path string `json:"path"`
	// Kind is document, photo, voice or video; by default it follows the
	// file's extension.
	Kind    string `json:"kind,omitempty"`
	Caption string `json:"caption,omitempty"`
}

// sendKinds maps extensions to the kind a file goes out as by default.
var sendKinds = map[string]string{
	".jpg": message.Photo, ".jpeg": message.Photo, ".png": message.Photo, ".webp": message.Photo,
	".ogg": message.Voice, ".oga": message.Voice, ".opus": message.Voice,
	".mp4": message.Video, ".mov": message.Video, ".webm": message.Video,
}

// maxSendBytes is Telegram's upload limit for bots.
const maxSendBytes = 50 << 20

func badInput(format string, args ...any) error {
	return codedErr{wire.ErrBadRequest, fmt.Errorf(format, args...)}
}

// sendFile is the host tool's body: the file is checked and queued, with
// its delivery job, in one transaction; a repeated call (the agent
// retrying) queues it once.
func (a *API) sendFile(ctx context.Context, _ string, input json.RawMessage) (json.RawMessage, error) {
	hc, ok := ctx.Value(hostCallKey{}).(hostCall)
	if !ok {
		return nil, fmt.Errorf("%s called outside a session", SendFileTool)
	}
	var in sendFileInput
	if err := strictjson.Decode(input, &in, strictjson.Limits{MaxBytes: 1 << 16}); err != nil {
		return nil, badInput("%s input: %v", SendFileTool, err)
	}
	if in.Path == "" {
		return nil, badInput("path is required: the file's name inside .choirtmp/send")
	}
	file, err := message.FilePath(in.Path)
	if err != nil {
		return nil, badInput("%v: write the file under .choirtmp/send first", err)
	}
	rel := strings.TrimPrefix(file, ".choirtmp/send/")
	kind := in.Kind
	if kind == "" {
		kind = sendKinds[strings.ToLower(path.Ext(rel))]
		if kind == "" {
			kind = message.Document
		}
	}
	switch kind {
	case message.Document, message.Photo, message.Voice, message.Video:
	default:
		return nil, badInput("kind %q: want document, photo, voice or video", kind)
	}
	b, err := a.bindings(ctx, hc.sessionID)
	if err != nil {
		return nil, err
	}
	cfg, _ := a.config()
	ws, ok := cfg.Workspaces[b.Workspace]
	if !ok {
		return nil, fmt.Errorf("the session's workspace %q is no longer configured", b.Workspace)
	}
	// Through an os.Root on the configured directory, like every later
	// access: a link the agent planted cannot make choird look into
	// another workspace, and a FIFO is described, never opened.
	st, err := message.File{Dir: ws.Path, Path: file}.Stat()
	switch {
	case errors.Is(err, message.ErrNotRegular):
		return nil, badInput("%s is not a regular file", rel)
	case errors.Is(err, fs.ErrNotExist):
		return nil, badInput("%s: no such file in .choirtmp/send: write it there first", rel)
	case err != nil:
		return nil, badInput("%s cannot be sent: %v", rel, err)
	case st.Size() == 0:
		return nil, badInput("%s is empty", rel)
	case st.Size() > maxSendBytes:
		return nil, badInput("%s is %d bytes; Telegram takes at most 50 MB from a bot: compress or split it", rel, st.Size())
	}
	gw, chat, err := control.OutboundAddress(cfg, b)
	if err != nil {
		return nil, err
	}
	var q outbox.Queued
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		q, err = outbox.EnqueueTx(ctx, tx, a.jobs, outbox.Params{AgentID: hc.agentID, SessionID: &hc.sessionID,
			MessageID: "file:" + hc.callRef(), Gateway: gw, DM: b.DM, ChatID: chat, Kind: kind,
			Text: in.Caption, Workspace: b.Workspace, FilePath: file, MaxPending: outbox.AgentMaxPending})
		return err
	})
	if errors.Is(err, outbox.ErrFull) {
		return nil, outboxFull(err)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"queued": true, "kind": kind, "file": ".choirtmp/send/" + rel,
		"outbox_id": q.Row.OutboxID, "note": "delivered to the user shortly; the file is deleted once sent"})
}
