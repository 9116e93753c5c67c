package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool/notion/notiontest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestNotionThroughTheAgent has the agent (a child process of choird)
// search its leased Notion integration and read the page it found, by the
// id the search returned, against a local server speaking the Notion
// protocol: every request carries the integration's secret, which the
// agent resolved from its binding, and the model sees the flattened page.
func TestNotionThroughTheAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	toolResult := func(want string) func(testing.TB, *llmtest.Request) {
		return func(t testing.TB, r *llmtest.Request) {
			if m := r.Last(); m.Role != "tool" || !strings.Contains(m.Content, want) {
				t.Errorf("the model got %s %q, want a tool result containing %q", m.Role, m.Content, want)
			}
		}
	}
	llm := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "n1", Name: "choir.notion.query", Arguments: `{"action": "search", "query": "travel", "object": "page"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "n2", Name: "choir.notion.query",
			Arguments: fmt.Sprintf(`{"action": "read_page", "page_id": %q}`, notiontest.PageID)}).Expect(toolResult(notiontest.PageID)),
		llmtest.Text("Your flights are booked.").Expect(toolResult("Flights are booked.")),
		summaryReply,
	)
	fake := notiontest.NewServer(t)
	h := choirdtest.WriteHome(t, choirdtest.Options{ModelEndpoint: llm.BaseURL(), FastHeartbeat: true,
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			cfg.Gateways[gatewayTG] = config.Gateway{Type: config.GatewayTelegram, Secret: "telegram-bot"}
			secrets["telegram-bot"] = botToken
			cfg.DMs[dmAlice] = config.DM{Gateway: gatewayTG, UserID: fmt.Sprint(userAlice)}
			cfg.NotionIntegrations = map[string]config.NotionIntegration{
				"notes": {Secret: "notion-notes", Endpoint: fake.URL()},
			}
			secrets["notion-notes"] = fake.Token
			a := cfg.Agents["assistant"]
			a.Defaults.DM, a.Defaults.Notion = dmAlice, "notes"
			cfg.Agents["assistant"] = a
		}})
	srv := telegramtest.NewServer(t)
	e := &tgEnv{Home: h, tg: srv, bot: srv.AddBot(botToken, botName), llm: llm}
	t.Cleanup(func() { killAgents(t, h.Dir) })
	e.dumpLogsOnFailure(t, "assistant")
	d := e.runChoird(t)
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: actorAdmin}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}

	e.bot.SendText(userAlice, "what do my travel plans say?")
	waitSentTo(t, e.bot, userAlice, "the reply", containsText("flights are booked"))

	reqs, auths := fake.Requests(), fake.Authorizations()
	if len(reqs) < 3 || reqs[0] != "POST /search" || reqs[1] != "GET /pages/"+notiontest.PageID {
		t.Errorf("Notion requests %q", reqs)
	}
	for i, a := range auths {
		if a != "Bearer "+fake.Token {
			t.Errorf("request %d (%s) carried %q, not the integration's secret", i, reqs[i], a)
		}
	}
	stopAgent(t, d.Daemon, "assistant")
	llm.Done()
}
