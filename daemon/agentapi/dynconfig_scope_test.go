package agentapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// TestDynamicConfigCarriesOnlyOwnResources checks that the dynamic
// configuration an agent fetches names only the email account, git
// identity and Notion integration its own session is bound to: another
// agent's mail servers, policy and secret names, or its git hosts and
// token name, are none of a compromised agent's business.
func TestDynamicConfigCarriesOnlyOwnResources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(c *config.Config, secrets config.Secrets) {
		mail := func(addr, secret string) config.EmailAccount {
			return config.EmailAccount{SMTPHost: "127.0.0.1", SMTPPort: 2525, IMAPHost: "127.0.0.1", IMAPPort: 1143,
				Sharing: config.EmailExclusive, Secret: secret, EmailPolicy: config.EmailPolicy{Address: addr, TLS: "none"}}
		}
		c.EmailAccounts = map[string]config.EmailAccount{
			"assistant-mail": mail("assistant@choir.local", "assistant-mail-pw"),
			"helper-mail":    mail("helper@choir.local", "helper-mail-pw"),
		}
		secrets["assistant-mail-pw"], secrets["helper-mail-pw"] = "pw-a", "pw-h"
		c.GitIdentities["helper-git"] = config.GitIdentity{Name: "Helper", Email: "helper@choir.local",
			Secret: "helper-git-token", Hosts: []string{"git.helper.example"}}
		secrets["helper-git-token"] = "ghp-helper"
		c.NotionIntegrations = map[string]config.NotionIntegration{
			"assistant-notion": {Secret: "assistant-notion-key"}, "helper-notion": {Secret: "helper-notion-key"}}
		secrets["assistant-notion-key"], secrets["helper-notion-key"] = "n-a", "n-h"
		a, h := c.Agents["assistant"], c.Agents["helper"]
		a.Defaults.Email, a.Defaults.Notion = "assistant-mail", "assistant-notion"
		h.Defaults.Email, h.Defaults.GitIdentity, h.Defaults.Notion = "helper-mail", "helper-git", "helper-notion"
		c.Agents["assistant"], c.Agents["helper"] = a, h
	}})
	agent := d.StandIn(t, "assistant", admin.StartOverrides{})
	got, err := agent.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var dc rpc.DynamicConfig
	if err := json.Unmarshal(got.Config, &dc); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		got  []string
		want []string
	}{
		{"email accounts", slices.Sorted(maps.Keys(dc.EmailAccounts)), []string{"assistant-mail"}},
		{"git identities", slices.Sorted(maps.Keys(dc.GitIdentities)), []string{"dev"}},
		{"notion integrations", slices.Sorted(maps.Keys(dc.NotionIntegrations)), []string{"assistant-notion"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("assistant's dynamic config carries %s %v, want only its own %v", c.what, c.got, c.want)
		}
	}
	for _, name := range []string{"helper-mail", "helper-git", "git.helper.example", "helper-notion"} {
		if strings.Contains(string(got.Config), name) {
			t.Errorf("assistant's dynamic config names the helper's %s: %s", name, got.Config)
		}
	}
}

// TestMCPSecretsFollowTheConfig: choird binds the agent's mcp_secrets to
// its session as the MCP scope (the only secrets its MCP servers may
// receive), hands one out only while agents.<id>.mcp_secrets lists it,
// and stops when an admin takes it out of the list.
func TestMCPSecretsFollowTheConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(c *config.Config, secrets config.Secrets) {
		a := c.Agents["assistant"]
		a.MCPSecrets = []string{"mcp-token"}
		c.Agents["assistant"] = a
		secrets["mcp-token"] = "mcp-v"
	}})
	agent := d.StandIn(t, "assistant", admin.StartOverrides{})
	if got := agent.Hello.ResourceBindings.MCPSecrets; !slices.Equal(got, []string{"mcp-token"}) {
		t.Fatalf("the session's MCP scope = %v, want [mcp-token]", got)
	}
	if got, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"mcp-token"}}); err != nil ||
		got.Secrets["mcp-token"] != "mcp-v" {
		t.Fatalf("GET_SECRETS mcp-token while listed: %v", err)
	}

	cfg, secrets, err := config.Load(d.Home)
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Agents["assistant"]
	a.MCPSecrets = nil
	cfg.Agents["assistant"] = a
	if err := config.WriteFiles(d.Home, cfg, secrets, true); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"config", "load"}, {"config", "apply"}} {
		if code, out, errs := choirctltest.Run(t, d.Home, args...); code != 0 {
			t.Fatalf("choirctl %v: %d %s %s", args, code, out, errs)
		}
	}
	if _, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"mcp-token"}}); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Errorf("GET_SECRETS mcp-token after it left mcp_secrets: %v, want permission denied", err)
	}
	got, err := agent.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var dc rpc.DynamicConfig
	if err := json.Unmarshal(got.Config, &dc); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(dc.Secrets, "mcp-token") {
		t.Errorf("the dynamic config still lists mcp-token: %v", dc.Secrets)
	}
}

// TestMCPServerSecretStaysWithChoird: the secret of an MCP server that
// agents.<id>.mcp_servers names is added by choird's egress gateway, so
// the session neither lists it nor gets it; another of mcp_secrets (an
// external tool's, say) is still handed over.
func TestMCPServerSecretStaysWithChoird(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(c *config.Config, secrets config.Secrets) {
		a := c.Agents["assistant"]
		a.MCPSecrets = []string{"mcp-token", "tool-token"}
		a.MCPServers = map[string]config.MCPServer{"pay": {URL: "https://mcp.example/pay", Secret: "mcp-token"}}
		c.Agents["assistant"] = a
		secrets["mcp-token"], secrets["tool-token"] = "mcp-v", "tool-v"
	}})
	agent := d.StandIn(t, "assistant", admin.StartOverrides{})
	if got := agent.Hello.ResourceBindings.Secrets; !slices.Equal(got, []string{"tool-token"}) {
		t.Errorf("the hello lists %v, want tool-token alone", got)
	}
	_, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"mcp-token"}})
	if !errors.Is(err, wire.ErrPermissionDenied) || !strings.Contains(err.Error(), "added by choird's egress gateway") {
		t.Errorf("GET_SECRETS of the MCP server's secret: %v, want a refusal naming the egress gateway", err)
	}
	if got, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"tool-token"}}); err != nil ||
		got.Secrets["tool-token"] != "tool-v" {
		t.Errorf("GET_SECRETS tool-token: %v", err)
	}
}

// TestInProcessAgentGetsTheServiceKeys: an agent that runs in another
// program's process (session.RuntimeInProcess) has no egress gateway, so
// choird lists and hands it the model's key, which it withholds from
// every agent its runtimes start.
func TestInProcessAgentGetsTheServiceKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{})
	s, err := session.CreateSession(ctx, d.Pool(), d.Snapshot().Config, "assistant", admin.StartOverrides{}, d.ConfigVersion(),
		session.RuntimeInProcess)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Options{Socket: d.Socket(), SessionID: s.Session.ID.String(), LeaseToken: s.LeaseToken})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	hello, err := cl.InitHello(ctx, choirdtest.HelloRequest(s))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(hello.ResourceBindings.Secrets, "model-key") {
		t.Errorf("the hello lists %v, want the model's key among them", hello.ResourceBindings.Secrets)
	}
	got, err := cl.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"model-key"}})
	if err != nil || got.Secrets["model-key"] != choirdtest.Canary {
		t.Errorf("GET_SECRETS model-key: %v", err)
	}
}
