package core

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
)

// This file is the edge's side of its core jobs: the lane tools that
// spawn, steer, stop and list them, their lifetime inside the edge's, and
// what they tell the user through the edge (reports, questions, restarts),
// delivered at the edge's next safe point.

// Set is an edge's core jobs; it implements lane.Jobs.
type Set struct {
	edge *lane.Edge
	cfg  Config
	// base is the context jobs run under: the edge's Run context.
	base context.Context

	mu    sync.Mutex
	live  map[string]*Job
	ended []*Job // the latest ended jobs, for their last status report
	news  []coreNews
	// restoring holds the snapshot's jobs until Run resumes them;
	// restoredRev is the snapshot's revision.
	restoring   []Snapshot
	restoredRev int64
	wg          sync.WaitGroup
	// unsent counts reports of ended jobs not yet handed to Out: the
	// lane is not settled while any is (see Edge.Settled).
	unsent atomic.Int64
}

// keptEnded bounds the ended jobs whose last status is kept.
const keptEnded = 16

// coreNews is what a job has to tell the user through the edge.
type coreNews struct {
	kind string // one of the news kinds below
	job  string
	// ev is the committed event the message derives its ID from.
	ev   rpc.Event
	text string
	// sent is the report event already committed on the edge lane when a
	// resumed session sends it again.
	sent *rpc.Event
}

// The kinds of news, which are also the edge events' source and the
// message IDs' kind.
const (
	newsReport   = "core_report"
	newsNeedInfo = "core_need_info"
	newsResumed  = "core_resumed"
	newsRefused  = "core_refused"
	// newsRateLimited is spec 7.7's notice of a rate-limited model call.
	newsRateLimited = "core_rate_limited"
)

var _ lane.Jobs = (*Set)(nil)

// NewSet makes the core jobs of edge. Use it as lane.EdgeConfig.Jobs:
//
//	Jobs: func(e *lane.Edge) lane.Jobs { jobs = core.NewSet(e, cfg); return jobs }
func NewSet(edge *lane.Edge, cfg Config) *Set {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RateLimitDelay <= 0 {
		cfg.RateLimitDelay = llm.DefaultRateLimitDelay
	}
	return &Set{edge: edge, cfg: cfg, live: map[string]*Job{}}
}

func (s *Set) notify() {
	if s.cfg.StatusFunc != nil {
		s.cfg.StatusFunc()
	}
}

// sessionTokens are the tokens every lane of the session has used.
func (s *Set) sessionTokens() int64 { return s.edge.SpendTokens(0) }

// Tools are the edge's tools for its jobs.
func (s *Set) Tools() []llm.ToolSpec { return edgeCoreTools() }

// Call answers one of the edge's job tools.
func (s *Set) Call(ctx context.Context, call llm.ToolCall) (json.RawMessage, error) {
	switch call.Name {
	case coreSpawnTool:
		return s.spawn(ctx, call)
	case coreInjectTool:
		var in struct {
			JobName string `json:"job_name"`
			Content string `json:"content"`
		}
		if err := decodeLaneInput(call.Name, call.Arguments, &in); err != nil {
			return s.refuse(ctx, call, "invalid_input", err.Error())
		}
		c := s.job(in.JobName)
		if c == nil {
			return s.refuse(ctx, call, "no_such_job", s.noSuchJob(in.JobName))
		}
		if err := c.inject(in.Content); err != nil {
			return s.refuse(ctx, call, "injection_refused", err.Error())
		}
		return successJSON(fmt.Sprintf("the instruction reaches %s at its next safe point", in.JobName)), nil
	case coreCancelTool:
		var in struct {
			JobName string `json:"job_name"`
		}
		if err := decodeLaneInput(call.Name, call.Arguments, &in); err != nil {
			return s.refuse(ctx, call, "invalid_input", err.Error())
		}
		if !s.Cancel(in.JobName, "cancelled by the edge lane") {
			return s.refuse(ctx, call, "no_such_job", s.noSuchJob(in.JobName))
		}
		return successJSON(fmt.Sprintf("%s stops at its next safe point; its report follows", in.JobName)), nil
	case coreListTool:
		return s.list(), nil
	}
	return errJSON("unknown_tool", "there is no tool "+call.Name), nil
}

// spawn starts a job from the edge's CoreJobStart.
func (s *Set) spawn(ctx context.Context, call llm.ToolCall) (json.RawMessage, error) {
	start, err := parseCoreJobStart(call.Arguments, s.exposed)
	if err != nil {
		return s.refuse(ctx, call, "invalid_input", err.Error())
	}
	if s.job(start.JobName) != nil {
		return s.refuse(ctx, call, "name_taken",
			fmt.Sprintf("a core job named %s is running; choose another name, or cancel it first", start.JobName))
	}
	if limit := s.cfg.Budgets.MaxCoreJobs; limit > 0 && s.liveCount() >= limit {
		msg := fmt.Sprintf("%d core jobs are running, the most this session allows (max_core_jobs); "+
			"wait for one to end or cancel one", limit)
		out, err := s.refuse(ctx, call, "budget_exceeded", msg)
		s.tell(coreNews{kind: newsRefused, job: start.JobName, ev: s.lastEvent(),
			text: fmt.Sprintf("Core job %q was not started: %s.", start.JobName, msg)})
		return out, err
	}
	ev, err := s.cfg.Arbiter.Commit(ctx, rpc.EventCoreStarted, "core:"+start.JobName, map[string]any{
		"start": start, "budgets": s.jobBudgets()})
	if err != nil {
		return nil, fmt.Errorf("commit core start: %w", err)
	}
	s.launch(newJob(s, start, ev.Rev, Usage{}))
	return successJSON(fmt.Sprintf("core job %s started; it runs in the background and its report reaches the user when it ends",
		start.JobName)), nil
}

// jobBudgets are the job budgets recorded with a job's start.
func (s *Set) jobBudgets() map[string]any {
	b := s.cfg.Budgets
	return map[string]any{"per_job_max_steps": b.PerJobMaxSteps, "per_job_max_tool_calls": b.PerJobMaxToolCalls,
		"per_job_wall_time_ms": b.PerJobWallTime.Milliseconds(), "max_injections_per_job": b.MaxInjectionsPerJob}
}

// exposed reports whether core jobs may be offered the tool.
func (s *Set) exposed(name string) bool {
	def, ok := s.cfg.Tools.Lookup(name)
	return ok && def.Runtime().Exposure.Allows(tool.LaneCore) && name != tool.NameMemoryCompact
}

// refuse logs a refused lane-tool call, as the arbiter does a refused
// proposal, and returns the structured error the model sees.
func (s *Set) refuse(ctx context.Context, call llm.ToolCall, kind, msg string) (json.RawMessage, error) {
	rej := map[string]string{"error": kind, "message": msg}
	if _, err := s.cfg.Arbiter.Commit(ctx, rpc.EventToolCallRequested, "edge", map[string]any{"call_id": call.ID,
		"tool": call.Name, "input": inputOrEmpty(call.Arguments), "status": "rejected", "rejection": rej}); err != nil {
		return nil, err
	}
	return errJSON(kind, msg), nil
}

// lastEvent is the log's head, which names a notice that no event of its
// own produced.
func (s *Set) lastEvent() rpc.Event {
	rev, h := s.cfg.Log.Head()
	return rpc.Event{Rev: rev, Hash: h}
}

func errJSON(kind, msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"status": "rejected", "error": map[string]string{"error": kind, "message": msg}})
	return b
}

func successJSON(msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"status": "success", "summary": msg})
	return b
}

func (s *Set) noSuchJob(name string) string {
	names := s.names()
	if len(names) == 0 {
		return fmt.Sprintf("no core job named %s is running; none is", name)
	}
	return fmt.Sprintf("no core job named %s is running; running: %s", name, strings.Join(names, ", "))
}

// launch runs a job in its own goroutine.
func (s *Set) launch(c *Job) {
	s.mu.Lock()
	s.live[c.start.JobName] = c
	s.ended = slices.DeleteFunc(s.ended, func(o *Job) bool { return o.start.JobName == c.start.JobName })
	s.mu.Unlock()
	s.wg.Go(c.run)
	s.notify()
}

func (s *Set) job(name string) *Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[name]
}

func (s *Set) liveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

func (s *Set) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.live))
	for n := range s.live {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Cancel stops a job at its next safe point (a cancel push of scope
// core): a model call in flight is abandoned, a lock wait given up, a tool
// in flight stopped (its result is still committed). It reports whether
// the job was running.
func (s *Set) Cancel(name, reason string) bool {
	c := s.job(name)
	if c == nil {
		return false
	}
	c.cancel(&coreError{Kind: errKindCancelled, Message: reason})
	return true
}

// list is choir.core.list's answer.
func (s *Set) list() json.RawMessage {
	type entry struct {
		JobName  string `json:"job_name"`
		State    State  `json:"state"`
		Used     Usage  `json:"used"`
		Progress string `json:"progress,omitempty"`
	}
	var jobs []entry
	for _, n := range s.names() {
		if c := s.job(n); c != nil {
			st := c.status()
			jobs = append(jobs, entry{JobName: n, State: State(st.State), Used: c.usage(), Progress: st.Progress})
		}
	}
	b, _ := json.Marshal(map[string]any{"status": "success", "jobs": jobs, "count": len(jobs)})
	return b
}

// end takes a job out of the live set and queues its report. Reports
// are mandatory: one is queued for every job, however it ended.
func (s *Set) end(c *Job, ev rpc.Event, st coreStopped, committed bool) {
	s.mu.Lock()
	if s.live[c.start.JobName] == c {
		delete(s.live, c.start.JobName)
	}
	s.ended = append(s.ended, c)
	if len(s.ended) > keptEnded {
		s.ended = s.ended[len(s.ended)-keptEnded:]
	}
	s.mu.Unlock()
	if !committed {
		// Without its core_stopped event the log cannot carry the report
		// either: the arbiter has stopped, and so has the session.
		s.notify()
		return
	}
	s.unsent.Add(1)
	s.tell(coreNews{kind: newsReport, job: c.start.JobName, ev: ev, text: reportText(st)})
	s.notify()
}

// tell queues news for the edge's next safe point and wakes an IDLE edge.
func (s *Set) tell(n coreNews) {
	s.mu.Lock()
	s.news = append(s.news, n)
	s.mu.Unlock()
	s.edge.Wake()
}

// Deliver hands the queued news to the user, on the edge's goroutine at a
// safe point: each is committed on the edge lane (what the user was told)
// and sent under an ID derived from the job's event, so a resend after a
// restart is recognised by choird's outbox. It returns what the edge's
// model must know of them.
func (s *Set) Deliver(ctx context.Context) ([]llm.Message, error) {
	s.mu.Lock()
	news := s.news
	s.news = nil
	s.mu.Unlock()
	var msgs []llm.Message
	for i, n := range news {
		ev := rpc.Event{}
		if n.sent != nil {
			ev = *n.sent
		} else {
			var err error
			ev, err = s.cfg.Arbiter.Commit(ctx, rpc.EventModelOutput, "edge", map[string]any{"text": n.text,
				"source": n.kind, "job_name": n.job, "core_rev": n.ev.Rev})
			if err != nil {
				s.mu.Lock()
				s.news = append(news[i:], s.news...)
				s.mu.Unlock()
				return msgs, fmt.Errorf("commit %s of core job %s: %w", n.kind, n.job, err)
			}
		}
		err := s.cfg.Out.Send(ctx, lane.OutboundMessage{ID: lane.MessageID(n.kind, n.ev.Hash), Rev: ev.Rev, Text: n.text})
		if n.kind == newsReport {
			s.unsent.Add(-1)
		}
		if err != nil {
			s.cfg.Logger.WarnContext(ctx, "core news not sent", slog.String("job", n.job), slog.String("error", err.Error()))
		}
		msgs = append(msgs, llm.SystemMessage("You told the user: "+n.text))
	}
	return msgs, nil
}

// Begin starts the set under the edge's Run context and resumes the jobs
// a restart interrupted.
func (s *Set) Begin(ctx context.Context) {
	s.base = ctx
	s.recover(ctx)
}

// End ends every job at once, because the edge ends (spec 7.5), and waits
// for them; while ctx lives, their reports are delivered.
func (s *Set) End(ctx context.Context, reason string) {
	s.mu.Lock()
	jobs := make([]*Job, 0, len(s.live))
	for _, c := range s.live {
		jobs = append(jobs, c)
	}
	s.mu.Unlock()
	for _, c := range jobs {
		c.cancel(&coreError{Kind: errKindEdgeEnded, Message: reason})
	}
	s.wg.Wait()
	if ctx.Err() != nil {
		return
	}
	if _, err := s.Deliver(ctx); err != nil {
		s.cfg.Logger.WarnContext(ctx, "core reports not delivered at the edge's end", slog.String("error", err.Error()))
	}
}

// Statuses are the jobs' REPORT_STATUS: the running ones and the latest
// ended ones, whose final state choird shows once.
func (s *Set) Statuses() []rpc.ReportStatusRequest {
	s.mu.Lock()
	jobs := slices.Clone(s.ended)
	for _, c := range s.live {
		jobs = append(jobs, c)
	}
	s.mu.Unlock()
	out := make([]rpc.ReportStatusRequest, 0, len(jobs))
	for _, c := range jobs {
		out = append(out, c.status())
	}
	slices.SortFunc(out, func(a, b rpc.ReportStatusRequest) int { return strings.Compare(a.Lane, b.Lane) })
	return out
}

// Running reports whether any job runs.
func (s *Set) Running() bool { return s.liveCount() > 0 }

// Unsent reports whether the report of an ended job waits to be sent.
func (s *Set) Unsent() bool { return s.unsent.Load() > 0 }

// CancelAll stops every job (a cancel push of scope all) and returns
// their names.
func (s *Set) CancelAll(reason string) []string {
	names := s.names()
	for _, n := range names {
		s.Cancel(n, reason)
	}
	return names
}
