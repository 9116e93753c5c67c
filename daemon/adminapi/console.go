package adminapi

import (
	"context"
	"fmt"

	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// consoleOff answers choirctl console when choird serves no console,
// saying why (problem) and what to do.
func consoleOff(problem string) error {
	return codedErr{wire.ErrUnavailable, fmt.Errorf(`choird serves no web console (%s): add "console": {"listen": "127.0.0.1:7780"} `+
		"to config.json, or fix what stopped it, and restart choird", problem)}
}

// mountConsole serves choirctl console: the admin socket is the console's
// trust root, so whoever reaches it gets a one-time login link, and lists
// and revokes the console's sessions.
func mountConsole(mux *admin.Mux, logins *login.Store, problem string) {
	admin.Handle(mux, "POST", admin.PathConsoleLogin, func(ctx context.Context, _ admin.Empty) (admin.ConsoleLogin, error) {
		if logins == nil {
			return admin.ConsoleLogin{}, consoleOff(problem)
		}
		out, err := logins.Issue(ctx, adminScope(ctx).Actor)
		return out, controlErr(err)
	})
	admin.Handle(mux, "GET", admin.PathConsoleSessions, func(ctx context.Context, _ admin.Empty) ([]admin.ConsoleSession, error) {
		if logins == nil {
			return nil, consoleOff(problem)
		}
		out, err := logins.List(ctx)
		return out, controlErr(err)
	})
	admin.Handle(mux, "POST", admin.PathConsoleSessionRevoke, func(ctx context.Context, _ admin.Empty) (admin.ConsoleRevoked, error) {
		if logins == nil {
			return admin.ConsoleRevoked{}, consoleOff(problem)
		}
		prefix := admin.PathValue(ctx, "id")
		ids, err := logins.Revoke(ctx, prefix, adminScope(ctx).Actor)
		if err != nil {
			return admin.ConsoleRevoked{}, controlErr(err)
		}
		if len(ids) == 0 {
			return admin.ConsoleRevoked{}, codedErr{wire.ErrNotFound,
				fmt.Errorf("no live console session's id starts with %q (choirctl console sessions lists them)", prefix)}
		}
		return admin.ConsoleRevoked{Revoked: ids}, nil
	})
}
