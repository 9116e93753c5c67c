package adminapi

import (
	"context"
	"errors"
	"strconv"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// Admin API paths of the session, model, voice and approval commands, for
// choirctl. An agent's approvals have a path of their own rather than
// GET /v1/approvals?agent=: handlers see path values, not the query.
const (
	PathSessionCores    = "/v1/agents/{id}/session/cores"
	PathSessionCancel   = "/v1/agents/{id}/session/cancel/{name}"
	PathSessionCompact  = "/v1/agents/{id}/session/compact"
	PathSessionEvents   = "/v1/agents/{id}/session/events"
	PathSessionEventsN  = "/v1/agents/{id}/session/events/{n}"
	PathModels          = "/v1/models"
	PathAgentModel      = "/v1/agents/{id}/model"
	PathVoices          = "/v1/voices"
	PathAgentVoice      = "/v1/agents/{id}/voice"
	PathApprovals       = "/v1/approvals"
	PathAgentApprovals  = "/v1/agents/{id}/approvals"
	PathApproval        = "/v1/approvals/{id}"
	PathApprovalApprove = "/v1/approvals/{id}/approve"
	PathApprovalReject  = "/v1/approvals/{id}/reject"
)

// ModelSetRequest is the body of POST /v1/agents/{id}/model.
type ModelSetRequest struct {
	LLM string `json:"llm"`
}

// Validate checks that a model is named.
func (r ModelSetRequest) Validate() error {
	if r.LLM == "" {
		return errors.New("llm is empty: name a model of config.json (choirctl model list)")
	}
	return nil
}

// VoiceSetRequest is the body of POST /v1/agents/{id}/voice.
type VoiceSetRequest struct {
	VoiceProfile string `json:"voice_profile"`
}

// Validate checks that a voice profile is named.
func (r VoiceSetRequest) Validate() error {
	if r.VoiceProfile == "" {
		return errors.New("voice_profile is empty: name a voice profile of config.json (choirctl voice list)")
	}
	return nil
}

// sessionErr codes the errors of these commands: a decision on a resolved
// approval and a command for an agent that is not running conflict with
// choird's state; a missing approval is not found.
func sessionErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, control.ErrApprovalResolved), errors.Is(err, control.ErrNotRunning):
		return codedErr{rpc.ErrConflict, err}
	case errors.Is(err, control.ErrNotFound):
		return codedErr{rpc.ErrNotFound, err}
	}
	return controlErr(err)
}

func (d *API) mountSessionControl(mux *admin.Mux) {
	id := func(ctx context.Context) string { return admin.PathValue(ctx, "id") }
	admin.Handle(mux, "GET", PathSessionCores, func(ctx context.Context, _ admin.Empty) (control.SessionCoresResult, error) {
		out, err := d.SessionCores(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", PathSessionCancel, func(ctx context.Context, _ admin.Empty) (control.SessionRef, error) {
		out, err := d.SessionCancel(ctx, adminScope(ctx), id(ctx), admin.PathValue(ctx, "name"))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", PathSessionCompact, func(ctx context.Context, _ admin.Empty) (control.SessionRef, error) {
		out, err := d.SessionCompact(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathSessionEvents, func(ctx context.Context, _ admin.Empty) (control.SessionEventsResult, error) {
		out, err := d.SessionEvents(ctx, adminScope(ctx), id(ctx), 0)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathSessionEventsN, func(ctx context.Context, _ admin.Empty) (control.SessionEventsResult, error) {
		n, err := strconv.Atoi(admin.PathValue(ctx, "n"))
		if err != nil || n < 1 {
			return control.SessionEventsResult{}, rpc.Errorf(rpc.CodeBadRequest, "the number of events must be a positive number, not %q",
				admin.PathValue(ctx, "n"))
		}
		out, err := d.SessionEvents(ctx, adminScope(ctx), id(ctx), n)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathModels, func(ctx context.Context, _ admin.Empty) (control.ModelListResult, error) {
		out, err := d.ModelList(ctx, adminScope(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathAgentModel, func(ctx context.Context, _ admin.Empty) (control.ModelState, error) {
		out, err := d.ModelGet(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", PathAgentModel, func(ctx context.Context, in ModelSetRequest) (control.ModelState, error) {
		out, err := d.ModelSet(ctx, adminScope(ctx), id(ctx), in.LLM)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathVoices, func(ctx context.Context, _ admin.Empty) ([]control.NamedVoice, error) {
		out, err := d.VoiceList(ctx, adminScope(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathAgentVoice, func(ctx context.Context, _ admin.Empty) (control.ModelState, error) {
		out, err := d.VoiceGet(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", PathAgentVoice, func(ctx context.Context, in VoiceSetRequest) (control.ModelState, error) {
		out, err := d.VoiceSet(ctx, adminScope(ctx), id(ctx), in.VoiceProfile)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathApprovals, func(ctx context.Context, _ admin.Empty) ([]control.Approval, error) {
		out, err := d.ApprovalList(ctx, adminScope(ctx), "")
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathAgentApprovals, func(ctx context.Context, _ admin.Empty) ([]control.Approval, error) {
		if err := d.KnownAgent(id(ctx)); err != nil {
			return nil, sessionErr(err)
		}
		out, err := d.ApprovalList(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	admin.Handle(mux, "GET", PathApproval, func(ctx context.Context, _ admin.Empty) (control.Approval, error) {
		out, err := d.ApprovalShow(ctx, adminScope(ctx), id(ctx))
		return out, sessionErr(err)
	})
	decide := func(approve bool) func(ctx context.Context, _ admin.Empty) (control.Approval, error) {
		return func(ctx context.Context, _ admin.Empty) (control.Approval, error) {
			out, err := d.ApprovalDecide(ctx, adminScope(ctx), id(ctx), approve)
			return out, sessionErr(err)
		}
	}
	admin.Handle(mux, "POST", PathApprovalApprove, decide(true))
	admin.Handle(mux, "POST", PathApprovalReject, decide(false))
}
