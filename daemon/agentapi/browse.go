package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/choirhq/choir/daemon/browser"
)

// ToolFailure is a host tool's failure with a structured output for the
// model (what went wrong, what to do, whether to retry): it goes back as a
// result with status error, like a tool's own failures.
type ToolFailure struct {
	Output json.RawMessage
	Err    error
}

func (f *ToolFailure) Error() string { return f.Err.Error() }
func (f *ToolFailure) Unwrap() error { return f.Err }

// BrowseTool serves choir.web.browse from the browser worker that worker
// returns (started on first use); workspace finds the calling session's
// workspace on the host, where screenshots and PDFs are saved.
func BrowseTool(worker func() (*browser.Worker, error), workspace func(context.Context) (string, error)) map[string]HostTool {
	return map[string]HostTool{browser.ToolName: func(ctx context.Context, agentID string, in json.RawMessage) (json.RawMessage, error) {
		w, err := worker()
		if err != nil {
			return nil, failure(&browser.Failure{Kind: "browser_unavailable", Message: err.Error(),
				Fix: "the operator must install Debian's chromium package on the host; use choir.web.fetch meanwhile"})
		}
		out, err := w.Browse(ctx, agentID, in, workspace)
		var f *browser.Failure
		if errors.As(err, &f) {
			return nil, failure(f)
		}
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}}
}

func failure(f *browser.Failure) error {
	b, _ := json.Marshal(f)
	return &ToolFailure{Output: b, Err: f}
}

// HostCallWorkspace returns the host path of the workspace of the session
// whose host tool call ctx carries.
func (a *API) HostCallWorkspace(ctx context.Context) (string, error) {
	hc, ok := ctx.Value(hostCallKey{}).(hostCall)
	if !ok {
		return "", errors.New("not called for a session")
	}
	b, err := a.bindings(ctx, hc.sessionID)
	if err != nil {
		return "", err
	}
	cfg, _ := a.config()
	ws, ok := cfg.Workspaces[b.Workspace]
	if !ok {
		return "", fmt.Errorf("the session's workspace %q is no longer configured", b.Workspace)
	}
	return ws.Path, nil
}
