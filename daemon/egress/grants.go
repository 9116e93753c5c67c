package egress

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/hostpattern"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Grants lists the hosts people allowed for good (/always on an egress
// approval), every agent's, oldest first.
func Grants(ctx context.Context, pool *pgxpool.Pool) ([]admin.EgressGrant, error) {
	rows, err := seam.Queries(pool).EgressGrantList(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list egress grants: %w", err)
	}
	out := make([]admin.EgressGrant, len(rows))
	for i, r := range rows {
		out[i] = admin.EgressGrant{AgentID: r.AgentID, Host: r.Host, Port: int(r.Port), GrantedAt: r.GrantedAt}
	}
	return out, nil
}

// Revoke takes agentID's grant of host and port back: the next
// connection there is decided by egress.unknown again (asked about,
// under approve). A grant that does not exist is an error wrapping
// choirsql.ErrNotFound that lists how to find the grants.
func Revoke(ctx context.Context, pool *pgxpool.Pool, agentID string, r admin.EgressRevoke) (admin.EgressGrant, error) {
	host := hostpattern.Normalize(r.Host)
	n, err := seam.Queries(pool).EgressGrantRevoke(ctx, db.EgressGrantRevokeParams{AgentID: agentID, Host: host,
		Port: int32(r.Port)})
	if err != nil {
		return admin.EgressGrant{}, fmt.Errorf("revoke egress grant: %w", err)
	}
	if n == 0 {
		return admin.EgressGrant{}, fmt.Errorf("agent %s has no grant for %s (choirctl egress grants lists them): %w",
			agentID, net.JoinHostPort(host, strconv.Itoa(r.Port)), choirsql.ErrNotFound)
	}
	return admin.EgressGrant{AgentID: agentID, Host: host, Port: r.Port}, nil
}
