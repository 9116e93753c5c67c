package agentapi

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
)

// Handler is the agent protocol's handler: a's methods, with the database
// errors that reach the agent given their codes (see databaseErr). choird's
// server serves it; a method's own codes are kept.
func (a *API) Handler() rpc.ControlPlaneHandler { return coded{a} }

// coded wraps every verb of an API in databaseErr.
type coded struct{ a *API }

func (c coded) HandleInitHello(ctx context.Context, call rpc.Call, req rpc.InitHelloRequest) (rpc.InitHelloResponse, error) {
	resp, err := c.a.HandleInitHello(ctx, call, req)
	return resp, c.a.databaseErr(ctx, call, err)
}

func (c coded) HandleGetSecrets(ctx context.Context, call rpc.Call, req rpc.GetSecretsRequest) (rpc.GetSecretsResponse, error) {
	resp, err := c.a.HandleGetSecrets(ctx, call, req)
	return resp, c.a.databaseErr(ctx, call, err)
}

func (c coded) HandleHeartbeat(ctx context.Context, call rpc.Call, req rpc.HeartbeatRequest) (rpc.HeartbeatResponse, error) {
	resp, err := c.a.HandleHeartbeat(ctx, call, req)
	return resp, c.a.databaseErr(ctx, call, err)
}

func (c coded) HandleRequestApproval(ctx context.Context, call rpc.Call, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	resp, err := c.a.HandleRequestApproval(ctx, call, req)
	if errors.Is(err, approval.ErrTooLong) {
		c.a.logger.WarnContext(ctx, "approval request refused before anyone was asked", slog.String("agent_id", call.Session.AgentID),
			slog.String("request_type", req.RequestType), slog.String("reason", err.Error()))
		return resp, wire.Errorf(wire.CodeBadRequest, "%v", err)
	}
	return resp, c.a.databaseErr(ctx, call, err)
}

func (c coded) HandleReportStatus(ctx context.Context, call rpc.Call, req rpc.ReportStatusRequest) (rpc.ReportStatusResponse, error) {
	resp, err := c.a.HandleReportStatus(ctx, call, req)
	return resp, c.a.databaseErr(ctx, call, err)
}

func (c coded) HandleTerminateSelf(ctx context.Context, call rpc.Call, req rpc.TerminateSelfRequest) (rpc.TerminateSelfResponse, error) {
	resp, err := c.a.HandleTerminateSelf(ctx, call, req)
	return resp, c.a.databaseErr(ctx, call, err)
}

func (c coded) HandleFetchDynamicConfig(ctx context.Context, call rpc.Call, req rpc.FetchDynamicConfigRequest) (rpc.FetchDynamicConfigResponse, error) {
	resp, err := c.a.HandleFetchDynamicConfig(ctx, call, req)
	return resp, c.a.databaseErr(ctx, call, err)
}

func (c coded) HandleExecuteHostTool(ctx context.Context, call rpc.Call, req rpc.ExecuteHostToolRequest) (rpc.ExecuteHostToolResponse, error) {
	resp, err := c.a.HandleExecuteHostTool(ctx, call, req)
	return resp, c.a.databaseErr(ctx, call, err)
}

func (c coded) HandleSendOutbound(ctx context.Context, call rpc.Call, req rpc.SendOutboundRequest) (rpc.SendOutboundResponse, error) {
	resp, err := c.a.HandleSendOutbound(ctx, call, req)
	return resp, c.a.databaseErr(ctx, call, err)
}

// databaseErr codes an error of a handler that came from Postgres, named at
// the seam (choirsql.Interpret); an error the handler coded itself, or
// that did not come from Postgres, is returned as it is. An outage or a
// lost serialization race is unavailable, telling the agent to retry,
// without the driver's text (which names the database), which is logged;
// a missing row no handler expected is not_found, a duplicate a conflict;
// any other database error stays uncoded, and the server answers it as
// internal.
func (a *API) databaseErr(ctx context.Context, call rpc.Call, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := wire.AsError(err); ok {
		return err
	}
	named := choirsql.Interpret(err)
	switch {
	case errors.Is(named, choirsql.ErrUnavailable), errors.Is(named, choirsql.ErrSerialization):
		a.logger.WarnContext(ctx, "agent call failed on the database", slog.String("verb", string(call.Verb)),
			slog.String("session_id", call.Session.ID), slog.Any("err", named))
		msg := "the database is unavailable; retry in a moment"
		if errors.Is(named, choirsql.ErrSerialization) {
			msg = "a concurrent change got in the way; retry"
		}
		return wire.Errorf(wire.CodeUnavailable, "%s: %s", call.Verb, msg)
	case errors.Is(named, choirsql.ErrNotFound):
		return codedErr{wire.ErrNotFound, err}
	case errors.Is(named, choirsql.ErrUniqueViolation):
		return codedErr{wire.ErrConflict, err}
	}
	return err
}

// fromDatabase reports whether err came from Postgres: a named error of
// the seam, or any other error the server raised.
func fromDatabase(err error) bool {
	var pe *pgconn.PgError
	named := choirsql.Interpret(err)
	return errors.Is(named, choirsql.ErrUnavailable) || errors.Is(named, choirsql.ErrSerialization) ||
		errors.Is(named, choirsql.ErrNotFound) || errors.Is(named, choirsql.ErrUniqueViolation) || errors.As(err, &pe)
}
