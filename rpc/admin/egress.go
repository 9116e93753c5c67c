package admin

import (
	"context"
	"net/http"
	"time"
)

// The paths of choirctl egress: the hosts a person allowed an agent for
// good (/always on an egress approval), and taking one back.
const (
	PathEgressGrants      = "/v1/egress/grants"
	PathAgentEgressRevoke = "/v1/agents/{id}/egress/revoke"
)

// EgressGrant is a host and port an agent's egress gateway lets through
// without asking, since a person approved it for good.
type EgressGrant struct {
	AgentID   string    `json:"agent_id"`
	Host      string    `json:"host"`
	Port      int       `json:"port"`
	GrantedAt time.Time `json:"granted_at"`
}

// EgressRevoke names the grant to take back.
type EgressRevoke struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// EgressGrants lists every agent's grants.
func (c *Client) EgressGrants(ctx context.Context) ([]EgressGrant, error) {
	return call[[]EgressGrant](ctx, c, http.MethodGet, PathEgressGrants, nil)
}

// EgressRevoke takes agentID's grant of r back.
func (c *Client) EgressRevoke(ctx context.Context, agentID string, r EgressRevoke) (EgressGrant, error) {
	return call[EgressGrant](ctx, c, http.MethodPost, Fill(PathAgentEgressRevoke, agentID), r)
}
