package core

import (
	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/offer"
	"github.com/choirhq/choir/config"
)

// A job asks the registry's injector for the tools parameter of each
// call. A job's prompt is rebuilt from the log at every step, so it is
// offered direct or compact mode only (see [offer.Injector.Plan]): an
// invalid input's rejection, which the log keeps, carries the schema.

// toolOffer is the job's offer, made at its first step: a job is one turn.
func (c *Job) toolOffer() *offer.Offer {
	if o := c.offer.Load(); o != nil {
		return o
	}
	inj := c.set.cfg.Injector
	if inj == nil {
		inj = offer.NewInjector(c.set.cfg.Tools, offer.InjectorConfig{Mode: offer.ModeDirect})
	}
	window := c.set.cfg.Model().ContextWindow
	if window <= 0 {
		window = config.DefaultContextWindow
	}
	c.offer.CompareAndSwap(nil, inj.Offer(tool.LaneCore, window))
	return c.offer.Load()
}

// toolFilter is what the job may call: tools exposed to core jobs, cut to
// its tool_constraints.
func (c *Job) toolFilter() tool.Filter {
	return tool.Filter{Lane: tool.LaneCore, Allow: c.allow()}
}

// noteOutcomes records the schemas the rejections gave the model: they
// join the tools parameter for the rest of the job.
func (c *Job) noteOutcomes(ps []arbiter.Proposal, outs []arbiter.Outcome) {
	for i, out := range outs {
		if out.Rejected != nil && i < len(ps) {
			c.toolOffer().Amend(c.ctx, c.toolFilter(), ps[i].Tool, out.Rejected.Kind, nil)
		}
	}
}

// toolTokens estimates what a tools parameter costs.
func toolTokens(specs []llm.ToolSpec) int64 {
	views := make([]tool.LLMView, len(specs))
	for i, s := range specs {
		views[i] = tool.LLMView{Name: s.Name, Description: s.Description, Parameters: s.Parameters}
	}
	return int64(offer.EstimateTokens(views))
}
