package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc"
)

// isCompaction tells working memory's compaction calls from a job's own:
// they offer no tools and open with the compaction instructions.
func isCompaction(r *llmtest.Request) bool {
	return len(r.Tools) == 0 && strings.Contains(r.System(), "You keep the reference summary")
}

// promptTokens is a request's size as llmtest reports it in usage: four
// bytes of its messages and tools per token.
func promptTokens(r *llmtest.Request) int64 {
	return (int64(len(r.Fields["messages"])+len(r.Fields["tools"])) + 3) / 4
}

var (
	foldedLineRE = regexp.MustCompile(`(?m)^\[rev (\d+), ev ([0-9a-f]+)\] \w+: .*$`)
	factRE       = regexp.MustCompile(`FACT (\w+)=(\w+)`)
	revsRE       = regexp.MustCompile(`revisions (\d+) to (\d+)`)
)

// factsDelta is a compaction model that keeps every "FACT key=value" of
// the events it folds (a job's tool calls included) as a fact, and
// rewrites the summary text to one line.
func factsDelta(r *llmtest.Request) llmtest.Step {
	var facts []workmem.Fact
	for _, line := range foldedLineRE.FindAllStringSubmatch(r.Last().Content, -1) {
		for _, f := range factRE.FindAllStringSubmatch(line[0], -1) {
			facts = append(facts, workmem.Fact{Key: f[1], Value: f[2], SourceEvent: line[2]})
		}
	}
	span := revsRE.FindStringSubmatch(r.Last().Content)
	d := map[string]any{"mode": "overwrite", "summary_update": fmt.Sprintf("Steps up to revision %s reported progress.", span[2])}
	if len(facts) > 0 {
		d["add_fact"] = facts
	}
	b, _ := json.Marshal(map[string]any{"memory_delta": d})
	return llmtest.Text(string(b))
}

// factJob is a job's scripted model: its first steps report the facts,
// every step reports a long line of progress, and after steps steps it
// answers with the value its prompt shows for each fact, from its window
// or from its summary.
type factJob struct {
	steps int
	facts [][2]string
	n     atomic.Int64 // the job's steps answered
	// before, if set, runs before step n is answered.
	before func(ctx context.Context, n int)
}

var plantedFacts = [][2]string{{"door_code", "4417"}, {"cat", "Miso"}, {"locker", "B17"}}

func (f *factJob) respond(ctx context.Context, r *llmtest.Request) llmtest.Step {
	if isCompaction(r) {
		return factsDelta(r)
	}
	n := int(f.n.Add(1)) - 1
	if f.before != nil {
		f.before(ctx, n)
	}
	if n < f.steps {
		text := fmt.Sprintf("step %d: checked another module, and all of it reads as it should %s", n, strings.Repeat("and so on ", 90))
		if n < len(f.facts) {
			text = fmt.Sprintf("FACT %s=%s ", f.facts[n][0], f.facts[n][1]) + text
		}
		args, _ := json.Marshal(map[string]string{"kind": "progress", "text": text})
		return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.report", Arguments: string(args)})
	}
	var answers []string
	for _, fact := range f.facts {
		answers = append(answers, fact[0]+"="+factIn(r, fact[0]))
	}
	return llmtest.Text(strings.Join(answers, " "))
}

// factIn is the value a prompt shows for key: a fact of its summary, or a
// FACT its window holds; "?" for none.
func factIn(r *llmtest.Request, key string) string {
	for _, m := range r.Messages {
		texts := []string{m.Content}
		for _, tc := range m.ToolCalls {
			texts = append(texts, tc.Arguments)
		}
		for _, text := range texts {
			for _, line := range strings.Split(text, "\n") {
				if v, ok := strings.CutPrefix(line, "- "+key+": "); ok {
					return strings.Fields(v)[0]
				}
			}
			for _, f := range factRE.FindAllStringSubmatch(text, -1) {
				if f[1] == key {
					return f[2]
				}
			}
		}
	}
	return "?"
}

// wantAnswer is the answer of a factJob that found every fact.
func wantAnswer(facts [][2]string) string {
	var s []string
	for _, f := range facts {
		s = append(s, f[0]+"="+f[1])
	}
	return strings.Join(s, " ")
}

// modelSteps counts the model steps a request's window holds, notes of
// results whose call was folded left out.
func modelSteps(r *llmtest.Request) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "assistant" && !strings.HasPrefix(m.Content, "[the result of my earlier tool call ") {
			n++
		}
	}
	return n
}

// jobPrompts are a job's own requests, compaction calls left out.
func jobPrompts(srv *llmtest.Server) []*llmtest.Request {
	var out []*llmtest.Request
	for _, r := range srv.Requests() {
		if !isCompaction(r) {
			out = append(out, r)
		}
	}
	return out
}

// compactionsOf are the deltas committed on a lane.
func (b *coreBench) compactionsOf(t testing.TB, laneName string) []rpc.Event {
	return b.find(t, rpc.EventMemoryWriteCommitted, laneName)
}

func startFactJob(t *testing.T, b *coreBench, job *factJob) {
	t.Helper()
	b.coreSrv.SetResponder(job.respond)
	b.edgeSrv.Add(llmtest.ToolCalls(spawnCall("s1", "j", "Check every module and remember what you find.")), llmtest.Text("Started."))
	if err := b.edge.Deliver(lane.UserMessage{Text: "check the modules"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "Started.")
}

// TestCoreAutomaticCompaction runs a job of many steps under a small
// context window: its window is compacted by itself, more than once, in
// the background, and the user is told each time; the facts its first
// steps reported are answered at the end from its summary; every prompt
// stays under the context window and carries the job's CoreJobStart whole;
// every event of the job's lane left its window only by being folded; and
// the compaction calls spend tokens but no steps.
func TestCoreAutomaticCompaction(t *testing.T) {
	t.Parallel()
	// The core tools take some 3,800 tokens of the window and the head
	// some 100; of the 6,400 tokens of budget (80%) each step takes some
	// 250.
	const room, steps = 4200, 40
	b := setupCores(t, coreOpts{overTools: room})
	window := b.window
	job := &factJob{steps: steps, facts: plantedFacts}
	startFactJob(t, b, job)
	st := b.waitStopped(t, "j")
	if st.Outcome != "completed" || !strings.Contains(string(st.FinalResult), wantAnswer(plantedFacts)) {
		t.Fatalf("the job ended %s with %s, want the facts %q", st.Outcome, st.FinalResult, wantAnswer(plantedFacts))
	}
	if st.Used.Steps != steps+1 {
		t.Errorf("%d steps counted, want %d: a compaction call is no step", st.Used.Steps, steps+1)
	}

	comps := b.compactionsOf(t, "core:j")
	if len(comps) < 2 {
		t.Fatalf("%d compactions of the job's window, want at least 2", len(comps))
	}
	prompts := jobPrompts(b.coreSrv)
	first, last := prompts[0], prompts[len(prompts)-1]
	if !strings.Contains(last.System(), "- door_code: 4417 [ev ") || strings.Contains(string(last.Body), "FACT door_code=4417") {
		t.Errorf("last prompt: the planted fact is not in the summary only: %s", last.System())
	}
	// The head is never compacted: the CoreJobStart is in every prompt,
	// exactly as in the first.
	start := first.Messages[2]
	if first.Messages[0].Role != "system" || !strings.HasPrefix(start.Content, "Your task, from the edge lane (CoreJobStart):\n") {
		t.Fatalf("first prompt opens with %+v", first.Messages[:3])
	}
	for _, r := range b.coreSrv.Requests() {
		if n := promptTokens(r); n > window {
			t.Errorf("request %d takes %d tokens, over the context window of %d", r.Index, n, window)
		}
		if !isCompaction(r) && !slices.ContainsFunc(r.Messages, func(m llmtest.Message) bool {
			return m.Role == start.Role && m.Content == start.Content
		}) {
			t.Errorf("request %d lacks the CoreJobStart", r.Index)
		}
	}

	// Every compaction folded the oldest events left, and every event of
	// the job's window below the last boundary was folded by one.
	folded := map[int64]bool{}
	var boundary int64
	texts, ids := b.messages()
	for i, c := range comps {
		var p struct {
			Trigger    string `json:"trigger"`
			FromRev    int64  `json:"from_rev"`
			ThroughRev int64  `json:"through_rev"`
			WindowFrom int64  `json:"window_from"`
			Folded     int    `json:"folded_events"`
		}
		if err := json.Unmarshal(c.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Trigger != "automatic" || p.FromRev < boundary || p.ThroughRev < p.FromRev {
			t.Errorf("compaction %d = %+v after boundary %d", i, p, boundary)
		}
		for rev := p.FromRev; rev <= p.ThroughRev; rev++ {
			folded[rev] = true
		}
		boundary = p.WindowFrom
		// The user is told of each, under an ID derived from its delta.
		want := fmt.Sprintf(`Core job "j": compacted %d earlier messages into its reference summary (rev %d–%d).`,
			p.Folded, p.FromRev, p.ThroughRev)
		if i := slices.Index(ids, lane.MessageID("core_compaction", c.Hash)); i < 0 || texts[i] != want {
			t.Errorf("compaction %d: no notice %q under its ID; sent %q", i, want, texts)
		}
	}
	for _, ev := range b.events(t) {
		shown := ev.Type == rpc.EventModelOutput || ev.Type == rpc.EventToolResultCommitted || ev.Type == rpc.EventInjectedInstruction
		if ev.Lane == "core:j" && shown && ev.Rev < boundary && !folded[ev.Rev] {
			t.Errorf("event %d (%s) left the job's window without being folded", ev.Rev, ev.Type)
		}
	}
	b.checkReports(t)
	var largest int64
	for _, r := range prompts {
		largest = max(largest, promptTokens(r))
	}
	t.Logf("%d steps, %d compactions, largest job prompt %d tokens of a %d-token window", steps, len(comps), largest, window)
}

// TestCoreManualCompaction compacts a running job's whole window on
// request, as /compact does for every lane: the job goes on meanwhile,
// its next prompt carries the summary instead of the folded steps, and
// the user is told.
func TestCoreManualCompaction(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{})
	held, release := make(chan struct{}), make(chan struct{})
	job := &factJob{steps: 4, facts: plantedFacts[:2], before: func(ctx context.Context, n int) {
		if n == 3 {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}}
	startFactJob(t, b, job)
	<-held
	comps := b.jobs.Compact()
	res, err := comps["j"].Wait(t.Context())
	if err != nil || len(comps) != 1 {
		t.Fatalf("compaction of %d jobs: %+v, %v", len(comps), res, err)
	}
	if res.Trigger != workmem.TriggerManual || res.Folded < 6 || len(res.Summary.Facts) != 2 {
		t.Errorf("manual compaction = %+v", res)
	}
	close(release)
	st := b.waitStopped(t, "j")
	if !strings.Contains(string(st.FinalResult), wantAnswer(plantedFacts[:2])) {
		t.Errorf("final result %s", st.FinalResult)
	}
	// The step after the compaction: its window holds what came after.
	r := jobPrompts(b.coreSrv)[4]
	if !strings.Contains(r.System(), "- cat: Miso") || strings.Contains(string(r.Body), "FACT cat=Miso") || modelSteps(r) != 1 {
		t.Errorf("prompt after the compaction: %d steps, summary %q", modelSteps(r), r.System())
	}
	b.waitMessage(t, fmt.Sprintf(`Core job "j": compacted %d earlier messages into its reference summary`, res.Folded))
	// core_stopped is committed a moment before the job leaves the set.
	waitFor(t, "j to leave the live set", func() bool { return !b.jobs.Running() })
	if got := b.jobs.Compact(); len(got) != 0 {
		t.Errorf("compactions of ended jobs: %v", got)
	}
}

// TestCoreMemorySurvivesRestart crashes an agent while a job whose window
// was compacted runs, and resumes it from a snapshot and the tail choird
// returns. With the tail from the job's window boundary, the job keeps its
// summary and its whole window (the steps between the boundary and the
// snapshot included) and is shown no note of lost steps. A compaction
// committed after the snapshot is adopted from the tail. A tail that
// starts after the snapshot (capped, or from an older choird) still
// leaves the summary, from the snapshot, and the job is told which
// revisions it lost. Each time it answers the facts it folded.
func TestCoreMemorySurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// snapAfterCompaction takes the snapshot once the compaction is
		// swapped in; otherwise before it is committed.
		snapAfterCompaction bool
		// capped starts the tail after the snapshot.
		capped bool
	}{
		{name: "TailFromTheWindowBoundary", snapAfterCompaction: true},
		{name: "DeltaCommittedAfterTheSnapshot"},
		{name: "SummaryFromTheSnapshotWhenTheTailIsCapped", snapAfterCompaction: true, capped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const room = 4200
			ws := t.TempDir()
			a := setupCores(t, coreOpts{ws: ws, overTools: room})
			var snaps []core.Snapshot
			held := make(chan struct{})
			job := &factJob{steps: 40, facts: plantedFacts, before: func(ctx context.Context, n int) {
				switch {
				case !tc.snapAfterCompaction && n == 2:
					snaps = a.jobs.Snapshots()
				case tc.snapAfterCompaction && snaps == nil && len(a.compactionsOf(t, "core:j")) > 0 &&
					a.jobs.Snapshots()[0].WindowFrom > a.jobs.Snapshots()[0].StartedRev:
					snaps = a.jobs.Snapshots()
				case snaps != nil && len(a.compactionsOf(t, "core:j")) > 0 && n > 2:
					close(held)
					<-ctx.Done() // the crash ends this call
				}
			}}
			startFactJob(t, a, job)
			<-held
			evs := a.events(t)
			a.stopLane()
			<-a.runDone
			snap := snaps[0]
			if tc.snapAfterCompaction == snap.ReferenceSummary.IsZero() || snap.WindowFrom > snap.ThroughRev {
				t.Fatalf("snapshot = %+v", snap)
			}
			// choird's tail: from the job's window boundary, below the
			// snapshot; or after the snapshot, capped.
			from := snap.WindowFrom
			if tc.capped {
				from = snap.ThroughRev + 1
			}
			history := slices.DeleteFunc(evs, func(ev rpc.Event) bool { return ev.Rev < from })
			stepsBefore := job.n.Load() - 1 // the held call never returned

			b := setupCores(t, coreOpts{ws: ws, overTools: room, history: history, snaps: snaps})
			rest := &factJob{steps: 2, facts: plantedFacts}
			b.coreSrv.SetResponder(rest.respond)
			st := b.waitStopped(t, "j")
			if st.Outcome != "completed" || !strings.Contains(string(st.FinalResult), wantAnswer(plantedFacts)) {
				t.Errorf("the resumed job ended %s with %s, want %q", st.Outcome, st.FinalResult, wantAnswer(plantedFacts))
			}
			if st.Used.Steps != stepsBefore+3 {
				t.Errorf("%d steps counted, want the %d before the crash and 3 after", st.Used.Steps, stepsBefore)
			}
			r := jobPrompts(b.coreSrv)[0]
			if !strings.Contains(r.System(), "- door_code: 4417") || strings.Contains(string(r.Body), "FACT door_code=4417") {
				t.Errorf("the resumed prompt lost the summary: %q", r.System())
			}
			lost := fmt.Sprintf("Its events from revision %d to %d are neither in your context nor in your reference summary",
				snap.WindowFrom, snap.ThroughRev)
			if told := strings.Contains(r.System(), lost); told != tc.capped {
				t.Errorf("told of lost steps %v, want %v: %q", told, tc.capped, r.System())
			}
			// Its window: the steps from the boundary (or the snapshot) to
			// the restart.
			boundary := snap.WindowFrom
			var want int
			for pass := range 2 {
				for _, ev := range history {
					var p struct {
						WindowFrom int64  `json:"window_from"`
						CoreEvent  string `json:"core_event"`
					}
					json.Unmarshal(ev.Payload, &p)
					switch {
					case ev.Lane != "core:j":
					case pass == 0 && ev.Type == rpc.EventMemoryWriteCommitted: // a delta after the snapshot moves it on
						boundary = max(boundary, p.WindowFrom)
					case pass == 1 && ev.Type == rpc.EventModelOutput && p.CoreEvent == "" && ev.Rev >= boundary:
						want++
					}
				}
			}
			if n := modelSteps(r); n != want || n == 0 {
				t.Errorf("the resumed window holds %d steps, want %d", n, want)
			}
			b.checkReports(t)
		})
	}
}
