package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
)

// Approved is a person's approval of one gated call, as choird pushed it
// (approval_resolved): the approval, the request type it was filed under
// (the tool's name) and the payload the person was shown. The edge lane
// runs an approved call once, through the arbiter, under a context that
// carries it, and the approval checks of the call (the arbiter's gate,
// choir.email.send's own) let the call through only when what it would
// do now is exactly that payload.
type Approved struct {
	ID      string
	Tool    string
	Payload json.RawMessage
}

type approvedKey struct{}

// WithApproved returns ctx carrying a.
func WithApproved(ctx context.Context, a Approved) context.Context {
	return context.WithValue(ctx, approvedKey{}, a)
}

// ApprovedFor returns the approval ctx carries for a call of toolName
// whose request payload is payload; ok is false when it carries none, or
// one of another tool or another payload.
func ApprovedFor(ctx context.Context, toolName string, payload json.RawMessage) (Approved, bool) {
	a, ok := ctx.Value(approvedKey{}).(Approved)
	if !ok || a.Tool != toolName || !SameJSON(a.Payload, payload) {
		return Approved{}, false
	}
	return a, true
}

// SameJSON reports whether a and b are the same JSON value, whatever the
// order of object keys and the spacing.
func SameJSON(a, b json.RawMessage) bool {
	ca, errA := canonJSON(a)
	cb, errB := canonJSON(b)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}

func canonJSON(b json.RawMessage) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v) // map keys sorted
}

// ApprovalInput is implemented by a tool that files its own approvals
// with a payload of its own making (choir.email.send): it turns an
// approved payload back into the input that files it.
type ApprovalInput interface {
	InputFromApproval(payload json.RawMessage) (json.RawMessage, error)
}

// ErrNotRunnable reports an approval that no call of the agent's waits on
// (a proposal, a schedule: choird acts on those itself).
var ErrNotRunnable = errors.New("no call of the agent waits on this approval")

// ApprovedInput returns the input of the call an approved payload stands
// for: the payload itself for a runtime.approval tool (the arbiter's gate
// files the input whole), the tool's own answer for an [ApprovalInput]
// tool, else an error wrapping [ErrNotRunnable].
func (d *Def) ApprovedInput(payload json.RawMessage) (json.RawMessage, error) {
	if d.kind == KindMeta {
		return nil, ErrNotRunnable
	}
	if d.spec.Runtime.Approval {
		return payload, nil
	}
	if ai, ok := d.exec.(ApprovalInput); ok {
		return ai.InputFromApproval(payload)
	}
	return nil, ErrNotRunnable
}
