package lane_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/manifest"
	"github.com/choirhq/choir/agent/tool/mcp"
	"github.com/choirhq/choir/agent/tool/offer"
	"github.com/choirhq/choir/rpc"
)

// scaleWindow is the context window of the scale targets: 32K tokens.
const scaleWindow = 32_768

// manyTools writes manifests of n generated external tools, in realistic
// sizes (a two-sentence description, four typed parameters), spread over
// categories, and returns the directory.
func manyTools(t testing.TB, n int) string {
	t.Helper()
	dir := t.TempDir()
	services := []string{"github", "calendar", "mail", "crm", "billing", "notes", "tickets", "drive", "chat", "metrics", "deploy", "mcpfake"}
	verbs := []string{"list", "get", "create", "update", "delete", "search", "archive", "export", "import", "sync", "tag", "share"}
	for i := range n {
		svc, verb := services[i%len(services)], verbs[(i/len(services))%len(verbs)]
		name := fmt.Sprintf("%s.item%d.%s", svc, i/len(services)/len(verbs), verb)
		spec := tool.Spec{
			LLM: tool.LLMView{Name: name,
				Description: fmt.Sprintf("%s one or more %s records of the user's %s account, returning ids, titles and timestamps. "+
					"Use the filters to narrow the result and page through long lists with cursor.", verb, svc, svc),
				Parameters: json.RawMessage(`{"type":"object","properties":{` +
					`"id":{"type":"string","description":"Record id, as returned by list or search."},` +
					`"query":{"type":"string","description":"Free-text filter on title and body."},` +
					`"limit":{"type":"integer","minimum":1,"maximum":100,"description":"At most this many records."},` +
					`"cursor":{"type":"string","description":"Opaque cursor from the previous page."}},` +
					`"additionalProperties":false}`)},
			Runtime: tool.Runtime{TimeoutMS: 10_000, SideEffect: tool.SideEffectRead, Trust: tool.TrustOwn, Version: "1.0", ExecPath: "/bin/true"},
		}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// scaleRegistry holds 150 tools: the built-ins, the tools of a stdio MCP
// server (the mcp package's fake, started in ws), and generated externals.
func scaleRegistry(t testing.TB, ws string) *tool.Registry {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fakemcp")
	if out, err := exec.Command("go", "build", "-o", bin, "../tool/mcp/testdata/fakeserver").CombinedOutput(); err != nil {
		t.Fatalf("build the fake MCP server: %v: %s", err, out)
	}
	set, layer, _, err := mcp.Start(context.Background(), manifest.MCP{Servers: map[string]manifest.MCPServer{"notes": {Command: bin}}},
		mcp.Config{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	base, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	nb := len(base.Names()) + len(layer.Defs)
	reg, err := builtin.Build(builtin.Config{AgentDir: manyTools(t, 150-nb), Layers: []tool.Layer{layer}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(reg.Names()); n != 150 {
		t.Fatalf("registry holds %d tools, want 150", n)
	}
	return reg
}

// runTask runs the scripted three-tool task in mode and returns the model
// calls it took and the most schema tokens one of them carried.
func runTask(t *testing.T, reg *tool.Registry, ws string, mode offer.Mode, steps ...llmtest.Step) (calls int, maxTokens int64) {
	t.Helper()
	srv := llmtest.NewServer(t, steps...)
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: ws}})
	// Direct mode is the baseline of the call count only: 150 schemas fill
	// most of a 32K window, so it runs in a window of twice that, where no
	// compaction interleaves its own call.
	window := int64(scaleWindow)
	if mode == offer.ModeDirect {
		window *= 2
	}
	model := func() llm.ModelSettings { m := srv.Model(); m.ContextWindow = window; return m }
	b := &bundle{log: log, ws: ws, out: newSink(), srv: srv, done: make(chan error, 1)}
	b.edge = lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, LLM: &llm.Client{}, Model: model,
		Out: b.out, RateLimitDelay: 10 * time.Millisecond, Injector: offer.NewInjector(reg, offer.InjectorConfig{Mode: mode}),
		Identity: lane.Identity{Instructions: "You are the edge lane."}})
	ctx, cancel := context.WithCancel(context.Background())
	arbDone := make(chan struct{})
	go func() { arb.Run(ctx); close(arbDone) }()
	go func() { b.done <- b.edge.Run(ctx) }()
	defer func() { cancel(); <-b.done; <-arbDone }()
	b.edge.Deliver(lane.UserMessage{Text: "note it, read it back, find it"})
	if got := b.out.next(t); got != "done" {
		t.Fatalf("%s: answer = %q", mode, got)
	}
	for _, c := range b.llmCalls(t) {
		calls++
		maxTokens = max(maxTokens, c.ToolSchemaTokens)
	}
	return calls, maxTokens
}

// The three tools of the task, one of them the MCP server's, called at
// once once the model knows them.
var taskCalls = []llmtest.Call{
	{ID: "w", Name: "choir.fs.write", Arguments: `{"path":"n.txt","content":"alpha\n"}`},
	{ID: "r", Name: "notes.read_note", Arguments: `{"path":"n.txt"}`},
	{ID: "s", Name: "choir.fs.search", Arguments: `{"pattern":"alpha"}`},
}

func TestToolsAtScale(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	reg := scaleRegistry(t, ws)
	plan := offer.NewInjector(reg, offer.InjectorConfig{}).Plan(tool.LaneEdge, scaleWindow)
	budget := int64(scaleWindow * offer.SchemaBudgetPercent / 100)
	t.Logf("150 tools, 32K window: direct %d tokens, compact %d tokens, budget %d: mode %s",
		plan.DirectTokens, plan.CompactTokens, budget, plan.Mode)
	if plan.Mode == offer.ModeDirect {
		t.Fatalf("150 tools chose direct mode at %d tokens", plan.DirectTokens)
	}

	directCalls, directMax := runTask(t, reg, ws, offer.ModeDirect,
		llmtest.ToolCalls(taskCalls...), llmtest.Text("done"))
	autoCalls, autoMax := runTask(t, reg, ws, offer.ModeAuto,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: offer.NameToolsLoad, Arguments: `{"category":"choir.fs"}`},
			llmtest.Call{ID: "2", Name: offer.NameToolsSearch, Arguments: `{"query":"read a note file"}`}),
		llmtest.ToolCalls(taskCalls...).Expect(func(t testing.TB, r *llmtest.Request) {
			if _, ok := r.Tool("choir.fs.search"); !ok {
				t.Errorf("choir.fs not loaded: %v", r.ToolNames())
			}
			if c := lastToolResult(t, r); !strings.Contains(c, "notes.read_note") {
				t.Errorf("search did not find the MCP tool: %s", c)
			}
		}),
		llmtest.Text("done").Expect(func(t testing.TB, r *llmtest.Request) {
			for _, m := range r.Messages[len(r.Messages)-3:] {
				if m.Role != "tool" || !json.Valid([]byte(m.Content)) || !strings.Contains(m.Content, `"success"`) {
					t.Errorf("task call answer = %+v", m)
				}
			}
		}))
	t.Logf("direct: %d model calls, %d schema tokens per call; %s: %d model calls, at most %d schema tokens per call",
		directCalls, directMax, plan.Mode, autoCalls, autoMax)
	if autoMax > budget {
		t.Errorf("%s mode sent %d schema tokens in one call, over 20%% of 32K (%d)", plan.Mode, autoMax, budget)
	}
	if autoCalls > directCalls+2 {
		t.Errorf("%s mode took %d model calls, direct %d: more than 2 extra", plan.Mode, autoCalls, directCalls)
	}
}

// BenchmarkOfferTools is what building one call's tools parameter costs
// with 150 tools in each mode (auto: the one the injector picks for the
// 32K window), against the floor of listing the LLM views (what direct
// mode did before modes existed), and the schema tokens each sends.
func BenchmarkOfferTools(b *testing.B) {
	reg := scaleRegistry(b, b.TempDir())
	f := tool.Filter{Lane: tool.LaneEdge}
	b.Run("Floor", func(b *testing.B) {
		for b.Loop() {
			_ = reg.LLMViews(f)
		}
	})
	for _, mode := range []offer.Mode{offer.ModeAuto, offer.ModeDirect, offer.ModeCompact, offer.ModeDiscovery} {
		b.Run(cmp.Or(string(mode), "auto"), func(b *testing.B) {
			o := offer.NewInjector(reg, offer.InjectorConfig{Mode: mode}).Offer(tool.LaneEdge, scaleWindow)
			o.Call(context.Background(), f, offer.NameToolsLoad, json.RawMessage(`{"category":"choir.fs"}`))
			for b.Loop() {
				_ = o.Tools(f)
			}
			b.ReportMetric(float64(offer.EstimateTokens(o.Tools(f))), "schema_tokens")
		})
	}
}
