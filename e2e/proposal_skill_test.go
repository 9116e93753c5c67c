package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestSkillBuilderProposal runs the skill-builder skill with the scripted
// model: understand, design, validate, propose, done. The person sees the
// skill's states and file, approves with the button, and choird merges it
// into the agent's repository with the agent's identity; the image build
// then fails (the process runtime builds no images), so the chat is told
// the step and that nothing was deployed, the merge is reverted and the
// running agent is untouched.
func TestSkillBuilderProposal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	work := repoWith(t, map[string]string{"identity/SOUL.md": "agent soul\n"})
	agentRepo := filepath.Join(t.TempDir(), "agent.git")
	gitDir(t, filepath.Dir(agentRepo), "clone", "-q", "--bare", work, agentRepo)
	spec := map[string]any{"name": "triage", "description": "Sort the day's notes.", "initial_state": "read",
		"states": map[string]any{
			"read": map[string]any{"objective": "Read the notes.", "allowed_tools": []string{"choir.fs.read"},
				"transitions": []any{map[string]string{"on": "complete", "to": "done"}}},
			"done": map[string]any{"terminal": true}},
		"max_steps": 5, "interruptible": true}
	args, _ := json.Marshal(map[string]any{"change": "add", "spec": spec, "rationale": "Notes pile up."})
	llm := llmtest.NewServer(t)
	llm.SetResponder(builderModel("triage skill", "skill-builder", "choir.propose.skill", string(args), new(atomic.Pointer[string])))
	e := newTGEnv(t, llm, func(c *config.Config) {
		a := c.Agents["assistant"]
		a.Repo = config.Repo{URL: agentRepo, Ref: "main"}
		c.Agents["assistant"] = a
	})
	e.dumpLogsOnFailure(t, "assistant")
	d := e.runChoird(t)
	st, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: actorAdmin}, "assistant", admin.StartOverrides{})
	if err != nil {
		t.Fatal(err)
	}
	e.bot.SendText(userAlice, "please make me a triage skill")
	request := waitSentTo(t, e.bot, userAlice, "approval request with buttons",
		func(m telegramtest.Message) bool { return len(m.Keyboard()) > 0 })
	texts := strings.Join(sentTexts(e.bot, userAlice), "\n")
	for _, want := range []string{"add skill triage", "- read: Read the notes.", "tools: choir.fs.read; transitions: complete -> done",
		"=== skills/triage.json", "will be merged, built and deployed"} {
		if !strings.Contains(texts, want) {
			t.Errorf("the person is not shown %q:\n%s", want, texts)
		}
	}
	e.bot.PressButton(userAlice, request.MessageID, request.Keyboard()[0][0].Data)
	waitSentTo(t, e.bot, userAlice, "the merge step", containsText("merged into main"))
	failed := waitSentTo(t, e.bot, userAlice, "the failed build", containsText("build failed; approved, not applied"))
	if !strings.Contains(failed.Text, "running agent is unchanged") {
		t.Errorf("failure message = %q", failed.Text)
	}
	if got := gitDir(t, agentRepo, "log", "-1", "--format=%s", "main"); !strings.HasPrefix(got, "Revert") {
		t.Errorf("main after the failed build: %q", got)
	}
	if now, err := d.AgentStatus(ctx, control.Scope{Admin: true, Actor: actorAdmin}, "assistant"); err != nil || now.SessionID != st.SessionID {
		t.Errorf("the running agent changed: %+v, %v", now, err)
	}
}
