package lane

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/choirhq/choir/rpc"
)

// This file holds the mandatory report of an ended core job and the
// recovery of jobs after a restart.
//
// The report is the lane's template, not a model call: it must reach the
// user for every job, however the job ended, and a model call can fail,
// be rate-limited or time out exactly when things go wrong; the result it
// carries was already written by the flagship model. It names the job, its
// outcome, the final (or last partial) result and the budgets used.

// maxReportResult bounds the result quoted in a report.
const maxReportResult = 6000

// reportText words a job's end for the user.
func reportText(st coreStopped) string {
	var b strings.Builder
	u := st.Used
	spent := fmt.Sprintf("%d steps, %d tool calls, %d tokens, %s", u.Steps, u.ToolCalls, u.Tokens,
		(time.Duration(u.WallMS) * time.Millisecond).Round(100*time.Millisecond))
	switch {
	case st.Error == nil:
		fmt.Fprintf(&b, "Core job %q completed (%s).", st.JobName, spent)
	case st.Error.Kind == errKindBudget:
		fmt.Fprintf(&b, "Core job %q was stopped: budget exceeded, %s (%s).", st.JobName, st.Error.Message, spent)
	case st.Error.Kind == errKindCancelled:
		fmt.Fprintf(&b, "Core job %q was cancelled: %s (%s).", st.JobName, st.Error.Message, spent)
	case st.Error.Kind == errKindEdgeEnded:
		fmt.Fprintf(&b, "Core job %q was stopped because %s (%s).", st.JobName, st.Error.Message, spent)
	default:
		fmt.Fprintf(&b, "Core job %q failed: %s (%s).", st.JobName, st.Error.Message, spent)
	}
	if len(st.FinalResult) > 0 {
		b.WriteString("\n\nResult:\n" + clipText(resultText(st.FinalResult), maxReportResult))
	} else if st.PartialResult != "" {
		b.WriteString("\n\nLast partial result:\n" + clipText(st.PartialResult, maxReportResult))
	}
	return b.String()
}

// resultText shows a final result: a string as it is, anything else as
// indented JSON.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStartByte(s[n]) {
		n--
	}
	return s[:n] + "\n[… clipped]"
}

// CoreSnapshot is a running job's part of a working-memory snapshot: its
// briefing, what it has spent and its last reports. ThroughRev is the head
// of the log when it was taken; counters are raised before what they count
// is committed, so they cover every event up to ThroughRev (and may count
// a few after it: a resumed job errs toward less budget, never more).
type CoreSnapshot struct {
	Start         CoreJobStart `json:"start"`
	StartedRev    int64        `json:"started_rev"`
	State         CoreState    `json:"state"`
	Used          CoreUsage    `json:"used"`
	ThroughRev    int64        `json:"through_rev"`
	TakenAt       time.Time    `json:"taken_at"`
	Progress      string       `json:"progress,omitempty"`
	PartialResult string       `json:"partial_result,omitempty"`
	SchemaRetried bool         `json:"schema_retried,omitempty"`
	// Counted are the calls of the step in progress already counted.
	Counted []string `json:"counted_calls,omitempty"`
	// Pending are instructions accepted (and counted) but not yet
	// committed: the resumed job still gets them.
	Pending []string `json:"pending_injections,omitempty"`
}

// CoreSnapshots returns the running jobs' state for a working-memory
// snapshot.
func (e *Edge) CoreSnapshots() []CoreSnapshot {
	if e.cores == nil {
		return []CoreSnapshot{}
	}
	out := []CoreSnapshot{}
	for _, n := range e.cores.names() {
		c := e.cores.job(n)
		if c == nil {
			continue
		}
		head, _ := e.cfg.Log.Head() // before the counters: see CoreSnapshot
		u := c.usage()
		c.mu.Lock()
		out = append(out, CoreSnapshot{Start: c.start, StartedRev: c.startRev, State: c.state, Used: u, ThroughRev: head,
			TakenAt: time.Now(), Progress: c.progress, PartialResult: c.partial, SchemaRetried: c.schemaRetried,
			Counted: slices.Clone(c.counted), Pending: slices.Clone(c.pending)})
		c.mu.Unlock()
	}
	return out
}

// RestoreCores hands the lane the jobs a snapshot carried; Run resumes them
// with what the log's tail adds. Call it before Run.
func (e *Edge) RestoreCores(snaps []CoreSnapshot) {
	if e.cores != nil {
		e.cores.restoring = snaps
	}
}

// restored is a job being rebuilt from the snapshot and the tail.
type restored struct {
	snap CoreSnapshot
	// before is the snapshot as it was, before the tail's events.
	before   CoreSnapshot
	fromTail bool // its core_started is in the tail: its whole window is
	lastAt   time.Time
	calls    map[string]bool
}

// count adds one of the job's tail events to what it has spent.
func (r *restored) count(ev rpc.Event) {
	var p struct {
		CallID           string `json:"call_id"`
		Tool             string `json:"tool"`
		Source           string `json:"source"`
		CoreEvent        string `json:"core_event"`
		Text             string `json:"text"`
		PromptTokens     int64  `json:"prompt_tokens"`
		CompletionTokens int64  `json:"completion_tokens"`
	}
	json.Unmarshal(ev.Payload, &p) //nolint:errcheck // an unreadable payload counts nothing
	u := &r.snap.Used
	switch ev.Type {
	case rpc.EventLLMCallCommitted:
		u.Steps++
		u.Tokens += p.PromptTokens + p.CompletionTokens
	case rpc.EventToolCallRequested, rpc.EventToolCallCommitted:
		if p.CallID != "" && p.Tool != coreReportTool && !r.calls[p.CallID] && !slices.Contains(r.snap.Counted, p.CallID) {
			r.calls[p.CallID] = true
			u.ToolCalls++
		}
	case rpc.EventInjectedInstruction:
		if p.Source != injectionFromEdge {
			break
		}
		if i := slices.Index(r.snap.Pending, p.Text); i >= 0 {
			r.snap.Pending = slices.Delete(r.snap.Pending, i, i+1) // counted when accepted
		} else {
			u.Injections++
		}
	case rpc.EventModelOutput:
		if p.CoreEvent != "" {
			r.snap.Progress = p.CoreEvent + ": " + p.Text
		}
		if p.CoreEvent == "partial_result" {
			r.snap.PartialResult = p.Text
		}
	}
	r.lastAt = ev.CreatedAt
}

// recover rebuilds the jobs a restart interrupted, from the snapshot's jobs
// and the log's tail: every job whose core_stopped is not in the log
// resumes, with its budgets as spent (never reset) and its window rebuilt
// from its events in the tail, and the user is told; a job whose budgets
// are used up ends at its first safe point and is reported as any other.
// Reports of jobs that ended are sent again (choird's outbox drops a
// duplicate) or, when the restart came before them, sent now.
func (s *coreSet) recover(ctx context.Context) {
	head, _ := s.e.cfg.Log.Head()
	evs, err := s.e.cfg.Log.Range(s.e.cfg.Log.Oldest(), head)
	if err != nil {
		evs = nil
	}
	recs := map[string]*restored{}
	for _, sn := range s.restoring {
		recs[sn.Start.JobName] = &restored{snap: sn, before: sn, calls: map[string]bool{}}
	}
	s.restoring = nil
	reported := map[int64]rpc.Event{}
	var stopped []rpc.Event
	for _, ev := range evs {
		if ev.Lane == "edge" {
			if rev, ok := reportOf(ev); ok {
				reported[rev] = ev
			}
			continue
		}
		name, ok := strings.CutPrefix(ev.Lane, "core:")
		if !ok {
			continue
		}
		switch ev.Type {
		case rpc.EventCoreStarted:
			var p struct {
				Start CoreJobStart `json:"start"`
			}
			if json.Unmarshal(ev.Payload, &p) == nil {
				recs[name] = &restored{snap: CoreSnapshot{Start: p.Start, StartedRev: ev.Rev, TakenAt: ev.CreatedAt},
					fromTail: true, calls: map[string]bool{}}
			}
			continue
		case rpc.EventCoreStopped:
			stopped = append(stopped, ev)
			delete(recs, name)
			continue
		}
		if r := recs[name]; r != nil && ev.Rev > r.snap.ThroughRev && ev.Rev > r.snap.StartedRev {
			r.count(ev)
		}
	}
	for _, ev := range stopped {
		s.recoverReport(ev, reported)
	}
	for _, r := range recs {
		s.resume(ctx, r, evs)
	}
}

// reportOf returns the core_stopped revision an edge event reports.
func reportOf(ev rpc.Event) (int64, bool) {
	if ev.Type != rpc.EventModelOutput {
		return 0, false
	}
	var p struct {
		Source  string `json:"source"`
		CoreRev int64  `json:"core_rev"`
	}
	if json.Unmarshal(ev.Payload, &p) != nil || p.Source != newsReport {
		return 0, false
	}
	return p.CoreRev, true
}

// recoverReport queues the report of a job that ended before the restart:
// sent again under its ID when it was committed, else written now.
func (s *coreSet) recoverReport(ev rpc.Event, reported map[int64]rpc.Event) {
	var st coreStopped
	if json.Unmarshal(ev.Payload, &st) != nil {
		return
	}
	n := coreNews{kind: newsReport, job: st.JobName, ev: ev, text: reportText(st)}
	if rep, ok := reported[ev.Rev]; ok {
		var p struct {
			Text string `json:"text"`
		}
		json.Unmarshal(rep.Payload, &p) //nolint:errcheck // the template's text is the fallback
		if p.Text != "" {
			n.text = p.Text
		}
		n.sent = &rep
	}
	s.unsent.Add(1)
	s.tell(n)
}

// resume starts a job again where the restart left it.
func (s *coreSet) resume(ctx context.Context, r *restored, evs []rpc.Event) {
	used := r.snap.Used
	if !r.lastAt.IsZero() && r.lastAt.After(r.snap.TakenAt) {
		used.WallMS += r.lastAt.Sub(r.snap.TakenAt).Milliseconds()
	}
	c := newCore(s, r.snap.Start, r.snap.StartedRev, used)
	c.progress, c.partial, c.schemaRetried = r.snap.Progress, r.snap.PartialResult, r.snap.SchemaRetried
	c.pending = r.snap.Pending
	for _, ev := range evs {
		if ev.Lane == c.lane && ev.Rev >= c.startRev {
			c.events = append(c.events, ev)
		}
	}
	if len(evs) > 0 {
		c.seen = evs[len(evs)-1].Rev
	}
	if !r.fromTail {
		c.note = fmt.Sprintf("This job was resumed after a restart. Its steps before revision %d are not in your context; "+
			"your last report then was %q", r.before.ThroughRev+1, r.before.Progress)
		if r.before.PartialResult != "" {
			c.note += fmt.Sprintf(" and your last partial result %q", r.before.PartialResult)
		}
		c.note += ". Check the workspace before repeating work."
	}
	ev, err := c.commit(rpc.EventInjectedInstruction, coreInjection{Source: injectionFromRestart,
		Text: "The agent restarted and you resume this job where you were. A tool call without a result was interrupted: " +
			"check its effect before repeating it."})
	if err != nil {
		s.e.cfg.Logger.ErrorContext(ctx, "core job not resumed", slog.String("job", c.start.JobName), slog.String("error", err.Error()))
		return
	}
	s.e.cfg.Logger.InfoContext(ctx, "core job resumed after a restart", slog.String("job", c.start.JobName),
		slog.Int64("steps", used.Steps), slog.Bool("whole_window", r.fromTail))
	s.tell(coreNews{kind: newsResumed, job: c.start.JobName, ev: ev,
		text: fmt.Sprintf("Core job %q was interrupted by a restart and resumes (%d steps done so far).", c.start.JobName, used.Steps)})
	s.launch(c)
}
