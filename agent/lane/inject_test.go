package lane_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	"github.com/choirhq/choir/agent/tool/offer"
	"github.com/choirhq/choir/rpc"
)

// setupMode is setup with the tools offered in a forced mode.
func setupMode(t *testing.T, mode offer.Mode, steps ...llmtest.Step) *bundle {
	t.Helper()
	srv := llmtest.NewServer(t, steps...)
	ws := t.TempDir()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	skills, err := skill.Load(skill.Config{KnownTool: reg.Has})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: ws},
		Approvals: &approver{by: map[string]string{}}})
	b := &bundle{log: log, ws: ws, out: newSink(), srv: srv, done: make(chan error, 1)}
	b.edge = lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, Skills: skills, LLM: &llm.Client{},
		Model: srv.Model, Out: b.out, Budgets: lane.Budgets{}, RateLimitDelay: 10 * time.Millisecond,
		Injector: offer.NewInjector(reg, offer.InjectorConfig{Mode: mode}),
		Identity: lane.Identity{Instructions: "You are the edge lane."}})
	ctx, cancel := context.WithCancel(context.Background())
	arbDone := make(chan struct{})
	go func() { arb.Run(ctx); close(arbDone) }()
	go func() { b.done <- b.edge.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-b.done; <-arbDone })
	return b
}

// llmCalls returns the llm_call_committed payloads of the log.
func (b *bundle) llmCalls(t *testing.T) []commitlog.LLMCall {
	t.Helper()
	head, _ := b.log.Head()
	evs, err := b.log.Range(1, head)
	if err != nil {
		t.Fatal(err)
	}
	var out []commitlog.LLMCall
	for _, ev := range evs {
		if ev.Type == rpc.EventLLMCallCommitted {
			var c commitlog.LLMCall
			if err := json.Unmarshal(ev.Payload, &c); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
	}
	return out
}

func params(t testing.TB, r *llmtest.Request, name string) string {
	t.Helper()
	tl, ok := r.Tool(name)
	if !ok {
		t.Fatalf("tool %s not offered; tools = %v", name, r.ToolNames())
	}
	return string(tl.Parameters)
}

func TestInjectDirectSendsFullSchemasAndRecordsTokens(t *testing.T) {
	t.Parallel()
	b := setupMode(t, offer.ModeAuto,
		llmtest.Text("hi").Expect(func(t testing.TB, r *llmtest.Request) {
			if p := params(t, r, "choir.fs.write"); !strings.Contains(p, `"content"`) {
				t.Errorf("direct mode sent choir.fs.write without its schema: %s", p)
			}
		}))
	b.edge.Deliver(lane.UserMessage{Text: "hello"})
	b.out.next(t)
	calls := b.llmCalls(t)
	if len(calls) != 1 || calls[0].ToolMode != "direct" || calls[0].ToolSchemaTokens <= 0 {
		t.Fatalf("llm calls = %+v, want one in direct mode with its tool-schema tokens", calls)
	}
}

func TestInjectCompactReturnsSchemaWithTheError(t *testing.T) {
	t.Parallel()
	b := setupMode(t, offer.ModeCompact,
		// The model calls a tool whose schema it has not seen, wrongly.
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"file":"a.txt","text":"x"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if p := params(t, r, "choir.fs.write"); p != `{"type":"object"}` {
					t.Errorf("compact mode sent schema %s", p)
				}
				if tl, _ := r.Tool("choir.fs.write"); strings.Contains(tl.Description, "\n") || len(tl.Description) > 123 {
					t.Errorf("compact description is not one line: %q", tl.Description)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "2", Name: "choir.fs.write", Arguments: `{"path":"a.txt","content":"x"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				c := lastToolResult(t, r)
				if !strings.Contains(c, `"invalid_input"`) || !strings.Contains(c, `"schema"`) || !strings.Contains(c, `"content"`) {
					t.Errorf("rejection lacks the schema: %s", c)
				}
				if p := params(t, r, "choir.fs.write"); !strings.Contains(p, `"content"`) {
					t.Errorf("after the error the schema is not offered: %s", p)
				}
			}),
		llmtest.Text("written").Expect(func(t testing.TB, r *llmtest.Request) {
			if c := lastToolResult(t, r); !strings.Contains(c, `"status":"success"`) {
				t.Errorf("second call = %s", c)
			}
		}))
	b.edge.Deliver(lane.UserMessage{Text: "write a"})
	if got := b.out.next(t); got != "written" {
		t.Fatalf("answer = %q", got)
	}
	if data, err := os.ReadFile(filepath.Join(b.ws, "a.txt")); err != nil || string(data) != "x" {
		t.Fatalf("a.txt = %q, %v", data, err)
	}
	for _, c := range b.llmCalls(t) {
		if c.ToolMode != "compact" {
			t.Errorf("llm call mode = %q", c.ToolMode)
		}
	}
}

func TestInjectDiscoverySearchLoadCall(t *testing.T) {
	t.Parallel()
	discovery := []string{offer.NameToolsCategories, offer.NameToolsDescribe, offer.NameToolsLoad, offer.NameToolsSearch}
	b := setupMode(t, offer.ModeDiscovery,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: offer.NameToolsSearch, Arguments: `{"query":"show the lines of a text file"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				for _, n := range discovery {
					if _, ok := r.Tool(n); !ok {
						t.Errorf("discovery tool %s not offered: %v", n, r.ToolNames())
					}
				}
				if _, ok := r.Tool("choir.fs.read"); ok {
					t.Errorf("discovery mode offered choir.fs.read before it was loaded")
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "2", Name: offer.NameToolsLoad, Arguments: `{"category":"choir.fs"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, `"choir.fs.read"`) {
					t.Errorf("search result = %s", c)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "3", Name: "choir.fs.read", Arguments: `{"path":"notes.txt"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if p := params(t, r, "choir.fs.read"); !strings.Contains(p, `"path"`) {
					t.Errorf("loaded schema = %s", p)
				}
				if _, ok := r.Tool("choir.fs.write"); !ok {
					t.Errorf("load of choir.fs did not offer choir.fs.write: %v", r.ToolNames())
				}
			}),
		llmtest.Text("read").Expect(func(t testing.TB, r *llmtest.Request) {
			if c := lastToolResult(t, r); !strings.Contains(c, "secret plans") {
				t.Errorf("read result = %s", c)
			}
		}),
		// The next turn starts again from the discovery tools alone.
		llmtest.Text("again").Expect(func(t testing.TB, r *llmtest.Request) {
			if _, ok := r.Tool("choir.fs.read"); ok {
				t.Errorf("a loaded schema outlived its turn: %v", r.ToolNames())
			}
		}))
	if err := os.WriteFile(filepath.Join(b.ws, "notes.txt"), []byte("secret plans\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.edge.Deliver(lane.UserMessage{Text: "what is in notes.txt?"})
	if got := b.out.next(t); got != "read" {
		t.Fatalf("answer = %q", got)
	}
	b.edge.Deliver(lane.UserMessage{Text: "and now?"})
	b.out.next(t)
	calls := b.llmCalls(t)
	if calls[0].ToolMode != "discovery" || calls[2].ToolSchemaTokens <= calls[0].ToolSchemaTokens {
		t.Errorf("llm calls = %+v: want discovery, and more schema tokens once a category is loaded", calls)
	}
}

func TestInjectDiscoveryKeepsSkillAllowlist(t *testing.T) {
	t.Parallel()
	b := setupMode(t, offer.ModeDiscovery,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.skill.start", Arguments: `{"name":"skill-builder"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "2", Name: offer.NameToolsSearch, Arguments: `{"query":"write content to a file"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "3", Name: offer.NameToolsLoad, Arguments: `{"category":"choir.fs"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); strings.Contains(c, "choir.fs.write") {
					t.Errorf("search found a tool the skill state does not allow: %s", c)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "4", Name: "choir.fs.write", Arguments: `{"path":"x.txt","content":"no"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				c := lastToolResult(t, r)
				if !strings.Contains(c, `"choir.fs.read"`) || strings.Contains(c, "choir.fs.write") {
					t.Errorf("load = %s, want choir.fs.read alone", c)
				}
				if _, ok := r.Tool("choir.fs.write"); ok {
					t.Errorf("choir.fs.write offered under a state that does not allow it")
				}
			}),
		llmtest.Text("refused").Expect(func(t testing.TB, r *llmtest.Request) {
			if c := lastToolResult(t, r); !strings.Contains(c, `"tool_not_allowed"`) {
				t.Errorf("direct call of a disallowed tool = %s", c)
			}
		}))
	b.edge.Deliver(lane.UserMessage{Text: "design a skill"})
	b.out.next(t)
	if _, err := os.Stat(filepath.Join(b.ws, "x.txt")); !os.IsNotExist(err) {
		t.Fatalf("x.txt exists: the refused call ran (%v)", err)
	}
}

func TestInjectUnknownToolGetsNearestNames(t *testing.T) {
	t.Parallel()
	b := setupMode(t, offer.ModeDiscovery,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.reed", Arguments: `{"path":"a"}`}),
		llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
			c := lastToolResult(t, r)
			var m struct {
				Nearest []string `json:"nearest_tools"`
			}
			if err := json.Unmarshal([]byte(c), &m); err != nil || !slices.Contains(m.Nearest, "choir.fs.read") {
				t.Errorf("unknown tool answer = %s, want choir.fs.read among nearest_tools", c)
			}
		}))
	b.edge.Deliver(lane.UserMessage{Text: "read a"})
	b.out.next(t)
}
