package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	rpcclient "github.com/choirhq/choir/rpc/client"
)

// TestConsoleProposal: a proposal's page shows its whole change as its
// DM was shown it, and the console, an admin, decides a config change
// (which only an admin may).
func TestConsoleProposal(t *testing.T) {
	b := setup(t)
	a := b.d.StandIn(t, "assistant", admin.StartOverrides{})
	resp, err := a.Client.RequestApproval(rpcclient.WithRequestID(context.Background(), "req-cfg"), rpc.ApprovalRequest{
		RequestType: "choir.propose.config_change", Summary: "s",
		Payload: json.RawMessage(`{"patch":{"agents":{"assistant":{"budgets":{"max_steps_per_message":7}}}},"rationale":"Fewer steps."}`)})
	if err != nil {
		t.Fatal(err)
	}
	c, ck := b.loggedIn(t)
	code, page := body(t, c, b.url+"/approvals/"+resp.ApprovalID)
	if code != http.StatusOK || !strings.Contains(page, "<h2>proposal</h2>") || !strings.Contains(page, "agents.assistant.budgets") ||
		!strings.Contains(page, "max_steps_per_message") {
		t.Fatalf("proposal page: HTTP %d\n%s", code, page)
	}
	r := b.post(t, c, "/approvals/"+resp.ApprovalID+"/decide", url.Values{"decision": {"approve"}, "csrf": {b.csrf(t, c)}},
		map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "null"})
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve: HTTP %d", r.StatusCode)
	}
	code, page = body(t, c, b.url+"/approvals/"+resp.ApprovalID)
	if code != http.StatusOK || !strings.Contains(page, "approved by "+b.actorOf(t, ck)) {
		t.Errorf("after approving: HTTP %d\n%s", code, page)
	}
}
