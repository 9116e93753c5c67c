package agentapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/sql/seam"
)

// HandleGetSecrets returns exactly the requested secrets, each of which must
// belong to one of the session's resources and be one choird's egress
// gateway does not add itself (see sessionSecrets).
func (a *API) HandleGetSecrets(ctx context.Context, call rpc.Call, req rpc.GetSecretsRequest) (rpc.GetSecretsResponse, error) {
	id, err := sessionUUID(call)
	if err != nil {
		return rpc.GetSecretsResponse{}, err
	}
	st, err := seam.Queries(a.pool).SessionDynamicState(ctx, id)
	if err != nil {
		return rpc.GetSecretsResponse{}, fmt.Errorf("load session %s: %w", id, err)
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(st.ResourceBindings, &b); err != nil {
		return rpc.GetSecretsResponse{}, fmt.Errorf("session %s bindings: %w", id, err)
	}
	cfg, secrets := a.config()
	gateway := hasGateway(st.Runtime)
	allowed := sessionSecrets(cfg, call.Session.AgentID, b, gateway)
	var denied, added []string
	for _, name := range req.Resources {
		switch {
		case gateway && gatewaySecret(cfg, call.Session.AgentID, b, name):
			added = append(added, name)
		case !slices.Contains(allowed, name):
			denied = append(denied, name)
		}
	}
	if len(added) > 0 {
		a.logger.WarnContext(ctx, "secrets refused: the egress gateway adds them", slog.String("agent_id", call.Session.AgentID),
			slog.String("session_id", call.Session.ID), slog.Any("names", added))
		verb := "is"
		if len(added) > 1 {
			verb = "are"
		}
		return rpc.GetSecretsResponse{}, fmt.Errorf("secret %s %s added by choird's egress gateway and never enters the agent: "+
			"call the service at its route on the gateway (rpc/egress.ServiceURL): %w", strings.Join(added, ", "), verb, wire.ErrPermissionDenied)
	}
	if len(denied) > 0 {
		return rpc.GetSecretsResponse{}, fmt.Errorf("secrets %s are not bound to this session (bound: %s): %w",
			strings.Join(denied, ", "), strings.Join(allowed, ", "), wire.ErrPermissionDenied)
	}
	out := make(rpc.Secrets, len(req.Resources))
	for _, name := range req.Resources {
		v, ok := secrets[name]
		if !ok {
			return rpc.GetSecretsResponse{}, fmt.Errorf("secret %s is not in secrets.json: %w", name, wire.ErrNotFound)
		}
		out[name] = v
	}
	a.logger.InfoContext(ctx, "secrets handed to agent", slog.String("agent_id", call.Session.AgentID),
		slog.String("session_id", call.Session.ID), slog.Any("names", req.Resources))
	return rpc.GetSecretsResponse{Secrets: out}, nil
}

// hasGateway reports whether the agent of a session of runtime goes out
// through choird's egress gateway: every agent choird's runtimes start
// does (runtime.Spec.EgressSocket; the daemon always serves it), one that
// runs in another program's process (session.RuntimeInProcess) does not.
func hasGateway(runtime string) bool { return runtime != session.RuntimeInProcess }

// sessionSecrets lists, sorted, the secrets a session of agentID may
// fetch: those bound at its start (b.Secrets), less, when its agent has
// the gateway, the ones choird's egress gateway adds itself
// (gatewaySecret). A secret bound only as one of the agent's mcp_secrets
// is left out once the running configuration no longer lists it there.
func sessionSecrets(cfg *config.Config, agentID string, b rpc.ResourceBindings, gateway bool) []string {
	out := slices.DeleteFunc(slices.Clone(b.Secrets), func(name string) bool {
		if gateway && gatewaySecret(cfg, agentID, b, name) {
			return true
		}
		return slices.Contains(b.MCPSecrets, name) && !slices.Contains(cfg.Agents[agentID].MCPSecrets, name) &&
			!boundElsewhere(cfg, b, name)
	})
	slices.Sort(out)
	return slices.Compact(out)
}

// gatewaySecret reports whether name is a secret that choird's egress
// gateway adds to the agent's calls itself (issue 34): a model's, a search
// provider's, a TTS provider's, a Notion integration's, that of one of
// the agent's MCP servers (agents.<id>.mcp_servers), the bound email
// account's password (the mail route sends and reads the mail) and the
// bound git identity's token (the git route). choird starts every agent
// it starts with the gateway (hasGateway), so these never enter such an
// agent. What remains to hand over are the agent's mcp_secrets that no
// MCP server names: the secrets of its external tools.
func gatewaySecret(cfg *config.Config, agentID string, b rpc.ResourceBindings, name string) bool {
	if name == "" {
		return false
	}
	secrets := []string{cfg.GitIdentities[b.GitIdentity].Secret, cfg.EmailAccounts[b.Email].Secret}
	for _, m := range cfg.Models {
		secrets = append(secrets, m.Secret)
	}
	for _, sp := range cfg.Search {
		secrets = append(secrets, sp.Secret)
	}
	for _, t := range cfg.TTS {
		secrets = append(secrets, t.Secret)
	}
	for _, n := range cfg.NotionIntegrations {
		secrets = append(secrets, n.Secret)
	}
	for _, m := range cfg.Agents[agentID].MCPServers {
		secrets = append(secrets, m.Secret)
	}
	return slices.Contains(secrets, name)
}

// boundElsewhere reports whether name is the secret of a resource b binds
// that an agent without the gateway (session.RuntimeInProcess) uses
// itself: the git identity's token, the email account's password.
func boundElsewhere(cfg *config.Config, b rpc.ResourceBindings, name string) bool {
	return slices.Contains([]string{cfg.GitIdentities[b.GitIdentity].Secret, cfg.EmailAccounts[b.Email].Secret}, name)
}
