package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/rpc"
)

// notifyUsage tells the DM what the usage meter says (a cap 80% used, a
// cap lowered below the spend). It does not wait: the meter calls it on a
// lane's way to or from a model call.
func (s *session) notifyUsage(text string) {
	s.logger.Warn("usage notice", slog.String("text", text))
	e := s.edge
	if e == nil {
		return // before the lane exists: the first refused call says it
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Notify(ctx, "usage", text); err != nil {
			s.logger.Warn("usage notice not sent", slog.String("error", err.Error()))
		}
	}()
}

// logBilledFailure commits a model call that failed after the provider
// billed it (the meter's BilledFailureFunc) as an llm_call_committed of
// purpose billed_failure: its spend is then in the replicated log, which
// the usage views and the next session's baseline count.
func (s *session) logBilledFailure(req *llm.Request, u llm.Usage) {
	s.logger.Warn("model call failed after the provider billed it: its usage is counted", slog.String("model", req.Model.Name),
		slog.String("lane", req.Lane), slog.Int64("prompt_tokens", u.PromptTokens),
		slog.Int64("completion_tokens", u.CompletionTokens), slog.Float64("cost_usd", u.CostUSD))
	lane := req.Lane
	if !rpc.ValidLane(lane) {
		lane = "system"
	}
	arb := s.arb
	if arb == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := arb.Commit(ctx, rpc.EventLLMCallCommitted, lane, commitlog.LLMCall{Model: req.Model.Name, Lane: lane,
		PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens,
		CostUSD: u.CostUSD, CostSource: u.CostSource, JobID: req.JobID, Purpose: commitlog.PurposeBilledFailure,
		SpendKey: req.SpendKey}); err != nil {
		s.logger.Warn("billed failure not logged: its spend counts in this session only", slog.String("error", err.Error()))
	}
}
