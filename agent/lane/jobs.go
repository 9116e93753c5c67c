package lane

import (
	"context"
	"encoding/json"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/rpc"
)

// Jobs are the core jobs that run beside the edge (spec 7.1): package core
// implements them, and the edge drives them through this interface. They
// live strictly inside the edge's Run.
type Jobs interface {
	// Begin starts the jobs under ctx, the edge's Run context, resuming
	// those a restart interrupted. End ends every job at once and waits for
	// them; their reports are delivered while ctx lives.
	Begin(ctx context.Context)
	End(ctx context.Context, reason string)
	// Tools are the edge's tools for its jobs (choir.core.*); Call answers
	// one of them.
	Tools() []llm.ToolSpec
	Call(ctx context.Context, call llm.ToolCall) (json.RawMessage, error)
	// Deliver tells the user, at the edge's safe point and on its
	// goroutine, what the jobs have to say (their reports above all), and
	// returns what the edge's model must know of it.
	Deliver(ctx context.Context) ([]llm.Message, error)
	// Running reports whether any job runs; Unsent whether the report of
	// an ended job waits to be sent.
	Running() bool
	Unsent() bool
	// Statuses are the jobs' REPORT_STATUS.
	Statuses() []rpc.ReportStatusRequest
}

// CoresRunning reports whether any core job runs: the edge is then limited
// to read-only tools (spec 7.2). Wire it to the arbiter's EdgeRestricted.
func (e *Edge) CoresRunning() bool { return e.jobs != nil && e.jobs.Running() }

// Statuses are the REPORT_STATUS of every lane: the edge's, then each core
// job's.
func (e *Edge) Statuses() []rpc.ReportStatusRequest {
	out := []rpc.ReportStatusRequest{e.Status()}
	if e.jobs != nil {
		out = append(out, e.jobs.Statuses()...)
	}
	return out
}

// SpendTokens adds tokens a core job used to the session's, which all
// lanes share, and returns the session's total.
func (e *Edge) SpendTokens(n int64) int64 { return e.tokens.Add(n) }

// SpendToolCall adds a core job's tool call to the session's and returns
// the session's total.
func (e *Edge) SpendToolCall() int64 { return e.toolCalls.Add(1) }

// Wake tells the edge that its jobs have something for its next safe
// point: an IDLE edge looks at once.
func (e *Edge) Wake() { e.wakeUp() }

// UserError words a model failure for the user (spec 7.7).
func UserError(err error) string { return userError(err) }
