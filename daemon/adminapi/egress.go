package adminapi

import (
	"context"

	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/rpc/admin"
)

// mountEgress serves choirctl egress: the hosts allowed for good, and
// taking one back.
func (d *API) mountEgress(mux *admin.Mux) {
	admin.Handle(mux, "GET", admin.PathEgressGrants, func(ctx context.Context, _ admin.Empty) ([]admin.EgressGrant, error) {
		out, err := egress.Grants(ctx, d.pool)
		return out, sessionErr(err)
	})
	admin.Handle(mux, "POST", admin.PathAgentEgressRevoke, func(ctx context.Context, r admin.EgressRevoke) (admin.EgressGrant, error) {
		agentID := admin.PathValue(ctx, "id")
		if err := d.KnownAgent(agentID); err != nil {
			return admin.EgressGrant{}, sessionErr(err)
		}
		out, err := egress.Revoke(ctx, d.pool, agentID, r)
		return out, sessionErr(err)
	})
}
