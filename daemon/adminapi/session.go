package adminapi

import (
	"context"
	"errors"
	"strconv"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/audit"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
)

// sessionErr codes the errors of these commands: a decision on a resolved
// approval and a command for an agent that is not running conflict with
// choird's state; a missing approval is not found.
func sessionErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, approval.ErrResolved), errors.Is(err, control.ErrNotRunning):
		return codedErr{wire.ErrConflict, err}
	case errors.Is(err, choirsql.ErrNotFound):
		return codedErr{wire.ErrNotFound, err}
	case errors.Is(err, approval.ErrNotRemembered):
		return codedErr{wire.ErrBadRequest, err}
	}
	return controlErr(err)
}

func (d *API) mountSessionControl(mux *admin.Mux) {
	id := func(ctx context.Context) string { return admin.PathValue(ctx, "id") }
	admin.Handle(mux, "POST", admin.PathSessionList, func(ctx context.Context, in admin.SessionListRequest) ([]admin.SessionInfo, error) {
		out, err := d.SessionList(ctx, adminScope(ctx), in)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", admin.PathSessionReplay, func(ctx context.Context, in admin.SessionReplayRequest) (admin.SessionReplay, error) {
		out, err := (&audit.Reader{Pool: d.pool, Control: d.Control}).SessionReplay(ctx, adminScope(ctx), in)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathSessionCores, func(ctx context.Context, _ admin.Empty) (admin.SessionCoresResult, error) {
		out, err := d.SessionCores(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", admin.PathSessionCancel, func(ctx context.Context, _ admin.Empty) (admin.SessionRef, error) {
		out, err := d.SessionCancel(ctx, adminScope(ctx), id(ctx), admin.PathValue(ctx, "name"))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", admin.PathSessionCompact, func(ctx context.Context, _ admin.Empty) (admin.SessionRef, error) {
		out, err := d.SessionCompact(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathSessionEvents, func(ctx context.Context, _ admin.Empty) (admin.SessionEventsResult, error) {
		out, err := d.SessionEvents(ctx, adminScope(ctx), id(ctx), 0)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathSessionEventsN, func(ctx context.Context, _ admin.Empty) (admin.SessionEventsResult, error) {
		n, err := strconv.Atoi(admin.PathValue(ctx, "n"))
		if err != nil || n < 1 {
			return admin.SessionEventsResult{}, wire.Errorf(wire.CodeBadRequest, "the number of events must be a positive number, not %q",
				admin.PathValue(ctx, "n"))
		}
		out, err := d.SessionEvents(ctx, adminScope(ctx), id(ctx), n)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathModels, func(ctx context.Context, _ admin.Empty) (admin.ModelListResult, error) {
		out, err := d.ModelList(ctx, adminScope(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathAgentModel, func(ctx context.Context, _ admin.Empty) (admin.ModelState, error) {
		out, err := d.ModelGet(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentModel, func(ctx context.Context, in admin.ModelSetRequest) (admin.ModelState, error) {
		out, err := d.ModelSet(ctx, adminScope(ctx), id(ctx), in.LLM)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathVoices, func(ctx context.Context, _ admin.Empty) ([]admin.NamedVoice, error) {
		out, err := d.VoiceList(ctx, adminScope(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathAgentVoice, func(ctx context.Context, _ admin.Empty) (admin.ModelState, error) {
		out, err := d.VoiceGet(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentVoice, func(ctx context.Context, in admin.VoiceSetRequest) (admin.ModelState, error) {
		out, err := d.VoiceSet(ctx, adminScope(ctx), id(ctx), in.VoiceProfile)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathApprovals, func(ctx context.Context, _ admin.Empty) ([]admin.Approval, error) {
		out, err := d.approvals.List(ctx, adminScope(ctx), "")
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathAgentApprovals, func(ctx context.Context, _ admin.Empty) ([]admin.Approval, error) {
		if err := d.KnownAgent(id(ctx)); err != nil {
			return nil, sessionErr(err)
		}
		out, err := d.approvals.List(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", admin.PathApproval, func(ctx context.Context, _ admin.Empty) (admin.Approval, error) {
		out, err := d.approvals.Show(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	decide := func(approve bool) func(ctx context.Context, _ admin.Empty) (admin.Approval, error) {
		return func(ctx context.Context, _ admin.Empty) (admin.Approval, error) {
			out, err := d.approvals.Decide(ctx, adminScope(ctx), id(ctx), approve)
			return out, sessionErr(err)
		}
	}
	admin.Handle(mux, "POST", admin.PathApprovalApprove, decide(true))
	admin.Handle(mux, "POST", admin.PathApprovalReject, decide(false))
	admin.Handle(mux, "POST", admin.PathApprovalAlways, func(ctx context.Context, _ admin.Empty) (admin.Approval, error) {
		out, err := d.approvals.Always(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
}
