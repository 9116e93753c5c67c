package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/manifest"
	"github.com/choirhq/choir/agent/tool/mcp"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
)

var (
	buildOnce sync.Once
	fakeBin   string
	buildErr  error
)

// fakeServer builds the stdio MCP server of testdata/fakeserver once.
func fakeServer(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fakemcp")
		if err != nil {
			buildErr = err
			return
		}
		fakeBin = filepath.Join(dir, "fakeserver")
		out, err := exec.Command("go", "build", "-o", fakeBin, "./testdata/fakeserver").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build fake server: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return fakeBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeBin != "" {
		os.RemoveAll(filepath.Dir(fakeBin))
	}
	os.Exit(code)
}

// approver answers approvals as choird does: one per request ID, pending
// until the test approves it.
type approver struct {
	mu       sync.Mutex
	status   map[string]rpc.ApprovalStatus
	requests int
}

func (a *approver) RequestApproval(_ context.Context, id string, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	if err := req.Validate(); err != nil {
		return rpc.ApprovalResponse{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.status[id]
	if !ok {
		a.requests++
		st = rpc.ApprovalPending
		a.status[id] = st
	}
	return rpc.ApprovalResponse{ApprovalID: "appr-" + id, Status: st}, nil
}

func (a *approver) approveAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id := range a.status {
		a.status[id] = rpc.ApprovalApproved
	}
}

type bundle struct {
	arb   *arbiter.Arbiter
	log   *commitlog.Log
	ws    string
	appr  *approver
	reg   *tool.Registry
	seq   int
	notes chan string
}

// setup starts the servers of m and an arbiter over the built-ins and
// their tools.
// Every secret given is one of mcp_secrets, and the test servers'
// loopback address is allowlisted.
func setup(t *testing.T, m manifest.MCP, secrets map[string]string) (*bundle, error) {
	t.Helper()
	return setupWith(t, m, mcp.Config{SecretFunc: func(n string) (string, bool) { v, ok := secrets[n]; return v, ok },
		MCPSecrets: slices.Collect(maps.Keys(secrets)), AllowHosts: []string{"127.0.0.1"}})
}

// setupWith is setup with cfg's secrets, mcp_secrets and allowlist.
func setupWith(t *testing.T, m manifest.MCP, cfg mcp.Config) (*bundle, error) {
	t.Helper()
	ws := t.TempDir()
	b := &bundle{ws: ws, appr: &approver{status: map[string]rpc.ApprovalStatus{}}, notes: make(chan string, 4)}
	cfg.Workspace = ws
	cfg.NoticeFunc = func(server string, err error) { b.notes <- server }
	set, layer, _, err := mcp.Start(context.Background(), m, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(set.Close)
	reg, err := tool.New(builtin.Tools(), layer)
	if err != nil {
		return nil, err
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	b.reg, b.log = reg, log
	// These tests are of the MCP client, whose every answer is untrusted
	// input: the policy that holds a lane's next acting call after one
	// (issue 30) is the arbiter's, tested there, and opted out of here.
	b.arb = arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: ws}, Approvals: b.appr,
		Untrusted: func() config.UntrustedInput { return config.UntrustedInput{Mode: config.UntrustedAllow} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.arb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return b, nil
}

// call proposes one call and returns its outcome and the locks it held.
func (b *bundle) call(t *testing.T, name, input string) (arbiter.Outcome, []string) {
	t.Helper()
	b.seq++
	id := fmt.Sprintf("c%d", b.seq)
	out, err := b.arb.Propose(context.Background(), arbiter.Proposal{Owner: lock.Edge, CallID: id, Tool: name, Input: json.RawMessage(input)})
	if err != nil {
		t.Fatal(err)
	}
	head, _ := b.log.Head()
	evs, _ := b.log.Range(1, head)
	for _, ev := range evs {
		if ev.Type == rpc.EventToolCallCommitted {
			c, err := commitlog.Decode[commitlog.ToolCall](ev)
			if err == nil && c.CallID == id {
				return out, c.Locks
			}
		}
	}
	return out, nil
}

func stdio(t *testing.T, env map[string]string) manifest.MCPServer {
	return manifest.MCPServer{Command: fakeServer(t), Env: env}
}

func TestStdioServerToolsRunThroughTheArbiterUnderTheirLocks(t *testing.T) {
	t.Parallel()
	b, err := setup(t, manifest.MCP{Servers: map[string]manifest.MCPServer{"notes": stdio(t, nil)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	def, ok := b.reg.Lookup("notes.write_note")
	if !ok || def.Kind() != tool.KindExternal || def.Runtime().SideEffect != tool.SideEffectWrite {
		t.Fatalf("notes.write_note = %v %+v", ok, def)
	}
	if rd, _ := b.reg.Lookup("notes.read_note"); rd.Runtime().SideEffect != tool.SideEffectRead {
		t.Errorf("a read-only MCP tool has side effect %s", rd.Runtime().SideEffect)
	}
	out, locks := b.call(t, "notes.write_note", `{"path":"n.txt","text":"hello"}`)
	if out.Rejected != nil || out.Result.Status != tool.StatusSuccess || !slices.Equal(locks, []string{"workspace:X"}) {
		t.Fatalf("write_note: %+v, locks %v", out, locks)
	}
	if b2, _ := os.ReadFile(filepath.Join(b.ws, "n.txt")); string(b2) != "hello" {
		t.Fatalf("the stdio server did not run in the workspace: %q", b2)
	}
	out, _ = b.call(t, "notes.read_note", `{"path":"n.txt"}`)
	if !strings.Contains(string(out.Result.Output), "hello") {
		t.Errorf("read_note = %s", out.Result.Output)
	}
	// The arbiter validates against the MCP schema.
	if out, _ := b.call(t, "notes.write_note", `{"path":1}`); out.Rejected == nil || out.Rejected.Kind != "invalid_input" {
		t.Errorf("invalid input = %+v", out)
	}
}

// httpServer is a streamable-HTTP MCP server that wants a bearer token.
func httpServer(t *testing.T, token string) string {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "remote", Version: "1"}, nil)
	var mu sync.Mutex
	charged := 0
	s.AddTool(&sdk.Tool{Name: "charge", Description: "Charge a card.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"cents":{"type":"integer"}},"required":["cents"]}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			mu.Lock()
			charged++
			n := charged
			mu.Unlock()
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("charged %d", n)}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestHTTPServerWithSecretNeedsApproval(t *testing.T) {
	t.Parallel()
	url := httpServer(t, "s3cret")
	m := manifest.MCP{Servers: map[string]manifest.MCPServer{"pay": {URL: url, Secret: "pay_token",
		Tools: map[string]manifest.MCPToolView{"charge": {Approval: true}}}}}
	if _, err := setup(t, m, map[string]string{"pay_token": "wrong"}); err == nil || !strings.Contains(err.Error(), `"pay"`) {
		t.Fatalf("a wrong secret: err = %v, want the server named", err)
	}
	b, err := setup(t, m, map[string]string{"pay_token": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := b.reg.Lookup("pay.charge")
	if rt := def.Runtime(); len(rt.Locks) != 0 || rt.SideEffect != tool.SideEffectExternal || !rt.Approval {
		t.Fatalf("runtime view of pay.charge = %+v", rt)
	}
	out, _ := b.call(t, "pay.charge", `{"cents":100}`)
	if !strings.Contains(string(out.Result.Output), `"pending"`) || strings.Contains(string(out.Result.Output), "charged") {
		t.Fatalf("first call ran without approval: %s", out.Result.Output)
	}
	b.appr.approveAll()
	out, _ = b.call(t, "pay.charge", `{ "cents": 100 }`) // the same input, spaced otherwise
	if !strings.Contains(string(out.Result.Output), "charged 1") {
		t.Fatalf("approved call = %+v", out.Result)
	}
	if b.appr.requests != 1 {
		t.Errorf("%d approval requests, want 1", b.appr.requests)
	}
	// Another input is another approval.
	if out, _ := b.call(t, "pay.charge", `{"cents":999}`); !strings.Contains(string(out.Result.Output), `"pending"`) {
		t.Errorf("a new input ran on the old approval: %s", out.Result.Output)
	}
}

func TestServerThatFailsToStartIsNamed(t *testing.T) {
	t.Parallel()
	bad := manifest.MCPServer{Command: filepath.Join(t.TempDir(), "no-such-server")}
	_, err := setup(t, manifest.MCP{Servers: map[string]manifest.MCPServer{"files": bad}}, nil)
	var se *mcp.StartError
	if !errors.As(err, &se) || se.Server != "files" || !strings.Contains(err.Error(), `"files"`) {
		t.Fatalf("err = %v, want a StartError naming files", err)
	}
	bad.Optional = true
	if _, err := setup(t, manifest.MCP{Servers: map[string]manifest.MCPServer{"files": bad, "notes": stdio(t, nil)}}, nil); err != nil {
		t.Fatalf("an optional server that fails stopped the start: %v", err)
	}
}

func TestInvalidSchemaOrNameClashRefusesStart(t *testing.T) {
	t.Parallel()
	_, err := setup(t, manifest.MCP{Servers: map[string]manifest.MCPServer{"notes": stdio(t, map[string]string{"FAKE_BAD_SCHEMA": "1"})}}, nil)
	if err == nil || !strings.Contains(err.Error(), `"notes"`) || !strings.Contains(err.Error(), `"broken"`) {
		t.Errorf("invalid schema: err = %v, want server notes and tool broken named", err)
	}
	_, err = setup(t, manifest.MCP{Servers: map[string]manifest.MCPServer{"choir": stdio(t, map[string]string{"FAKE_CLASH": "1"})}}, nil)
	if err == nil || !strings.Contains(err.Error(), "mcp:choir/exec") || !strings.Contains(err.Error(), `"choir.exec"`) {
		t.Errorf("name clash: err = %v, want the MCP tool and the built-in named", err)
	}
}

func TestServerDyingMidCallIsRestartedOnceThenUnavailable(t *testing.T) {
	t.Parallel()
	b, err := setup(t, manifest.MCP{Servers: map[string]manifest.MCPServer{"notes": stdio(t, nil)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := b.call(t, "notes.crash", `{}`)
	if out.Result.Status != tool.StatusError || !strings.Contains(string(out.Result.Output), "mcp_server_restarted") {
		t.Fatalf("first death = %+v", out.Result)
	}
	// Restarted: the server answers again.
	if out, _ := b.call(t, "notes.write_note", `{"path":"a","text":"b"}`); out.Result.Status != tool.StatusSuccess {
		t.Fatalf("after the restart = %+v", out.Result)
	}
	out, _ = b.call(t, "notes.crash", `{}`)
	if !strings.Contains(string(out.Result.Output), "mcp_server_unavailable") {
		t.Fatalf("second death = %+v", out.Result)
	}
	if got := <-b.notes; got != "notes" {
		t.Errorf("notice for %q", got)
	}
	if out, _ := b.call(t, "notes.read_note", `{"path":"a"}`); !strings.Contains(string(out.Result.Output), "mcp_server_unavailable") {
		t.Errorf("a tool of the dead server = %+v", out.Result)
	}
	for _, v := range b.reg.LLMViews(tool.Filter{Lane: tool.LaneEdge}) {
		if strings.HasPrefix(v.Name, "notes.") {
			t.Errorf("%s of the dead server is still offered", v.Name)
		}
	}
}

// TestToolTakingAKeyIsKeyed checks issue 31's keyed MCP tools: a tool
// whose schema has idempotency_key is keyed, the model is not shown the
// parameter, and the call's key is given for it, so the same call run
// again with its key (as after a restart) has its effect once, and
// another call has its own.
func TestToolTakingAKeyIsKeyed(t *testing.T) {
	t.Parallel()
	b, err := setup(t, manifest.MCP{Servers: map[string]manifest.MCPServer{"notes": stdio(t, nil)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	def, ok := b.reg.Lookup("notes.append_entry")
	if !ok || def.Idempotency(nil) != tool.IdempotencyKeyed {
		t.Fatalf("notes.append_entry: %v, idempotency %q, want keyed", ok, def.Idempotency(nil))
	}
	if strings.Contains(string(def.LLM().Parameters), "idempotency_key") {
		t.Errorf("the model is shown the key parameter: %s", def.LLM().Parameters)
	}
	if def, _ := b.reg.Lookup("notes.write_note"); def.Idempotency(nil) != tool.IdempotencyUnsafe {
		t.Errorf("a tool without a key parameter is %q, want unsafe", def.Idempotency(nil))
	}
	in := json.RawMessage(`{"path":"log.txt","text":"one","idempotency_key":"the model's own"}`)
	ctx := tool.WithCallKey(context.Background(), "ck-first")
	for range 2 { // the call, then the same call run again with its key
		if res, err := def.Execute(ctx, tool.Env{Workspace: b.ws}, in); err != nil || res.Status != tool.StatusSuccess {
			t.Fatalf("append_entry: %v %+v", err, res)
		}
	}
	other := tool.WithCallKey(context.Background(), "ck-second")
	if _, err := def.Execute(other, tool.Env{Workspace: b.ws}, in); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(b.ws, "log.txt"))
	if string(got) != "ck-first one\nck-second one\n" {
		t.Errorf("log.txt = %q: want one entry per call, under the arbiter's key and not the model's", got)
	}
}

// TestApprovedCallRunsOnceUnderItsApproval: the call the edge lane makes
// once choird pushes an approval (under tool.Approved, with the input
// rebuilt from the approved payload) runs on the MCP server without
// asking again, and once: the model's call of it afterwards does not run.
func TestApprovedCallRunsOnceUnderItsApproval(t *testing.T) {
	t.Parallel()
	url := httpServer(t, "s3cret")
	m := manifest.MCP{Servers: map[string]manifest.MCPServer{"pay": {URL: url, Secret: "pay_token",
		Tools: map[string]manifest.MCPToolView{"charge": {Approval: true}}}}}
	b, err := setup(t, m, map[string]string{"pay_token": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := b.reg.Lookup("pay.charge")
	approved := tool.Approved{ID: "appr-7", Tool: "pay.charge", Payload: json.RawMessage(`{"cents": 250}`)}
	input, err := def.ApprovedInput(approved.Payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := b.arb.Propose(tool.WithApproved(context.Background(), approved),
		arbiter.Proposal{Owner: lock.Edge, CallID: "approved-appr-7", Tool: "pay.charge", Input: input})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.Result.Output), "charged 1") || b.appr.requests != 0 {
		t.Fatalf("approved call = %s, %d approval requests; want it run, nobody asked again", out.Result.Output, b.appr.requests)
	}
	out, err = b.arb.Propose(tool.WithApproved(context.Background(), approved),
		arbiter.Proposal{Owner: lock.Edge, CallID: "approved-appr-7-again", Tool: "pay.charge", Input: input})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.Result.Output), "already_ran") {
		t.Errorf("the same approval again = %s, want already_ran", out.Result.Output)
	}
}
