// Package core runs the agent's core jobs beside the edge lane (spec 7.1,
// 7.3): named jobs on the flagship model, each a goroutine with its own
// state machine, briefed by the edge's CoreJobStart and never shown the
// user's messages. The edge drives them through lane.Jobs: spawn, inject,
// cancel and list are its tools, and every job's end reaches the user as
// a report the edge delivers at its next safe point. Jobs take their locks
// as core:<name>, so they run at once unless they touch the same
// resource, and a restarted agent resumes them from its log.
package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/offer"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc"
)

// This file is one core job (spec 7.3): a goroutine with its own state
// machine on the flagship model, which never sees the user's messages,
// only the CoreJobStart the edge wrote. Its window is its own lane's
// committed events, kept by its working memory (memory.go) and laid out
// before every model call (prompt.go), so a job resumed after a crash
// reads what it would have read.

// State is a state of a core job's machine (spec 7.3).
type State string

// The core states.
const (
	Created      State = "CORE_CREATED"
	Initializing State = "CORE_INITIALIZING"
	Reasoning    State = "CORE_REASONING"
	WaitingTool  State = "CORE_WAITING_TOOL"
	Completed    State = "CORE_COMPLETED"
	Terminated   State = "CORE_TERMINATED"
)

// Config is what the core jobs work with.
type Config struct {
	Arbiter *arbiter.Arbiter
	Log     *commitlog.Log
	Tools   *tool.Registry
	// Injector decides how the jobs' models are offered the tools; nil:
	// direct.
	Injector *offer.Injector
	LLM      *llm.Client
	// Model returns the settings of the flagship model (core_llm).
	Model func() llm.ModelSettings
	// Instructions are the core lane's behavioural instructions; empty
	// means the package's own.
	Instructions string
	// Soul is SOUL-CORE.md.
	Soul string
	// Out is the edge's: jobs speak to the user only through reports the
	// edge delivers.
	Out     lane.Outbound
	Budgets Budgets
	// RateLimitDelay is rate_limit_retry_ms, used when a 429 carries no
	// Retry-After.
	RateLimitDelay time.Duration
	// CompactionThresholdPercent is compaction_threshold_percent, as the
	// edge's: the share of the flagship model's context window a job's
	// prompt may fill before its window is compacted. Nil or 0: the
	// default (80).
	CompactionThresholdPercent func() int
	// StatusFunc is called after every change of what Statuses reports;
	// it must not block. Nil: not called.
	StatusFunc func()
	Logger     *slog.Logger
}

// Budgets bound the core jobs (spec 7.6); none is ever reset. Zero means
// unlimited. The session budgets are shared with the edge: its counters
// are the session's.
type Budgets struct {
	// MaxCoreJobs bounds the jobs running at once.
	MaxCoreJobs            int
	TotalSessionTokens     int64
	MaxToolCallsPerSession int64
	PerJobMaxSteps         int
	PerJobMaxToolCalls     int
	PerJobWallTime         time.Duration
	MaxInjectionsPerJob    int
}

// Usage is what a job has spent; it is never reset, not by an
// injection and not by a recovery.
type Usage struct {
	Steps      int64 `json:"steps"`
	ToolCalls  int64 `json:"tool_calls"`
	Tokens     int64 `json:"tokens"`
	WallMS     int64 `json:"wall_time_ms"`
	Injections int   `json:"injections"`
}

// coreError is why a job was terminated; it is also the cause a job's
// context is cancelled with.
type coreError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Budget and Limit name the budget a budget_exceeded error ran out of.
	Budget string `json:"budget,omitempty"`
	Limit  int64  `json:"limit,omitempty"`
}

func (e *coreError) Error() string { return e.Kind + ": " + e.Message }

// The kinds of coreError.
const (
	errKindCancelled = "cancelled"
	errKindBudget    = "budget_exceeded"
	errKindModel     = "model_error"
	errKindResult    = "invalid_result"
	errKindEdgeEnded = "edge_ended"
	errKindInternal  = "error"
)

func budgetError(budget string, limit int64, what string) *coreError {
	return &coreError{Kind: errKindBudget, Budget: budget, Limit: limit,
		Message: fmt.Sprintf("%s: the %s budget of %d is used up", what, budget, limit)}
}

// coreStopped is the payload of core_stopped: how the job ended.
type coreStopped struct {
	JobName       string          `json:"job_name"`
	JobID         string          `json:"job_id"`
	Outcome       string          `json:"outcome"` // completed or terminated
	State         State           `json:"state"`
	FinalResult   json.RawMessage `json:"final_result,omitempty"`
	PartialResult string          `json:"partial_result,omitempty"`
	Error         *coreError      `json:"error,omitempty"`
	Used          Usage           `json:"budgets_used"`
}

// coreCall is one tool call of a core step, under the call ID the job
// gives it (unique in the chain: job ID, step, position).
type coreCall struct {
	CallID    string          `json:"call_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// Job is one named core job.
type Job struct {
	set *Set
	// offer is the job's view of the tools (offer.go).
	offer    atomic.Pointer[offer.Offer]
	start    JobStart
	lane     string
	owner    lock.Owner
	startRev int64
	schema   *jsonschema.Schema
	wall     time.Duration // the job's wall-time budget; 0 is none
	ctx      context.Context
	cancel   context.CancelCauseFunc
	stopWall context.CancelFunc
	done     chan struct{}
	// note is shown after the briefing when the job resumed without the
	// start of its window.
	note string
	// mem is the job's working memory: its window of the lane's events
	// and the reference summary of what was folded out of it.
	mem *workmem.Memory

	mu       sync.Mutex
	state    State
	used     Usage
	runStart time.Time // when this run began; WallMS holds earlier runs
	pending  []string  // injections waiting for the next safe point
	// counted are the calls of the current step already counted against
	// the budgets: a snapshot names them, so a recovery does not count
	// them again when it finds them in the tail.
	counted       []string
	progress      string
	partial       string
	schemaRetried bool
}

// newJob makes a job that has spent used; launch runs it.
func newJob(s *Set, start JobStart, startRev int64, used Usage) *Job {
	owner, _ := lock.Core(start.JobName) // the name was checked at spawn
	c := &Job{set: s, start: start, lane: "core:" + start.JobName, owner: owner, startRev: startRev,
		schema: start.compiledOutputSchema(), done: make(chan struct{}), state: Created, used: used}
	b := s.cfg.Budgets
	c.wall = b.PerJobWallTime
	if tb := time.Duration(start.ToolConstraints.TimeBudgetMS) * time.Millisecond; tb > 0 && (c.wall <= 0 || tb < c.wall) {
		c.wall = tb
	}
	ctx, cancel := context.WithCancelCause(s.base)
	c.runStart, c.stopWall = time.Now(), func() {}
	if c.wall > 0 {
		left := c.wall - time.Duration(used.WallMS)*time.Millisecond
		ctx, c.stopWall = context.WithDeadlineCause(ctx, c.runStart.Add(left),
			budgetError("per_job_wall_time_ms", c.wall.Milliseconds(), "out of time"))
	}
	c.ctx, c.cancel = ctx, cancel
	c.mem = c.newMemory()
	return c
}

// run drives the job to its end and commits how it ended. Its working
// memory closes first: a compaction in flight is abandoned, so nothing is
// committed on the job's lane after its end.
func (c *Job) run() {
	defer close(c.done)
	res, cerr := c.loop()
	c.mem.Close()
	c.finish(res, cerr)
	c.stopWall()
	c.cancel(nil)
}

// loop is the state machine: INITIALIZING -> REASONING <-> WAITING_TOOL
// until a final result (COMPLETED) or a cancel, a budget or an error
// (TERMINATED). It returns the final result, or why the job ended.
func (c *Job) loop() (json.RawMessage, *coreError) {
	c.setState(Initializing)
	b := c.set.cfg.Budgets
	for {
		// Between two model steps every tool result is committed: a safe
		// point, where a cancel ends the job and injections are applied.
		if err := c.safePoint(); err != nil {
			return nil, err
		}
		if b.PerJobMaxSteps > 0 && c.usage().Steps >= int64(b.PerJobMaxSteps) {
			return nil, budgetError("per_job_max_steps", int64(b.PerJobMaxSteps), "out of steps")
		}
		c.setState(Reasoning)
		text, calls, err := c.step()
		if err != nil {
			if c.ctx.Err() != nil {
				continue // abandoned by a cancel: the safe point says why
			}
			var ce *meter.CapError
			if errors.As(err, &ce) {
				// Stopped before the call: the job ends with its partial
				// result like any job out of budget.
				return nil, &coreError{Kind: errKindBudget, Budget: ce.Field, Limit: int64(ce.Cap),
					Message: strings.TrimPrefix(ce.Error(), "usage cap: ")}
			}
			return nil, &coreError{Kind: errKindModel, Message: lane.UserError(err)}
		}
		if t := b.TotalSessionTokens; t > 0 && c.set.sessionTokens() > t {
			return nil, budgetError("total_session_tokens", t, "the session is out of tokens")
		}
		if len(calls) == 0 {
			if c.hasPending() {
				continue // an instruction arrived meanwhile: it comes first
			}
			if res, err, done := c.finalResult(text); done {
				return res, err
			}
			continue
		}
		if c.ctx.Err() != nil {
			continue // the completed call is a safe point: no tool runs
		}
		c.setState(WaitingTool)
		if err := c.runTools(calls); err != nil {
			return nil, err
		}
	}
}

// safePoint ends the job if it was cancelled or ran out of time, and
// commits the instructions injected since the last one.
func (c *Job) safePoint() *coreError {
	if c.ctx.Err() != nil {
		return c.cause()
	}
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, text := range pending {
		if _, err := c.commit(rpc.EventInjectedInstruction, coreInjection{Source: injectionFromEdge, Text: text}); err != nil {
			return &coreError{Kind: errKindInternal, Message: "commit injected instruction: " + err.Error()}
		}
	}
	return nil
}

// cause says why the job's context ended.
func (c *Job) cause() *coreError {
	var ce *coreError
	if errors.As(context.Cause(c.ctx), &ce) {
		return ce
	}
	return &coreError{Kind: errKindEdgeEnded, Message: "the edge lane ended"}
}

// step makes one model call, abandoned if the job is cancelled, and
// commits it. Counters are raised just before what they count is
// committed, so that a snapshot never counts less than its log shows.
func (c *Job) step() (string, []coreCall, error) {
	model := c.set.cfg.Model()
	policy := llm.RateLimitPolicy{DefaultDelay: c.set.cfg.RateLimitDelay,
		NotifyFunc: func(ctx context.Context, _ *llm.RateLimitError, wait time.Duration) {
			c.set.cfg.Logger.WarnContext(ctx, "core model rate limited", slog.String("job", c.start.JobName), slog.Duration("wait", wait))
			c.set.tell(coreNews{kind: newsRateLimited, job: c.start.JobName, ev: c.set.lastEvent(),
				text: fmt.Sprintf("Core job %q: the model provider is rate-limiting it; retrying in %s.", c.start.JobName,
					wait.Round(time.Second))})
		}}
	tools := c.tools()
	resp, err := c.set.cfg.LLM.CompleteWithRetry(c.ctx, llm.Request{Model: model, Messages: c.prompt(tools), Tools: tools,
		Lane: c.lane, JobID: c.start.JobID}, policy)
	if err != nil {
		return "", nil, err
	}
	n := resp.Usage.PromptTokens + resp.Usage.CompletionTokens
	c.mu.Lock()
	c.used.Tokens += n
	c.used.Steps++
	step := c.used.Steps
	c.counted = nil
	c.mu.Unlock()
	c.set.edge.SpendTokens(n)
	c.set.notify()
	if _, err := c.commit(rpc.EventLLMCallCommitted, commitlog.LLMCall{Model: model.Name, Lane: c.lane,
		PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens,
		LatencyMS: resp.Latency.Milliseconds(), ToolMode: string(c.toolOffer().Mode()),
		ToolSchemaTokens: toolTokens(tools), CachedTokens: resp.Usage.CachedTokens, CostUSD: resp.Usage.CostUSD,
		CostSource: resp.Usage.CostSource, JobID: c.start.JobID, SpendKey: resp.SpendKey}); err != nil {
		return "", nil, err
	}
	calls := make([]coreCall, len(resp.ToolCalls))
	for i, tc := range resp.ToolCalls {
		calls[i] = coreCall{CallID: fmt.Sprintf("core-%s-%s-%d-%d", c.start.JobName, c.start.JobID, step, i+1),
			Tool: tc.Name, Arguments: tc.Arguments}
	}
	if _, err := c.commit(rpc.EventModelOutput, coreOutput{Text: resp.Content, ToolCalls: calls}); err != nil {
		return "", nil, err
	}
	return resp.Content, calls, nil
}

// runTools runs one step's tool calls, one after the other, each to its
// committed result; it stops early when the job is cancelled or a budget
// runs out (a call left without a result is shown to the model as not
// run). It is the one place a job's calls go to the arbiter.
func (c *Job) runTools(calls []coreCall) *coreError {
	for i := 0; i < len(calls); {
		if c.ctx.Err() != nil {
			return nil
		}
		// The report tool is the lane's: it spends no tool call.
		if calls[i].Tool == coreReportTool {
			if err := c.report(calls[i]); err != nil && c.ctx.Err() == nil {
				return &coreError{Kind: errKindInternal, Message: err.Error()}
			}
			i++
			continue
		}
		// A run of other calls goes to the arbiter at once: those with
		// disjoint locks run concurrently, conflicting ones in order. The
		// calls within the budgets run; one beyond them ends the job.
		var ps []arbiter.Proposal
		var over *coreError
		j := i
		for ; j < len(calls) && calls[j].Tool != coreReportTool; j++ {
			if over = c.countToolCall(calls[j].CallID); over != nil {
				break
			}
			ps = append(ps, arbiter.Proposal{Owner: c.owner, CallID: calls[j].CallID, Tool: calls[j].Tool,
				Input: calls[j].Arguments, Allow: c.allow(), SchemaUnseen: c.toolOffer().SchemaUnseen(calls[j].Tool)})
		}
		if len(ps) > 0 {
			outs, err := c.set.cfg.Arbiter.ProposeAll(c.ctx, ps)
			if err != nil && c.ctx.Err() == nil {
				return &coreError{Kind: errKindInternal, Message: err.Error()}
			}
			c.noteOutcomes(ps, outs)
		}
		if over != nil {
			return over
		}
		i = j
	}
	return nil
}

// countToolCall spends one tool call of the job's and of the session's
// budgets, or says which is used up.
func (c *Job) countToolCall(id string) *coreError {
	b := c.set.cfg.Budgets
	c.mu.Lock()
	if b.PerJobMaxToolCalls > 0 && c.used.ToolCalls >= int64(b.PerJobMaxToolCalls) {
		c.mu.Unlock()
		return budgetError("per_job_max_tool_calls", int64(b.PerJobMaxToolCalls), "out of tool calls")
	}
	c.used.ToolCalls++
	c.counted = append(c.counted, id)
	c.mu.Unlock()
	if s := c.set.edge.SpendToolCall(); b.MaxToolCallsPerSession > 0 && s > b.MaxToolCallsPerSession {
		return budgetError("max_tool_calls_per_session", b.MaxToolCallsPerSession, "the session is out of tool calls")
	}
	return nil
}

// allow is the job's allowlist for the arbiter: tool_constraints'
// allowed_tools, or nil for every tool exposed to core jobs.
func (c *Job) allow() []string {
	if len(c.start.ToolConstraints.AllowedTools) == 0 {
		return nil
	}
	return c.start.ToolConstraints.AllowedTools
}

// tools are the schemas offered to the job's model.
func (c *Job) tools() []llm.ToolSpec {
	var out []llm.ToolSpec
	views := c.toolOffer().Tools(c.toolFilter())
	for _, v := range views {
		if v.Name == tool.NameMemoryCompact {
			continue // compaction of a job's window is the lane's, not the model's
		}
		out = append(out, llm.ToolSpec{Name: v.Name, Description: v.Description, Parameters: v.Parameters})
	}
	return append(out, llm.ToolSpec{Name: coreReportTool, Parameters: reportParams,
		Description: "Report to the edge lane and the user: progress, your plan, a short summary of your reasoning, " +
			"a tool you propose, information you need, or a partial result. Never your raw chain of thought."})
}

// report commits a CoreEvent the model sent with the report tool.
func (c *Job) report(call coreCall) error {
	var in struct {
		Kind string          `json:"kind"`
		Text string          `json:"text"`
		Data json.RawMessage `json:"data"`
	}
	if err := decodeLaneInput(coreReportTool, call.Arguments, &in); err != nil {
		_, cerr := c.commit(rpc.EventToolCallRequested, map[string]any{"call_id": call.CallID, "tool": call.Tool,
			"input": inputOrEmpty(call.Arguments), "status": "rejected",
			"rejection": map[string]string{"error": "invalid_input", "message": err.Error()}})
		return cerr
	}
	ev, err := c.commit(rpc.EventModelOutput, coreOutput{CoreEvent: in.Kind, CallID: call.CallID, Text: in.Text, Data: in.Data})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.progress = in.Kind + ": " + in.Text
	if in.Kind == "partial_result" {
		c.partial = in.Text
	}
	c.mu.Unlock()
	c.set.notify()
	if in.Kind == "need_info" {
		c.set.tell(coreNews{kind: newsNeedInfo, job: c.start.JobName, ev: ev,
			text: fmt.Sprintf("Core job %q needs information: %s", c.start.JobName, in.Text)})
	}
	return nil
}

// finalResult checks the model's answer against the output schema. done
// is false when the model was told once what is wrong and answers again.
func (c *Job) finalResult(text string) (json.RawMessage, *coreError, bool) {
	if c.schema == nil {
		b, _ := json.Marshal(text)
		return b, nil, true
	}
	raw := json.RawMessage(stripFence(text))
	err := tool.ValidateInput("output_schema", c.schema, raw)
	if err == nil {
		return raw, nil, true
	}
	c.mu.Lock()
	retried := c.schemaRetried
	c.schemaRetried = true
	c.mu.Unlock()
	if retried {
		return nil, &coreError{Kind: errKindResult, Message: "the final result does not satisfy the output schema: " + err.Error()}, true
	}
	note := "Your final result does not satisfy the output_schema of your task (" + err.Error() +
		"). Answer again with only a JSON value that satisfies it."
	if _, cerr := c.commit(rpc.EventInjectedInstruction, coreInjection{Source: injectionFromLane, Text: note}); cerr != nil {
		return nil, &coreError{Kind: errKindInternal, Message: cerr.Error()}, true
	}
	return nil, nil, false
}

// stripFence removes a Markdown code fence around a JSON answer.
func stripFence(s string) string {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "```"); ok {
		rest = strings.TrimPrefix(rest, "json")
		if body, ok := strings.CutSuffix(strings.TrimSpace(rest), "```"); ok {
			return strings.TrimSpace(body)
		}
	}
	return s
}

// finish commits how the job ended and hands its report to the edge.
func (c *Job) finish(result json.RawMessage, cerr *coreError) {
	st := coreStopped{JobName: c.start.JobName, JobID: c.start.JobID, Outcome: "completed", State: Completed,
		FinalResult: result, Error: cerr}
	if cerr != nil {
		st.Outcome, st.State = "terminated", Terminated
	}
	c.mu.Lock()
	st.PartialResult = c.partial
	if cerr != nil {
		c.progress = "error: " + cerr.Message
	} else {
		c.progress = "final_result: " + resultText(result)
	}
	c.mu.Unlock()
	st.Used = c.usage()
	// The end is committed even when the job's context is gone: the log
	// must say how every job ended.
	if cerr != nil && cerr.Kind == errKindCancelled {
		if _, err := c.commit(rpc.EventCancelled, map[string]string{"scope": string(rpc.CancelCore),
			"job_name": c.start.JobName, "reason": cerr.Message}); err != nil {
			c.set.cfg.Logger.Warn("core cancel not committed", slog.String("job", c.start.JobName), slog.String("error", err.Error()))
		}
	}
	ev, err := c.commit(rpc.EventCoreStopped, st)
	c.setState(st.State)
	if err != nil {
		c.set.cfg.Logger.Error("core job end not committed", slog.String("job", c.start.JobName), slog.String("error", err.Error()))
	}
	c.set.end(c, ev, st, err == nil)
}

// commit appends an event to the job's lane, whatever became of its
// context.
func (c *Job) commit(typ rpc.EventType, payload any) (rpc.Event, error) {
	return c.set.cfg.Arbiter.Commit(context.WithoutCancel(c.ctx), typ, c.lane, payload)
}

// Inject queues an instruction for the job's next safe point. It fails
// when the job has had its max_injections_per_job.
func (c *Job) inject(text string) error {
	limit := c.set.cfg.Budgets.MaxInjectionsPerJob
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == Completed || c.state == Terminated {
		return fmt.Errorf("core job %q has ended", c.start.JobName)
	}
	if limit > 0 && c.used.Injections >= limit {
		return fmt.Errorf("core job %q has had its %d instructions (max_injections_per_job); cancel it and start a new one to change course",
			c.start.JobName, limit)
	}
	c.used.Injections++
	c.pending = append(c.pending, text)
	return nil
}

func (c *Job) hasPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending) > 0
}

func (c *Job) setState(s State) {
	c.mu.Lock()
	changed := c.state != s
	c.state = s
	c.mu.Unlock()
	if changed {
		c.set.notify()
	}
}

// usage is what the job has spent so far, wall time included.
func (c *Job) usage() Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.used
	u.WallMS += time.Since(c.runStart).Milliseconds()
	return u
}

// status is the job's REPORT_STATUS.
func (c *Job) status() rpc.ReportStatusRequest {
	u := c.usage()
	b := c.set.cfg.Budgets
	c.mu.Lock()
	st := rpc.ReportStatusRequest{Lane: c.lane, State: string(c.state), Steps: u.Steps, Progress: clipProgress(c.progress)}
	ended := c.state == Completed || c.state == Terminated
	c.mu.Unlock()
	left := func(limit, used int64) *int64 {
		v := max(limit-used, 0)
		return &v
	}
	if b.PerJobMaxSteps > 0 {
		st.BudgetRemaining.Steps = left(int64(b.PerJobMaxSteps), u.Steps)
	}
	if b.PerJobMaxToolCalls > 0 {
		st.BudgetRemaining.ToolCalls = left(int64(b.PerJobMaxToolCalls), u.ToolCalls)
	}
	if c.wall > 0 && !ended {
		st.BudgetRemaining.TimeMS = left(c.wall.Milliseconds(), u.WallMS)
	}
	if b.TotalSessionTokens > 0 {
		st.BudgetRemaining.Tokens = left(b.TotalSessionTokens, c.set.sessionTokens())
	}
	return st
}

// clipProgress makes a progress line fit REPORT_STATUS: its first line,
// printable, at most rpc.MaxProgress bytes.
func clipProgress(s string) string {
	s, _, _ = strings.Cut(strings.ToValidUTF8(s, "?"), "\n")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
	if len(s) <= rpc.MaxProgress {
		return s
	}
	cut := rpc.MaxProgress - len("…")
	for cut > 0 && !isRuneStartByte(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStartByte(b byte) bool { return b&0xC0 != 0x80 }

func inputOrEmpty(in json.RawMessage) json.RawMessage {
	if len(in) == 0 || !json.Valid(in) {
		return json.RawMessage(`{}`)
	}
	return in
}
