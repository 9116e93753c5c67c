package agentapi_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// TestGitTokenStaysInChoird: a session bound to a git identity with a
// token is not bound to the token (the gateway's git route adds it): the
// hello and the dynamic configuration name it among no secrets, and
// GET_SECRETS refuses it.
func TestGitTokenStaysInChoird(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{})
	agent := d.StandIn(t, "assistant", admin.StartOverrides{})
	if agent.Hello.ResourceBindings.GitIdentity != "dev" {
		t.Fatalf("the session is bound to git identity %q, want dev", agent.Hello.ResourceBindings.GitIdentity)
	}
	if s := agent.Hello.ResourceBindings.Secrets; slices.Contains(s, "git-token") {
		t.Errorf("the hello binds the git token: %v", s)
	}
	if dc := fetchDynamic(t, agent.Client); slices.Contains(dc.Secrets, "git-token") || slices.Contains(dc.Secrets, "model-key") {
		t.Errorf("the dynamic config's secrets are %v, want neither the git token nor the model's key", dc.Secrets)
	}
	_, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"git-token"}})
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Errorf("GET_SECRETS git-token: %v, want permission denied", err)
	}
}
