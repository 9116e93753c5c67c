package core_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc"
)

// coreBench is an edge with core jobs: the edge on one scripted model,
// its jobs on another, a shared lock manager, a workspace and the user's
// side of the conversation.
type coreBench struct {
	// window is the core model's context window, 0 for the model's own.
	window  int64
	edge    *lane.Edge
	jobs    *core.Set
	log     *commitlog.Log
	ws      string
	out     *sink
	edgeSrv *llmtest.Server
	coreSrv *llmtest.Server
	locks   *lock.Manager
	done    chan error
	stop    context.CancelFunc
	// stopLane cuts the lane off, as a crash of the agent would (what it
	// commits afterwards is the test's to ignore).
	stopLane context.CancelFunc
	// runDone is closed when Run has returned.
	runDone chan struct{}
}

// coreOpts shape a coreBench.
type coreOpts struct {
	budgets core.Budgets
	// slowTools adds the test tools of slowToolDir.
	slowTools bool
	// history is a log's events to resume from, with the snapshot's jobs.
	history []rpc.Event
	snaps   []core.Snapshot
	snapRev int64
	// ws is the workspace to use (default: a new one).
	ws string
	// overTools, when set, makes the core model's context window the core
	// lane's tool schemas plus this many tokens (default: the model's
	// window), so a small window keeps the same room whatever tools are
	// built in.
	overTools int64
	// gate, when set, is both lanes' usage gate (a meter).
	gate llm.Gate
	// gatedTools adds test.ping, a tool every call of which needs a
	// person's approval (runtime.approval).
	gatedTools bool
}

// slowWriteScript is test.slow_write: it marks that it started, waits until
// the call named by wait_for has started too (so two calls succeed only if
// they run at the same time), then writes its file.
const slowWriteScript = `in=$(cat)
path=$(printf '%s' "$in" | sed -n 's/.*"path": *"\([^"]*\)".*/\1/p')
other=$(printf '%s' "$in" | sed -n 's/.*"wait_for": *"\([^"]*\)".*/\1/p')
touch "$path.started"
n=0
while [ -n "$other" ] && [ ! -f "$other.started" ]; do
  n=$((n+1)); [ $n -gt 400 ] && { echo '{"status":"error","summary":"the other call never started"}'; exit 0; }
  sleep 0.05
done
printf 'written by %s\n' "$path" > "$path"
echo '{"status":"success","summary":"written"}'
`

func slowToolDir(t testing.TB) string {
	dir := t.TempDir()
	tooltest.AddTool(t, dir, "slow_write", `{
  "llm": {"name": "test.slow_write", "description": "Write a file slowly.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "wait_for": {"type": "string"}},
                         "required": ["path"], "additionalProperties": false}},
  "runtime": {"timeout_ms": 30000, "side_effect": "write", "trust": "own", "version": "1.0",
              "locks": [{"resource": "file:{path}", "mode": "X"}]}
}`, slowWriteScript)
	return dir
}

// gatedToolDir holds test.ping, which writes the file its input names;
// every call of it needs a person's approval.
func gatedToolDir(t testing.TB) string {
	dir := t.TempDir()
	tooltest.AddTool(t, dir, "ping", `{
  "llm": {"name": "test.ping", "description": "Ping: write a file.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                         "required": ["path"], "additionalProperties": false}},
  "runtime": {"timeout_ms": 30000, "side_effect": "write", "trust": "own", "version": "1.0", "approval": true,
              "locks": [{"resource": "file:{path}", "mode": "X"}]}
}`, `path=$(cat | sed -n 's/.*"path": *"\([^"]*\)".*/\1/p')
echo pinged > "$path"
echo '{"status":"success","summary":"pinged"}'
`)
	return dir
}

func setupCores(t testing.TB, o coreOpts) *coreBench {
	t.Helper()
	cfg := builtin.Config{}
	if o.slowTools {
		cfg.GlobalDir = slowToolDir(t)
	}
	if o.gatedTools {
		cfg.GlobalDir = gatedToolDir(t)
	}
	reg, err := builtin.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ws := o.ws
	if ws == "" {
		ws = t.TempDir()
	}
	var log *commitlog.Log
	var app *commitlog.Appender
	if len(o.history) > 0 {
		last := o.history[len(o.history)-1]
		log, app, err = commitlog.NewWithHistory(last.Rev, last.Hash, o.history)
	} else {
		log, app, err = commitlog.New(0, rpc.Genesis)
	}
	if err != nil {
		t.Fatal(err)
	}
	b := &coreBench{log: log, ws: ws, out: newSink(), locks: lock.New(), done: make(chan error, 1),
		runDone: make(chan struct{}), edgeSrv: llmtest.NewServer(t), coreSrv: llmtest.NewServer(t)}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: ws}, Locks: b.locks,
		EdgeRestricted: func() bool { return b.edge.CoresRunning() }})
	coreModel := b.coreSrv.Model
	if o.overTools > 0 {
		var specs []llm.ToolSpec
		for _, v := range reg.LLMViews(tool.Filter{Lane: tool.LaneCore}) {
			specs = append(specs, llm.ToolSpec{Name: v.Name, Description: v.Description, Parameters: v.Parameters})
		}
		window := workmem.EstimateTools(specs) + o.overTools
		b.window = window
		coreModel = func() llm.ModelSettings {
			m := b.coreSrv.Model()
			m.ContextWindow = window
			return m
		}
	}
	jobsCfg := core.Config{Arbiter: arb, Log: log, Tools: reg, LLM: &llm.Client{Gate: o.gate}, Model: coreModel,
		Soul: "Be thorough and exact.", Out: b.out, Budgets: o.budgets, RateLimitDelay: 10 * time.Millisecond}
	b.edge = lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, LLM: &llm.Client{Gate: o.gate},
		Model: b.edgeSrv.Model, Out: b.out, RateLimitDelay: 10 * time.Millisecond,
		Budgets:  lane.Budgets{TotalSessionTokens: o.budgets.TotalSessionTokens, MaxToolCallsPerSession: o.budgets.MaxToolCallsPerSession},
		Identity: lane.Identity{Instructions: "You are the edge lane.", User: "The user is Ada.", Soul: "Be brief."},
		Jobs: func(e *lane.Edge) lane.Jobs {
			b.jobs = core.NewSet(e, jobsCfg)
			return b.jobs
		}})
	b.jobs.Restore(o.snapRev, o.snaps)
	ctx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	arbDone := make(chan struct{})
	go func() { arb.Run(ctx); close(arbDone) }()
	// The lane runs on a context of its own, as in the agent: a test may
	// end it (cut off) while the arbiter still commits.
	laneCtx, stopLane := context.WithCancel(context.Background())
	b.stopLane = stopLane
	go func() { b.done <- b.edge.Run(laneCtx); close(b.runDone) }()
	t.Cleanup(func() { stopLane(); <-b.runDone; cancel(); <-arbDone })
	return b
}

// events returns the log's events, checking the chain.
func (b *coreBench) events(t testing.TB) []rpc.Event {
	t.Helper()
	head, _ := b.log.Head()
	evs, err := b.log.Range(b.log.Oldest(), head)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) > 0 {
		if _, err := commitlog.VerifyChain(evs[0].Rev-1, evs[0].HashPrev, evs); err != nil {
			t.Fatal(err)
		}
	}
	return evs
}

// find returns the events of type typ on lane ("" for any lane).
func (b *coreBench) find(t testing.TB, typ rpc.EventType, lane string) []rpc.Event {
	var out []rpc.Event
	for _, ev := range b.events(t) {
		if ev.Type == typ && (lane == "" || ev.Lane == lane) {
			out = append(out, ev)
		}
	}
	return out
}

// waitMessage waits until the user has been sent a message containing sub
// and returns its index among the messages sent.
func (b *coreBench) waitMessage(t testing.TB, sub string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b.out.mu.Lock()
		for i, m := range b.out.msgs {
			if strings.Contains(m, sub) {
				b.out.mu.Unlock()
				return i
			}
		}
		msgs := slices.Clone(b.out.msgs)
		b.out.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no message containing %q within 30 s; sent: %q", sub, msgs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// messages returns the messages sent so far, with their IDs.
func (b *coreBench) messages() (texts, ids []string) {
	b.out.mu.Lock()
	defer b.out.mu.Unlock()
	return slices.Clone(b.out.msgs), slices.Clone(b.out.ids)
}

// waitFor polls cond for up to 30 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// spawnCall is the edge's call of choir.core.spawn.
func spawnCall(id, name, task string, extra ...string) llmtest.Call {
	args := fmt.Sprintf(`{"job_name":%q,"task_spec":%q`, name, task)
	for _, e := range extra {
		args += "," + e
	}
	return llmtest.Call{ID: id, Name: "choir.core.spawn", Arguments: args + "}"}
}

// jobOf is the job a core request is for, from its CoreJobStart.
func jobOf(r *llmtest.Request) string {
	for _, m := range r.Messages {
		if rest, ok := strings.CutPrefix(m.Content, "Your task, from the edge lane (CoreJobStart):\n"); ok {
			var s core.JobStart
			if json.Unmarshal([]byte(rest), &s) == nil {
				return s.JobName
			}
		}
	}
	return ""
}

// steps is how many model steps a core request follows.
func steps(r *llmtest.Request) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// scriptedJobs answers core requests by job: each job's script is played
// step by step (the request's step count picks the step), so jobs running
// at once get their own conversations.
type scriptedJobs struct {
	mu      sync.Mutex
	scripts map[string][]llmtest.Step
	seen    map[string]int
}

func (s *scriptedJobs) respond(_ context.Context, r *llmtest.Request) llmtest.Step {
	job, n := jobOf(r), steps(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[job]++
	script := s.scripts[job]
	if n >= len(script) {
		return llmtest.Text(fmt.Sprintf("(no step %d scripted for %s)", n+1, job))
	}
	return script[n]
}

func newScriptedJobs(scripts map[string][]llmtest.Step) *scriptedJobs {
	return &scriptedJobs{scripts: scripts, seen: map[string]int{}}
}

// stoppedOf decodes a core_stopped event.
type stoppedPayload struct {
	JobName     string          `json:"job_name"`
	JobID       string          `json:"job_id"`
	Outcome     string          `json:"outcome"`
	State       string          `json:"state"`
	FinalResult json.RawMessage `json:"final_result"`
	Partial     string          `json:"partial_result"`
	Error       *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
		Budget  string `json:"budget"`
	} `json:"error"`
	Used core.Usage `json:"budgets_used"`
}

func stoppedOf(t testing.TB, ev rpc.Event) stoppedPayload {
	t.Helper()
	var p stoppedPayload
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitStopped waits for the job's core_stopped event.
func (b *coreBench) waitStopped(t testing.TB, job string) stoppedPayload {
	t.Helper()
	var ev rpc.Event
	waitFor(t, job+"'s core_stopped", func() bool {
		evs := b.find(t, rpc.EventCoreStopped, "core:"+job)
		if len(evs) == 0 {
			return false
		}
		ev = evs[len(evs)-1]
		return true
	})
	return stoppedOf(t, ev)
}

// checkReports fails the test unless every core_stopped in the log has
// its report sent to the user, under the ID derived from the event, and
// committed on the edge lane: the mandatory report of spec 7.1.
func (b *coreBench) checkReports(t testing.TB) {
	t.Helper()
	for _, ev := range b.find(t, rpc.EventCoreStopped, "") {
		want := lane.MessageID("core_report", ev.Hash)
		waitFor(t, "the report of "+ev.Lane, func() bool {
			_, ids := b.messages()
			return slices.Contains(ids, want)
		})
		found := false
		for _, rep := range b.find(t, rpc.EventModelOutput, "edge") {
			var p struct {
				Source  string `json:"source"`
				CoreRev int64  `json:"core_rev"`
			}
			json.Unmarshal(rep.Payload, &p)
			found = found || (p.Source == "core_report" && p.CoreRev == ev.Rev)
		}
		if !found {
			t.Errorf("the report of %s (rev %d) was sent but not committed on the edge lane", ev.Lane, ev.Rev)
		}
	}
}

// sink is the user's side of the conversation.
type sink struct {
	mu   sync.Mutex
	msgs []string
	ids  []string
	got  chan string
}

func newSink() *sink { return &sink{got: make(chan string, 4096)} }

func (s *sink) Send(_ context.Context, m lane.OutboundMessage) error {
	s.mu.Lock()
	s.msgs = append(s.msgs, m.Text)
	s.ids = append(s.ids, m.ID)
	s.mu.Unlock()
	select {
	case s.got <- m.Text:
	default: // nobody reads: the test looks at msgs
	}
	return nil
}

func lastToolResult(t testing.TB, r *llmtest.Request) string {
	t.Helper()
	m := r.Last()
	if m.Role != "tool" {
		t.Fatalf("last message is %s, want a tool result", m.Role)
	}
	return m.Content
}
