package core

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
		c.mu.Lock()
		out = append(out, Snapshot{Start: c.start, StartedRev: c.startRev, State: c.state, Used: u, ThroughRev: head,
			TakenAt: time.Now(), Progress: c.progress, PartialResult: c.partial, SchemaRetried: c.schemaRetried,
			Counted: slices.Clone(c.counted), Pending: slices.Clone(c.pending)})
		c.mu.Unlock()
	}
	return out
}

// Restore hands the set the jobs a snapshot carried; the edge's Run
// resumes them with what the log's tail adds. Call it before Run.
func (s *Set) Restore(snaps []Snapshot) { s.restoring = snaps }

// restored is a job being rebuilt from the snapshot and the tail.
type restored struct {
	snap Snapshot
	// before is the snapshot as it was, before the tail's events.
	before   Snapshot
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
		switch ev.Type {
		case rpc.EventCoreStarted:
			var p struct {
				Start JobStart `json:"start"`
			}
			if json.Unmarshal(ev.Payload, &p) == nil {
				recs[name] = &restored{snap: Snapshot{Start: p.Start, StartedRev: ev.Rev, TakenAt: ev.CreatedAt},
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

// resume starts a job again where the restart left it.
func (s *Set) resume(ctx context.Context, r *restored, evs []rpc.Event) {
	used := r.snap.Used
	if !r.lastAt.IsZero() && r.lastAt.After(r.snap.TakenAt) {
		used.WallMS += r.lastAt.Sub(r.snap.TakenAt).Milliseconds()
	}
	c := newJob(s, r.snap.Start, r.snap.StartedRev, used)
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
		s.cfg.Logger.ErrorContext(ctx, "core job not resumed", slog.String("job", c.start.JobName), slog.String("error", err.Error()))
		return
	}
	s.cfg.Logger.InfoContext(ctx, "core job resumed after a restart", slog.String("job", c.start.JobName),
		slog.Int64("steps", used.Steps), slog.Bool("whole_window", r.fromTail))
	s.tell(coreNews{kind: newsResumed, job: c.start.JobName, ev: ev,
		text: fmt.Sprintf("Core job %q was interrupted by a restart and resumes (%d steps done so far).", c.start.JobName, used.Steps)})
	s.launch(c)
}
