package arbiter_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/rpc"
)

// TestSecretsScrubbedFromToolOutput runs choir.exec on a command that
// prints secrets it found in the workspace (none is in its input): the
// committed result and the model's view name each secret as
// [secret:<name>], never its value, also when the value needs escaping in
// JSON; a value too short to scrub safely is left alone.
func TestSecretsScrubbedFromToolOutput(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{
		"model-key": "sk-canary-3a9f1c77",
		"quoted":    `pa"ss\word-1`,
		"short":     "abc",
	}
	ws := t.TempDir()
	var file strings.Builder
	for _, v := range secrets {
		file.WriteString("found " + v + "\n")
	}
	if err := os.WriteFile(filepath.Join(ws, "leak.txt"), []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Locks: lock.New(), Env: tool.Env{Workspace: ws},
		Secrets: func() map[string]string { return secrets }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { arb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	for _, cmd := range []string{"cat leak.txt", "cat leak.txt; exit 3"} {
		input, _ := json.Marshal(map[string]string{"command": cmd})
		out, err := arb.Propose(context.Background(), arbiter.Proposal{Owner: lock.Edge, CallID: "c-" + cmd, Tool: tool.NameExec,
			Input: input})
		if err != nil || out.Rejected != nil {
			t.Fatalf("%s: %v %+v", cmd, err, out.Rejected)
		}
		head, _ := log.Head()
		evs, err := log.Range(1, head)
		if err != nil {
			t.Fatal(err)
		}
		last := evs[len(evs)-1]
		if last.Type != rpc.EventToolResultCommitted {
			t.Fatalf("last event is %s", last.Type)
		}
		for _, where := range []struct{ name, text string }{
			{"committed result", string(last.Payload)}, {"model's view", string(out.ForModel())},
		} {
			for name, v := range map[string]string{"model-key": secrets["model-key"], "quoted": `pa\"ss\\word-1`} {
				if strings.Contains(where.text, v) || strings.Contains(where.text, secrets[name]) {
					t.Errorf("%s: the %s of %q holds secret %s: %s", cmd, where.name, cmd, name, where.text)
				}
				if !strings.Contains(where.text, "[secret:"+name+"]") {
					t.Errorf("%s: the %s does not name [secret:%s]: %s", cmd, where.name, name, where.text)
				}
			}
			if !strings.Contains(where.text, "found abc") {
				t.Errorf("%s: a value shorter than %d bytes was scrubbed: %s", cmd, arbiter.MinScrubBytes, where.text)
			}
			if !json.Valid([]byte(where.text)) {
				t.Errorf("%s: the %s is not valid JSON after scrubbing: %s", cmd, where.name, where.text)
			}
		}
	}
}
