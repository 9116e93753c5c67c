package core

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc"
)

// This file rebuilds the jobs after a restart, from the working-memory
// snapshot's jobs and the log's tail choird returned.

// Snapshot is a running job's part of a working-memory snapshot: its
// briefing, what it has spent and its last reports. ThroughRev is the head
// of the log when it was taken; counters are raised before what they count
// is committed, so they cover every event up to ThroughRev (and may count
// a few after it: a resumed job errs toward less budget, never more).
type Snapshot struct {
	Start         JobStart  `json:"start"`
	StartedRev    int64     `json:"started_rev"`
	State         State     `json:"state"`
	Used          Usage     `json:"used"`
	ThroughRev    int64     `json:"through_rev"`
	TakenAt       time.Time `json:"taken_at"`
	Progress      string    `json:"progress,omitempty"`
	PartialResult string    `json:"partial_result,omitempty"`
	SchemaRetried bool      `json:"schema_retried,omitempty"`
	// Counted are the calls of the step in progress already counted.
	Counted []string `json:"counted_calls,omitempty"`
	// Pending are instructions accepted (and counted) but not yet
	// committed: the resumed job still gets them.
	Pending []string `json:"pending_injections,omitempty"`
	// ReferenceSummary and WindowFrom are the job's working memory: the
	// summary of what was folded out of its window, and the first
	// revision the window holds (its core_started until a compaction).
	// choird starts a resumed session's tail at the lowest boundary of
	// every lane, so that the window is whole again.
	ReferenceSummary workmem.ReferenceSummary `json:"reference_summary,omitzero"`
	WindowFrom       int64                    `json:"event_window_boundary,omitempty"`
}

// Snapshots returns the running jobs' state for a working-memory
// snapshot.
func (s *Set) Snapshots() []Snapshot {
	out := []Snapshot{}
	for _, n := range s.names() {
		c := s.job(n)
		if c == nil {
			continue
		}
		head, _ := s.cfg.Log.Head() // before the counters: see Snapshot
		u := c.usage()
		sum, from := c.mem.State()
		c.mu.Lock()
		out = append(out, Snapshot{Start: c.start, StartedRev: c.startRev, State: c.state, Used: u, ThroughRev: head,
			TakenAt: time.Now(), Progress: c.progress, PartialResult: c.partial, SchemaRetried: c.schemaRetried,
			Counted: slices.Clone(c.counted), Pending: slices.Clone(c.pending), ReferenceSummary: sum, WindowFrom: from})
		c.mu.Unlock()
	}
	return out
}

// Restore hands the set the jobs the snapshot at revision rev carried;
// the edge's Run resumes them with what the log's tail adds. Call it
// before Run.
func (s *Set) Restore(rev int64, snaps []Snapshot) { s.restoredRev, s.restoring = rev, snaps }

// restored is a job being rebuilt from the snapshot and the tail.
type restored struct {
	snap Snapshot
	// before is the snapshot as it was, before the tail's events.
	before Snapshot
	lastAt time.Time
	calls  map[string]bool
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
		Purpose          string `json:"purpose"`
	}
	json.Unmarshal(ev.Payload, &p) //nolint:errcheck // an unreadable payload counts nothing
	u := &r.snap.Used
	switch ev.Type {
	case rpc.EventLLMCallCommitted:
		if p.Purpose == "" { // a compaction call spends tokens, no step
			u.Steps++
		}
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
// resumes, with its budgets as spent (never reset), its working memory as
// the snapshot and the tail leave it, and the user is told; a job whose
// budgets are used up ends at its first safe point and is reported as any
// other. Reports of jobs that ended are sent again (choird's outbox drops
// a duplicate) or, when the restart came before them, sent now.
//
// The tail may start before the snapshot (choird starts it at the lowest
// window boundary of the lanes): what a snapshot counted is not counted
// again, and a job's own core_started in it does not replace its snapshot.
func (s *Set) recover(ctx context.Context) {
	head, _ := s.cfg.Log.Head()
	evs, err := s.cfg.Log.Range(s.cfg.Log.Oldest(), head)
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
		r := recs[name]
		switch ev.Type {
		case rpc.EventCoreStarted:
			var p struct {
				Start JobStart `json:"start"`
			}
			// A start at or before the one known is the snapshot's job's,
			// or an earlier job's of the same name.
			if (r == nil || ev.Rev > r.snap.StartedRev) && json.Unmarshal(ev.Payload, &p) == nil {
				recs[name] = &restored{snap: Snapshot{Start: p.Start, StartedRev: ev.Rev, TakenAt: ev.CreatedAt},
					calls: map[string]bool{}}
			}
			continue
		case rpc.EventCoreStopped:
			stopped = append(stopped, ev)
			if r != nil && ev.Rev > r.snap.StartedRev { // not an earlier job's end
				delete(recs, name)
			}
			continue
		}
		if r != nil && ev.Rev > r.snap.ThroughRev && ev.Rev > r.snap.StartedRev {
			r.count(ev)
		}
	}
	for _, ev := range stopped {
		// A report committed by the snapshot was handed to Out before it
		// was taken (see lane.Edge.Settled): the tail reaches back before
		// the snapshot only for the windows.
		if rep, ok := reported[ev.Rev]; ok && rep.Rev <= s.restoredRev {
			continue
		}
		s.recoverReport(ev, reported)
	}
	// Every job's memory takes in its window before any of them commits:
	// the log may drop acknowledged events once new ones are replicated.
	jobs := make([]*Job, 0, len(recs))
	for _, r := range recs {
		jobs = append(jobs, s.rebuild(ctx, r))
	}
	for _, c := range jobs {
		s.resume(ctx, c)
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
func (s *Set) recoverReport(ev rpc.Event, reported map[int64]rpc.Event) {
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

// rebuild makes a job again from what the snapshot and the tail say of
// it: its budgets as spent, its reports, and its working memory (the
// snapshot's summary and window boundary, or a compaction committed after
// the snapshot, whichever is newer).
func (s *Set) rebuild(ctx context.Context, r *restored) *Job {
	used := r.snap.Used
	if !r.lastAt.IsZero() && r.lastAt.After(r.snap.TakenAt) {
		used.WallMS += r.lastAt.Sub(r.snap.TakenAt).Milliseconds()
	}
	c := newJob(s, r.snap.Start, r.snap.StartedRev, used)
	c.progress, c.partial, c.schemaRetried = r.snap.Progress, r.snap.PartialResult, r.snap.SchemaRetried
	c.pending = r.snap.Pending
	c.mem.Restore(r.snap.ReferenceSummary, r.snap.WindowFrom)
	if _, from := c.mem.State(); from < s.cfg.Log.Oldest() {
		// The tail does not reach back to the window's start (an older
		// choird, or a tail capped in length): say what is missing.
		s.cfg.Logger.WarnContext(ctx, "core job resumed without the start of its window", slog.String("job", c.start.JobName),
			slog.Int64("window_from", from), slog.Int64("log_from", s.cfg.Log.Oldest()))
		c.note = fmt.Sprintf("This job was resumed after a restart. Its events from revision %d to %d are neither in your "+
			"context nor in your reference summary; your last report then was %q", from, s.cfg.Log.Oldest()-1, r.before.Progress)
		if r.before.PartialResult != "" {
			c.note += fmt.Sprintf(" and your last partial result %q", r.before.PartialResult)
		}
		c.note += ". Check the workspace before repeating work."
	}
	return c
}

// resume starts a rebuilt job again where the restart left it.
func (s *Set) resume(ctx context.Context, c *Job) {
	ev, err := c.commit(rpc.EventInjectedInstruction, coreInjection{Source: injectionFromRestart,
		Text: "The agent restarted and you resume this job where you were. A tool call without a result was interrupted: " +
			"check its effect before repeating it."})
	if err != nil {
		s.cfg.Logger.ErrorContext(ctx, "core job not resumed", slog.String("job", c.start.JobName), slog.String("error", err.Error()))
		c.mem.Close()
		c.stopWall()
		c.cancel(nil)
		return
	}
	used := c.usage()
	s.cfg.Logger.InfoContext(ctx, "core job resumed after a restart", slog.String("job", c.start.JobName),
		slog.Int64("steps", used.Steps), slog.Bool("whole_window", c.note == ""))
	s.tell(coreNews{kind: newsResumed, job: c.start.JobName, ev: ev,
		text: fmt.Sprintf("Core job %q was interrupted by a restart and resumes (%d steps done so far).", c.start.JobName, used.Steps)})
	s.launch(c)
}
