package daemon_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// holdManifest is an external tool that declares the secret "tool-token"
// (bound to the session as one of the agent's mcp_secrets: any secret
// the agent holds will do) and holds no lock, so that it runs beside
// choir.exec.
const holdManifest = `{
  "llm": {"name": "x.hold", "description": "Holds a secret.", "parameters": {"type": "object"}},
  "runtime": {"timeout_ms": 30000, "side_effect": "read", "trust": "own", "version": "1.0", "secret_resources": ["tool-token"]}
}`

// holdTool writes its pid to the workspace, then waits (20 s at most) for
// the go file before it reads its secrets on fd 3.
const holdTool = `#!/bin/sh
echo $$ > "$CHOIR_WORKSPACE/tool.pid"
i=0; while [ ! -e "$CHOIR_WORKSPACE/go" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
s=$(cat <&3); printf '{"status":"success","summary":"held %s bytes"}' "${#s}"
`

// stealCommand reads the tool's fd 3 and memory while it waits, prints
// what it got in base64 (past the scrubber), then lets the tool go on.
const stealCommand = `i=0; while [ ! -s tool.pid ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
p=$(cat tool.pid); echo "pid $p"
echo "fd3: $(cat /proc/$p/fd/3 2>&1 | base64 | tr -d '\n')"
echo "fds: $(ls -l /proc/$p/fd 2>&1 | tr '\n' ' ')"
echo "mem: $(dd if=/proc/$p/mem bs=1 count=16 2>&1 | base64 | tr -d '\n')"
touch go`

// runSecretSteal has the model call x.hold and, in the same step,
// choir.exec with stealCommand, and checks that the command got nothing
// while the tool got its secret.
func runSecretSteal(t *testing.T, setup reachSetup) {
	setup.edit = func(c *config.Config, s config.Secrets) {
		a := c.Agents["assistant"]
		a.MCPSecrets = append(a.MCPSecrets, "tool-token")
		c.Agents["assistant"] = a
		s["tool-token"] = "ghp-test"
	}
	args, _ := json.Marshal(map[string]any{"command": stealCommand, "timeout_ms": 30000})
	run := runToolCalls(t, setup, nil,
		llmtest.Call{ID: "hold", Name: "x.hold", Arguments: `{}`},
		llmtest.Call{ID: "steal", Name: "choir.exec", Arguments: string(args)})
	steal, hold := run.results["steal"], run.results["hold"]
	t.Logf("choir.exec: %s\nx.hold: %s", steal, hold)
	if !strings.Contains(steal, "fd3: ") || !strings.Contains(steal, "pid ") {
		t.Fatalf("the steal did not run beside the tool: %s", steal)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(`{"tool-token":"ghp-test"}`))
	for _, bad := range []string{"ghp-test", "[secret:", b64[:16]} {
		if strings.Contains(steal, bad) {
			t.Errorf("choir.exec read the tool's secret (%q) through /proc", bad)
		}
	}
	if !strings.Contains(steal, "ermission denied") {
		t.Errorf("the tool's /proc entries were not refused: %s", steal)
	}
	if !strings.Contains(hold, "held 25 bytes") {
		t.Errorf("the tool did not get its secret whole: %s", hold)
	}
}

// TestToolSecretsFD3ProcessRuntime: under the process runtime (the agent
// runs as choird's user, root here), a choir.exec command running beside
// an external tool cannot read the tool's secrets on /proc/<pid>/fd/3.
func TestToolSecretsFD3ProcessRuntime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tools := filepath.Join(dir, "choir", "tools", "global")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]string{"hold.json": holdManifest, "hold": holdTool} {
		if err := os.WriteFile(filepath.Join(tools, name), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The process runtime's agent reads its tools from CHOIR_DIR.
	agent := filepath.Join(dir, "choir-agent")
	wrapper := "#!/bin/sh\nCHOIR_DIR=" + filepath.Join(dir, "choir") + " exec " + choirdtest.Binary(t, "cmd/choir-agent") + ` "$@"` + "\n"
	if err := os.WriteFile(agent, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	runSecretSteal(t, reachSetup{opts: daemon.Options{Runtime: "process", AgentBinary: agent}, listen: "127.0.0.1:0",
		socket: daemon.AgentSocketPath})
}

// TestToolSecretsFD3DockerRuntime is the same in a container.
func TestToolSecretsFD3DockerRuntime(t *testing.T) {
	t.Parallel()
	runSecretSteal(t, dockerReachSetup(t, map[string]runtimetest.File{
		"choir/tools/global/hold.json": {Data: []byte(holdManifest), Mode: 0o644},
		"choir/tools/global/hold":      {Data: []byte(holdTool), Mode: 0o755},
	}))
}
