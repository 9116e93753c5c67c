package lane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/workmem"
)

// This file ties the edge lane to its working memory (agent/workmem): the
// layout of its prompt, the measure once per step, and manual compaction.

// promptLayout is how the running turn's prompt is made: its first fixed
// messages are never compacted, the next ones up to prefix are the
// summary and the window through revision before, as of generation gen
// of the working memory; the current message and the turn follow.
type promptLayout struct {
	before int64
	fixed  int
	prefix int
	gen    uint64
}

// layoutPrompt returns the never-compacted head, the summary and the
// window through revision before, and remembers the layout for the turn.
func (e *Edge) layoutPrompt(before int64) []llm.Message {
	head := e.promptHead()
	msgs, gen := e.mem.Layout(head, before)
	e.mu.Lock()
	e.layout = promptLayout{before: before, fixed: len(head), prefix: len(msgs), gen: gen}
	e.mu.Unlock()
	return msgs
}

// checkMemory measures the turn's prompt once per step, after the model's
// response and the tool results before it (spec 11.3): working memory
// starts a compaction when the summary and the window pass the threshold.
// When a compaction has been swapped in since the prompt was laid out, the
// summary and window part of msgs is laid out again; the current message
// and the turn so far are kept as they are.
func (e *Edge) checkMemory(ctx context.Context, msgs []llm.Message) []llm.Message {
	e.mu.Lock()
	l := e.layout
	e.mu.Unlock()
	if l.prefix > len(msgs) {
		return msgs
	}
	relayout := func() {
		if e.mem.Generation() != l.gen {
			msgs = append(e.layoutPrompt(l.before), msgs[l.prefix:]...)
			e.mu.Lock()
			l = e.layout
			e.mu.Unlock()
		}
	}
	relayout()
	fixed := workmem.EstimateTokens(msgs[:l.fixed]...) + workmem.EstimateTokens(msgs[l.prefix:]...) +
		workmem.EstimateTools(e.tools())
	if e.mem.Check(ctx, fixed, l.before) {
		relayout()
	}
	return msgs
}

// checkIdle measures the prompt between turns, when everything committed
// may be folded.
func (e *Edge) checkIdle(ctx context.Context) {
	head, _ := e.cfg.Log.Head()
	e.mem.Check(ctx, workmem.EstimateTokens(e.promptHead()...)+workmem.EstimateTools(e.tools()), head)
}

// compact answers choir.memory.compact: the whole window before the
// current message is folded into the reference summary, on the path of
// every compaction (spec 11.3), and the tool answers once it is applied or
// has failed, which leaves the window as it was.
func (e *Edge) compact(ctx context.Context) (json.RawMessage, error) {
	e.mu.Lock()
	l := e.layout
	e.mu.Unlock()
	res, err := e.requestCompaction(ctx, l.before).Wait(ctx)
	switch {
	case errors.Is(err, workmem.ErrNothingToCompact):
		return errJSON("nothing_to_compact", "the event window is empty"), nil
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return errJSON("compaction_failed", "the window is kept: "+err.Error()), nil
	}
	b, _ := json.Marshal(map[string]any{"status": "success", "summary": fmt.Sprintf(
		"compacted %d events (revisions %d to %d) into the reference summary", res.Folded, res.FromRev, res.ThroughRev)})
	return b, nil
}

// requestCompaction starts a manual compaction of the window through
// revision through.
func (e *Edge) requestCompaction(ctx context.Context, through int64) *workmem.Compaction {
	return e.mem.Compact(ctx, workmem.EstimateTokens(e.promptHead()...)+workmem.EstimateTools(e.tools()), through)
}
