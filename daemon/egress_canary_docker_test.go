package daemon_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
)

// Canary values of the credentials a container must never hold (issue
// 34): each is unique, so a find names the secret.
const (
	canaryMail   = "mailpw-canary-51c9e2"
	canarySearch = "brave-canary-0d7b44"
	canaryNotion = "secret_notion-canary-93fa"
)

// TestNoCredentialInTheContainer is issue 34's canary test under docker:
// the agent is bound to a model, a mail account, a git identity, a search
// provider and a Notion integration, each with a canary secret; while it
// makes model calls and sends a mail, the environment, command line and
// memory of every process of its container and every file it can reach
// hold none of them, and the model endpoint and the mail server saw
// theirs (choird added them on the way out).
func TestNoCredentialInTheContainer(t *testing.T) {
	t.Parallel()
	cli := runtimetest.RequireDocker(t)
	setup := dockerReachSetup(t, nil)
	mail := mailboxtest.Start(t)
	const from = "assistant@example.com"
	mail.AddUser(t, from, canaryMail)
	mail.AddUser(t, "user@example.com", "user-password")
	setup.edit = func(c *config.Config, s config.Secrets) {
		acct := mail.Account(from)
		acct.AllowedRecipients = []string{"user@example.com"}
		c.EmailAccounts = map[string]config.EmailAccount{"mail": acct}
		c.Search = map[string]config.SearchProvider{"brave": {Secret: "search-key", Endpoint: "http://127.0.0.1:9/res/v1"}}
		c.NotionIntegrations = map[string]config.NotionIntegration{"notes": {Secret: "notion-key", Endpoint: "http://127.0.0.1:9/v1"}}
		a := c.Agents["assistant"]
		a.Defaults.Email, a.Defaults.Notion = "mail", "notes"
		c.Agents["assistant"] = a
		s["mail-secret"], s["search-key"], s["notion-key"] = canaryMail, canarySearch, canaryNotion
	}
	needles := map[string]string{"model key": choirdtest.Canary, "git token": "ghp-test", "mail password": canaryMail,
		"search key": canarySearch, "Notion token": canaryNotion}
	setup.during = func(t *testing.T, run toolRun) {
		finds := runtimetest.ScanContainer(t, cli, runtime.LabelSessionID, run.sessionID, needles)
		slices.Sort(finds)
		if finds = slices.Compact(finds); len(finds) > 0 {
			t.Errorf("credentials inside the agent's container:\n%s", strings.Join(finds, "\n"))
		}
	}
	run := runToolCalls(t, setup, nil,
		llmtest.Call{ID: "exec", Name: "choir.exec", Arguments: `{"command":"env; ls /tmp"}`},
		llmtest.Call{ID: "mail", Name: "choir.email.send",
			Arguments: `{"to":["user@example.com"],"subject":"Notes","text":"The notes you asked for."}`})
	if !slices.ContainsFunc(run.model.Requests(), func(r *llmtest.Request) bool { return r.APIKey == choirdtest.Canary }) {
		t.Errorf("the model endpoint never saw the model key: choird did not add it")
	}
	sent := mail.Sent()
	if len(sent) != 1 || !slices.Contains(sent[0].To, "user@example.com") {
		t.Errorf("mail sent: %+v (result %s), want one to user@example.com: choird logs in with the password", sent, run.results["mail"])
	}
}
