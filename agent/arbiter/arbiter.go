// Package arbiter is the agent's single writer: lanes send it proposals, and
// it validates each one (schema, lane and skill allowlists, path
// constraints), acquires the whole lockset atomically, executes the tool (in
// process, or on the host through EXECUTE_HOST_TOOL), commits the outcome to
// the hash-chained log and releases the locks on every exit path.
//
// The arbiter serialises commits, not executions: every append goes through
// its one loop goroutine, but tools holding disjoint locks run at the same
// time, so a slow host tool never blocks another lane's file read. The
// calls of one model step run the same way ([Arbiter.ProposeAll]): those
// with disjoint locks at once, conflicting ones in the step's order.
package arbiter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/usage"
)

// HostExecutor runs a host tool on choird (EXECUTE_HOST_TOOL).
type HostExecutor interface {
	ExecuteHostTool(ctx context.Context, name, callID string, input json.RawMessage) (tool.Result, error)
}

// Approver files an approval request with choird (REQUEST_APPROVAL).
// requestID is the request's idempotency key: filing the same requestID
// again returns the first approval instead of a second one.
type Approver interface {
	RequestApproval(ctx context.Context, requestID string, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error)
}

// Config is what an arbiter works with.
type Config struct {
	Appender *commitlog.Appender
	Tools    *tool.Registry
	Locks    *lock.Manager
	Env      tool.Env
	// Host executes host tools; nil refuses them.
	Host HostExecutor
	// Approvals files the requests of meta tools (spec 8.10); nil refuses
	// them.
	Approvals Approver
	// EdgeRestricted reports whether the edge lane is limited to read-only
	// tools (spec 7.2: while any core job runs). Nil means never.
	EdgeRestricted func() bool
	// Secrets returns the session's secrets (name to value), whose values
	// are replaced by [secret:<name>] in every tool result before it is
	// committed; nil scrubs nothing. The map is read, never changed.
	Secrets func() map[string]string
	// UsageFunc, when set, is told the usage records of every tool
	// result committed (a usage meter counts them against the caps).
	UsageFunc func(lane string, recs []usage.Record)
	// Durable waits until choird has acknowledged the log through rev
	// (the heartbeat's flush). When set, a call of a tool that may act
	// runs only after its intent is acknowledged; nil runs every call at
	// once (an arbiter without choird: tests, tools run by hand).
	Durable func(ctx context.Context, rev int64) error
	// Fault, when set, is told each fault point a call with an intent
	// passes (FaultAfterIntent, ...): the kill-anywhere suite stops the
	// agent there. Nil in production.
	Fault func(point, toolName, callID string)
	// IntentGroupWait bounds how long a call of a step waits for its
	// siblings' intents to share one acknowledgement; 0 is
	// DefaultIntentGroupWait.
	IntentGroupWait time.Duration
	// Untrusted returns the agent's untrusted-input policy (issue 30,
	// policy.go); nil is the default, approve.
	Untrusted func() config.UntrustedInput
	Logger    *slog.Logger
}

// Proposal is a lane's request to run one tool.
type Proposal struct {
	// Owner is the proposing lane: lock.Edge or a core job's owner.
	Owner  lock.Owner
	CallID string
	Tool   string
	Input  json.RawMessage
	// Allow is the lane's allowlist; nil allows every tool exposed to the
	// lane.
	Allow []string
	// Skill is the lane's active skill run, whose current state's
	// allowlist also applies; nil when no skill runs.
	Skill *skill.Run
	// SchemaUnseen says the model was offered the tool without its schema
	// (compact or discovery mode): an invalid input's rejection then
	// carries the schema, so that the next call can succeed.
	SchemaUnseen bool
}

// Rejection is a proposal the arbiter refused: it is returned to the model
// as a structured error listing what is allowed, and nothing ran.
type Rejection struct {
	Kind         string             `json:"error"`
	Message      string             `json:"message"`
	Tool         string             `json:"tool"`
	Problems     []tool.Problem     `json:"problems,omitempty"`
	AllowedTools []string           `json:"allowed_tools,omitempty"`
	Transitions  []skill.Transition `json:"valid_transitions,omitempty"`
	// Schema is the tool's input schema, given with an invalid input when
	// the model had not seen it (Proposal.SchemaUnseen).
	Schema json.RawMessage `json:"schema,omitempty"`
}

func (r *Rejection) Error() string { return r.Kind + ": " + r.Message }

// Outcome is how a proposal ended.
type Outcome struct {
	// Result is the tool's result as the proposing lane's model may see
	// it (exposure and prompt_mask applied). Zero when rejected.
	Result tool.Result
	// Rejected is set when the proposal never ran.
	Rejected *Rejection
	// Locks are the locks the call held.
	Locks []string
	// Duration is the execution time, locks excluded.
	Duration time.Duration
}

// ForModel is the JSON the model receives as the tool's answer.
func (o Outcome) ForModel() json.RawMessage {
	if o.Rejected != nil {
		b, _ := json.Marshal(map[string]any{"status": "rejected", "error": o.Rejected})
		return b
	}
	return o.Result.JSON()
}

type commitReq struct {
	typ     rpc.EventType
	lane    string
	payload any
	reply   chan commitResp
}

type commitResp struct {
	ev  rpc.Event
	err error
}

// Arbiter serialises every commit of one agent.
type Arbiter struct {
	cfg     Config
	commits chan commitReq
	done    chan struct{}
	// ran holds the approvals whose gated call has run (approvalgate.go).
	ran approvedRuns
	// prov is each lane's untrusted sources (provenance.go).
	prov provenance
}

// New makes an arbiter; call Run to start its loop.
func New(cfg Config) *Arbiter {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Locks == nil {
		cfg.Locks = lock.New()
	}
	return &Arbiter{cfg: cfg, commits: make(chan commitReq), done: make(chan struct{})}
}

// ErrStopped is returned for proposals and commits after Run has ended.
var ErrStopped = errors.New("arbiter stopped")

// Run is the commit loop: the only place events are appended. It returns
// when ctx ends.
func (a *Arbiter) Run(ctx context.Context) error {
	defer close(a.done)
	for {
		select {
		case <-ctx.Done():
			return nil
		case req := <-a.commits:
			var ev rpc.Event
			var err error
			if c, ok := req.payload.(commitlog.LLMCall); ok {
				// A model call records what its context held (issue 30).
				c.Sources = a.prov.of(req.lane)
				req.payload = c
			}
			switch p := req.payload.(type) {
			case commitlog.Payload:
				ev, err = a.cfg.Appender.AppendPayload(req.lane, p)
			case json.RawMessage:
				ev, err = a.cfg.Appender.Append(req.typ, req.lane, p)
			default:
				var raw []byte
				if raw, err = json.Marshal(p); err == nil {
					ev, err = a.cfg.Appender.Append(req.typ, req.lane, raw)
				}
			}
			if err == nil {
				a.prov.fold(ev, req.payload)
			}
			req.reply <- commitResp{ev, err}
		}
	}
}

// Commit appends one event through the loop: user messages, model output,
// LLM call records, skill transitions, core lifecycle. payload is a
// commitlog.Payload, a json.RawMessage or any value marshalled to a JSON
// object.
func (a *Arbiter) Commit(ctx context.Context, typ rpc.EventType, lane string, payload any) (rpc.Event, error) {
	req := commitReq{typ: typ, lane: lane, payload: payload, reply: make(chan commitResp, 1)}
	select {
	case a.commits <- req:
	case <-a.done:
		return rpc.Event{}, ErrStopped
	case <-ctx.Done():
		return rpc.Event{}, ctx.Err()
	}
	// Once the loop has the request it always answers.
	r := <-req.reply
	return r.ev, r.err
}

func laneOf(o lock.Owner) tool.Lane {
	if o.IsEdge() {
		return tool.LaneEdge
	}
	return tool.LaneCore
}

// check validates a proposal without side effects and returns its tool,
// its locks and what the untrusted-input policy decided of it, or the
// rejection to send back.
func (a *Arbiter) check(p Proposal) (*tool.Def, []lock.Request, decision, *Rejection) {
	def, reqs, rej := a.checkCall(p)
	if rej != nil {
		return nil, nil, decision{}, rej
	}
	d := a.decide(def, p)
	if d.policy == commitlog.PolicyRefused {
		return nil, nil, d, refusal(p, d)
	}
	return def, reqs, d, nil
}

// checkCall validates a proposal against the registry, the lane and its
// skill, and resolves its locks.
func (a *Arbiter) checkCall(p Proposal) (*tool.Def, []lock.Request, *Rejection) {
	lane := laneOf(p.Owner)
	allowed := func() []string {
		var names []string
		for _, v := range a.cfg.Tools.LLMViews(tool.Filter{Lane: lane, Allow: p.Allow}) {
			if p.Skill != nil && !slices.Contains(p.Skill.AllowedTools(), v.Name) {
				continue
			}
			if a.restricted(p.Owner) && !a.readOnly(v.Name) {
				continue
			}
			names = append(names, v.Name)
		}
		return names
	}
	reject := func(kind, format string, args ...any) *Rejection {
		r := &Rejection{Kind: kind, Message: fmt.Sprintf(format, args...), Tool: p.Tool, AllowedTools: allowed()}
		if p.Skill != nil {
			r.Transitions = p.Skill.ValidTransitions()
		}
		return r
	}
	def, ok := a.cfg.Tools.Lookup(p.Tool)
	if !ok {
		return nil, nil, reject("unknown_tool", "there is no tool %q", p.Tool)
	}
	if !def.Runtime().Exposure.Allows(lane) || (p.Allow != nil && !slices.Contains(p.Allow, p.Tool)) {
		return nil, nil, reject("tool_not_allowed", "%s is not available to the %s lane", p.Tool, lane)
	}
	if p.Skill != nil {
		if err := p.Skill.CheckTool(p.Tool); err != nil {
			return nil, nil, reject("tool_not_allowed", "%v", err)
		}
	}
	if a.restricted(p.Owner) && !a.readOnly(p.Tool) {
		return nil, nil, reject("tool_not_allowed",
			"%s has side effects, and the edge lane is limited to read-only tools while core jobs run", p.Tool)
	}
	if err := def.Validate(p.Input); err != nil {
		r := reject("invalid_input", "%v", err)
		var ie *tool.InputError
		if errors.As(err, &ie) {
			r.Problems = ie.Problems
		}
		if p.SchemaUnseen {
			r.Schema = def.LLM().Parameters
		}
		return nil, nil, r
	}
	locks, err := def.Locks(a.cfg.Env.Workspace, p.Input)
	if err != nil {
		kind := "invalid_input"
		if errors.Is(err, tool.ErrPathEscape) {
			kind = "path_escape"
		}
		return nil, nil, reject(kind, "%v", err)
	}
	reqs := make([]lock.Request, 0, len(locks))
	for _, l := range locks {
		r, err := lock.ParseRequest(l.String())
		if err != nil {
			return nil, nil, reject("invalid_input", "lock %s: %v", l, err)
		}
		reqs = append(reqs, r)
	}
	return def, reqs, nil
}

func (a *Arbiter) restricted(o lock.Owner) bool {
	return o.IsEdge() && a.cfg.EdgeRestricted != nil && a.cfg.EdgeRestricted()
}

func (a *Arbiter) readOnly(name string) bool {
	def, ok := a.cfg.Tools.Lookup(name)
	return ok && def.Runtime().SideEffect == tool.SideEffectRead
}

// Propose runs one proposal to its end: it is either rejected (a
// structured error, nothing executed, logged as tool_call_requested with the
// rejection) or executed under its locks between tool_call_committed and
// tool_result_committed. The returned error is reserved for the
// arbiter itself failing (a commit that could not be appended, ctx ended
// before the call was logged); tool failures are results.
func (a *Arbiter) Propose(ctx context.Context, p Proposal) (Outcome, error) {
	def, reqs, d, rej := a.check(p)
	if rej != nil {
		return a.reject(ctx, p, d, rej)
	}
	release, err := a.cfg.Locks.Acquire(ctx, p.Owner, reqs)
	if err != nil {
		return a.abandon(ctx, p, err)
	}
	defer release()
	return a.run(ctx, def, p, d, reqs, nil)
}

// request is the payload of a tool_call_requested event.
func request(p Proposal) map[string]any {
	return map[string]any{"call_id": p.CallID, "tool": p.Tool, "input": inputOrNull(p.Input)}
}

// reject logs a rejected proposal as tool_call_requested with the
// rejection.
func (a *Arbiter) reject(ctx context.Context, p Proposal, d decision, rej *Rejection) (Outcome, error) {
	req := request(p)
	req["status"] = "rejected"
	req["rejection"] = rej
	if d.policy != "" {
		req["sources"], req["policy"] = d.sources, d.policy
	}
	if _, err := a.Commit(ctx, rpc.EventToolCallRequested, p.Owner.String(), req); err != nil {
		return Outcome{}, fmt.Errorf("log rejected call %s: %w", p.CallID, err)
	}
	return Outcome{Rejected: rej}, nil
}

// abandon logs an accepted proposal that never got its locks as
// tool_call_requested with why it never ran (an accepted proposal that
// gets them is logged by tool_call_committed, which carries the request),
// and returns that reason as the arbiter's error.
func (a *Arbiter) abandon(ctx context.Context, p Proposal, why error) (Outcome, error) {
	req := request(p)
	req["status"] = "abandoned"
	req["error"] = why.Error()
	if _, err := a.Commit(context.WithoutCancel(ctx), rpc.EventToolCallRequested, p.Owner.String(), req); err != nil {
		return Outcome{}, fmt.Errorf("log abandoned call %s: %w", p.CallID, err)
	}
	return Outcome{}, fmt.Errorf("acquire locks for %s: %w", p.CallID, why)
}

// run executes an accepted proposal whose locks are held, between
// tool_call_committed and tool_result_committed. A call that may act
// writes ahead: its tool_call_committed is its intent, and the tool runs
// only once choird has acknowledged it (intent.go).
//
// g, when not nil, is the intents of the calls of one step that start
// together: this call's acknowledgement waits until they are all committed,
// so that one heartbeat carries them all (see intentGroup).
func (a *Arbiter) run(ctx context.Context, def *tool.Def, p Proposal, d decision, reqs []lock.Request, g *groupMember) (Outcome, error) {
	lane := p.Owner.String()
	locks := lock.Strings(reqs)
	call := a.intent(def, p, locks)
	call.Sources, call.Policy = d.sources, d.policy
	ev, err := a.Commit(ctx, rpc.EventToolCallCommitted, lane, call)
	g.done()
	if err != nil {
		return Outcome{}, fmt.Errorf("commit call %s: %w", p.CallID, err)
	}

	start := time.Now()
	var res tool.Result
	if call.WriteAhead {
		g.wait(ctx)
	}
	execErr := a.durable(ctx, call, ev.Rev)
	ran := false
	if execErr == nil {
		cctx := tool.WithLaneName(tool.WithCallKey(ctx, call.IdempotencyKey), lane)
		res, ran, execErr = a.execute(tool.WithLaneSources(cctx, a.prov.of(lane)), def, p, d)
		a.fault(FaultAfterEffect, call)
	}
	dur := time.Since(start)
	status, res, errText := a.settle(res, execErr)
	// The result is committed even when the lane's ctx ended: the tool ran.
	recs := a.validUsage(p, res.Usage)
	res.Usage = nil
	var srcs []string
	if ran && status != commitlog.ToolInDoubt {
		// What the tool brought in; a call held for approval, or one
		// that never started, brought nothing.
		srcs = def.Sources(p.Input, res)
	}
	if err := a.commitResult(context.WithoutCancel(ctx), lane, p, status, dur, res.JSON(), errText, recs, srcs); err != nil {
		return Outcome{}, err
	}
	a.fault(FaultAfterResult, call)
	if len(recs) > 0 && a.cfg.UsageFunc != nil {
		a.cfg.UsageFunc(lane, recs)
	}
	view, _ := def.ForModel(laneOf(p.Owner), res)
	return Outcome{Result: view, Locks: locks, Duration: dur}, nil
}

// settle turns a tool's return into the status, result and error text to
// commit, with every known secret scrubbed: nothing a tool printed reaches
// the log, choird or a model with a secret in it.
func (a *Arbiter) settle(res tool.Result, execErr error) (commitlog.ToolStatus, tool.Result, string) {
	status := commitlog.ToolSuccess
	errText := ""
	if execErr == nil && res.Status == tool.StatusInDoubt {
		status, errText = commitlog.ToolInDoubt, res.Summary
		if errText == "" {
			errText = inDoubtText
		}
	} else if execErr != nil || res.Status != tool.StatusSuccess {
		status = commitlog.ToolError
		if execErr != nil {
			errText = execErr.Error()
			res = tool.Result{Status: tool.StatusError, Summary: errText}
		} else {
			errText = res.Summary
		}
	}
	if a.cfg.Secrets != nil {
		sc := newScrubber(a.cfg.Secrets())
		res, errText = sc.result(res), sc.text(errText)
	}
	return status, res, errText
}

func (a *Arbiter) commitResult(ctx context.Context, lane string, p Proposal, status commitlog.ToolStatus,
	dur time.Duration, output json.RawMessage, errText string, recs []usage.Record, srcs []string) error {
	_, err := a.Commit(ctx, rpc.EventToolResultCommitted, lane, commitlog.ToolResult{CallID: p.CallID, Tool: p.Tool,
		Status: status, DurationMS: dur.Milliseconds(), Output: output, Error: errText, Usage: recs, Sources: srcs})
	if err != nil {
		return fmt.Errorf("commit result of %s: %w", p.CallID, err)
	}
	return nil
}

// execute runs the tool, turning a panic into an error result so that the
// deferred lock release and the result commit always happen.
// ran reports that the tool itself ran (or began to): false for a call a
// gate held, and for a proposal filed for approval.
func (a *Arbiter) execute(ctx context.Context, def *tool.Def, p Proposal, d decision) (res tool.Result, ran bool, err error) {
	defer func() {
		if v := recover(); v != nil {
			a.cfg.Logger.Error("tool panicked", slog.String("tool", p.Tool), slog.String("call_id", p.CallID), slog.Any("panic", v))
			err = fmt.Errorf("%s panicked: %v", p.Tool, v)
		}
	}()
	if def.Kind() == tool.KindMeta {
		res, err := a.requestApproval(ctx, def, p, d.sources)
		return res, false, err
	}
	// A call the policy holds waits at the arbiter's gate, unless the tool
	// asks a person itself (its card names the lane's sources too).
	if def.Runtime().Approval || (d.held() && !def.AsksApproval(p.Input)) {
		if res, ok, err := a.gate(ctx, p, d); !ok || err != nil {
			return res, false, err
		}
	}
	ran = true
	if def.Runtime().Host {
		if a.cfg.Host == nil {
			return tool.Result{}, false, fmt.Errorf("%s runs on the host, and no host connection is configured", p.Tool)
		}
		if d := def.Runtime().TimeoutMS; d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(d)*time.Millisecond)
			defer cancel()
		}
		res, err := a.cfg.Host.ExecuteHostTool(ctx, p.Tool, p.CallID, p.Input)
		if err != nil {
			return tool.Result{}, true, err
		}
		return def.Shape(a.cfg.Env, res), true, nil
	}
	res, err = def.Execute(ctx, a.cfg.Env, p.Input)
	return res, true, err
}

func inputOrNull(in json.RawMessage) json.RawMessage {
	if len(in) == 0 || !json.Valid(in) {
		return json.RawMessage("null")
	}
	return in
}

// validUsage returns the tool's usage records that are valid; an invalid
// one is logged and left out, so that a tool's mistake never fails the
// commit of its result.
func (a *Arbiter) validUsage(p Proposal, recs []usage.Record) []usage.Record {
	var out []usage.Record
	for _, r := range recs {
		if err := r.Validate(); err != nil {
			a.cfg.Logger.Error("tool reported invalid usage", slog.String("tool", p.Tool), slog.String("call_id", p.CallID),
				slog.String("error", err.Error()))
			continue
		}
		out = append(out, r)
	}
	return out
}
