package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/tool"
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

// prompt lays out spec 11.3 for a core job: the system prompt, SOUL-CORE.md
// and the CoreJobStart, which are never compacted, then the job's window.
func (c *Job) prompt() []llm.Message {
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
	return append(msgs, c.window()...)
}

// window is the job's committed events as conversation.
func (c *Job) window() []llm.Message {
	c.sync()
	return renderCore(c.events, c.set.cfg.Tools)
}

// sync reads the job's events committed since it last looked.
func (c *Job) sync() {
	log := c.set.cfg.Log
	evs, err := log.Since(c.seen)
	if errors.Is(err, commitlog.ErrNotRetained) {
		// Other lanes committed more than the log keeps since the job last
		// looked: what is gone is gone from its window too.
		c.set.cfg.Logger.Warn("core job window lost events to the log's retention", slog.String("job", c.start.JobName))
		head, _ := log.Head()
		evs, err = log.Range(log.Oldest(), head)
	}
	if err != nil {
		return
	}
	for _, ev := range evs {
		if ev.Lane == c.lane {
			c.events = append(c.events, ev)
		}
		c.seen = ev.Rev
	}
	c.events = trimWindow(c.events, coreWindowEvents)
}

// coreWindowEvents bounds the events of a job's window until the lanes'
// working memory compacts it.
const coreWindowEvents = 400

// trimWindow keeps the last n events or fewer, starting at a model step so
// that no tool result is left without its call.
func trimWindow(evs []rpc.Event, n int) []rpc.Event {
	if len(evs) <= n {
		return evs
	}
	for i := len(evs) - n; i < len(evs); i++ {
		var p coreOutput
		if evs[i].Type == rpc.EventModelOutput && json.Unmarshal(evs[i].Payload, &p) == nil && p.CoreEvent == "" {
			return slices.Clone(evs[i:])
		}
	}
	return slices.Clone(evs[len(evs)-n:])
}

// renderCore turns a job's events into conversation: every step with its
// tool calls, each call answered by its committed result (or, when it has
// none, by a note that it did not run or was interrupted), and the
// instructions injected between steps.
func renderCore(evs []rpc.Event, reg *tool.Registry) []llm.Message {
	results := map[string]string{}
	for _, ev := range evs {
		if id, res := callResult(ev, reg); id != "" {
			results[id] = res
		}
	}
	var out []llm.Message
	for _, ev := range evs {
		switch ev.Type {
		case rpc.EventModelOutput:
			var p coreOutput
			if json.Unmarshal(ev.Payload, &p) != nil || p.CoreEvent != "" {
				continue
			}
			if len(p.ToolCalls) == 0 {
				out = append(out, llm.AssistantMessage(answerText(p.Text)))
				continue
			}
			calls := make([]llm.ToolCall, len(p.ToolCalls))
			for i, tc := range p.ToolCalls {
				calls[i] = llm.ToolCall{ID: tc.CallID, Name: tc.Tool, Arguments: inputOrEmpty(tc.Arguments)}
			}
			out = append(out, llm.AssistantMessage(p.Text, calls...))
			for _, tc := range p.ToolCalls {
				res, ok := results[tc.CallID]
				if !ok {
					res = `{"status":"error","summary":"no result: the call did not run, or a restart interrupted it; check its effect before repeating it"}`
				}
				out = append(out, llm.ToolResultMessage(tc.CallID, res))
			}
		case rpc.EventInjectedInstruction:
			var p coreInjection
			if json.Unmarshal(ev.Payload, &p) != nil {
				continue
			}
			if p.Source == injectionFromEdge {
				out = append(out, llm.UserMessage("Instruction from the edge lane: "+p.Text))
			} else {
				out = append(out, llm.UserMessage(p.Text))
			}
		}
	}
	return out
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
