package daemon

import (
	"context"
	"errors"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// configErr codes the errors of the configuration commands: a refused
// apply or an empty stage is a conflict with choird's state, which the
// operator resolves as the message says.
func configErr(err error) error {
	var refused *ConfigRefusedError
	if errors.As(err, &refused) || errors.Is(err, ErrNothingStaged) {
		return codedErr{rpc.ErrConflict, err}
	}
	return controlErr(err)
}

func (d *Daemon) mountConfigControl(mux *admin.Mux) {
	admin.Handle(mux, "POST", admin.PathConfigLoad, func(ctx context.Context, _ admin.Empty) (ConfigDiff, error) {
		out, err := d.ConfigLoad(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "GET", admin.PathConfigDiff, func(ctx context.Context, _ admin.Empty) (ConfigDiff, error) {
		out, err := d.ConfigDiff(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "POST", admin.PathConfigApply, func(ctx context.Context, _ admin.Empty) (ConfigApplyResult, error) {
		out, err := d.ConfigApply(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "GET", admin.PathConfig, func(ctx context.Context, _ admin.Empty) (ConfigShowResponse, error) {
		sc := adminScope(ctx)
		out, err := d.ConfigShow(ctx, sc)
		if err != nil {
			return ConfigShowResponse{}, configErr(err)
		}
		return ConfigShowResponse{ConfigVersion: d.runningConfigVersion(), Config: out}, nil
	})
	admin.Handle(mux, "GET", admin.PathSecrets, func(ctx context.Context, _ admin.Empty) ([]string, error) {
		out, err := d.SecretList(ctx, adminScope(ctx))
		return out, configErr(err)
	})
}
