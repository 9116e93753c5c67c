package daemon_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/gittest"
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
// makes model calls, sends a mail and pushes with git from choir.exec (the
// host's git, copied into the image), the environment, command line and
// memory of every process of its container and every file it can reach
// hold none of them, and the model endpoint, the mail server and the git
// remote saw theirs (choird added them on the way out).
func TestNoCredentialInTheContainer(t *testing.T) {
	t.Parallel()
	cli := runtimetest.RequireDocker(t)
	const gitToken = "ghp-canary-3e8d17"
	remote := gittest.NewServer(t, gitToken)
	remote.Init(t, "team/app.git")
	setup := dockerReachSetup(t, hostGit(t))
	setup.opts.ServiceTransport = remote.Transport()
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
		gi := c.GitIdentities["dev"]
		gi.Hosts = []string{remote.Host()}
		c.GitIdentities["dev"] = gi
		s["git-token"] = gitToken
		s["mail-secret"], s["search-key"], s["notion-key"] = canaryMail, canarySearch, canaryNotion
	}
	needles := map[string]string{"model key": choirdtest.Canary, "git token": gitToken, "mail password": canaryMail,
		"search key": canarySearch, "Notion token": canaryNotion}
	setup.during = func(t *testing.T, run toolRun) {
		finds := runtimetest.ScanContainer(t, cli, runtime.LabelSessionID, run.sessionID, needles)
		slices.Sort(finds)
		if finds = slices.Compact(finds); len(finds) > 0 {
			t.Errorf("credentials inside the agent's container:\n%s", strings.Join(finds, "\n"))
		}
	}
	run := runToolCalls(t, setup, nil,
		llmtest.Call{ID: "exec", Name: "choir.exec", Arguments: `{"command":"cd /tmp && git init -q -b main r && cd r && ` +
			`echo hello > f && git add f && git commit -qm 'pushed by the agent' && git push -q https://` + remote.Host() +
			`/team/app.git main 2>&1 && echo pushed","timeout_ms":120000}`},
		llmtest.Call{ID: "mail", Name: "choir.email.send",
			Arguments: `{"to":["user@example.com"],"subject":"Notes","text":"The notes you asked for."}`})
	if !slices.ContainsFunc(run.model.Requests(), func(r *llmtest.Request) bool { return r.APIKey == choirdtest.Canary }) {
		t.Errorf("the model endpoint never saw the model key: choird did not add it")
	}
	t.Logf("choir.exec: %s", run.results["exec"])
	if got := remote.Log(t, "team/app.git", "main"); got != "pushed by the agent" {
		t.Errorf("the remote's main is %q, want the agent's commit (choir.exec: %s)", got, run.results["exec"])
	}
	for _, r := range remote.Requests() {
		if !r.Authorized {
			t.Errorf("%s %s reached the remote without the token", r.Method, r.Path)
		}
	}
	sent := mail.Sent()
	if len(sent) != 1 || !slices.Contains(sent[0].To, "user@example.com") {
		t.Errorf("mail sent: %+v (result %s), want one to user@example.com: choird logs in with the password", sent, run.results["mail"])
	}
}

// hostGit is the host's git for the agent's image: git itself, the helper
// that speaks smart HTTP, and the shared libraries ldd says they load, at
// the paths they have on the host.
func hostGit(t *testing.T) map[string]runtimetest.File {
	t.Helper()
	files := map[string]runtimetest.File{}
	for bin, at := range map[string]string{"/usr/bin/git": "bin/git",
		"/usr/lib/git-core/git-remote-http": "usr/lib/git-core/git-remote-http"} {
		files[at] = runtimetest.File{Source: bin, Mode: 0o755}
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			t.Fatalf("ldd %s (apt-get install git): %v", bin, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				real, err := filepath.EvalSymlinks(f)
				if err != nil {
					t.Fatal(err)
				}
				files[strings.TrimPrefix(f, "/")] = runtimetest.File{Source: real, Mode: 0o755}
			}
		}
	}
	return files
}
