package proc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/choirhq/choir/agent/sandbox"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
)

// execDefaultTimeoutMS is choir.exec's timeout when the call names none;
// the largest it takes is in its spec (catalog.Exec).
const execDefaultTimeoutMS = 120_000

// execTool is choir.exec: a shell command in the workspace (spec 8.7). It
// always takes workspace:X (spec 9.5): no command parsing, no read-only
// override. Its environment is the pass list of ChildEnv, never a secret.
type execTool struct{}

func (execTool) Spec() tool.Spec { return catalog.Exec() }

// execOutput is choir.exec's output.
type execOutput struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// Output is the combined stdout and stderr, or its head and tail.
	Output string `json:"output"`
	// OutputBytes is how many bytes the command wrote in all.
	OutputBytes int64 `json:"output_bytes"`
}

func (execTool) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	var in struct {
		Command   string `json:"command"`
		TimeoutMS int    `json:"timeout_ms"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return tool.Result{}, &tool.InputError{Name: tool.NameExec, Problems: []tool.Problem{{Message: err.Error()}}}
	}
	timeout := time.Duration(in.TimeoutMS) * time.Millisecond
	if in.TimeoutMS == 0 {
		timeout = execDefaultTimeoutMS * time.Millisecond
	}
	if fi, err := os.Stat(env.Workspace); err != nil || !fi.IsDir() {
		return tool.ErrorResult("workspace %s is not a directory", env.Workspace), nil
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	lim := env.Limits.WithDefaults()
	out := NewHeadTail(lim.CaptureBytes)
	cmd := exec.CommandContext(cctx, "/bin/sh", "-c", in.Command)
	cmd.Dir = env.Workspace
	// A proxy of the call's own announces the lane's untrusted sources to
	// choird, for a person asked to approve a connection.
	proxyEnv, release := CallProxyEnv(ctx)
	defer release()
	cmd.Env = ChildEnv(env.Workspace, proxyEnv...)
	cmd.Stdin = nil // /dev/null
	cmd.Stdout, cmd.Stderr = out, out
	SetProcessGroup(cmd)
	runErr := StartConfined(cmd, sandbox.StartConfined)
	if runErr == nil {
		runErr = cmd.Wait()
	}
	if ctx.Err() != nil {
		return tool.Result{}, ctx.Err()
	}
	if runErr != nil && cmd.ProcessState == nil {
		return tool.ErrorResult("start command: %v", tool.ErrText(runErr)), nil
	}
	code, sig := ExitStatus(cmd.ProcessState)
	timedOut := cctx.Err() != nil
	res := execOutput{ExitCode: code, Signal: sig, TimedOut: timedOut, OutputBytes: out.total}

	full := out.Text()
	status, summary := tool.StatusSuccess, "exit code 0"
	switch {
	case timedOut:
		status, summary = tool.StatusError, fmt.Sprintf("timed out after %v and was killed", timeout)
	case sig != "":
		status, summary = tool.StatusError, "killed by "+sig
	case code != 0:
		status, summary = tool.StatusError, fmt.Sprintf("exit code %d", code)
	}
	res.Output = full
	r := tool.SuccessResult(summary, res)
	r.Status = status
	if len(r.Output) <= lim.ResultBytes {
		return r, nil
	}
	// Too long for the model: keep head and tail, the whole in an artifact.
	ref, aerr := tool.WriteArtifact(env.Workspace, []byte(full))
	note := "\n[... output cut: read artifact_ref with choir.fs.read for all of it ...]\n"
	if aerr != nil {
		note = "\n[... output cut; it could not be saved: " + aerr.Error() + " ...]\n"
	}
	res.Output = ""
	overhead := len(tool.SuccessResult(summary, res).Output) + 64
	res.Output = string(fitStringRaw(lim.ResultBytes-overhead, func(n int) string {
		return tool.TruncateUTF8(full, n/2) + note + tool.TailUTF8(full, n/2)
	}))
	r = tool.SuccessResult(summary, res)
	r.Status = status
	r.ArtifactRef = ref
	r.Truncated = true
	return r, nil
}

// fitStringRaw is FitString returning the fitting string itself.
func fitStringRaw(limit int, render func(n int) string) string {
	var s string
	_ = json.Unmarshal(tool.FitString(max(limit, 256), render), &s)
	return s
}
