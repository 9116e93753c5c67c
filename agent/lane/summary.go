package lane

import (
	"context"
	"fmt"
	"strings"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/rpc"
)

// summaryMessages bounds how many of the window's latest messages the
// session summary is written from; what came before is in the reference
// summary.
const summaryMessages = 200

// sessionSummary is the payload of a session_summary event.
type sessionSummary struct {
	Summary string `json:"summary"`
	Model   string `json:"model"`
	// ThroughRev is the last revision the summary covers.
	ThroughRev int64 `json:"through_rev"`
}

// ErrNothingToSummarise is returned by SessionSummary when the session
// holds no conversation: no model call is made.
var ErrNothingToSummarise = fmt.Errorf("no conversation in this session to summarise")

// SessionSummary writes the session summary of a graceful stop (spec 17.2):
// one model call over the reference summary and the latest events, whose
// answer is committed as a session_summary event. Call it after Run has
// returned; ctx bounds the call (session_summary_timeout_ms).
func (e *Edge) SessionSummary(ctx context.Context) (rpc.Event, error) {
	head, _ := e.cfg.Log.Head()
	sum, _ := e.mem.State()
	ref := sum.Render()
	conv := e.mem.Window(head)
	if len(conv) > summaryMessages {
		conv = conv[len(conv)-summaryMessages:]
	}
	talk := false
	for _, m := range conv {
		// The user's words, or a mail or a schedule's fire the lane
		// answered (a notice call, userMessages).
		talk = talk || m.Role == llm.RoleUser || (len(m.ToolCalls) > 0 && m.ToolCalls[0].Name == NoticeTool)
	}
	if !talk && ref == "" {
		return rpc.Event{}, ErrNothingToSummarise
	}
	msgs := []llm.Message{llm.SystemMessage("The session is ending. Write its summary for your future self: what the " +
		"user wanted, what was done and decided, results of tools, and what is still open, in short plain lines. " +
		"It is stored in memory and read when a later session needs this one.")}
	if ref != "" {
		msgs = append(msgs, llm.SystemMessage(ref))
	}
	msgs = append(msgs, conv...)
	msgs = append(msgs, llm.UserMessage("Write the session summary now."))
	model := e.cfg.Model()
	resp, err := e.cfg.LLM.Complete(ctx, llm.Request{Model: model, Messages: msgs, Lane: "edge"})
	if err != nil {
		return rpc.Event{}, fmt.Errorf("session summary call: %w", err)
	}
	text := strings.TrimSpace(resp.Content)
	if text == "" {
		return rpc.Event{}, fmt.Errorf("session summary call: %w: empty answer", llm.ErrMalformedResponse)
	}
	e.tokens.Add(resp.Usage.PromptTokens + resp.Usage.CompletionTokens)
	// The summary is committed even if ctx ran out meanwhile: the call
	// was made and paid for.
	cctx := context.WithoutCancel(ctx)
	if _, err := e.cfg.Arbiter.Commit(cctx, rpc.EventLLMCallCommitted, "edge", commitlog.LLMCall{Model: model.Name,
		Lane: "edge", PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens,
		LatencyMS: resp.Latency.Milliseconds(), Purpose: commitlog.PurposeSessionSummary,
		CachedTokens: resp.Usage.CachedTokens, CostUSD: resp.Usage.CostUSD, CostSource: resp.Usage.CostSource, SpendKey: resp.SpendKey}); err != nil {
		return rpc.Event{}, fmt.Errorf("commit summary call: %w", err)
	}
	ev, err := e.cfg.Arbiter.Commit(cctx, rpc.EventSessionSummary, "edge",
		sessionSummary{Summary: text, Model: model.Name, ThroughRev: head})
	if err != nil {
		return rpc.Event{}, fmt.Errorf("commit session summary: %w", err)
	}
	return ev, nil
}
