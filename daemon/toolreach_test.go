package daemon_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// forwarder accepts on one address and forwards each connection to a
// target set later: the model's endpoint must be in config.json before
// choird starts, the scripted model server only once the session is known.
type forwarder struct {
	ln     net.Listener
	target atomic.Pointer[string]
	wg     sync.WaitGroup
}

func newForwarder(t *testing.T, addr string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				tp := f.target.Load()
				if tp == nil {
					return
				}
				u, err := net.Dial("tcp", *tp)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, u)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

// reachSetup says how one runtime runs the probe.
type reachSetup struct {
	opts daemon.Options
	// listen is where the model's forwarder listens: an address the agent
	// can reach.
	listen string
	// socket is choird's agent socket as the agent sees it.
	socket func(home string) string
	// edit, when set, changes the configuration and secrets further.
	edit func(c *config.Config, s config.Secrets)
	// during, when set, runs once the tool results reached the model,
	// while the agent still runs.
	during func(t *testing.T, run toolRun)
}

// runReachProbe starts "assistant" under setup's runtime, has the model
// call choir.exec on reachprobe, and returns the probe's output as the
// model received it, the session and its lease token's hash.
func runReachProbe(t *testing.T, setup reachSetup, probe string) (string, string, []byte) {
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	cmd := `./reachprobe -socket ` + setup.socket("$CHOIR_HOME") + ` -session $CHOIR_SESSION -cred "$HOME/.choir/cred.sock" -git-host git.example.com 2>&1`
	args, _ := json.Marshal(map[string]any{"command": cmd, "timeout_ms": 60000})
	run := runToolCalls(t, setup, map[string][]byte{"reachprobe": bin},
		llmtest.Call{ID: "1", Name: "choir.exec", Arguments: string(args)})
	return choirdtest.ProbeReport(t, run.results["1"], run.ws), run.sessionID, run.hash
}

// toolRun is what runToolCalls saw: the tool results the model received,
// by call ID, and the session's workspace, id and lease token hash.
type toolRun struct {
	results   map[string]string
	ws        string
	sessionID string
	hash      []byte
	// pool is choird's database, open until the test ends.
	pool *pgxpool.Pool
	// model is the model fake, which saw every call.
	model *llmtest.Server
}

// runToolCalls starts "assistant" under setup's runtime with files in
// its workspace, has the model make calls in one step, and returns the
// results. In a choir.exec command's arguments, $CHOIR_HOME and
// $CHOIR_SESSION stand for choird's home and the session's id.
func runToolCalls(t *testing.T, setup reachSetup, files map[string][]byte, calls ...llmtest.Call) toolRun {
	fwd := newForwarder(t, setup.listen)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{ModelEndpoint: "http://" + fwd.ln.Addr().String() + "/v1", Daemon: setup.opts,
		Edit: func(c *config.Config, s config.Secrets) {
			// A fast heartbeat, but no crash verdict on a loaded machine:
			// these tests are about what tools reach, not crash detection.
			choirdtest.FastHeartbeat(c, s)
			c.CrashDetectionThresholdMS = 30_000
			if setup.edit != nil {
				setup.edit(c, s)
			}
		}})
	defer d.StopAgents(t)
	home, ws := d.Home, d.Workspace("main")
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(ws, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errs := choirctltest.Run(t, home, "agent", "start", "assistant", "--dm", "console"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	st := d.WaitState(t, "assistant", admin.AgentActive)
	run := toolRun{results: map[string]string{}, ws: ws, sessionID: st.SessionID, pool: d.Pool()}
	if err := d.Pool().QueryRow(context.Background(), "SELECT lease_token_hash FROM choir_control.sessions WHERE session_id = $1",
		st.SessionID).Scan(&run.hash); err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		calls[i].Arguments = strings.NewReplacer("$CHOIR_HOME", home, "$CHOIR_SESSION", st.SessionID).Replace(c.Arguments)
	}
	var mu sync.Mutex
	var done atomic.Bool
	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(calls...),
		llmtest.Text("done").Expect(func(t testing.TB, req *llmtest.Request) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range req.Messages {
				if m.Role == "tool" {
					run.results[m.ToolCallID] = m.Content
				}
			}
			done.Store(true)
		}),
		llmtest.Text("The agent ran its tools."), // the session summary at the stop
	)
	addr := strings.TrimSuffix(strings.TrimPrefix(srv.BaseURL(), "http://"), "/v1")
	fwd.target.Store(&addr)
	if _, err := d.Push(st.SessionID, choirdtest.UserMessage("go")); err != nil {
		t.Fatal(err)
	}
	choirdtest.WaitFor(t, "the tool results at the model", d.Logs, done.Load)
	mu.Lock()
	defer mu.Unlock()
	run.model = srv
	if setup.during != nil {
		setup.during(t, run)
	}
	return run
}

// checkNothingObtained reads the probe's report: no secret, no lease
// token, no readable agent memory, no answer from choird or from the
// credential socket.
func checkNothingObtained(t *testing.T, report string, hash []byte) {
	t.Helper()
	t.Logf("probe report:\n%s", report)
	for _, s := range []string{choirdtest.Canary, "ghp-test", "[secret:"} {
		if strings.Contains(report, s) {
			t.Errorf("the probe obtained %q", s)
		}
	}
	// The token (43 base64url characters) is nowhere: look for it at every
	// place in every run of its alphabet, "NAME=<token>" and runs glued to
	// other text included.
	found := false
	for _, w := range regexp.MustCompile(`[A-Za-z0-9_-]{43,}`).FindAllString(report, -1) {
		for i := 0; i+43 <= len(w) && !found; i++ {
			found = rpc.LeaseTokenMatches(w[i:i+43], hash)
		}
	}
	if found {
		t.Errorf("the probe obtained the lease token")
	}
	if strings.Contains(report, "CHOIR_LEASE_TOKEN=") {
		t.Errorf("a lease token variable is in some environment")
	}
	// The probe reads the memory of its ancestors: the agent that ran it
	// is the choir-agent among them. Only its environment counts here: an
	// agent of another test, started a moment ago as the same user, may
	// be caught before it made itself undumpable, and the process runtime
	// does not isolate agents from each other (the docker runtime does).
	agentMem := regexp.MustCompile(`(?m)^mem (\d+) \(choir-agent\): (.*)$`).FindAllStringSubmatch(report, -1)
	if len(agentMem) == 0 {
		t.Errorf("the probe did not find the agent among its ancestors")
	}
	own := map[string]bool{}
	for _, m := range agentMem {
		own[m[1]] = true
		if !strings.HasPrefix(m[2], "denied") {
			t.Errorf("the agent's memory is readable: %s", m[0])
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^environ (\d+) \(choir-agent\): (.*)$`).FindAllStringSubmatch(report, -1) {
		if own[m[1]] && !strings.HasPrefix(m[2], "denied") {
			t.Errorf("the agent's environment is readable: %s", m[0])
		}
	}
	if !strings.Contains(report, "socket: GET_SECRETS refused") || strings.Contains(report, "GET_SECRETS GOT") {
		t.Errorf("GET_SECRETS without the token was not refused")
	}
	checkNoGitToken(t, report)
}

// checkNoGitToken reads the probe's git attempts: git credential fill,
// every configured credential helper run by hand, the credential socket
// and choird's git route give nothing that holds the git token, in plain
// or in base64; and the agent did point git at its identity's route (else
// the attempts mean nothing).
func checkNoGitToken(t *testing.T, report string) {
	t.Helper()
	const token = "ghp-test"
	for _, m := range regexp.MustCompile(`(?m)^b64 (\S*)$`).FindAllStringSubmatch(report, -1) {
		b, err := base64.StdEncoding.DecodeString(m[1])
		if err != nil {
			t.Errorf("undecodable probe line %q: %v", m[0], err)
		}
		if strings.Contains(string(b), token) {
			t.Errorf("the probe obtained the git token: %q", b)
		}
	}
	if !regexp.MustCompile(`gitconfig: ".*http://127\.0\.0\.1:\d+/svc/git/dev/git\.example\.com/`).MatchString(report) {
		t.Errorf("the agent did not point git at choird's git route for git.example.com: did it set up its git identity?")
	}
	if strings.Contains(report, `cred bare: got "token=`) || regexp.MustCompile(`cred evil: got "[^"]`).MatchString(report) {
		t.Errorf("the credential socket answered")
	}
	if !regexp.MustCompile(`proxy api/user: 404 .*not a git smart-HTTP request`).MatchString(report) {
		t.Errorf("choird's git route forwarded a request that is not git's")
	}
}

// TestToolReachProcessRuntime runs reachprobe through choir.exec in the
// real agent under the process runtime: /proc/*/environ, the agent's
// memory, choird's, choird's socket and the git credential socket
// yield nothing. Under the process runtime the agent runs as choird's
// user, root here: what closes its /proc entries to the tool is that the
// agent is not dumpable and that no program it executes holds
// CAP_SYS_PTRACE, CAP_SYS_ADMIN or CAP_PERFMON.
func TestToolReachProcessRuntime(t *testing.T) {
	t.Parallel()
	testToolReachProcess(t, choirdtest.Binary(t, "cmd/choir-agent"))
}

// TestToolReachProcessRuntimeCgo is the same with an agent built with
// cgo, which cannot change every thread's capabilities at once and
// executes itself again instead.
func TestToolReachProcessRuntimeCgo(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "choir-agent")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/choirhq/choir/cmd/choir-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build choir-agent with cgo: %v\n%s", err, out)
	}
	testToolReachProcess(t, bin)
}

func testToolReachProcess(t *testing.T, agentBin string) {
	probe := runtimetest.BuildStatic(t, "github.com/choirhq/choir/daemon/runtime/runtimetest/reachprobe")
	out, _, hash := runReachProbe(t, reachSetup{
		opts:   daemon.Options{Runtime: "process", AgentBinary: agentBin},
		listen: "127.0.0.1:0",
		socket: daemon.AgentSocketPath,
	}, probe)
	checkNothingObtained(t, out, hash)
	// choird is the agent's parent here, as the same user: it is not
	// dumpable, and the tool holds no capability that opens it anyway.
	choird := strconv.Itoa(os.Getpid())
	for _, what := range []string{"mem", "environ"} {
		m := regexp.MustCompile(`(?m)^` + what + ` ` + choird + ` \(.*\): (.*)$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("the probe did not try choird's %s", what)
		} else if !strings.HasPrefix(m[1], "denied") {
			t.Errorf("choird's %s is readable: %s", what, m[0])
		}
	}
}

// standInGit is the docker image's git: the agent only looks for it (an
// image without git gets no git identity) and writes its global git
// configuration itself, so it never runs: a run fails, and says so.
const standInGit = `#!/bin/sh
echo "stand-in git: not supported: $*" >&2
exit 1
`

// TestToolReachDockerRuntime does the same in a container: an image of
// the real agent, busybox for /bin/sh, a stand-in git so that the agent
// sets up its credential socket for the bound git identity, and the
// probe.
func TestToolReachDockerRuntime(t *testing.T) {
	t.Parallel()
	probe := runtimetest.BuildStatic(t, "github.com/choirhq/choir/daemon/runtime/runtimetest/reachprobe")
	out, _, hash := runReachProbe(t, dockerReachSetup(t, nil), probe)
	// The credential socket is in the container's HOME (/tmp): a bare
	// request and one for a host not allowed get nothing, and the git
	// token is nowhere in the report.
	checkNothingObtained(t, out, hash)
}

// dockerReachSetup runs the agent in a container: an image of the real
// agent, busybox for /bin/sh and its applets, a stand-in git so that the
// agent sets up its bound git identity, and extra files.
func dockerReachSetup(t *testing.T, extra map[string]runtimetest.File) reachSetup {
	t.Helper()
	cli := runtimetest.RequireDocker(t)
	runtimetest.BusyboxImage(t, cli) // fails without busybox when docker is required
	bridge, err := net.InterfaceByName("docker0")
	if err != nil {
		t.Fatalf("no docker0 bridge for the container to reach the model: %v", err)
	}
	addrs, _ := bridge.Addrs()
	var gw string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			gw = ipn.IP.String()
		}
	}
	if gw == "" {
		t.Fatal("docker0 has no IPv4 address")
	}
	agent := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]runtimetest.File{
		"choir-agent": {Source: agent, Mode: 0o755},
		"bin/busybox": {Source: busybox, Mode: 0o755},
		"bin/git":     {Data: []byte(standInGit), Mode: 0o755},
		// No tmp/ in the image: the engine copies an image's /tmp, mode
		// 0755 and root's, into the tmpfs mounted there, and the agent's
		// HOME (/tmp) would not be writable to its uid.
	}
	for _, applet := range []string{"sh", "cat", "ls", "env", "sleep", "base64", "dd", "head", "cut", "touch", "printf", "echo"} {
		files["bin/"+applet] = runtimetest.File{Link: "busybox"}
	}
	for name, f := range extra {
		files[name] = f
	}
	image := runtimetest.ImportImage(t, cli, "choir-agent-reach", files, `ENTRYPOINT ["/choir-agent"]`, "ENV PATH=/bin")
	return reachSetup{
		opts:   daemon.Options{Runtime: "docker", AgentImage: image},
		listen: gw + ":0",
		socket: func(string) string { return "/run/choir.sock" },
	}
}
