package propose_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/verbatim"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// bareAgentRepo is an agent repository as a bare repository that choird
// clones and pushes to, made from files.
func bareAgentRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	work := choirdtest.GitRepo(t, files)
	bare := filepath.Join(t.TempDir(), "agent.git")
	choirdtest.Git(t, filepath.Dir(bare), "clone", "--quiet", "--bare", work, bare)
	return bare
}

type proposalBundle struct {
	d    *choirdtest.Choird
	repo string
	a    *choirdtest.StandIn
}

func setupProposals(t *testing.T) *proposalBundle {
	t.Helper()
	repo := bareAgentRepo(t, map[string]string{"identity/SOUL.md": "soul\n", "tools/.keep": ""})
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(c *config.Config, _ config.Secrets) {
		choirdtest.FastHeartbeat(c, nil)
		c.DMs["alice"] = config.DM{Gateway: "console", UserID: "alice"}
		c.DMs["bob"] = config.DM{Gateway: "console", UserID: "bob"}
		c.GitIdentities = map[string]config.GitIdentity{"bot": {Name: "Assistant Bot", Email: "bot@example.org"}}
		a := c.Agents["assistant"]
		a.Defaults.DM, a.Defaults.GitIdentity = "alice", "bot"
		a.Repo = config.Repo{URL: repo, Ref: "main"}
		c.Agents["assistant"] = a
		h := c.Agents["helper"]
		h.Defaults.DM, h.Defaults.Workspace = "bob", "other"
		c.Agents["helper"] = h
	}})
	return &proposalBundle{d: d, repo: repo, a: d.StandIn(t, "assistant", admin.StartOverrides{})}
}

func (b *proposalBundle) propose(t *testing.T, reqID, typ, payload string) (rpc.ApprovalResponse, error) {
	t.Helper()
	ctx := client.WithRequestID(context.Background(), reqID)
	return b.a.Client.RequestApproval(ctx, rpc.ApprovalRequest{RequestType: typ, Summary: "s", Payload: json.RawMessage(payload)})
}

// waitState waits for a proposal's outcome in the audit view.
func (b *proposalBundle) waitState(t *testing.T, id string, states ...string) (outcome, step, reason string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		b.d.Pool().QueryRow(context.Background(), `SELECT outcome, step, reason FROM choir_audit.proposals WHERE approval_id = $1`, id).
			Scan(&outcome, &step, &reason)
		for _, s := range states {
			if outcome == s {
				return outcome, step, reason
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("proposal %s: outcome %q at step %q (%s), want %v", id, outcome, step, reason, states)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// messages are the texts queued to the agent's chats, oldest first.
func (b *proposalBundle) messages(t *testing.T, id string) []string {
	t.Helper()
	rows, err := b.d.Pool().Query(context.Background(), `SELECT text FROM choir_control.outbox
		WHERE message_id LIKE 'approval:' || $1 || ':%' ORDER BY outbox_id`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		out = append(out, s)
	}
	return out
}

const helloScript = "#!/bin/sh\nprintf '{\"status\":\"success\",\"summary\":\"hello\",\"output\":{\"greeting\":\"hi\"}}'\n"

func toolProposal(name string) string {
	b, _ := json.Marshal(map[string]any{"change": "add", "name": name, "description": "Say hello.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false},
		"behavior":   "Returns a greeting.", "rationale": "The user wants greetings.",
		"runtime":        map[string]any{"side_effect": "read", "trust": "own", "secret_resources": []string{"weather-key"}},
		"implementation": map[string]string{"content": helloScript}})
	return string(b)
}

// TestToolProposalPipeline: an invalid proposal is refused before anyone
// is asked; a valid one shows its manifest, lock policy, secret scope and
// code in full, with the words of what approval does; another agent's DM
// cannot approve it and nothing is applied before approval; once approved
// it is merged into the repo with the agent's git identity, and the build
// that fails here (no global repo to build from) leaves it approved, not applied,
// reverted, with the step reported to the chat and the audit view.
func TestToolProposalPipeline(t *testing.T) {
	t.Parallel()
	b := setupProposals(t)
	ctx := context.Background()
	head := choirdtest.Git(t, b.repo, "rev-parse", "main")

	bad := strings.Replace(toolProposal("greet.hello"), `"side_effect":"read","trust":"own"`, `"side_effect":"read","trust":"own","locks":[{"resource":"file:{path}","mode":"S"}]`, 1)
	if _, err := b.propose(t, "req-bad", "choir.propose.tool", bad); err == nil || !errors.Is(err, wire.ErrBadRequest) ||
		!strings.Contains(err.Error(), "{path}") {
		t.Fatalf("invalid proposal: %v", err)
	}
	var n int
	b.d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.pending_approvals WHERE agent_id = 'assistant'`).Scan(&n)
	if n != 0 {
		t.Fatalf("an invalid proposal reached a person: %d approvals", n)
	}

	resp, err := b.propose(t, "req-good", "choir.propose.tool", toolProposal("greet.hello"))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ApprovalID
	msgs := b.messages(t, id)
	all := strings.Join(msgs, "\n")
	for _, want := range []string{verbatim.Lines(helloScript), "Secret scope: weather-key", "Lock policy: none", "will be merged", "built and deployed"} {
		if !strings.Contains(all, want) {
			t.Errorf("the person is not shown %q:\n%s", want, all)
		}
	}
	if !strings.Contains(msgs[len(msgs)-1], "requested by assistant") || strings.Contains(all, "Executing") {
		t.Errorf("the request with its buttons must come last, after the full change: %q", msgs)
	}

	if _, err := b.d.Approvals().Decide(ctx, control.Scope{Agent: "helper", DM: "bob", Actor: "telegram:bob"}, id, true); !errors.Is(err, control.ErrForbidden) {
		t.Fatalf("another agent's DM approved: %v", err)
	}
	if got := choirdtest.Git(t, b.repo, "rev-parse", "main"); got != head {
		t.Fatal("the repository changed without an approval")
	}
	if outcome, _, _ := b.waitState(t, id, "pending"); outcome != "pending" {
		t.Fatal(outcome)
	}

	if _, err := b.d.Approvals().Decide(ctx, control.Scope{Agent: "assistant", DM: "alice", Actor: "telegram:alice"}, id, true); err != nil {
		t.Fatal(err)
	}
	_, step, reason := b.waitState(t, id, "approved, not applied")
	if step != "build" || !strings.Contains(reason, "global_repo") || !strings.Contains(reason, "reverted") {
		t.Errorf("step %q reason %q", step, reason)
	}
	var merge string
	b.d.Pool().QueryRow(ctx, `SELECT merge_commit FROM choir_audit.proposals WHERE approval_id = $1 AND decided_by = 'telegram:alice'`, id).Scan(&merge)
	if merge == "" {
		t.Fatal("no merge commit in the audit view")
	}
	if got := choirdtest.Git(t, b.repo, "show", "-s", "--format=%an <%ae>|%B", merge+"^2"); !strings.HasPrefix(got, "Assistant Bot <bot@example.org>|add tool greet.hello") {
		t.Errorf("proposal commit = %q", got)
	}
	if got := choirdtest.Git(t, b.repo, "show", merge+":tools/greet.hello"); got+"\n" != helloScript {
		t.Errorf("merged executable = %q", got)
	}
	if got := choirdtest.Git(t, b.repo, "log", "-1", "--format=%s", "main"); !strings.HasPrefix(got, "Revert") {
		t.Errorf("main after the failed build: %q", got)
	}
	all = strings.Join(b.messages(t, id), "\n")
	for _, want := range []string{"merged into main", "build failed; approved, not applied", "running agent is unchanged"} {
		if !strings.Contains(all, want) {
			t.Errorf("the chat is not told %q:\n%s", want, all)
		}
	}
}

// TestConfigProposal: a config change shows every setting it changes,
// approval settings included, and once approved goes through config load
// and apply; one that fails config validation is refused.
func TestConfigProposal(t *testing.T) {
	t.Parallel()
	b := setupProposals(t)
	ctx := context.Background()
	if _, err := b.propose(t, "req-cfg-bad", "choir.propose.config_change",
		`{"patch":{"agents":{"assistant":{"defaults":{"llm":"nope"}}}},"rationale":"r"}`); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("invalid config change: %v", err)
	}
	resp, err := b.propose(t, "req-cfg", "choir.propose.config_change",
		`{"patch":{"agents":{"assistant":{"budgets":{"max_steps_per_message":7}}}},"rationale":"Fewer steps."}`)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(b.messages(t, resp.ApprovalID), "\n")
	if !strings.Contains(all, "agents.assistant.budgets") || !strings.Contains(all, `"max_steps_per_message":7`) {
		t.Fatalf("the budget setting is not in the diff:\n%s", all)
	}
	if _, err := b.d.Approvals().Decide(ctx, control.Scope{Admin: true, Actor: "choirctl:uid=0"}, resp.ApprovalID, true); err != nil {
		t.Fatal(err)
	}
	b.waitState(t, resp.ApprovalID, "applied")
	if b.d.Snapshot().Config.Agents["assistant"].Budgets.MaxStepsPerMessage != 7 {
		t.Error("the running config does not have the change")
	}
	if all := strings.Join(b.messages(t, resp.ApprovalID), "\n"); !strings.Contains(all, "config applied, version") ||
		!strings.Contains(all, "agents.assistant.budgets") {
		t.Errorf("the chat is not told what took effect:\n%s", all)
	}
	data, _ := os.ReadFile(filepath.Join(b.d.Home, config.ConfigFile))
	if !strings.Contains(string(data), `"max_steps_per_message": 7`) {
		t.Errorf("config.json:\n%s", data)
	}
}

// TestRepoProposalRejectedKeepsBranch: a branch the session pushed is
// shown as a diff; rejected, nothing is merged and the branch stays.
func TestRepoProposalRejectedKeepsBranch(t *testing.T) {
	t.Parallel()
	b := setupProposals(t)
	ctx := context.Background()
	work := filepath.Join(t.TempDir(), "w")
	choirdtest.Git(t, filepath.Dir(work), "clone", "--quiet", b.repo, work)
	branch := "proposal/" + b.a.SessionID + "/soul"
	choirdtest.Git(t, work, "checkout", "-q", "-b", branch)
	os.WriteFile(filepath.Join(work, "identity", "SOUL.md"), []byte("a kinder soul\n"), 0o644)
	choirdtest.Git(t, work, "commit", "-qam", "kinder")
	choirdtest.Git(t, work, "push", "-q", "origin", branch)
	head := choirdtest.Git(t, b.repo, "rev-parse", "main")

	if _, err := b.propose(t, "req-repo-other", "choir.propose.repo_change",
		`{"branch":"proposal/someone-else/soul","rationale":"r"}`); err == nil {
		t.Fatal("a branch of another session was accepted")
	}
	resp, err := b.propose(t, "req-repo", "choir.propose.repo_change", `{"branch":"`+branch+`","rationale":"Be kinder."}`)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(b.messages(t, resp.ApprovalID), "\n")
	for _, want := range []string{"+a kinder soul", "identity/SOUL.md | 2 +-", "will be merged"} {
		if !strings.Contains(all, want) {
			t.Errorf("the person is not shown %q:\n%s", want, all)
		}
	}
	if _, err := b.d.Approvals().Decide(ctx, control.Scope{Agent: "assistant", DM: "alice", Actor: "telegram:alice"}, resp.ApprovalID, false); err != nil {
		t.Fatal(err)
	}
	if got := choirdtest.Git(t, b.repo, "rev-parse", "main"); got != head {
		t.Error("a rejected proposal changed main")
	}
	if outcome, _, _ := b.waitState(t, resp.ApprovalID, "rejected"); outcome != "rejected" {
		t.Error(outcome)
	}
	choirdtest.Git(t, b.repo, "rev-parse", "--verify", "refs/heads/"+branch)
}

// TestLongProposalIsSentWhole: a change longer than one message goes out
// in numbered parts, each one message, before the request; nothing is cut.
func TestLongProposalIsSentWhole(t *testing.T) {
	t.Parallel()
	b := setupProposals(t)
	script := "#!/bin/sh\n" + strings.Repeat("echo 'a line of the tool that the person reads in full'\n", 500)
	var in map[string]any
	json.Unmarshal([]byte(toolProposal("greet.long")), &in)
	in["implementation"] = map[string]string{"content": script}
	raw, _ := json.Marshal(in)
	resp, err := b.propose(t, "req-long", "choir.propose.tool", string(raw))
	if err != nil {
		t.Fatal(err)
	}
	msgs := b.messages(t, resp.ApprovalID)
	if len(msgs) < 4 {
		t.Fatalf("%d messages for a %d-byte script", len(msgs), len(script))
	}
	for i, m := range msgs[:len(msgs)-1] {
		if len(m) > 4096 || !strings.Contains(m, fmt.Sprintf("part %d of %d", i+1, len(msgs)-1)) {
			t.Errorf("part %d: %d bytes, %.60q", i+1, len(m), m)
		}
	}
	var preview string
	b.d.Pool().QueryRow(context.Background(), `SELECT preview FROM choir_audit.proposals WHERE approval_id = $1`, resp.ApprovalID).Scan(&preview)
	if !strings.Contains(preview, verbatim.Lines(script)) {
		t.Error("the recorded preview does not hold the whole script")
	}
	if !strings.Contains(msgs[len(msgs)-1], "message(s) above") {
		t.Errorf("request = %q", msgs[len(msgs)-1])
	}
}

// TestProposalResumesAfterRestart: choird restarts right after the
// approval, wherever the pipeline was; the new choird carries it on to
// the same end, and nothing is applied twice.
func TestProposalResumesAfterRestart(t *testing.T) {
	t.Parallel()
	b := setupProposals(t)
	resp, err := b.propose(t, "req-restart", "choir.propose.tool", toolProposal("greet.again"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.d.Approvals().Decide(context.Background(), control.Scope{Admin: true, Actor: "choirctl:uid=0"}, resp.ApprovalID, true); err != nil {
		t.Fatal(err)
	}
	// The stand-in's session ends first: its heartbeats would find no
	// socket while choird restarts. The pipeline does not need the agent.
	b.a.Terminate(t, "choird restarts")
	b.d = b.d.Restart(t)
	_, step, _ := b.waitState(t, resp.ApprovalID, "approved, not applied")
	if step != "build" {
		t.Errorf("ended at step %q", step)
	}
	merges := choirdtest.Git(t, b.repo, "log", "--format=%H", "--fixed-strings", "--grep", "Choir-Approval: "+resp.ApprovalID, "main")
	reverts := choirdtest.Git(t, b.repo, "log", "--format=%H", "--grep", "^Revert", "main")
	if len(strings.Fields(merges)) != 1 || len(strings.Fields(reverts)) != 1 {
		t.Errorf("merges %q, reverts %q: want one of each", merges, reverts)
	}
}
