package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/modelenv"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// TestDemo is `make demo`: the whole stack on this machine with nothing
// from outside. A real choird process on a fresh database, one agent on
// the process runtime, a stand-in for Telegram's Bot API and one for the
// model, and a scripted conversation in which the agent writes a file,
// sets a reminder that needs an approval (which the demo grants with the
// [Approve] button), stores a memory and runs a core job; then the
// reminder fires. Afterwards the audit queries an operator would type
// into psql run against the database, with their output.
//
// With CHOIR_DEMO=1 (make demo) the transcript and the queries go to
// stdout, every line of a stand-in labelled as such; and when the
// environment names a real model (OPENAI_API_KEY, OPENROUTER_API_KEY or
// CHOIR_LLM_URL, as for choirctl init --local) the agent talks to it
// instead of the model stand-in, and the demo only reports what happened.
// In the suite it runs with the stand-in and checks every step.
func TestDemo(t *testing.T) {
	t.Parallel()
	runtimes := []string{"process", "docker"}
	if os.Getenv("CHOIR_DEMO") == "1" {
		runtimes = []string{demoRuntime()}
	}
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			runDemo(t, rt)
		})
	}
}

// demoRuntime is make demo's runtime: CHOIR_DEMO_RUNTIME when set, else
// docker when an engine answers, else process.
func demoRuntime() string {
	if rt := os.Getenv("CHOIR_DEMO_RUNTIME"); rt != "" {
		return rt
	}
	if exec.Command("docker", "version").Run() == nil {
		return "docker"
	}
	return "process"
}

func runDemo(t *testing.T, runtime string) {
	out := newDemoOutput(t)
	model := llmtest.NewServer(t)
	model.SetResponder(demoModel(out))
	endpoint := model.BaseURL()
	var image string
	if runtime == "docker" {
		cli := runtimetest.RequireDocker(t)
		bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
		files := map[string]runtimetest.File{"choir-agent": {Source: bin, Mode: 0o755}}
		// A real model is reached over TLS: give the agent the host's roots.
		const roots = "/etc/ssl/certs/ca-certificates.crt"
		if _, err := os.Stat(roots); err == nil {
			files[roots[1:]] = runtimetest.File{Source: roots, Mode: 0o644}
		}
		image = runtimetest.ImportImage(t, cli, "choir-agent-demo", files, `ENTRYPOINT ["/choir-agent"]`)
		endpoint = bridgeForward(t, endpoint, out)
	}
	e := newTGEnv(t, model, func(c *config.Config) {
		a := c.Agents["assistant"]
		a.SchedulesNeedApproval = true
		c.Agents["assistant"] = a
		m := c.Models["local"]
		m.Endpoint = endpoint
		c.Models["local"] = m
	})
	e.dumpLogsOnFailure(t, "assistant")
	real := demoRealModel(t, e, out)
	if err := os.WriteFile(filepath.Join(e.workspace(), "hotels.md"), []byte(demoHotels), 0o644); err != nil {
		t.Fatal(err)
	}
	out.say("demo", "Postgres database %s, home %s", e.DatabaseURL, e.Dir)
	opts := e.options(t)
	if runtime == "docker" {
		opts.Daemon.Runtime, opts.Daemon.AgentBinary, opts.Daemon.AgentImage = "docker", "", image
	}
	choirdtest.StartProcess(t, opts)
	e.startAgentAdmin(t, "assistant")
	out.say("demo", "choird is running (its own process) with agent %q on the %s runtime", "assistant", runtime)
	go out.relay(e.bot)

	// One: a file in the workspace.
	out.user(e.bot, "Please save a packing list for Friday's trip in trip/packing.md")
	out.waitBot(e.bot, "the file's confirmation", "packing", real)
	if start, err := strconv.ParseInt(os.Getenv("CHOIR_DEMO_START"), 10, 64); err == nil {
		out.say("demo", "first answer %s after make demo started, building included", time.Since(time.Unix(start, 0)).Round(time.Second))
	}
	if !real {
		if b, err := os.ReadFile(filepath.Join(e.workspace(), "trip", "packing.md")); err != nil || !strings.Contains(string(b), "passport") {
			t.Fatalf("trip/packing.md = %q, %v", b, err)
		}
	}

	// Two: a reminder, which this agent may set only with an approval.
	out.user(e.bot, "Remind me in 25 seconds to check in for the flight")
	request := waitSentToWithin(t, e.bot, userAlice, "the approval request", 2*time.Minute,
		func(m telegramtest.Message) bool { return len(m.Keyboard()) > 0 })
	kb := request.Keyboard()
	out.waitBot(e.bot, "the reply after the request", "approve the reminder", real)
	out.flush(e.bot)
	out.say("telegram stand-in", "alice presses [%s]", kb[0][0].Text)
	e.bot.PressButton(userAlice, request.MessageID, kb[0][0].Data)
	e.bot.WaitAnswers(t, 1)
	out.waitBot(e.bot, "the approval's confirmation", "approved:", real)

	// Three: a memory.
	out.user(e.bot, "Remember that I prefer aisle seats")
	out.waitBot(e.bot, "the memory's confirmation", "aisle", real)

	// Four: a core job, in the background.
	out.user(e.bot, "Compare the three hotels in hotels.md for me, in the background")
	out.waitBot(e.bot, "the core job's report", "completed", real)
	if !real {
		if b, err := os.ReadFile(filepath.Join(e.workspace(), "comparison.md")); err != nil || !strings.Contains(string(b), "Harbour") {
			t.Fatalf("comparison.md = %q, %v", b, err)
		}
	}
	out.waitBot(e.bot, "the reminder", "time to check in", real)
	out.stop(e.bot)

	pool := e.pool(t)
	if !real {
		var approved, knowledge, fires int
		pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_audit.approvals WHERE status = 'approved'`).Scan(&approved)
		pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_assistant.knowledge_documents WHERE text LIKE '%aisle%'`).Scan(&knowledge)
		pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.schedule_fires WHERE outcome = 'fired'`).Scan(&fires)
		if approved != 1 || knowledge != 1 || fires != 1 {
			t.Errorf("audit: %d approvals approved, %d knowledge documents, %d fires; want 1 each", approved, knowledge, fires)
		}
	}
	out.psql(t, e.DatabaseURL)
}

const demoHotels = `# Hotels for Friday
- Harbour Inn: 92 EUR a night, 4 min from the station, breakfast included.
- Grand Plaza: 180 EUR a night, rooftop pool, 20 min by tram.
- City Hostel: 45 EUR a night, shared bathroom, 10 min walk.
`

// bridgeForward makes the model stand-in reachable from a container on
// Docker's default bridge, which cannot reach the host's loopback: it
// forwards from the bridge's gateway address (proxy) and returns the
// endpoint to give the agent.
func bridgeForward(t *testing.T, endpoint string, out *demoOutput) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy(t, net.JoinHostPort(dockerGateway(t), "0"), u.Host)
	out.say("demo", "the model stand-in answers containers at %s", u)
	return u.String()
}

// bridgeGateway is the host's IPv4 address on Docker's default bridge:
// the address of the interface the bridge network names.
func bridgeGateway() (string, error) {
	name, err := exec.Command("docker", "network", "inspect", "bridge", "-f",
		`{{index .Options "com.docker.network.bridge.name"}}`).Output()
	if err != nil {
		return "", fmt.Errorf("docker network inspect bridge: %w", err)
	}
	iface, err := net.InterfaceByName(strings.TrimSpace(string(name)))
	if err != nil {
		return "", err
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
			return ip.IP.String(), nil
		}
	}
	return "", fmt.Errorf("interface %s has no IPv4 address", iface.Name)
}

// demoRealModel points the agent at the real model the environment names,
// when the demo runs with CHOIR_DEMO=1 and one is named, and says so.
func demoRealModel(t *testing.T, e *tgEnv, out *demoOutput) bool {
	if !out.print {
		return false
	}
	m, ok, err := modelenv.ModelFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		out.say("demo", "no model in the environment: the model stand-in answers from a script (%s to use a real one)", "set "+
			strings.TrimPrefix(modelenv.ModelEnvHelp, "set "))
		return false
	}
	cfg, secrets, err := config.Load(e.Dir)
	if err != nil {
		t.Fatal(err)
	}
	modelenv.UseModel(cfg, secrets, m)
	if err := config.WriteFiles(e.Dir, cfg, secrets, true); err != nil {
		t.Fatal(err)
	}
	out.say("demo", "using the real model %s at %s (from %s); the model stand-in is not used", m.Model.Model, m.Model.Endpoint, m.From)
	return true
}

// demoModel is the model stand-in's script: it answers each request from
// what the request holds (the user's last words, the tool just called, or
// the core job it is for), as a model would.
func demoModel(out *demoOutput) func(context.Context, *llmtest.Request) llmtest.Step {
	call := func(what, name, args string) llmtest.Step {
		out.say("model stand-in", "%s: calls %s %s", what, name, args)
		return llmtest.ToolCalls(llmtest.Call{Name: name, Arguments: args})
	}
	text := func(what, s string) llmtest.Step {
		out.say("model stand-in", "%s: answers %q", what, s)
		return llmtest.Text(s)
	}
	return func(_ context.Context, r *llmtest.Request) llmtest.Step {
		if jobName(r) == "hotels" {
			switch assistantSteps(r) {
			case 0:
				return call("core job hotels", "choir.fs.read", `{"path":"hotels.md"}`)
			case 1:
				return call("core job hotels", "choir.fs.write", `{"path":"comparison.md","content":"# Hotels compared\n\n`+
					`1. Harbour Inn: best value (92 EUR, breakfast, next to the station).\n2. City Hostel: cheapest, shared bathroom.\n`+
					`3. Grand Plaza: twice the price, for the pool.\n"}`)
			default:
				return text("core job hotels", "Harbour Inn is the best value; the full comparison is in comparison.md.")
			}
		}
		last := r.Last()
		if last.Role == "tool" && strings.Contains(last.Content, "[reminder #") {
			// A fire is the agent's own note, the answer to a notice call.
			return text("edge", "It is time to check in for your flight!")
		}
		if last.Role == "tool" {
			switch prev := lastCall(r); prev {
			case "choir.fs.write":
				return text("edge", "Saved your packing list in trip/packing.md.")
			case "choir.remind":
				return text("edge", "I have asked you to approve the reminder; once you do, I will remind you.")
			case "choir.memory.upsert":
				return text("edge", "Noted: you prefer aisle seats.")
			case "choir.core.spawn":
				return text("edge", "I am comparing the hotels in the background and will report when done.")
			}
		}
		if last.Role == "user" {
			switch c := last.Content; {
			case strings.Contains(c, "[reminder #"):
				return text("edge", "It is time to check in for your flight!")
			case strings.Contains(c, "packing list"):
				return call("edge", "choir.fs.write", `{"path":"trip/packing.md","content":"# Packing for Friday\n- passport\n- charger\n- rain jacket\n"}`)
			case strings.Contains(c, "Remind me"):
				return call("edge", "choir.remind", `{"in":"25s","text":"check in for the flight"}`)
			case strings.Contains(c, "aisle"):
				return call("edge", "choir.memory.upsert", `{"op":"insert","key":"user.preference.seat","text":"The user prefers aisle seats."}`)
			case strings.Contains(c, "hotels"):
				return call("edge", "choir.core.spawn", `{"job_name":"hotels","task_spec":"Read hotels.md, compare the three hotels `+
					`by price, location and extras, write comparison.md, and give the best choice."}`)
			}
		}
		return llmtest.Text("The session went as planned.") // summaries, approval outcomes
	}
}

// lastCall is the name of the tool the request's last assistant message
// called.
func lastCall(r *llmtest.Request) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if m := r.Messages[i]; m.Role == "assistant" && len(m.ToolCalls) > 0 {
			if c := m.ToolCalls[len(m.ToolCalls)-1]; c.Canonical != "" {
				return c.Canonical
			} else {
				return c.Name
			}
		}
	}
	return ""
}

// demoOutput is the demo's transcript: to stdout under CHOIR_DEMO=1, to
// the test's log otherwise (shown when it fails).
type demoOutput struct {
	t     *testing.T
	print bool
	mu    sync.Mutex
	done  chan struct{}
	wg    sync.WaitGroup
	// flushMu guards what flush has printed: seen messages, edits.
	flushMu     sync.Mutex
	seen, edits int
}

func newDemoOutput(t *testing.T) *demoOutput {
	return &demoOutput{t: t, print: os.Getenv("CHOIR_DEMO") == "1", done: make(chan struct{})}
}

// say writes one line, labelled with who says it.
func (o *demoOutput) say(who, format string, args ...any) {
	line := fmt.Sprintf("%s [%s] %s", time.Now().Format("15:04:05"), who, fmt.Sprintf(format, args...))
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.print {
		fmt.Println(line)
		return
	}
	o.t.Log(line)
}

// user sends text as alice, through the Telegram stand-in.
func (o *demoOutput) user(b *telegramtest.Bot, text string) {
	o.flush(b)
	o.say("telegram stand-in", "alice → bot: %s", text)
	b.SendText(userAlice, text)
}

// relay prints what the bot sends to alice until stop.
func (o *demoOutput) relay(b *telegramtest.Bot) {
	o.wg.Add(1)
	defer o.wg.Done()
	for {
		o.flush(b)
		select {
		case <-o.done:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// flush prints each message the bot has sent to alice, and each edit of
// one, since the last flush.
func (o *demoOutput) flush(b *telegramtest.Bot) {
	o.flushMu.Lock()
	defer o.flushMu.Unlock()
	sent, ed := b.SentTo(userAlice), b.TextEdits()
	for _, m := range sent[o.seen:] {
		buttons := ""
		for _, row := range m.Keyboard() {
			for _, btn := range row {
				buttons += " [" + btn.Text + "]"
			}
		}
		o.say("telegram stand-in", "bot → alice: %s%s", m.Text, buttons)
	}
	for _, e := range ed[o.edits:] {
		o.say("telegram stand-in", "bot edits message %d: %s", e.MessageID, e.Text)
	}
	o.seen, o.edits = len(sent), len(ed)
}

// waitBot waits for a message to alice holding sub (any new message
// with a real model, whose words cannot be known).
func (o *demoOutput) waitBot(b *telegramtest.Bot, what, sub string, real bool) {
	o.t.Helper()
	before := len(b.SentTo(userAlice))
	match := func(m telegramtest.Message) bool { return strings.Contains(strings.ToLower(m.Text), sub) }
	if real {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if b.Wait(ctx, func() bool { return len(b.SentTo(userAlice)) > before }) != nil {
			o.say("demo", "no reply came for %s within 3 minutes", what)
		}
		return
	}
	waitSentToWithin(o.t, b, userAlice, what, 2*time.Minute, match)
}

// stop ends the relay, once it has printed what was sent so far.
func (o *demoOutput) stop(b *telegramtest.Bot) {
	close(o.done)
	o.wg.Wait()
	o.flush(b)
}

// demoQueries are the audit queries an operator would run in psql.
var demoQueries = []string{
	`SELECT lane, tool, outcome, duration_ms, input->>'path' AS path FROM choir_audit.tool_calls ORDER BY called_at`,
	`SELECT request_type, summary, status, resolved_by, waited FROM choir_audit.approvals`,
	`SELECT key, text, version FROM choir_assistant.knowledge_documents`,
	`SELECT s.schedule_id, s.purpose, s.text, s.status, f.due_at, f.fired_at, f.outcome
	   FROM choir_control.schedules s LEFT JOIN choir_control.schedule_fires f USING (schedule_id)`,
	`SELECT lane, model, count(*) AS calls, sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens
	   FROM choir_audit.llm_calls GROUP BY lane, model ORDER BY lane`,
	`SELECT event_type, count(*) FROM choir_control.session_events GROUP BY event_type ORDER BY count(*) DESC`,
}

// psql runs each audit query through psql and shows it with its output.
func (o *demoOutput) psql(t *testing.T, dbURL string) {
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatalf("psql is not installed (Debian: apt-get install postgresql-client): %v", err)
	}
	o.say("demo", "the audit trail, as psql shows it:")
	for _, q := range demoQueries {
		q = strings.Join(strings.Fields(q), " ")
		res, err := exec.Command("psql", dbURL, "-X", "-P", "pager=off", "-c", q).CombinedOutput()
		if err != nil {
			t.Fatalf("psql %q: %v\n%s", q, err, res)
		}
		o.mu.Lock()
		if o.print {
			fmt.Printf("\n$ psql -c %q\n%s", q, res)
		} else {
			t.Logf("psql -c %q\n%s", q, res)
		}
		o.mu.Unlock()
	}
}

// waitSentToWithin is waitSentTo with its own patience.
func waitSentToWithin(t testing.TB, b *telegramtest.Bot, chat int64, what string, limit time.Duration,
	match func(telegramtest.Message) bool) telegramtest.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var found telegramtest.Message
	if err := b.Wait(ctx, func() bool {
		for _, m := range b.SentTo(chat) {
			if match(m) {
				found = m
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no %s sent to chat %d within %s; sent: %q", what, chat, limit, sentTexts(b, chat))
	}
	return found
}
