package lane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc"
)

// memBundle is an edge lane whose model has a small context window, and
// whose fake model answers from a responder.
type memBundle struct {
	*bundle
	window int64
	arb    *arbiter.Arbiter
	logs   *logTap
}

// memOpts configure a memBundle.
type memOpts struct {
	// window is the model's context window.
	window int64
	// overTools, when set instead, makes the window the edge's tool
	// schemas plus this many tokens: a small window that keeps the same
	// room for the conversation whatever tools are built in.
	overTools int64
	// answer answers the lane's requests, compact the compaction calls.
	answer, compact func(ctx context.Context, r *llmtest.Request) llmtest.Step
	// after is the log to continue, as a resumed session does; nil: a
	// fresh session.
	after *commitlog.Log
}

// toolsTuned is the estimated size of the built-in schemas the overTools
// values of these tests were tuned on.
const toolsTuned = 3817

// setupMemory starts an edge lane as o says.
func setupMemory(t testing.TB, o memOpts) *memBundle {
	t.Helper()
	b := newMemBundle(t, o)
	b.start(t)
	return b
}

// newMemBundle makes the lane without running it.
func newMemBundle(t testing.TB, o memOpts) *memBundle {
	t.Helper()
	srv := llmtest.NewServer(t)
	srv.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		if isCompaction(r) {
			return o.compact(ctx, r)
		}
		return o.answer(ctx, r)
	})
	// The core built-ins, without the service tools (Notion, TTS) that a
	// session gets only with their resources: the windows below were sized
	// on these, and the room under the compaction threshold shrinks as the
	// schemas grow (80% of the window minus the schemas).
	reg, err := tool.New(builtin.Tools())
	if err != nil {
		t.Fatal(err)
	}
	skills, err := skill.Load(skill.Config{KnownTool: reg.Has})
	if err != nil {
		t.Fatal(err)
	}
	var baseRev int64
	baseHash := rpc.Genesis
	if o.after != nil {
		baseRev, baseHash = o.after.Head()
	}
	log, app, err := commitlog.New(baseRev, baseHash)
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: ws},
		Approvals: &approver{by: map[string]string{}}})
	window := o.window
	if o.overTools > 0 {
		var specs []llm.ToolSpec
		for _, v := range reg.LLMViews(tool.Filter{Lane: tool.LaneEdge}) {
			specs = append(specs, llm.ToolSpec{Name: v.Name, Description: v.Description, Parameters: v.Parameters})
		}
		// The room under the compaction threshold (80% of the window,
		// less the schemas) stays what it was when the overTools values
		// were tuned, whatever the built-ins weigh now: the window takes
		// a quarter more of what the schemas gained since.
		est := workmem.EstimateTools(specs)
		window = est + o.overTools + (est-toolsTuned)/4
	}
	b := &memBundle{bundle: &bundle{log: log, ws: ws, out: &sink{got: make(chan string, 1024)}, srv: srv,
		done: make(chan error, 1)}, window: window, arb: arb, logs: &logTap{}}
	b.edge = lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, Skills: skills, LLM: &llm.Client{},
		Model: b.model, Out: b.out, RateLimitDelay: 10 * time.Millisecond, Logger: slog.New(b.logs),
		Identity: lane.Identity{Instructions: "You are the edge lane.", User: "The user is Ada.", Soul: "Be brief."}})
	return b
}

// start runs the arbiter and the lane until the test ends.
func (b *memBundle) start(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	arbDone := make(chan struct{})
	go func() { b.arb.Run(ctx); close(arbDone) }()
	edge := b.edge
	go func() { b.done <- edge.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-b.done; <-arbDone })
}

// logTap records the messages the lane logs.
type logTap struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logTap) Enabled(context.Context, slog.Level) bool { return true }
func (l *logTap) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logTap) WithGroup(string) slog.Handler            { return l }
func (l *logTap) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logTap) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

func (b *memBundle) model() llm.ModelSettings {
	m := b.srv.Model()
	m.ContextWindow = b.window
	return m
}

// isCompaction tells the working memory's compaction calls from the
// lane's own: they offer no tools and open with the compaction
// instructions.
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
	factRE       = regexp.MustCompile(`FACT (\w+)=(\S+)`)
	revsRE       = regexp.MustCompile(`revisions (\d+) to (\d+)`)
)

// factsDelta is a compaction model that keeps every "FACT key=value" of
// the events it folds as a fact, and rewrites the summary text to one
// line.
func factsDelta(_ context.Context, r *llmtest.Request) llmtest.Step {
	var facts []workmem.Fact
	for _, line := range foldedLineRE.FindAllStringSubmatch(r.Last().Content, -1) {
		for _, f := range factRE.FindAllStringSubmatch(line[0], -1) {
			facts = append(facts, workmem.Fact{Key: f[1], Value: f[2], SourceEvent: line[2]})
		}
	}
	span := revsRE.FindStringSubmatch(r.Last().Content)
	d := map[string]any{"mode": "overwrite", "summary_update": fmt.Sprintf("Small talk up to revision %s.", span[2])}
	if len(facts) > 0 {
		d["add_fact"] = facts
	}
	b, _ := json.Marshal(map[string]any{"memory_delta": d})
	return llmtest.Text(string(b))
}

// factAnswer answers "FACT? key" with the value the prompt shows for key,
// in the summary's facts or as a FACT in the window, and anything else
// with a short reply.
func factAnswer(_ context.Context, r *llmtest.Request) llmtest.Step {
	q, ok := strings.CutPrefix(r.Last().Content, "FACT? ")
	if !ok {
		return llmtest.Text("Noted: " + r.Last().Content[:min(len(r.Last().Content), 40)])
	}
	for _, m := range r.Messages[:len(r.Messages)-1] {
		if v, ok := factIn(m.Content, q); ok {
			return llmtest.Text(v)
		}
	}
	return llmtest.Text("I do not know " + q)
}

func factIn(text, key string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "- "+key+": "); ok {
			return strings.Fields(v)[0], true
		}
		if m := factRE.FindStringSubmatch(line); m != nil && m[1] == key {
			return m[2], true
		}
	}
	return "", false
}

// say delivers a message and returns the answer, collecting the
// compaction notices sent before it.
func (b *memBundle) say(t *testing.T, text string) (answer string, notices []string) {
	t.Helper()
	if err := b.edge.Deliver(lane.UserMessage{Text: text}); err != nil {
		t.Fatal(err)
	}
	for {
		m := b.out.next(t)
		if !strings.HasPrefix(m, "Compacted ") {
			return m, notices
		}
		notices = append(notices, m)
	}
}

func (b *memBundle) compactions(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range b.ofType(t, rpc.EventMemoryWriteCommitted) {
		out = append(out, payload(t, ev))
	}
	return out
}

// lanePrompts are the lane's own requests, compaction calls left out.
func (b *memBundle) lanePrompts() []*llmtest.Request {
	var out []*llmtest.Request
	for _, r := range b.srv.Requests() {
		if !isCompaction(r) {
			out = append(out, r)
		}
	}
	return out
}

// chat is a line of small talk of about 60 tokens.
func chat(i int) string {
	return fmt.Sprintf("turn %d: the weather is mild, the tea is warm, and nothing much happens here today", i)
}

func TestEdgeAutomaticCompaction(t *testing.T) {
	t.Parallel()
	// 4,800 tokens of budget (80%), of which the tools and instructions
	// take about 3,250: a few dozen turns fill the rest.
	b := setupMemory(t, memOpts{overTools: 2850, answer: factAnswer, compact: factsDelta})
	b.say(t, "FACT door_code=4417 remember the door code")
	b.say(t, "FACT cat=Miso that is my cat's name")
	var notices []string
	for i := 0; len(b.compactions(t)) < 2; i++ {
		if i == 200 {
			t.Fatal("no two compactions in 200 turns")
		}
		_, n := b.say(t, chat(i))
		notices = append(notices, n...)
	}
	if got, _ := b.say(t, "FACT? door_code"); got != "4417" {
		t.Errorf("door code after compaction = %q", got)
	}
	if got, _ := b.say(t, "FACT? cat"); got != "Miso" {
		t.Errorf("cat after compaction = %q", got)
	}

	comps := b.compactions(t)
	first := comps[0]
	if first["kind"] != "reference_summary_delta" || first["trigger"] != "automatic" || first["from_rev"] != float64(1) {
		t.Errorf("the first compaction did not fold the oldest events automatically: %v", first)
	}
	if comps[1]["from_rev"].(float64) < first["window_from"].(float64) {
		t.Errorf("the second compaction folded again what the first did: %v then %v", first, comps[1])
	}
	if len(notices) == 0 || !strings.Contains(notices[0], fmt.Sprintf("(rev 1–%.0f)", first["through_rev"])) {
		t.Errorf("notices = %q", notices)
	}
	last := b.lanePrompts()[len(b.lanePrompts())-1]
	var planted, summary bool
	for _, m := range last.Messages {
		planted = planted || strings.Contains(m.Content, "FACT door_code=4417")
		summary = summary || strings.Contains(m.Content, "- door_code: 4417 [ev ")
	}
	if planted || !summary {
		t.Errorf("last prompt: planted message still in the window %v, fact in the summary %v", planted, summary)
	}
	for _, r := range b.srv.Requests() {
		if n := promptTokens(r); n > b.window {
			t.Errorf("request %d takes %d tokens, over the context window of %d", r.Index, n, b.window)
		}
	}
}

// compactionScript answers the compaction calls in turn with steps, then
// with factsDelta.
func compactionScript(steps ...llmtest.Step) func(ctx context.Context, r *llmtest.Request) llmtest.Step {
	var n atomic.Int64
	return func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		if i := int(n.Add(1)) - 1; i < len(steps) {
			return steps[i]
		}
		return factsDelta(ctx, r)
	}
}

func TestEdgeCompactionNotApplied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		first llmtest.Step
	}{
		{"MalformedDeltaIsRejected", llmtest.Text(`{"memory_delta": {"mode": "replace-everything", "summary_update": ""}}`)},
		{"NotJSONIsRejected", llmtest.Text("Sure! Here is the summary: the user has a door code.")},
		{"FailedCallKeepsTheWindow", llmtest.ServerError(500, "compaction model down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// About 3,900 tokens of budget, of which the tools and instructions
			// take about 3,400: one long message passes the threshold.
			b := setupMemory(t, memOpts{overTools: 1350, answer: factAnswer, compact: compactionScript(tc.first)})
			b.say(t, "FACT door_code=4417 "+strings.Repeat("and a long story about the door ", 60))
			// The turn's end measured the window and made the first
			// compaction call, answered with tc.first.
			waitUntil(t, "the first compaction to fail", func() bool { return b.logs.count("compaction not applied") == 1 })
			snap := b.edge.Snapshot()
			// An edge that never compacted has its window from the start.
			if !snap.ReferenceSummary.IsZero() || snap.WindowFrom != 1 || len(b.compactions(t)) != 0 {
				t.Fatalf("a compaction that failed changed the memory: %+v, %v", snap, b.compactions(t))
			}
			if r := b.lanePrompts(); len(r) != 1 {
				t.Fatalf("%d lane requests", len(r))
			}
			// The next trigger retries, and this time the delta applies;
			// the lane answers meanwhile from the window or the summary.
			if answer, _ := b.say(t, "FACT? door_code"); answer != "4417" {
				t.Errorf("answer = %q", answer)
			}
			waitUntil(t, "the retried compaction", func() bool { return len(b.compactions(t)) == 1 })
			if c := b.compactions(t)[0]; c["from_rev"] != float64(1) || c["window_from"] != float64(2) {
				t.Errorf("retried compaction = %v", c)
			}
			waitUntil(t, "the swap", func() bool { return b.edge.Snapshot().WindowFrom == 2 })
			if f := b.edge.Snapshot().ReferenceSummary.Facts; len(f) != 1 || f[0].Value != "4417" {
				t.Errorf("facts = %+v", f)
			}
			var asked int
			for _, r := range b.srv.Requests() {
				if isCompaction(r) {
					asked++
				}
			}
			if asked != 2 {
				t.Errorf("%d compaction calls, want the failed one and its retry", asked)
			}
		})
	}
}

func TestEdgeCompactionIsAsynchronous(t *testing.T) {
	t.Parallel()
	held := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	b := setupMemory(t, memOpts{window: 128_000, answer: factAnswer, compact: func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		once.Do(func() { close(held) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return factsDelta(ctx, r)
	}})
	b.say(t, "FACT door_code=4417")
	b.edge.RequestCompaction()
	<-held
	// The compaction call is held in the fake server: the lane answers
	// meanwhile, from the window as it was.
	if got, _ := b.say(t, "FACT? door_code"); got != "4417" {
		t.Fatalf("answer while compacting = %q", got)
	}
	if r := b.lanePrompts()[1]; strings.Contains(r.System(), "Reference summary") {
		t.Errorf("a summary reached the prompt before the compaction was applied")
	}
	if snap := b.edge.Snapshot(); !snap.ReferenceSummary.IsZero() {
		t.Errorf("summary before the compaction call returned: %+v", snap.ReferenceSummary)
	}
	close(release)
	b.waitEvent(t, rpc.EventMemoryWriteCommitted, 1)
	if got := b.out.next(t); got != "Compacted 2 earlier messages into my reference summary (rev 1–3)." {
		t.Errorf("notice = %q", got)
	}
	if got, _ := b.say(t, "FACT? door_code"); got != "4417" {
		t.Errorf("answer after compaction = %q", got)
	}
	r := b.lanePrompts()[2]
	if !strings.Contains(r.System(), "- door_code: 4417") || hasMessage(r, "user", "FACT door_code=4417") {
		t.Errorf("after the swap: summary %q", r.System())
	}
}

func TestEdgeMemoryRestore(t *testing.T) {
	t.Parallel()
	b := setupMemory(t, memOpts{window: 128_000, answer: factAnswer, compact: factsDelta})
	b.say(t, "FACT door_code=4417")
	b.edge.RequestCompaction()
	b.waitEvent(t, rpc.EventMemoryWriteCommitted, 1)
	waitUntil(t, "the swap", func() bool { return b.edge.Snapshot().WindowFrom == 4 })
	snap := b.edge.Snapshot()
	if len(snap.ReferenceSummary.Facts) != 1 || snap.ReferenceSummary.Facts[0].Key != "door_code" {
		t.Fatalf("snapshot = %+v", snap)
	}
	raw, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("FromSnapshot", func(t *testing.T) {
		t.Parallel()
		var back lane.EdgeSnapshot
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		b2 := setupMemoryRestored(t, b.log, back)
		if got, _ := b2.say(t, "FACT? door_code"); got != "4417" {
			t.Errorf("answer after restore = %q", got)
		}
		if got := b2.edge.Snapshot(); got.WindowFrom != 4 || got.ReferenceSummary.Facts[0].Value != "4417" {
			t.Errorf("restored snapshot = %+v", got)
		}
	})

	t.Run("FromAnOldSnapshotsPlainSummary", func(t *testing.T) {
		t.Parallel()
		var old lane.EdgeSnapshot
		if err := json.Unmarshal([]byte(`{"tool_calls_used": 0, "tokens_used": 0,
			"reference_summary": "The door code is 4417.", "event_window_boundary": 3}`), &old); err != nil {
			t.Fatal(err)
		}
		b2 := setupMemoryRestored(t, b.log, old)
		b2.say(t, "hello")
		if r := b2.lanePrompts()[0]; !strings.Contains(r.System(), "The door code is 4417.") {
			t.Errorf("old summary not in the prompt: %q", r.System())
		}
	})

	t.Run("FromTheLogAfterTheSnapshot", func(t *testing.T) {
		t.Parallel()
		// A lane made over the log, as after a restart whose snapshot
		// predates the compaction, adopts the committed delta.
		reg, err := builtin.Build(builtin.Config{})
		if err != nil {
			t.Fatal(err)
		}
		again := lane.NewEdge(lane.EdgeConfig{Arbiter: b.arb, Log: b.log, Tools: reg, LLM: &llm.Client{}, Model: b.model, Out: newSink()})
		if err := again.Restore(lane.EdgeSnapshot{}); err != nil {
			t.Fatal(err)
		}
		if got := again.Snapshot(); got.WindowFrom != 4 || got.ReferenceSummary.Facts[0].Value != "4417" {
			t.Errorf("memory rebuilt from the log = %+v", got)
		}
	})
}

// setupMemoryRestored starts a lane restored from snap, continuing the
// log after.
func setupMemoryRestored(t *testing.T, after *commitlog.Log, snap lane.EdgeSnapshot) *memBundle {
	t.Helper()
	b := newMemBundle(t, memOpts{window: 128_000, answer: factAnswer, compact: factsDelta, after: after})
	if err := b.edge.Restore(snap); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	return b
}

// TestEdgeMemory500Turns is the target of spec 11.3's working memory: a
// scripted 500-turn conversation whose first turns plant facts. The
// prompt never passes the model's context window, every event of the
// lane is either in the window or folded into the summary, and the facts
// are answered at the end from the summary.
func TestEdgeMemory500Turns(t *testing.T) {
	t.Parallel()
	const turns = 500
	b := setupMemory(t, memOpts{overTools: 2850, answer: factAnswer, compact: factsDelta})
	budget := b.window * 80 / 100
	facts := [][2]string{{"door_code", "4417"}, {"cat", "Miso"}, {"wifi", "orange-42"}, {"dentist", "2025-03-14"}, {"locker", "B17"}}
	var notices []string
	for i := range turns {
		var text string
		switch {
		case i < len(facts):
			text = fmt.Sprintf("FACT %s=%s please remember this", facts[i][0], facts[i][1])
		case i >= turns-len(facts):
			text = "FACT? " + facts[i-(turns-len(facts))][0]
		case i%7 == 0:
			text = chat(i) + "; " + chat(i+1) + "; " + chat(i+2)
		default:
			text = chat(i)
		}
		answer, n := b.say(t, text)
		notices = append(notices, n...)
		if i >= turns-len(facts) {
			if want := facts[i-(turns-len(facts))][1]; answer != want {
				t.Errorf("turn %d: %q answered %q, want %q", i, text, answer, want)
			}
		}
	}

	var maxLane, maxCompaction, overBudget int64
	for _, r := range b.srv.Requests() {
		n := promptTokens(r)
		if n > b.window {
			t.Errorf("request %d takes %d tokens, over the context window of %d", r.Index, n, b.window)
		}
		if isCompaction(r) {
			maxCompaction = max(maxCompaction, n)
			continue
		}
		maxLane = max(maxLane, n)
		if n > budget {
			overBudget++
		}
	}
	last := b.lanePrompts()[len(b.lanePrompts())-1]
	for _, m := range last.Messages {
		if strings.Contains(m.Content, "FACT door_code=") {
			t.Errorf("the planted message is still in the last prompt's window: nothing was folded")
		}
	}

	// Every compaction folded the oldest events left, in order, and every
	// event of the lane below the final boundary was folded by one.
	comps := b.compactions(t)
	folded := map[int64]bool{}
	var boundary int64
	for i, c := range comps {
		from, through := int64(c["from_rev"].(float64)), int64(c["through_rev"].(float64))
		if c["trigger"] != "automatic" || from < boundary || through < from {
			t.Errorf("compaction %d = %v after boundary %d", i, c, boundary)
		}
		for rev := from; rev <= through; rev++ {
			folded[rev] = true
		}
		boundary = int64(c["window_from"].(float64))
	}
	for _, ev := range b.events(t) {
		shown := ev.Type == rpc.EventUserMsg || (ev.Type == rpc.EventModelOutput && !strings.Contains(string(ev.Payload), `"text":""`))
		if shown && ev.Rev < boundary && !folded[ev.Rev] {
			t.Errorf("event %d (%s) left the window without being folded", ev.Rev, ev.Type)
		}
	}
	if len(notices) != len(comps) {
		t.Errorf("%d notices for %d compactions", len(notices), len(comps))
	}
	t.Logf("%d turns, %d compactions; largest lane prompt %d tokens (%d over the %d-token threshold), largest compaction "+
		"request %d tokens; context window %d", turns, len(comps), maxLane, overBudget, budget, maxCompaction, b.window)
}

// TestEdgeWaitsForCompactionRatherThanOverflow: a prompt that would not
// fit the model's context window waits for the compaction in flight, and
// goes out with the summary instead of the events it folded.
func TestEdgeWaitsForCompactionRatherThanOverflow(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	// 4,500 tokens of window; the tools and instructions take about
	// 3,250, each long message about 1,000.
	b := setupMemory(t, memOpts{overTools: 1350, answer: factAnswer, compact: func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return factsDelta(ctx, r)
	}})
	long := func(fact string) string { return fact + " " + strings.Repeat("and the story goes on and on ", 130) }
	b.say(t, long("FACT door_code=4417"))
	// The first turn's end started a compaction, held in the fake server.
	if err := b.edge.Deliver(lane.UserMessage{Text: long("FACT cat=Miso")}); err != nil {
		t.Fatal(err)
	}
	b.waitEvent(t, rpc.EventUserMsg, 2)
	close(release)
	if got := b.out.next(t); got != "Compacted 1 earlier message into my reference summary (rev 1–1)." {
		t.Errorf("notice = %q", got)
	}
	b.out.next(t)
	r := b.lanePrompts()[1]
	if hasMessage(r, "user", "FACT door_code=4417") || !strings.Contains(r.System(), "- door_code: 4417") {
		t.Errorf("the second prompt went out without waiting for the compaction: %q", r.System())
	}
	if n := promptTokens(r); n > b.window {
		t.Errorf("second prompt takes %d tokens, over the context window of %d", n, b.window)
	}
}
