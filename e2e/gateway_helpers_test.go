package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// The Telegram side of the gateway tests: one bot, a regular DM bound to
// "assistant", an admin DM, and a user no DM names.
const (
	botToken   = "4242:e2e-gateway-token"
	botName    = "choir_e2e_bot"
	gatewayTG  = "tg"
	dmAlice    = "alice"
	dmBoss     = "boss"
	dmBob      = "bob"
	userAdmin  = int64(4200)
	userAlice  = int64(4201)
	userBob    = int64(4202)
	stranger   = int64(4299)
	helperID   = "helper"
	actorAdmin = "e2e"
)

// tgEnv is a .choir.d whose config.json has one telegram gateway pointing
// at a fake Bot API server, and a model pointing at a scripted LLM server.
type tgEnv struct {
	choirdtest.Home
	tg  *telegramtest.Server
	bot *telegramtest.Bot
	llm *llmtest.Server
	// agentBinary, when set, is the choir-agent choird starts (the
	// kill-anywhere suite's, built with choirfault).
	agentBinary string
}

// newTGEnv writes the configuration: DM alice (regular, "assistant"'s
// default DM), DM boss (admin); edit may change it before it is written.
func newTGEnv(t testing.TB, llm *llmtest.Server, edit func(*config.Config)) *tgEnv {
	t.Helper()
	return newTGEnvSecrets(t, llm, func(c *config.Config, _ config.Secrets) {
		if edit != nil {
			edit(c)
		}
	})
}

// newTGEnvSecrets is newTGEnv whose edit may add secrets too.
func newTGEnvSecrets(t testing.TB, llm *llmtest.Server, edit func(*config.Config, config.Secrets)) *tgEnv {
	t.Helper()
	h := choirdtest.WriteHome(t, choirdtest.Options{ModelEndpoint: llm.BaseURL(), FastHeartbeat: true,
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			cfg.Gateways[gatewayTG] = config.Gateway{Type: config.GatewayTelegram, Secret: "telegram-bot"}
			secrets["telegram-bot"] = botToken
			cfg.DMs[dmAlice] = config.DM{Gateway: gatewayTG, UserID: fmt.Sprint(userAlice)}
			cfg.DMs[dmBoss] = config.DM{Gateway: gatewayTG, UserID: fmt.Sprint(userAdmin), Admin: true}
			a := cfg.Agents["assistant"]
			a.Defaults.DM = dmAlice
			cfg.Agents["assistant"] = a
			if edit != nil {
				edit(cfg, secrets)
			}
		}})
	srv := telegramtest.NewServer(t)
	e := &tgEnv{Home: h, tg: srv, bot: srv.AddBot(botToken, botName), llm: llm}
	// Whatever happens, no agent process outlives the test.
	t.Cleanup(func() { killAgents(t, h.Dir) })
	return e
}

// options are the options of a choird on e, with the process runtime and
// the choir-agent binary this test built.
func (e *tgEnv) options(t testing.TB) choirdtest.Options {
	bin := e.agentBinary
	if bin == "" {
		bin = choirdtest.Binary(t, "cmd/choir-agent")
	}
	return choirdtest.Options{Home: e.Dir, DatabaseURL: e.DatabaseURL, ReadyTimeout: 2 * time.Minute,
		Daemon: daemon.Options{Runtime: "process", AgentBinary: bin, TelegramAPIURL: e.tg.URL()}}
}

// withHelper adds a second agent, "helper", with its own workspace and
// regular DM bob.
func withHelper(c *config.Config) {
	c.Workspaces["side"] = config.Workspace{Path: filepath.Join(filepath.Dir(c.Workspaces["main"].Path), "side")}
	c.DMs[dmBob] = config.DM{Gateway: gatewayTG, UserID: fmt.Sprint(userBob)}
	c.Agents[helperID] = config.Agent{Defaults: config.AgentDefaults{Workspace: "side", LLM: "local", DM: dmBob}}
}

func (e *tgEnv) workspace() string { return e.Workspace("main") }

// agentLog is the process runtime's log of an agent.
func (e *tgEnv) agentLog(agentID string) string {
	b, _ := os.ReadFile(filepath.Join(e.Dir, "logs", agentID+".log"))
	return string(b)
}

func (e *tgEnv) choirdLog() string {
	b, _ := os.ReadFile(filepath.Join(e.Dir, "logs", "choird.log"))
	return string(b)
}

// dumpLogsOnFailure prints choird's and the agents' logs if the test fails.
func (e *tgEnv) dumpLogsOnFailure(t testing.TB, agents ...string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("choird.log:\n%s", tail(e.choirdLog(), 12000))
		for _, a := range agents {
			t.Logf("%s.log:\n%s", a, tail(e.agentLog(a), 12000))
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// runChoird runs choird in process on e (options). At cleanup every
// running agent is stopped gracefully, then choird.
func (e *tgEnv) runChoird(t testing.TB) *choirdtest.Choird {
	t.Helper()
	return choirdtest.Start(t, e.options(t))
}

// pool opens a pool on the test's database.
func (e *tgEnv) pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), e.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// liveSession waits for agentID's live session to have said hello and
// returns its id.
func liveSession(t testing.TB, pool *pgxpool.Pool, agentID string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	waitUntil(t, agentID+"'s hello", func() bool {
		err := pool.QueryRow(context.Background(), `SELECT session_id FROM choir_control.sessions
			WHERE agent_id = $1 AND status = 'active' AND hello_at IS NOT NULL`, agentID).Scan(&id)
		return err == nil
	})
	return id
}

// startChoirdProcess runs the choird binary on e (options) and waits
// until its admin socket answers. At cleanup every running agent is
// stopped gracefully, then choird.
func (e *tgEnv) startChoirdProcess(t testing.TB) *choirdtest.Process {
	t.Helper()
	return choirdtest.StartProcess(t, e.options(t))
}

// startAgentAdmin starts agentID through choird's admin socket, as
// choirctl agent start does.
func (e *tgEnv) startAgentAdmin(t testing.TB, agentID string) admin.AgentStatus {
	t.Helper()
	c := admin.NewClient(admin.SocketPath(e.Dir))
	defer c.Close()
	var st admin.AgentStatus
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Do(ctx, "POST", "/v1/agents/"+agentID+"/start", admin.StartOverrides{}, &st); err != nil {
		t.Fatalf("start %s: %v", agentID, err)
	}
	return st
}

// killAgents kills every agent process a choird on home started and left
// behind.
func killAgents(t testing.TB, home string) {
	for _, pid := range agentGroups(home) {
		if err := syscall.Kill(-pid, syscall.SIGKILL); err == nil {
			t.Logf("killed agent process group %d left behind", pid)
		} else if !errors.Is(err, syscall.ESRCH) {
			t.Logf("kill agent process group %d: %v", pid, err)
		}
	}
}

// agentGroups returns the process groups of the agents a choird on home
// started that still run (the process runtime's state files name them).
// The agent leads its own process group; a pid that is not a group
// leader any more (reused) is left out.
func agentGroups(home string) []int {
	files, _ := filepath.Glob(filepath.Join(home, "run", "process", "*.json"))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var rec struct {
			Pid    int  `json:"pid"`
			Exited bool `json:"exited"`
		}
		if json.Unmarshal(b, &rec) != nil || rec.Exited || rec.Pid <= 0 {
			continue
		}
		if pgid, err := syscall.Getpgid(rec.Pid); err == nil && pgid == rec.Pid {
			out = append(out, rec.Pid)
		}
	}
	return out
}

// sentTexts returns the texts the bot sent to chat.
func sentTexts(b *telegramtest.Bot, chat int64) []string {
	var out []string
	for _, m := range b.SentTo(chat) {
		out = append(out, m.Text)
	}
	return out
}

// waitSentTo waits until the bot has sent a message to chat whose text
// satisfies match, and returns it.
func waitSentTo(t testing.TB, b *telegramtest.Bot, chat int64, what string, match func(telegramtest.Message) bool) telegramtest.Message {
	t.Helper()
	return waitSentToWithin(t, b, chat, what, 60*time.Second, match)
}

func containsText(sub string) func(telegramtest.Message) bool {
	return func(m telegramtest.Message) bool { return strings.Contains(m.Text, sub) }
}

func approvalRequest(summary string) rpc.ApprovalRequest {
	return rpc.ApprovalRequest{RequestType: "tool:choir.propose.tool", Summary: summary,
		Payload: json.RawMessage(`{"name":"choir.repo.status"}`)}
}

// waitUntil polls cond until it holds, failing tb after a minute.
func waitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopAgentAdmin stops agentID gracefully through choird's admin socket.
func (e *tgEnv) stopAgentAdmin(t testing.TB, agentID string) {
	t.Helper()
	c := admin.NewClient(admin.SocketPath(e.Dir))
	defer c.Close()
	var st admin.AgentStatus
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.Do(ctx, "POST", "/v1/agents/"+agentID+"/stop", admin.Empty{}, &st); err != nil {
		t.Errorf("stop %s: %v", agentID, err)
	}
}
