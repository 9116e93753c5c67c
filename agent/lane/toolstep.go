package lane

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/lock"
)

// toolStep answers the tool calls of one model step of a lane, in call
// order. Lane-level calls (compaction, skills, core job control) run one by
// one in the lane, since each may change what the calls after it are
// allowed; every maximal run of other calls between them goes through the
// arbiter at once ([arbiter.Arbiter.ProposeAll]), where the calls with
// disjoint locks run concurrently.
type toolStep struct {
	arb *arbiter.Arbiter
	// laneToolFunc reports whether a call runs in the lane itself.
	laneToolFunc func(llm.ToolCall) bool
	// runLaneToolFunc runs a lane-level call.
	runLaneToolFunc func(context.Context, llm.ToolCall) (json.RawMessage, error)
	// proposalFunc makes a call's proposal. It is called when the call's
	// run begins, after every lane-level call before it has run.
	proposalFunc func(llm.ToolCall) arbiter.Proposal
	// amendFunc, if set, may add to a rejected call's answer what the
	// model lacks (a schema it was not shown, the nearest tool names).
	amendFunc func(context.Context, llm.ToolCall, arbiter.Outcome) json.RawMessage
}

// run returns the tool result messages in the order of calls. It stops at
// the first error (of a lane-level call, or of the arbiter), returning the
// results so far.
func (s toolStep) run(ctx context.Context, calls []llm.ToolCall) ([]llm.Message, error) {
	msgs := make([]llm.Message, 0, len(calls))
	for i := 0; i < len(calls); {
		if s.laneToolFunc(calls[i]) {
			answer, err := s.runLaneToolFunc(ctx, calls[i])
			if err != nil {
				return msgs, err
			}
			msgs = append(msgs, llm.ToolResultMessage(calls[i].ID, string(answer)))
			i++
			continue
		}
		var ps []arbiter.Proposal
		j := i
		for ; j < len(calls) && !s.laneToolFunc(calls[j]); j++ {
			ps = append(ps, s.proposalFunc(calls[j]))
		}
		outs, err := s.arb.ProposeAll(ctx, ps)
		if err != nil {
			return msgs, err
		}
		for k, out := range outs {
			answer := out.ForModel()
			if s.amendFunc != nil && out.Rejected != nil {
				answer = s.amendFunc(ctx, calls[i+k], out)
			}
			msgs = append(msgs, llm.ToolResultMessage(calls[i+k].ID, string(answer)))
		}
		i = j
	}
	return msgs, nil
}

// runToolCalls answers the tool calls of one model step (see toolStep).
// The tool-call budget is charged per call, in order: the calls within it
// run, and a call beyond it ends the turn with ErrBudgetExceeded once they
// have.
func (e *Edge) runToolCalls(ctx context.Context, calls []llm.ToolCall) ([]llm.Message, error) {
	within, over := len(calls), false
	for i := range calls {
		if n := e.toolCalls.Add(1); e.cfg.Budgets.MaxToolCallsPerSession > 0 && n > e.cfg.Budgets.MaxToolCallsPerSession {
			within, over = i, true
			break
		}
	}
	msgs, err := toolStep{arb: e.cfg.Arbiter, laneToolFunc: e.laneTool, runLaneToolFunc: e.runLaneTool,
		proposalFunc: e.proposal, amendFunc: e.amend}.run(ctx, calls[:within])
	if err != nil {
		return msgs, err
	}
	if over {
		e.finalize(ctx, "This session has used its tool-call budget: I stop until midnight, when a new session starts with a fresh one; /restart starts one now.")
		return msgs, ErrBudgetExceeded
	}
	return msgs, nil
}

// laneTool reports whether the lane answers the call itself rather than
// the arbiter.
func (e *Edge) laneTool(call llm.ToolCall) bool { return e.laneHandler(call) != nil }

// runLaneTool answers a call laneTool reported as the lane's own.
func (e *Edge) runLaneTool(ctx context.Context, call llm.ToolCall) (json.RawMessage, error) {
	return e.laneHandler(call)(ctx, call)
}

// proposal is the edge's proposal for a call, under the skill that is
// active now.
func (e *Edge) proposal(call llm.ToolCall) arbiter.Proposal {
	o := e.currentOffer()
	unseen := o.SchemaUnseen(call.Name)
	o.Called(call.Name, e.toolFilter())
	return arbiter.Proposal{Owner: lock.Edge, CallID: fmt.Sprintf("edge-%d-%s", e.callSeq.Add(1), call.ID),
		Tool: call.Name, Input: call.Arguments, Skill: e.activeSkill(), SchemaUnseen: unseen}
}
