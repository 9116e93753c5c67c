package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
	"github.com/choirhq/choir/rpc/admin"
)

// mailerModel is the model of TestApprovalActsAtOnce: asked to "send
// report N" it calls choir.email.send, on an account that requires
// approval, and says it asked; given a turn of its own after Choir ran an
// approved send, it reports that report N went out, and counts such turns
// per report.
type mailerModel struct {
	mu    sync.Mutex
	wakes map[string]int
	sent  map[string]string // report -> the send's result, as the model saw it
}

var (
	askedReport    = regexp.MustCompile(`send report (\d+)`)
	approvedReport = regexp.MustCompile(`Report (\d+)`)
)

func (m *mailerModel) respond(_ context.Context, r *llmtest.Request) llmtest.Step {
	last := r.Last()
	switch {
	case strings.Contains(last.Content, "session summary"):
		return llmtest.Text("The session went as planned.")
	case last.Role == "user" && askedReport.MatchString(last.Content):
		n := askedReport.FindStringSubmatch(last.Content)[1]
		args, _ := json.Marshal(map[string]any{"to": []string{"bob@ext.test"}, "subject": "Report " + n,
			"text": "Here is report " + n + "."})
		return llmtest.ToolCalls(llmtest.Call{Name: "choir.email.send", Arguments: string(args)})
	case last.Role == "tool" && strings.Contains(last.Content, "pending_approval"):
		return llmtest.Text("I asked you to approve the mail.")
	case last.Role == "system" && strings.Contains(last.Content, "No new message from the user"):
		// The turn an approved call started: the result, then the
		// approval it ran under, naming the report.
		var result, report string
		for i := len(r.Messages) - 2; i >= 0 && report == ""; i-- {
			c := r.Messages[i].Content
			switch {
			case result == "" && strings.Contains(c, "Choir ran the approved choir.email.send call"):
				result = c
			case result != "" && approvedReport.MatchString(c):
				report = approvedReport.FindStringSubmatch(c)[1]
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.wakes[report]++
		m.sent[report] = result
		return llmtest.Text("Reported: report " + report + " went out.")
	}
	return llmtest.Text("ok")
}

func (m *mailerModel) woke(report string) (int, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.wakes[report], m.sent[report]
}

// TestApprovalActsAtOnce is issue 31's "approvals act at once", under each
// runtime, on an email account that requires approval: a mail approved
// while the agent is idle is sent at once, once, and the agent tells the
// DM with no further message from the user; one approved while the agent
// is stopped is sent when it is back, and told; a rejection and a timeout
// reach the DM once each (choird's notice), reach the agent's log once,
// send nothing and start no model turn.
func TestApprovalActsAtOnce(t *testing.T) {
	t.Parallel()
	for _, rt := range []string{"process", "docker"} {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			approvalActsAtOnce(t, rt)
		})
	}
}

// wakeEnv is one run of the test: choird with the fake Telegram, the mail
// servers and the model.
type wakeEnv struct {
	*tgEnv
	d     *choirdtest.Choird
	mail  *mailboxtest.Server
	model *mailerModel
	pool  *pgxpool.Pool
}

func approvalActsAtOnce(t *testing.T, runtime string) {
	ctx := context.Background()
	w := startWakeEnv(t, runtime)
	sc := control.Scope{Admin: true, Actor: actorAdmin}

	// Approved while the agent is idle: it is sent at once and told.
	req, id := w.ask(t, "1")
	w.bot.PressButton(userAlice, req.MessageID, req.Keyboard()[0][0].Data)
	waitSentTo(t, w.bot, userAlice, "the agent's report of the approved mail", containsText("Reported: report 1 went out."))
	w.checkSentOnce(t, "1")
	if n, result := w.model.woke("1"); n != 1 || !strings.Contains(result, `"status":"sent"`) {
		t.Errorf("approved mail: %d turns of the agent's own, the send's result %q; want one, sent", n, result)
	}
	w.waitTaken(t, id)

	// Rejected: choird tells the DM, once; the agent notes it, once, and
	// sends nothing.
	req, id = w.ask(t, "2")
	w.bot.PressButton(userAlice, req.MessageID, req.Keyboard()[0][1].Data)
	w.waitTaken(t, id)
	w.checkToldOnce(t, "2", "Rejected:")

	// Timed out: likewise. The test runs the timeout job itself rather
	// than wait out the approval timeout.
	_, id = w.ask(t, "3")
	w.expire(t, id)
	w.waitTaken(t, id)
	w.checkToldOnce(t, "3", "Approval timed out")

	// Approved while the agent is stopped: sent when it is back, and told.
	req, id = w.ask(t, "4")
	stopAgent(t, w.d.Daemon, "assistant")
	w.d.WaitState(t, "assistant", admin.AgentStopped)
	w.bot.PressButton(userAlice, req.MessageID, req.Keyboard()[0][0].Data)
	waitSentTo(t, w.bot, userAlice, "choird's notice of the approval", containsText("or as soon as assistant is back"))
	if n := len(w.sentWith("Report 4")); n != 0 {
		t.Fatalf("the mail approved while the agent was stopped went out %d times before it was back", n)
	}
	if _, err := w.d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{Email: "primary"}); err != nil {
		t.Fatal(err)
	}
	waitSentTo(t, w.bot, userAlice, "the agent's report after its restart", containsText("Reported: report 4 went out."))
	w.checkSentOnce(t, "4")
	w.waitTaken(t, id)

	if runtime == "process" {
		w.crashBetweenPushAndTake(t, "5")
	}

	for _, r := range []string{"2", "3"} {
		if n, _ := w.model.woke(r); n != 0 || len(w.sentWith("Report "+r)) != 0 {
			t.Errorf("report %s, not approved: %d turns of the agent's own, %d mails", r, n, len(w.sentWith("Report "+r)))
		}
	}
	// The user wrote once per report, and nothing else.
	var users int
	w.pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.inbox WHERE kind = 'message'`).Scan(&users)
	if want := map[string]int{"process": 5, "docker": 4}[runtime]; users != want {
		t.Errorf("%d messages from the user, want the %d requests", users, want)
	}
	stopAgent(t, w.d.Daemon, "assistant")
}

// startWakeEnv starts choird under runtime with an email account that
// requires approval, and the agent on it.
func startWakeEnv(t *testing.T, runtime string) *wakeEnv {
	t.Helper()
	mail := mailboxtest.Start(t)
	mail.AddUser(t, "agent@choir.test", "mail-pw-31")
	model := &mailerModel{wakes: map[string]int{}, sent: map[string]string{}}
	llm := llmtest.NewServer(t)
	llm.SetResponder(model.respond)
	endpoint, image := llm.BaseURL(), ""
	acct := mail.Account("agent@choir.test")
	if runtime == "docker" {
		cli := runtimetest.RequireDocker(t)
		bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
		image = runtimetest.ImportImage(t, cli, "choir-agent-approvalwake", map[string]runtimetest.File{
			"choir-agent": {Source: bin, Mode: 0o755}}, `ENTRYPOINT ["/choir-agent"]`)
		u, err := url.Parse(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		gw := dockerGateway(t)
		u.Host = proxy(t, net.JoinHostPort(gw, "0"), u.Host)
		endpoint = u.String()
		// A container reaches the host's SMTP server on the bridge only.
		host, port, err := net.SplitHostPort(proxy(t, net.JoinHostPort(gw, "0"), net.JoinHostPort("127.0.0.1", strconv.Itoa(acct.SMTPPort))))
		if err != nil {
			t.Fatal(err)
		}
		acct.SMTPHost = host
		acct.SMTPPort, _ = strconv.Atoi(port)
	}
	e := newTGEnvSecrets(t, llm, func(c *config.Config, s config.Secrets) {
		m := c.Models["local"]
		m.Endpoint = endpoint
		c.Models["local"] = m
		acct.Secret, acct.RequireApproval = "mail-primary", true
		c.EmailAccounts = map[string]config.EmailAccount{"primary": acct}
		s["mail-primary"] = "mail-pw-31"
	})
	e.dumpLogsOnFailure(t, "assistant")
	opts := e.options(t)
	if runtime == "docker" {
		opts.Daemon.Runtime, opts.Daemon.AgentBinary, opts.Daemon.AgentImage = "docker", "", image
	}
	d := choirdtest.Start(t, opts)
	if _, err := d.AgentStart(context.Background(), control.Scope{Admin: true, Actor: actorAdmin}, "assistant",
		admin.StartOverrides{Email: "primary"}); err != nil {
		t.Fatal(err)
	}
	d.WaitState(t, "assistant", admin.AgentActive)
	return &wakeEnv{tgEnv: e, d: d, mail: mail, model: model, pool: d.Pool()}
}

// ask has the user ask for report n, and returns the approval request the
// DM got, with its buttons, once the agent has said it asked.
func (w *wakeEnv) ask(t *testing.T, n string) (telegramtest.Message, string) {
	t.Helper()
	w.bot.SendText(userAlice, "please send report "+n+" to bob")
	req := waitSentTo(t, w.bot, userAlice, "the approval request of report "+n, func(m telegramtest.Message) bool {
		return len(m.Keyboard()) > 0 && strings.Contains(m.Text, "Report "+n)
	})
	var id string
	if err := w.pool.QueryRow(context.Background(), `SELECT approval_id::text FROM choir_control.pending_approvals
		WHERE request_type = 'choir.email.send' AND summary LIKE '%Report ' || $1 || '%'`, n).Scan(&id); err != nil {
		t.Fatalf("the approval of report %s: %v", n, err)
	}
	waitUntil(t, "the agent's answer to the request of report "+n, func() bool {
		return len(w.textsWith("I asked you to approve the mail.")) >= w.asked(n)
	})
	return req, id
}

// asked is how many reports up to n were asked for.
func (w *wakeEnv) asked(n string) int {
	i, _ := strconv.Atoi(n)
	return i
}

// expire runs the approval's timeout job now, as River would at its expiry.
func (w *wakeEnv) expire(t *testing.T, id string) {
	t.Helper()
	ins, err := river.NewClient(riverpgxv5.New(w.pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ins.Insert(context.Background(), approval.TimeoutArgs{ApprovalID: uuid.MustParse(id)}, nil); err != nil {
		t.Fatal(err)
	}
}

// waitTaken waits until choird records that the agent's log took the
// approval's outcome.
func (w *wakeEnv) waitTaken(t *testing.T, id string) {
	t.Helper()
	waitUntil(t, "the agent taking the outcome of approval "+id, func() bool {
		var taken bool
		w.pool.QueryRow(context.Background(), `SELECT outcome_taken_at IS NOT NULL FROM choir_control.pending_approvals
			WHERE approval_id = $1`, id).Scan(&taken)
		return taken
	})
	var events int
	w.pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.session_events
		WHERE event_type = 'injected_instruction' AND payload->>'approval_id' = $1`, id).Scan(&events)
	if events != 1 {
		t.Errorf("the agent's log took approval %s %d times, want once", id, events)
	}
}

// checkToldOnce checks that the DM was told of report n's outcome once,
// in choird's words that start with prefix.
func (w *wakeEnv) checkToldOnce(t *testing.T, n, prefix string) {
	t.Helper()
	waitSentTo(t, w.bot, userAlice, prefix+" of report "+n, func(m telegramtest.Message) bool {
		return strings.HasPrefix(m.Text, prefix) && strings.Contains(m.Text, "Report "+n)
	})
	var told int
	for _, text := range sentTexts(w.bot, userAlice) {
		if strings.Contains(text, "Report "+n) && !strings.Contains(text, "Approve or reject") && !strings.Contains(text, "part 1 of") {
			told++
		}
	}
	if told != 1 {
		t.Errorf("the DM was told of report %s's outcome %d times, want once", n, told)
	}
}

// checkSentOnce checks that report n went out once.
func (w *wakeEnv) checkSentOnce(t *testing.T, n string) {
	t.Helper()
	if got := w.sentWith("Report " + n); len(got) != 1 {
		t.Errorf("report %s went out %d times, want once", n, len(got))
	}
}

// sentWith returns the mails the SMTP server accepted whose subject is
// subject.
func (w *wakeEnv) sentWith(subject string) []mailboxtest.Envelope {
	var out []mailboxtest.Envelope
	for _, env := range w.mail.Sent() {
		if strings.Contains(string(env.Data), "Subject: "+subject+"\r\n") {
			out = append(out, env)
		}
	}
	return out
}

// textsWith returns the DM's messages that contain sub.
func (w *wakeEnv) textsWith(sub string) []string {
	var out []string
	for _, text := range sentTexts(w.bot, userAlice) {
		if strings.Contains(text, sub) {
			out = append(out, text)
		}
	}
	return out
}

// crashBetweenPushAndTake has the agent die after choird pushed an
// approval's outcome and before the agent took it: the agent is frozen
// (SIGSTOP) before the approval, so the push waits unread, then killed.
// The agent started again is pushed the outcome at its hello, sends the
// mail once and tells the DM.
func (w *wakeEnv) crashBetweenPushAndTake(t *testing.T, n string) {
	t.Helper()
	ctx := context.Background()
	req, id := w.ask(t, n)
	var killed string
	w.pool.QueryRow(ctx, `SELECT session_id::text FROM choir_control.sessions WHERE agent_id = 'assistant'
		AND status = 'active'`).Scan(&killed)
	signalAgents(t, w.Dir, syscall.SIGSTOP)
	w.bot.PressButton(userAlice, req.MessageID, req.Keyboard()[0][0].Data)
	waitUntil(t, "the outcome pushed to the frozen agent", func() bool {
		var pushed bool
		w.pool.QueryRow(ctx, `SELECT outcome_pushed_at IS NOT NULL FROM choir_control.pending_approvals
			WHERE approval_id = $1`, id).Scan(&pushed)
		return pushed
	})
	killAgents(t, w.Dir)
	waitUntil(t, "choird ending the killed session", func() bool {
		var live bool
		w.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM choir_control.sessions WHERE session_id::text = $1
			AND status IN ('starting', 'active', 'stopping')`, killed).Scan(&live)
		return !live
	})
	var taken bool
	w.pool.QueryRow(ctx, `SELECT outcome_taken_at IS NOT NULL FROM choir_control.pending_approvals
		WHERE approval_id = $1`, id).Scan(&taken)
	if taken || len(w.sentWith("Report "+n)) != 0 {
		t.Fatalf("the killed agent took the outcome (%v) or sent the mail (%d)", taken, len(w.sentWith("Report "+n)))
	}
	if _, err := w.d.AgentStart(ctx, control.Scope{Admin: true, Actor: actorAdmin}, "assistant",
		admin.StartOverrides{Email: "primary"}); err != nil {
		t.Fatal(err)
	}
	waitSentTo(t, w.bot, userAlice, "the agent's report after the crash", containsText("Reported: report "+n+" went out."))
	w.checkSentOnce(t, n)
	w.waitTaken(t, id)
}

// signalAgents sends sig to every agent process group a choird on home
// started and that still runs.
func signalAgents(t *testing.T, home string, sig syscall.Signal) {
	t.Helper()
	for _, pid := range agentGroups(home) {
		if err := syscall.Kill(-pid, sig); err != nil {
			t.Fatalf("signal agent process group %d: %v", pid, err)
		}
	}
}
