package lane

import (
	"context"
	"encoding/json"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/offer"
	"github.com/choirhq/choir/config"
)

// The edge asks the registry's injector for the tools parameter of each
// call; the mode and the discovery tools' answers are the registry's, the
// lane only routes.

// startOffer begins a turn's view of the tools: schemas loaded or shown in
// the last turn are dropped.
func (e *Edge) startOffer() {
	e.offer.Store(e.cfg.Injector.Offer(tool.LaneEdge, contextWindow(e.cfg.Model())))
}

// currentOffer is the running turn's offer, starting one if no turn ran.
func (e *Edge) currentOffer() *offer.Offer {
	if o := e.offer.Load(); o != nil {
		return o
	}
	e.startOffer()
	return e.offer.Load()
}

// toolFilter is what the edge may call now: its exposure and the active
// skill state's allowlist.
func (e *Edge) toolFilter() tool.Filter {
	f := tool.Filter{Lane: tool.LaneEdge}
	if run := e.activeSkill(); run != nil {
		f.Allow = run.AllowedTools()
		if f.Allow == nil {
			f.Allow = []string{}
		}
	}
	return f
}

// discover answers a discovery tool's call.
func (e *Edge) discover(ctx context.Context, call llm.ToolCall) (json.RawMessage, error) {
	return e.currentOffer().Call(ctx, e.toolFilter(), call.Name, call.Arguments), nil
}

// amend adds to a rejection what the model lacks to get the next call
// right (see [offer.Offer.Amend]).
func (e *Edge) amend(ctx context.Context, call llm.ToolCall, out arbiter.Outcome) json.RawMessage {
	return e.currentOffer().Amend(ctx, e.toolFilter(), call.Name, out.Rejected.Kind, out.ForModel())
}

// contextWindow is a model's window, or the default.
func contextWindow(m llm.ModelSettings) int64 {
	if m.ContextWindow > 0 {
		return m.ContextWindow
	}
	return config.DefaultContextWindow
}

// schemaTokens estimates what a tools parameter costs.
func schemaTokens(specs []llm.ToolSpec) int64 {
	views := make([]tool.LLMView, len(specs))
	for i, s := range specs {
		views[i] = tool.LLMView{Name: s.Name, Description: s.Description, Parameters: s.Parameters}
	}
	return int64(offer.EstimateTokens(views))
}
