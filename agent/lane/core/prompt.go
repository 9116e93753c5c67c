package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc"
)

// defaultCoreInstructions are the core lane's behavioural instructions
// (spec 11.3: deep execution, tool orchestration).
const defaultCoreInstructions = `You are a core job of a personal agent: you carry out one task, given to you by the agent's edge lane, ` +
	`with tools, step by step, until it is done. You do not talk with the user; the edge reports your outcome.
Plan first, then act. Use ` + coreReportTool + ` to report progress at each phase, your plan, a partial result ` +
	`worth keeping, or information you need; report summaries, never your raw reasoning.
Never invent tool results. When the task is done, answer without tool calls: that answer is your final result.`

// coreOutput is the payload of a job's model_output: a step of the model
// (text and tool calls), or a CoreEvent it reported with the report tool
// (CoreEvent, CallID, Text and Data).
type coreOutput struct {
	Text      string          `json:"text"`
	ToolCalls []coreCall      `json:"tool_calls,omitempty"`
	CoreEvent string          `json:"core_event,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
}

func answerText(text string) string {
	if strings.TrimSpace(text) == "" {
		return "(no answer)"
	}
	return text
}

// coreInjection is the payload of an injected_instruction on a job's lane.
type coreInjection struct {
	// Source is who adds it: the edge (counted against the job's
	// injections), the lane itself (a rejected final result), or a restart.
	Source string `json:"source"`
	Text   string `json:"text"`
}

// The sources of a job's injected instructions.
const (
	injectionFromEdge    = "edge"
	injectionFromLane    = "lane"
	injectionFromRestart = "restart"
)

// promptHead is what a job's prompt carries first and never compacts
// (spec 11.3): the system prompt, SOUL-CORE.md, the CoreJobStart, and
// the note of a restart that lost the start of the window.
func (c *Job) promptHead() []llm.Message {
	var sys strings.Builder
	sys.WriteString(c.set.cfg.Instructions)
	if sys.Len() == 0 {
		sys.WriteString(defaultCoreInstructions)
	}
	fmt.Fprintf(&sys, "\n\nYour job is named %s. Verbosity of your reports: %s.", c.start.JobName, c.start.Verbosity)
	if c.schema != nil {
		sys.WriteString(" Your final result must be a JSON value satisfying the output_schema of your task.")
	}
	msgs := []llm.Message{llm.SystemMessage(sys.String())}
	if c.set.cfg.Soul != "" {
		msgs = append(msgs, llm.SystemMessage("SOUL-CORE.md:\n"+c.set.cfg.Soul))
	}
	msgs = append(msgs, llm.UserMessage(c.start.render()))
	if c.note != "" {
		msgs = append(msgs, llm.SystemMessage(c.note))
	}
	return msgs
}

// prompt lays out spec 11.3 for a job's next step: the head, the
// reference summary and the window of the job's committed events. It is
// where the job's working memory measures the prompt, once per step: the
// summary and the window may be folded, the head and the tools may not.
func (c *Job) prompt(tools []llm.ToolSpec) []llm.Message {
	head := c.promptHead()
	rev, _ := c.set.cfg.Log.Head()
	c.mem.Check(c.ctx, workmem.EstimateTokens(head...)+workmem.EstimateTools(tools), rev)
	msgs, _ := c.mem.Layout(head, rev)
	return pairCalls(msgs)
}

// noResult answers a call whose result is not in the window.
const noResult = `{"status":"error","summary":"no result: the call did not run, or a restart interrupted it; check its effect before repeating it"}`

// pairCalls makes a laid-out window a conversation the model accepts:
// every tool call of a step is answered before anything else follows it
// (by noResult when its result is not there), and a result whose call was
// folded into the summary (a compaction can end within a step) is kept as
// a note, never dropped.
func pairCalls(msgs []llm.Message) []llm.Message {
	out := make([]llm.Message, 0, len(msgs))
	var open []string // the calls of the last step not yet answered
	closeStep := func() {
		for _, id := range open {
			out = append(out, llm.ToolResultMessage(id, noResult))
		}
		open = nil
	}
	for _, m := range msgs {
		if m.Role == llm.RoleTool {
			if i := slices.Index(open, m.ToolCallID); i >= 0 {
				open = slices.Delete(open, i, i+1)
				out = append(out, m)
				continue
			}
			closeStep()
			out = append(out, llm.AssistantMessage(fmt.Sprintf(
				"[the result of my earlier tool call %s, whose request is folded into the reference summary: %s]", m.ToolCallID, m.Content)))
			continue
		}
		closeStep()
		out = append(out, m)
		for _, tc := range m.ToolCalls {
			open = append(open, tc.ID)
		}
	}
	closeStep()
	return out
}

// renderCoreEvent renders one of a job's committed events as its window
// shows it: a step with its tool calls, each call's result (committed
// after it, within the step), and the instructions injected between
// steps. It depends on the event alone, as working memory requires.
func renderCoreEvent(ev rpc.Event, reg *tool.Registry) []llm.Message {
	switch ev.Type {
	case rpc.EventModelOutput:
		var p coreOutput
		if json.Unmarshal(ev.Payload, &p) != nil {
			return nil
		}
		if p.CoreEvent != "" {
			break // a report answers its call: callResult below
		}
		if len(p.ToolCalls) == 0 {
			return []llm.Message{llm.AssistantMessage(answerText(p.Text))}
		}
		calls := make([]llm.ToolCall, len(p.ToolCalls))
		for i, tc := range p.ToolCalls {
			calls[i] = llm.ToolCall{ID: tc.CallID, Name: tc.Tool, Arguments: inputOrEmpty(tc.Arguments)}
		}
		return []llm.Message{llm.AssistantMessage(p.Text, calls...)}
	case rpc.EventInjectedInstruction:
		var p coreInjection
		if json.Unmarshal(ev.Payload, &p) != nil {
			return nil
		}
		if p.Source == injectionFromEdge {
			return []llm.Message{llm.UserMessage("Instruction from the edge lane: " + p.Text)}
		}
		return []llm.Message{llm.UserMessage(p.Text)}
	}
	if id, res := callResult(ev, reg); id != "" {
		return []llm.Message{llm.ToolResultMessage(id, res)}
	}
	return nil
}

// callResult returns the call a committed event answers and the answer
// the model sees, or "" when the event answers none.
func callResult(ev rpc.Event, reg *tool.Registry) (callID, answer string) {
	var p struct {
		CallID    string          `json:"call_id"`
		Tool      string          `json:"tool"`
		Status    string          `json:"status"`
		Rejection json.RawMessage `json:"rejection"`
		Error     string          `json:"error"`
		Output    json.RawMessage `json:"output"`
		CoreEvent string          `json:"core_event"`
	}
	if json.Unmarshal(ev.Payload, &p) != nil || p.CallID == "" {
		return "", ""
	}
	switch {
	case ev.Type == rpc.EventModelOutput && p.CoreEvent != "":
		return p.CallID, `{"status":"success","summary":"reported"}`
	case ev.Type == rpc.EventToolCallRequested && p.Status == "rejected":
		b, _ := json.Marshal(map[string]any{"status": "rejected", "error": p.Rejection})
		return p.CallID, string(b)
	case ev.Type == rpc.EventToolCallRequested:
		return p.CallID, string(tool.ErrorResult("not run: %s", p.Error).JSON())
	case ev.Type == rpc.EventToolResultCommitted:
		var res tool.Result
		if json.Unmarshal(p.Output, &res) != nil {
			res = tool.Result{Status: tool.StatusError, Summary: p.Error}
		}
		if def, ok := reg.Lookup(p.Tool); ok {
			view, seen := def.ForModel(tool.LaneCore, res)
			if !seen {
				view = tool.Result{Status: res.Status, Summary: "the result is not shown to core jobs", Masked: true}
			}
			res = view
		}
		return p.CallID, string(res.JSON())
	}
	return "", ""
}
