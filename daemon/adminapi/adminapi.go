// Package adminapi is the admin socket's handlers: the paths choirctl
// calls, each decoded, run through the control layer with the scope of
// the peer (an admin, named by its uid), and its error given the code
// choirctl shows it with; choird's status; and the web console's logins
// (the admin socket is their trust root).
package adminapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/schedule"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/daemon/usage"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
)

// Options configure the admin API's handlers.
type Options struct {
	Control *control.Control
	// Approvals serves choirctl approval.
	Approvals *approval.Service
	// Chat serves choirctl chat.
	Chat *inbox.Inbox
	Pool *pgxpool.Pool
	// Memory is the memory store whose state status reports; nil before
	// it runs.
	Memory *memory.Store
	// Version and StartedAt are choird's, for status.
	Version   string
	StartedAt time.Time
	// Schedules serves choirctl schedule.
	Schedules *schedule.Service
	// Usage serves choirctl usage.
	Usage *usage.Service
	// ConsoleLogins serves choirctl console; nil when choird serves no
	// web console, and ConsoleProblem then says why.
	ConsoleLogins  *login.Store
	ConsoleProblem string
}

// API serves choirctl's requests: each handler calls the control layer
// with an admin scope and codes its errors for the wire.
type API struct {
	*control.Control
	approvals *approval.Service
	chat      *inbox.Inbox
	pool      *pgxpool.Pool
	memory    *memory.Store
	version   string
	startedAt time.Time
}

// Mount registers every admin handler on mux.
func Mount(mux *admin.Mux, o Options) {
	d := &API{Control: o.Control, approvals: o.Approvals, chat: o.Chat, pool: o.Pool, memory: o.Memory, version: o.Version, startedAt: o.StartedAt}
	admin.Handle(mux, "GET", admin.PathStatus, func(ctx context.Context, _ admin.Empty) (admin.StatusResponse, error) {
		return d.status(ctx), nil
	})
	d.mountControl(mux)
	d.mountMemory(mux)
	d.mountEgress(mux)
	mountSchedules(mux, o.Schedules)
	mountUsage(mux, o.Usage)
	mountConsole(mux, o.ConsoleLogins, o.ConsoleProblem)
}

// adminScope is the scope of a choirctl request: admin, named by the
// peer's uid.
func adminScope(ctx context.Context) control.Scope {
	actor := "choirctl"
	if p, ok := admin.PeerFromContext(ctx); ok {
		actor = fmt.Sprintf("choirctl:uid=%d", p.UID)
	}
	return control.Scope{Admin: true, Actor: actor}
}

// codedErr carries a control error with the rpc sentinel that picks its
// code, without adding the sentinel's text to the message.
type codedErr struct{ code, err error }

func (e codedErr) Error() string   { return e.err.Error() }
func (e codedErr) Unwrap() []error { return []error{e.code, e.err} }

// controlErr gives a control error the code choirctl shows it with; the
// message, which says what to do, is kept as it is. The control layer's
// own kinds come first; a database error goes by databaseErr; anything
// else is a request the control layer refused.
func controlErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, control.ErrForbidden):
		return codedErr{wire.ErrPermissionDenied, err}
	case errors.Is(err, session.ErrUnknownResource):
		return codedErr{wire.ErrNotFound, err}
	case errors.Is(err, session.ErrLeaseConflict):
		return codedErr{wire.ErrConflict, err}
	case errors.Is(err, runtime.ErrEngineUnreachable):
		return codedErr{wire.ErrUnavailable, err}
	}
	if err, ok := databaseErr(err); ok {
		return err
	}
	return codedErr{wire.ErrBadRequest, err}
}

// databaseErr codes an error that came from Postgres, named at the seam
// (choirsql.Interpret), and reports whether err was one. An outage or a
// lost serialization race is unavailable, and the message says to retry;
// a missing row no handler expected is not_found, a duplicate a conflict;
// any other database error is internal (admin.Handle logs it), never the
// client's bad request.
func databaseErr(err error) (error, bool) {
	named := choirsql.Interpret(err)
	var pe *pgconn.PgError
	switch {
	case errors.Is(named, choirsql.ErrUnavailable):
		return codedErr{wire.ErrUnavailable, fmt.Errorf("%w; choird cannot reach its database now, retry when Postgres is back", named)}, true
	case errors.Is(named, choirsql.ErrSerialization):
		return codedErr{wire.ErrUnavailable, fmt.Errorf("%w; a concurrent change got in the way, retry", named)}, true
	case errors.Is(named, choirsql.ErrNotFound):
		return codedErr{wire.ErrNotFound, err}, true
	case errors.Is(named, choirsql.ErrUniqueViolation):
		return codedErr{wire.ErrConflict, err}, true
	case errors.As(err, &pe):
		return err, true
	}
	return err, false
}

func (d *API) mountControl(mux *admin.Mux) {
	admin.Handle(mux, "GET", admin.PathAgents, func(ctx context.Context, _ admin.Empty) ([]admin.AgentStatus, error) {
		out, err := d.AgentList(ctx, adminScope(ctx))
		return out, controlErr(err)
	})
	admin.Handle(mux, "GET", admin.PathAgent, func(ctx context.Context, _ admin.Empty) (admin.AgentStatus, error) {
		out, err := d.AgentStatus(ctx, adminScope(ctx), admin.PathValue(ctx, "id"))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentStart, func(ctx context.Context, o admin.StartOverrides) (admin.AgentStatus, error) {
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
	admin.Handle(mux, "POST", admin.PathAgentBuild, func(ctx context.Context, in admin.BuildRequest) (admin.BuildResult, error) {
		out, err := d.AgentBuild(ctx, adminScope(ctx), admin.PathValue(ctx, "id"), in.Force)
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentUpdate, func(ctx context.Context, _ admin.Empty) (admin.UpdateResult, error) {
		out, err := d.AgentUpdate(ctx, adminScope(ctx), admin.PathValue(ctx, "id"))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentUpdateAll, func(ctx context.Context, _ admin.Empty) ([]admin.UpdateResult, error) {
		out, err := d.AgentUpdateAll(ctx, adminScope(ctx))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathSecretApply, func(ctx context.Context, _ admin.Empty) (admin.SecretApplyResult, error) {
		out, err := d.SecretApply(ctx, adminScope(ctx))
		return out, controlErr(err)
	})
	admin.Handle(mux, "GET", admin.PathWorkspaces, func(ctx context.Context, _ admin.Empty) ([]admin.WorkspaceInfo, error) {
		out, err := d.WorkspaceList(ctx, adminScope(ctx))
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathWorkspaceReset, func(ctx context.Context, _ admin.Empty) (admin.WorkspaceInfo, error) {
		out, err := d.WorkspaceReset(ctx, adminScope(ctx), admin.PathValue(ctx, "name"))
		return out, controlErr(err)
	})
	d.mountConfigControl(mux)
	d.mountChat(mux)
	d.mountSessionControl(mux)
}
