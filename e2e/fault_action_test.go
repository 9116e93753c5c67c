package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool/notion/notiontest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
)

// The kill-anywhere suite over side effects (issue 31, item 7): for each
// tool kind and each point of a call, trials kill the agent, choird or
// both there, bring back what died, and count the side effect at its
// sink. Every action must have happened exactly once, or the user must
// have been told that it is in doubt: 0 duplicates, 0 silent losses.

// actionPoint is where in a call a trial kills.
type actionPoint string

const (
	// beforeIntent: while the model call that makes the tool call is held.
	beforeIntent actionPoint = "before_intent"
	afterIntent  actionPoint = arbiter.FaultAfterIntent
	// midCall: while the tool runs, after its effect: the command has
	// appended and waits (only tools with midArgs).
	midCall     actionPoint = "mid_call"
	afterEffect actionPoint = arbiter.FaultAfterEffect
	afterResult actionPoint = arbiter.FaultAfterResult
)

// actionKind is one tool kind of the suite: the call a trial makes, and
// how many times its effect happened.
type actionKind struct {
	name string
	tool string
	args func(mark string) string
	// midArgs, when set, is a call that makes its effect, then waits until
	// the file release exists (unique to the trial): the midCall point.
	midArgs func(mark, release string) string
	// count is how many times the effect marked mark happened.
	count func(t *testing.T, f *actionEnv, mark string) int
}

var actionKinds = []actionKind{
	{name: "ExecAppend", tool: "choir.exec",
		args: func(mark string) string { return fmt.Sprintf(`{"command":"echo %s >> actions.log"}`, mark) },
		midArgs: func(mark, release string) string {
			return fmt.Sprintf(`{"command":"echo %s >> actions.log; while [ ! -e %s ]; do sleep 0.01; done"}`, mark, release)
		},
		count: func(t *testing.T, f *actionEnv, mark string) int {
			b, _ := os.ReadFile(filepath.Join(f.workspace(), "actions.log"))
			return strings.Count(string(b), mark+"\n")
		}},
	{name: "FSWrite", tool: "choir.fs.write",
		args: func(mark string) string { return fmt.Sprintf(`{"path":"%s.txt","content":"%s\n"}`, mark, mark) },
		count: func(t *testing.T, f *actionEnv, mark string) int {
			// An overwrite happened once or more times alike: its effect
			// is there or not.
			if b, err := os.ReadFile(filepath.Join(f.workspace(), mark+".txt")); err == nil && string(b) == mark+"\n" {
				return 1
			}
			return 0
		}},
	{name: "NotionAppend", tool: "choir.notion.query",
		args: func(mark string) string {
			return fmt.Sprintf(`{"action":"append","page_id":%q,"text":%q}`, notiontest.PageID, mark)
		},
		count: func(t *testing.T, f *actionEnv, mark string) int { return f.notion.Count(notiontest.PageID, mark) }},
	{name: "EmailSend", tool: "choir.email.send",
		args: func(mark string) string {
			return fmt.Sprintf(`{"to":["bob@example.com"],"subject":%q,"text":"hello"}`, mark)
		},
		count: func(t *testing.T, f *actionEnv, mark string) int {
			n := 0
			for _, e := range f.mail.Sent() {
				if strings.Contains(string(e.Data), mark) {
					n++
				}
			}
			return n
		}},
	{name: "ProposeTool", tool: "choir.propose.tool",
		args: func(mark string) string {
			return fmt.Sprintf(`{"change":"add","name":"choir.repo.status","description":"Show the repository status.",`+
				`"parameters":{"type":"object"},"behavior":"Runs git status.","runtime":{"side_effect":"read","trust":"own"},"rationale":%q}`, mark)
		},
		count: func(t *testing.T, f *actionEnv, mark string) int {
			var n int
			if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.pending_approvals
				WHERE summary LIKE '%' || $1 || '%'`, mark).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}},
	{name: "Remind", tool: "choir.remind",
		args: func(mark string) string { return fmt.Sprintf(`{"in":"240h","text":"%s"}`, mark) },
		count: func(t *testing.T, f *actionEnv, mark string) int {
			var n int
			if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.schedules WHERE text = $1`,
				mark).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}},
}

// actionTrials is the number of trials per point and tool: one in the
// default run, each victim in turn across the points; CHOIR_FAULT_TRIALS
// runs more (the full set: 10 or more).
func actionTrials(t *testing.T) int {
	if os.Getenv("CHOIR_FAULT_TRIALS") == "" {
		return 1
	}
	return faultTrials(t)
}

// TestActionsOnceUnderKills is the suite. It logs the table of outcomes
// (points × tools × outcome) and fails on any duplicate or silent loss.
func TestActionsOnceUnderKills(t *testing.T) {
	t.Parallel()
	trials := actionTrials(t)
	var mu sync.Mutex
	table := map[string]*outcomes{}
	for _, k := range actionKinds {
		t.Run(k.name, func(t *testing.T) {
			f := newActionEnv(t, k)
			n := 0
			for _, p := range []actionPoint{beforeIntent, afterIntent, midCall, afterEffect, afterResult} {
				if p == midCall && k.midArgs == nil {
					continue
				}
				o := &outcomes{}
				for range trials {
					o.add(f.trial(t, k, p, victim(n%3), n))
					n++
				}
				mu.Lock()
				table[string(p)+" "+k.name] = o
				mu.Unlock()
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kill-anywhere table (%d trials per cell, killing the agent, choird and both in turn):\n", trials)
	fmt.Fprintf(&b, "%d trials per cell; the victims are the agent, choird and both, in turn.\n\n", trials)
	fmt.Fprintf(&b, "| point | tool | once | in doubt, told | duplicated | lost silently |\n|---|---|---|---|---|---|\n")
	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		o := table[k]
		p, tl, _ := strings.Cut(k, " ")
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d |\n", p, tl, o.once, o.told, o.dup, o.lost)
	}
	t.Log(b.String())
	if path := os.Getenv("CHOIR_KILL_TABLE"); path != "" && !t.Failed() {
		// make kill-anywhere keeps the full table for bench/report.md.
		doc := fmt.Sprintf("## Kill-anywhere table\n\n`make kill-anywhere` (e2e TestActionsOnceUnderKills), %s. "+
			"Every action is exactly once, or the user was told it is in doubt.\n\n%s",
			time.Now().UTC().Format("2006-01-02"), strings.SplitN(b.String(), "\n", 2)[1])
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// outcomes counts the trials of one cell.
type outcomes struct{ once, told, dup, lost int }

func (o *outcomes) add(r trialOutcome) {
	switch r {
	case outcomeOnce:
		o.once++
	case outcomeTold:
		o.told++
	case outcomeDup:
		o.dup++
	default:
		o.lost++
	}
}

type trialOutcome int

const (
	outcomeOnce trialOutcome = iota
	outcomeTold
	outcomeDup
	outcomeLost
)

// actionEnv is choird as a process, the suite's agent (built with
// choirfault) under the process runtime, the fake Bot API, and a model
// that makes each trial's call once its message arrives and answers
// "done: <message>" once the call has a result in its context.
type actionEnv struct {
	*faultEnv
	kind   actionKind
	notion *notiontest.Server
	mail   *mailboxtest.Server

	mu   sync.Mutex
	hold *faultGate // the trial holding the model, for beforeIntent
}

func newActionEnv(t *testing.T, k actionKind) *actionEnv {
	t.Helper()
	model := llmtest.NewServer(t)
	notion, mail := notiontest.NewServer(t), mailboxtest.Start(t)
	mail.AddUser(t, "assistant@example.com", "mail-password")
	h := choirdtest.WriteHome(t, choirdtest.Options{ModelEndpoint: model.BaseURL(), FastHeartbeat: true,
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			cfg.HeartbeatIntervalMS, cfg.CrashDetectionThresholdMS = 1000, 3000
			cfg.Gateways[gatewayTG] = config.Gateway{Type: config.GatewayTelegram, Secret: "telegram-bot"}
			secrets["telegram-bot"] = botToken
			cfg.DMs[dmAlice] = config.DM{Gateway: gatewayTG, UserID: fmt.Sprint(userAlice)}
			cfg.NotionIntegrations = map[string]config.NotionIntegration{"notes": {Secret: "notion-notes", Endpoint: notion.URL()}}
			secrets["notion-notes"] = notion.Token
			acct := mail.Account("assistant@example.com")
			acct.AllowedRecipients = []string{"@example.com"}
			cfg.EmailAccounts = map[string]config.EmailAccount{"mail": acct}
			secrets[acct.Secret] = "mail-password"
			a := cfg.Agents["assistant"]
			a.Defaults.DM, a.Defaults.Notion, a.Defaults.Email = dmAlice, "notes", "mail"
			cfg.Agents["assistant"] = a
		}})
	srv := telegramtest.NewServer(t)
	e := &tgEnv{Home: h, tg: srv, bot: srv.AddBot(botToken, botName), llm: model,
		agentBinary: choirdtest.Binary(t, "cmd/choir-agent", "choirfault")}
	t.Cleanup(func() { killAgents(t, h.Dir) })
	e.dumpLogsOnFailure(t, "assistant")
	f := &actionEnv{faultEnv: &faultEnv{tgEnv: e, cutOff: map[string]bool{}}, kind: k, notion: notion, mail: mail}
	model.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		text, answered := trialState(r)
		if text == "" {
			return llmtest.Text("The session went as planned.")
		}
		if answered {
			return llmtest.Text("done: " + text)
		}
		f.mu.Lock()
		g := f.hold
		f.mu.Unlock()
		if g != nil && g.text == text {
			g.fire()
			select {
			case <-g.release:
			case <-ctx.Done():
			}
		}
		args := k.args(markOf(text))
		if strings.HasPrefix(text, "act "+string(midCall)+" ") {
			args = k.midArgs(markOf(text), filepath.Join(f.faultDir(), "release-"+markOf(text)))
		}
		return llmtest.ToolCalls(llmtest.Call{Name: k.tool, Arguments: args})
	})
	f.choird = e.startChoirdProcess(t)
	e.startAgentAdmin(t, "assistant")
	f.pool = e.pool(t)
	liveSession(t, f.pool, "assistant")
	return f
}

// trialState is the trial message a request answers, and whether the
// trial's call already has a result in it (a tool message, or the note a
// resumed turn renders for an earlier call).
func trialState(r *llmtest.Request) (text string, answered bool) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		m := r.Messages[i]
		if m.Role == "user" && strings.HasPrefix(m.Content, "act ") {
			for _, after := range r.Messages[i+1:] {
				if after.Role == "tool" || strings.HasPrefix(after.Content, "[earlier tool call") {
					answered = true
				}
			}
			return m.Content, answered
		}
	}
	return "", false
}

// markOf is the effect's mark of a trial message: "act <point> <n>"
// marks its effect "mark-<point>-<n>".
func markOf(text string) string {
	return "mark-" + strings.ReplaceAll(strings.TrimPrefix(text, "act "), " ", "-")
}

// faultDir is the suite agent's hold directory (cmd/choir-agent's
// fault_choirfault.go).
func (f *actionEnv) faultDir() string {
	ws := f.workspace()
	return filepath.Join(filepath.Dir(filepath.Clean(ws)), ".choir-fault-"+filepath.Base(ws))
}

// trial sends one message whose turn makes one call of k, kills v at p,
// brings back what died, waits for the turn's answer, and tells what
// happened to the call's effect.
func (f *actionEnv) trial(t *testing.T, k actionKind, p actionPoint, v victim, n int) trialOutcome {
	t.Helper()
	text := fmt.Sprintf("act %s %d", p, n)
	mark := markOf(text)
	g := &faultGate{text: text, victim: v, hit: make(chan struct{}), release: make(chan struct{})}
	g.session = liveSession(t, f.pool, "assistant").String()
	dir := f.faultDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "hit"))
	switch p {
	case beforeIntent:
		f.mu.Lock()
		f.hold = g
		f.mu.Unlock()
	case midCall:
		go g.fireWhen(func() bool { return k.count(t, f, mark) > 0 })
	default:
		if err := os.WriteFile(filepath.Join(dir, "arm"), []byte(string(p)+" "+k.tool), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.bot.SendText(userAlice, text)
	if p != beforeIntent && p != midCall {
		go g.fireWhen(func() bool { _, err := os.Stat(filepath.Join(dir, "hit")); return err == nil })
	}
	select {
	case <-g.hit:
	case <-time.After(90 * time.Second):
		t.Fatalf("%s %s (kill %s): the point was never reached; alice got %q", k.name, p, v, sentTexts(f.bot, userAlice))
	}
	f.kill(t, v)
	// What survived goes on: the model call, or the held agent.
	f.mu.Lock()
	f.hold = nil
	f.mu.Unlock()
	close(g.release)
	if p == midCall {
		// The command goes on, whoever died: its own process group
		// outlives a killed agent.
		os.WriteFile(filepath.Join(dir, "release-"+mark), nil, 0o644) //nolint:errcheck // the command polls for it
	} else if v == killChoird && p != beforeIntent {
		// The held agent goes on.
		os.WriteFile(filepath.Join(dir, "go"), nil, 0o644) //nolint:errcheck // the agent is held until it sees the file
	}
	f.revive(t, v, g.session)
	os.Remove(filepath.Join(dir, "arm"))

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := f.bot.Wait(ctx, func() bool { return countExactly(f.bot, userAlice, "done: "+text) > 0 }); err != nil {
		t.Fatalf("%s %s (kill %s): the turn never ended; alice got %q", k.name, p, v, sentTexts(f.bot, userAlice))
	}
	// Long enough for a duplicate to show: the turn's answer came after
	// any re-run, and a second one would come with another answer.
	effects := k.count(t, f, mark)
	told := false
	for _, m := range f.bot.SentTo(userAlice) {
		if strings.Contains(m.Text, "cannot tell whether") && strings.Contains(m.Text, mark) {
			told = true
		}
	}
	switch {
	case effects > 1:
		t.Errorf("%s %s (kill %s): the effect happened %d times", k.name, p, v, effects)
		return outcomeDup
	case effects == 1 && !told:
		return outcomeOnce
	case told:
		return outcomeTold
	}
	t.Errorf("%s %s (kill %s): the effect never happened and the user was not told", k.name, p, v)
	return outcomeLost
}

// fireWhen fires g once cond holds, looking every 2 ms for up to 90 s (the
// trial's own deadline).
func (g *faultGate) fireWhen(cond func() bool) {
	for range 90_000 / 2 {
		if cond() {
			g.fire()
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
