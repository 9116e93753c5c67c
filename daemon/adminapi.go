package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// adminScope is the scope of a choirctl request: admin, named by the
// peer's uid.
func adminScope(ctx context.Context) Scope {
	actor := "choirctl"
	if p, ok := admin.PeerFromContext(ctx); ok {
		actor = fmt.Sprintf("choirctl:uid=%d", p.UID)
	}
	return Scope{Admin: true, Actor: actor}
}

// codedErr carries a control error with the rpc sentinel that picks its
// code, without adding the sentinel's text to the message.
type codedErr struct{ code, err error }

func (e codedErr) Error() string   { return e.err.Error() }
func (e codedErr) Unwrap() []error { return []error{e.code, e.err} }

// controlErr gives a control error the code choirctl shows it with; the
// message, which says what to do, is kept as it is.
func controlErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrForbidden):
		return codedErr{rpc.ErrPermissionDenied, err}
	case errors.Is(err, ErrUnknownResource):
		return codedErr{rpc.ErrNotFound, err}
	case errors.Is(err, ErrLeaseConflict):
		return codedErr{rpc.ErrConflict, err}
	case errors.Is(err, runtime.ErrEngineUnreachable):
		return codedErr{rpc.ErrUnavailable, err}
	}
	return codedErr{rpc.ErrBadRequest, err}
}

func (d *Daemon) mountControl(mux *admin.Mux) {
	admin.Handle(mux, "GET", admin.PathAgents, func(ctx context.Context, _ admin.Empty) ([]admin.AgentStatus, error) {
		out, err := d.AgentList(ctx, adminScope(ctx))
		return out, controlErr(err)
	})
	admin.Handle(mux, "GET", admin.PathAgent, func(ctx context.Context, _ admin.Empty) (admin.AgentStatus, error) {
		out, err := d.AgentStatus(ctx, adminScope(ctx), admin.PathValue(ctx, "id"))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentStart, func(ctx context.Context, o StartOverrides) (admin.AgentStatus, error) {
		out, err := d.AgentStart(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), o)
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentStop, func(ctx context.Context, _ admin.Empty) (admin.AgentStatus, error) {
		out, err := d.AgentStop(ctx, adminScope(ctx), admin.PathValue(ctx, "id"))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentRestart, func(ctx context.Context, _ admin.Empty) (admin.AgentStatus, error) {
		out, err := d.AgentRestart(ctx, adminScope(ctx), admin.PathValue(ctx, "id"))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentBuild, func(ctx context.Context, in admin.BuildRequest) (BuildResult, error) {
		out, err := d.AgentBuild(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), in.Force)
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentUpdate, func(ctx context.Context, _ admin.Empty) (UpdateResult, error) {
		out, err := d.AgentUpdate(ctx, adminScope(ctx), admin.PathValue(ctx, "id"))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentUpdateAll, func(ctx context.Context, _ admin.Empty) ([]UpdateResult, error) {
		out, err := d.AgentUpdateAll(ctx, adminScope(ctx))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathSecretApply, func(ctx context.Context, _ admin.Empty) (SecretApplyResult, error) {
		out, err := d.SecretApply(ctx, adminScope(ctx))
		return out, controlErr(err)
	})
	admin.Handle(mux, "GET", admin.PathWorkspaces, func(ctx context.Context, _ admin.Empty) ([]WorkspaceInfo, error) {
		out, err := d.WorkspaceList(ctx, adminScope(ctx))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathWorkspaceReset, func(ctx context.Context, _ admin.Empty) (WorkspaceInfo, error) {
		out, err := d.WorkspaceReset(ctx, adminScope(ctx), admin.PathValue(ctx, "name"))
		return out, controlErr(err)
	})
	d.mountConfigControl(mux)
	d.mountChat(mux)
	d.mountSessionControl(mux)
	d.mountMemory(mux)
}
