package egress_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/outbox/outboxtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestApproveAsksTheDM: under egress.unknown approve, a tool's connection
// to a host egress.allow does not name waits while the agent's DM gets a
// card naming the host, the port and the lane's sources; approving lets
// that one connection through, refusing refuses it, and the agent is never
// told an outcome that is choird's own.
func TestApproveAsksTheDM(t *testing.T) {
	t.Parallel()
	ob, svc, b, pc := approvalSetup(t)

	decide := func(approve bool) {
		var id string
		outboxtest.WaitFor(t, "a pending egress approval", func() bool {
			return b.pool.QueryRow(context.Background(), `SELECT approval_id::text FROM choir_control.pending_approvals
				WHERE request_type = 'egress.connect' AND status = 'pending'`).Scan(&id) == nil
		})
		outboxtest.WaitFor(t, "the card in the DM", func() bool {
			for _, m := range ob.TG.SentTo(outboxtest.Chat) {
				if strings.Contains(m.Text, b.upstream) || strings.Contains(m.Text, strings.Split(b.upstream, ":")[0]) {
					return true
				}
			}
			return false
		})
		if _, err := svc.Decide(context.Background(), control.Scope{Admin: true, Actor: "test"}, id, approve); err != nil {
			t.Errorf("decide: %v", err)
		}
	}
	go decide(true)
	code, body, err := get(t, pc, "http://"+b.upstream+"/approved")
	if err != nil || code != 200 || body != "upstream saw GET /approved" {
		t.Fatalf("after approval: %d %q %v", code, body, err)
	}
	go decide(false)
	if code, body, _ := get(t, pc, "http://"+b.upstream+"/refused"); code != 403 || !strings.Contains(body, "not approved") {
		t.Errorf("after refusal: %d %q", code, body)
	}
	var untaken int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.pending_approvals
		WHERE request_type = 'egress.connect' AND outcome_taken_at IS NULL`).Scan(&untaken); err != nil || untaken != 0 {
		t.Errorf("%d egress approvals left for the agent to take (%v), want none", untaken, err)
	}
	rs := b.rows(t, 2)
	if rs[0].decision != "allowed" || rs[1].decision != "refused" {
		t.Errorf("audit %+v", rs)
	}
}

// TestAlwaysRemembersTheHost: the card offers /always; approving for good
// lets the waiting connection through and records the host and port, so
// the next connection there is not asked about; choirctl's revoke takes
// it back, and the one after is asked about again.
func TestAlwaysRemembersTheHost(t *testing.T) {
	t.Parallel()
	ob, svc, b, pc := approvalSetup(t)
	ctx := context.Background()
	asked := func() (n int) {
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.pending_approvals
			WHERE request_type = 'egress.connect'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	pending := func() (id string) {
		outboxtest.WaitFor(t, "a pending egress approval", func() bool {
			return b.pool.QueryRow(ctx, `SELECT approval_id::text FROM choir_control.pending_approvals
				WHERE request_type = 'egress.connect' AND status = 'pending'`).Scan(&id) == nil
		})
		return id
	}
	go func() {
		id := pending()
		outboxtest.WaitFor(t, "the card offering /always", func() bool {
			for _, m := range ob.TG.SentTo(outboxtest.Chat) {
				if strings.Contains(m.Text, "Reply /always") && strings.Contains(m.Text, b.upstream) {
					return true
				}
			}
			return false
		})
		if a, err := svc.Always(ctx, control.Scope{Admin: true, Actor: "test"}, id); err != nil || a.Status != "approved" {
			t.Errorf("always: %+v %v", a, err)
		}
	}()
	if code, body, err := get(t, pc, "http://"+b.upstream+"/first"); err != nil || code != 200 {
		t.Fatalf("the connection approved for good: %d %q %v", code, body, err)
	}
	if code, body, err := get(t, pc, "http://"+b.upstream+"/second"); err != nil || code != 200 || asked() != 1 {
		t.Fatalf("the next connection: %d %q %v, %d approvals asked (want the first only)", code, body, err, asked())
	}
	grants, err := egress.Grants(ctx, b.pool)
	host, port, _ := strings.Cut(b.upstream, ":")
	if err != nil || len(grants) != 1 || grants[0].Host != host || grants[0].AgentID != outboxtest.Agent {
		t.Fatalf("grants %+v %v, want %s for %s", grants, err, b.upstream, outboxtest.Agent)
	}
	p := grants[0].Port
	if _, err := egress.Revoke(ctx, b.pool, outboxtest.Agent, admin.EgressRevoke{Host: host, Port: p + 1}); err == nil {
		t.Errorf("revoking a grant that does not exist (port %d, granted %s) succeeded", p+1, port)
	}
	if _, err := egress.Revoke(ctx, b.pool, outboxtest.Agent, admin.EgressRevoke{Host: host, Port: p}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	go func() {
		if _, err := svc.Decide(ctx, control.Scope{Admin: true, Actor: "test"}, pending(), false); err != nil {
			t.Errorf("reject: %v", err)
		}
	}()
	if code, body, _ := get(t, pc, "http://"+b.upstream+"/third"); code != 403 || asked() != 2 {
		t.Errorf("after the revoke: %d %q, %d approvals asked (want a second)", code, body, asked())
	}
}

// approvalSetup runs a gateway whose unknown hosts are asked about in the
// DM of its agent's session (egress.Approvals on the approvals service,
// with the outbox delivering to a fake Telegram), the upstream allowed by
// netguard, and a client through the tools' proxy.
func approvalSetup(t *testing.T) (*outboxtest.Bundle, *approval.Service, *testBundle, *http.Client) {
	t.Helper()
	ob := outboxtest.Setup(t, gateway.SendLimits{})
	svc := approval.New(ob.Pool, nil)
	egress.RegisterApprovals(svc.Registry)
	client := ob.Start(t, func(w *river.Workers) {
		river.AddWorker(w, &approval.TimeoutWorker{Pool: ob.Pool, Logger: slog.New(slog.DiscardHandler), Kinds: svc.Registry,
			Resolved: svc.Resolved})
	})
	svc.SetJobs(client)
	cfg := &config.Config{
		Gateways: map[string]config.Gateway{outboxtest.Gateway: {Type: config.GatewayTelegram, Secret: "tg-token"}},
		DMs:      map[string]config.DM{outboxtest.DM: {Gateway: outboxtest.Gateway, UserID: "5551"}},
	}
	b := setupWith(t, setupOptions{pool: ob.Pool, agent: outboxtest.Agent, bindings: `{"dm": "` + outboxtest.DM + `"}`,
		approve: func(*testBundle) func(context.Context, egress.ApprovalRequest) (egress.Approval, error) {
			a := &egress.Approvals{Pool: ob.Pool, Registry: svc.Registry, Jobs: client,
				ConfigFunc: func() *config.Config { return cfg }, Poll: 20 * time.Millisecond}
			return a.Ask
		}})
	b.policy.Store(&egress.Policy{AllowHosts: []string{b.upstream}})
	pc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(b.localProxy(t)), DisableKeepAlives: true}}
	return ob, svc, b, pc
}
