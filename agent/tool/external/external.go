package external

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/choirhq/choir/agent/sandbox"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/manifest"
	"github.com/choirhq/choir/agent/tool/proc"
	"github.com/choirhq/choir/strictjson"
)

// stderrKeep is how much of an external tool's stderr is kept for the
// summary of a failure.
const stderrKeep = 2 << 10

// external runs an executable tool. The contract, for tool authors:
//
//   - the executable runs with the workspace as its working directory, in a
//     new process group, with a minimal environment (PATH, HOME, LANG,
//     LC_ALL, TZ, USER, SSH_AUTH_SOCK from the agent, plus CHOIR_WORKSPACE
//     and CHOIR_TOOL);
//   - it reads the call's input, a JSON object, on stdin;
//   - if the manifest declares secret_resources, the available ones are a
//     JSON object of name to value on file descriptor 3, and
//     CHOIR_SECRETS_FD=3 says so (secrets never go in the environment,
//     spec 14.1);
//   - it writes one JSON object {"status": "success"|"error", "summary":
//     "...", "output": <any JSON>} on stdout, at most Limits.CaptureBytes,
//     and exits 0; a non-zero exit is a failed call summarised from the
//     tail of stderr;
//   - on timeout its whole process group is killed;
//   - it runs in a Landlock domain of its own: no other process the agent
//     starts (a choir.exec command) can read its /proc entries, fd 3 and
//     memory included, attach to it or signal it.
type external struct {
	spec tool.Spec
}

func (e *external) Spec() tool.Spec { return e.spec.Clone() }

func (e *external) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	rt := e.spec.Runtime
	cmd := exec.CommandContext(ctx, rt.ExecPath)
	cmd.Dir = env.Workspace
	cmd.Stdin = bytes.NewReader(input)
	stdout := &proc.Capped{Limit: env.Limits.WithDefaults().CaptureBytes}
	stderr := proc.NewHeadTail(stderrKeep)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	proxyEnv, release := proc.CallProxyEnv(ctx)
	defer release()
	cmd.Env = proc.ChildEnv(env.Workspace, append([]string{"CHOIR_TOOL=" + e.spec.LLM.Name}, proxyEnv...)...)
	if key := tool.CallKey(ctx); key != "" {
		// The call's idempotency key: a keyed tool keeps its effect under
		// it, so the call run again after a restart does nothing more.
		cmd.Env = append(cmd.Env, "CHOIR_IDEMPOTENCY_KEY="+key)
	}
	proc.SetProcessGroup(cmd)

	var secretsW *os.File
	var secretsJSON []byte
	if len(rt.SecretResources) > 0 {
		secrets := map[string]string{}
		for _, n := range rt.SecretResources {
			if v, ok := env.Secret(n); ok {
				secrets[n] = v
			}
		}
		b, err := json.Marshal(secrets)
		if err != nil {
			return tool.Result{}, fmt.Errorf("encode secrets: %w", err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			return tool.Result{}, fmt.Errorf("secrets pipe: %w", err)
		}
		defer r.Close()
		defer w.Close()
		cmd.ExtraFiles = []*os.File{r}
		cmd.Env = append(cmd.Env, "CHOIR_SECRETS_FD=3")
		secretsW, secretsJSON = w, b
	}

	// In a Landlock domain of its own: a concurrent choir.exec command
	// cannot open /proc/<pid>/fd/3 and take the secrets first.
	if err := proc.StartConfined(cmd, sandbox.StartConfined); err != nil {
		return tool.ErrorResult("start %s: %v", e.spec.LLM.Name, tool.ErrText(err)), nil
	}
	done := make(chan struct{})
	if secretsW != nil {
		_ = cmd.ExtraFiles[0].Close() // the child has its copy
		go func() {
			defer close(done)
			_, _ = secretsW.Write(secretsJSON)
			_ = secretsW.Close()
		}()
	} else {
		close(done)
	}
	werr := cmd.Wait()
	if secretsW != nil {
		// A tool that never read its secrets must not block the writer.
		_ = secretsW.SetWriteDeadline(time.Now())
	}
	<-done
	if ctx.Err() != nil {
		return tool.Result{}, ctx.Err()
	}
	code, sig := proc.ExitStatus(cmd.ProcessState)
	if werr != nil || code != 0 {
		how := fmt.Sprintf("exited with code %d", code)
		if sig != "" {
			how = "killed by " + sig
		}
		msg := strings.TrimSpace(stderr.Text())
		if msg == "" {
			return tool.ErrorResult("%s %s", e.spec.LLM.Name, how), nil
		}
		return tool.ErrorResult("%s %s: %s", e.spec.LLM.Name, how, tool.TailUTF8(msg, 1024)), nil
	}
	return e.result(stdout), nil
}

// result reads the tool's result from what it wrote on stdout; a result
// that breaks the contract is the call's error.
func (e *external) result(stdout *proc.Capped) tool.Result {
	if stdout.Overflow {
		return tool.ErrorResult("%s wrote more than %d bytes on stdout", e.spec.LLM.Name, stdout.Limit)
	}
	var out struct {
		Status  tool.Status     `json:"status"`
		Summary string          `json:"summary"`
		Output  json.RawMessage `json:"output,omitempty"`
	}
	if err := strictjson.Decode(stdout.Buf, &out, strictjson.Limits{MaxBytes: stdout.Limit}); err != nil {
		return tool.ErrorResult("%s wrote an invalid result on stdout (want {\"status\", \"summary\", \"output\"}): %s", e.spec.LLM.Name, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if out.Status != tool.StatusSuccess && out.Status != tool.StatusError {
		return tool.ErrorResult("%s wrote status %q, want success or error", e.spec.LLM.Name, out.Status)
	}
	if strings.TrimSpace(out.Summary) == "" {
		return tool.ErrorResult("%s wrote no summary", e.spec.LLM.Name)
	}
	if string(out.Output) == "null" {
		out.Output = nil
	}
	return tool.Result{Status: out.Status, Summary: out.Summary, Output: out.Output}
}

// Load loads the manifests of one directory as tools of origin, each run
// by this package's executor; see [manifest.LoadTools].
func Load(dir string, origin tool.Origin) ([]*tool.Def, error) {
	return manifest.LoadTools(dir, origin, func(spec tool.Spec) tool.Tool { return &external{spec: spec} })
}
