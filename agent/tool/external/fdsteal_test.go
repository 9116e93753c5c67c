package external_test

import (
	"encoding/base64"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/tooltest"
)

// holdScript is an external tool that declares a secret and, before it
// reads its secrets on fd 3, writes its pid and waits (up to 20 s) for
// the go file: a concurrent choir.exec has that long to steal them.
const holdScript = `echo $$ > "$CHOIR_WORKSPACE/tool.pid"
i=0; while [ ! -e "$CHOIR_WORKSPACE/go" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
s=$(cat <&3); printf '{"status":"success","summary":"held","output":%s}' "$s"`

// stealCommand is what the model runs with choir.exec meanwhile: it reads
// the tool's fd 3 (printed in base64, past the scrubber), its fd list,
// environment and memory map, then lets the tool go on.
const stealCommand = `i=0; while [ ! -s tool.pid ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
p=$(cat tool.pid); echo "pid $p"
echo "fd3: $(base64 -w0 /proc/$p/fd/3 2>&1)"
echo "fd3 cat: $(cat /proc/$p/fd/3 2>&1 | base64 -w0)"
echo "fds: $(ls -l /proc/$p/fd 2>&1)"
echo "environ: $(base64 -w0 /proc/$p/environ 2>&1)"
echo "maps: $(head -c 300 /proc/$p/maps 2>&1)"
echo "mem: $(dd if=/proc/$p/mem bs=1 count=16 skip=$((0x$(head -1 /proc/$p/maps | cut -d- -f1))) 2>&1 | base64 -w0)"
touch go`

// TestConcurrentExecCannotReadToolSecrets runs an external tool holding a
// secret on fd 3 and, at the same time, a choir.exec command that tries
// to read /proc/<tool pid>/fd/3: it gets nothing, and the tool still gets
// its secret.
func TestConcurrentExecCannotReadToolSecrets(t *testing.T) {
	t.Parallel()
	const secret = "tool-secret-9c2e"
	dir := t.TempDir()
	manifest := strings.Replace(tooltest.Manifest("x.hold", `"secret_resources": ["tok"]`), `"timeout_ms": 5000`, `"timeout_ms": 30000`, 1)
	tooltest.AddTool(t, dir, "hold", manifest, holdScript)
	b := tooltest.Setup(t, builtin.Config{GlobalDir: dir})
	b.Env.SecretFunc = func(name string) (string, bool) { return secret, name == "tok" }

	var wg sync.WaitGroup
	var held tool.Result
	wg.Add(1)
	go func() {
		defer wg.Done()
		held = b.MustCall(t, "x.hold", `{}`)
	}()
	stolen := b.MustCall(t, tool.NameExec, `{"command": `+quote(stealCommand)+`, "timeout_ms": 30000}`)
	wg.Wait()
	out := string(stolen.JSON())
	t.Logf("exec: %s", out)
	if !strings.Contains(out, "fd3: ") || !strings.Contains(out, "pid ") {
		t.Fatalf("the steal did not run: %s", out)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(`{"tok":"` + secret + `"}`))
	for _, bad := range []string{secret, b64[:20], base64.StdEncoding.EncodeToString([]byte(secret))[:12]} {
		if strings.Contains(out, bad) {
			t.Errorf("choir.exec read the tool's secret (%q) from its /proc entries:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "ermission denied") {
		t.Errorf("the tool's /proc entries were not refused:\n%s", out)
	}
	if string(held.Output) != `{"tok":"`+secret+`"}` {
		t.Errorf("the tool did not get its secret: %+v", held)
	}
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
