package adminapi

import (
	"context"
	"errors"

	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// configErr codes the errors of the configuration commands: a refused
// apply or an empty stage is a conflict with choird's state, which the
// operator resolves as the message says.
func configErr(err error) error {
	var refused *control.ConfigRefusedError
	if errors.As(err, &refused) || errors.Is(err, control.ErrNothingStaged) {
		return codedErr{wire.ErrConflict, err}
	}
	return controlErr(err)
}

func (d *API) mountConfigControl(mux *admin.Mux) {
	admin.Handle(mux, "POST", admin.PathConfigLoad, func(ctx context.Context, _ admin.Empty) (configdiff.DiffReport, error) {
		out, err := d.ConfigLoad(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "GET", admin.PathConfigDiff, func(ctx context.Context, _ admin.Empty) (configdiff.DiffReport, error) {
		out, err := d.ConfigDiff(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "POST", admin.PathConfigApply, func(ctx context.Context, _ admin.Empty) (configdiff.ApplyReport, error) {
		out, err := d.ConfigApply(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "GET", admin.PathConfig, func(ctx context.Context, _ admin.Empty) (admin.ConfigShowResponse, error) {
		sc := adminScope(ctx)
		out, err := d.ConfigShow(ctx, sc)
		if err != nil {
			return admin.ConfigShowResponse{}, configErr(err)
		}
		return admin.ConfigShowResponse{ConfigVersion: d.ConfigVersion(), Config: out}, nil
	})
	admin.Handle(mux, "GET", admin.PathSecrets, func(ctx context.Context, _ admin.Empty) ([]string, error) {
		out, err := d.SecretList(ctx, adminScope(ctx))
		return out, configErr(err)
	})
}
