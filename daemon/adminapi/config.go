package adminapi

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// Admin API paths of the configuration and secret commands, for choirctl.
const (
	PathConfig      = "/v1/config"
	PathConfigLoad  = "/v1/config/load"
	PathConfigDiff  = "/v1/config/diff"
	PathConfigApply = "/v1/config/apply"
	PathSecrets     = "/v1/secrets"
)

// ConfigShowResponse is the body of GET /v1/config.
type ConfigShowResponse struct {
	ConfigVersion int64           `json:"config_version"`
	Config        json.RawMessage `json:"config"`
}

// configErr codes the errors of the configuration commands: a refused
// apply or an empty stage is a conflict with choird's state, which the
// operator resolves as the message says.
func configErr(err error) error {
	var refused *control.ConfigRefusedError
	if errors.As(err, &refused) || errors.Is(err, control.ErrNothingStaged) {
		return codedErr{rpc.ErrConflict, err}
	}
	return controlErr(err)
}

func (d *API) mountConfigControl(mux *admin.Mux) {
	admin.Handle(mux, "POST", PathConfigLoad, func(ctx context.Context, _ admin.Empty) (control.ConfigDiff, error) {
		out, err := d.ConfigLoad(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "GET", PathConfigDiff, func(ctx context.Context, _ admin.Empty) (control.ConfigDiff, error) {
		out, err := d.ConfigDiff(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "POST", PathConfigApply, func(ctx context.Context, _ admin.Empty) (control.ConfigApplyResult, error) {
		out, err := d.ConfigApply(ctx, adminScope(ctx))
		return out, configErr(err)
	})
	admin.Handle(mux, "GET", PathConfig, func(ctx context.Context, _ admin.Empty) (ConfigShowResponse, error) {
		sc := adminScope(ctx)
		out, err := d.ConfigShow(ctx, sc)
		if err != nil {
			return ConfigShowResponse{}, configErr(err)
		}
		return ConfigShowResponse{ConfigVersion: d.ConfigVersion(), Config: out}, nil
	})
	admin.Handle(mux, "GET", PathSecrets, func(ctx context.Context, _ admin.Empty) ([]string, error) {
		out, err := d.SecretList(ctx, adminScope(ctx))
		return out, configErr(err)
	})
}
