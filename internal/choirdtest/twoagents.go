package choirdtest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/starter"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
)

// Canary is the model key's value in TwoAgents' secrets: it must never be
// seen outside the memory of choird and of the agent that fetched it.
const Canary = "sk-canary-7f3a"

// TwoAgents makes config.Local's configuration the one choird's
// end-to-end tests share: agents "assistant" (with the git identity
// "dev") and "helper", workspaces "main" and "other", a model key (Canary)
// and a second console DM, "second".
func TwoAgents(cfg *config.Config, secrets config.Secrets) {
	cfg.Workspaces["other"] = config.Workspace{Path: filepath.Join(filepath.Dir(cfg.Workspaces["main"].Path), "other")}
	m := cfg.Models["local"]
	m.Secret = "model-key"
	cfg.Models["local"] = m
	secrets["model-key"] = Canary
	cfg.GitIdentities = map[string]config.GitIdentity{"dev": {Name: "Dev", Email: "dev@choir.local", Secret: "git-token",
		Hosts: []string{"git.example.com"}}}
	secrets["git-token"] = "ghp-test"
	a := cfg.Agents["assistant"]
	a.Defaults.GitIdentity = "dev"
	cfg.Agents["assistant"] = a
	h := a
	h.Defaults.GitIdentity = ""
	cfg.Agents["helper"] = h
	cfg.DMs["second"] = config.DM{Gateway: "console", UserID: "second"}
}

// WithTwoAgents is o on TwoAgents' configuration, which o.Edit may change
// further.
func WithTwoAgents(o Options) Options {
	edit := o.Edit
	o.Edit = func(cfg *config.Config, secrets config.Secrets) {
		TwoAgents(cfg, secrets)
		if edit != nil {
			edit(cfg, secrets)
		}
	}
	return o
}

// StartTwoAgents runs choird (with no agent runtime unless o.Daemon names
// one) on TwoAgents' configuration, which o.Edit may change further.
func StartTwoAgents(t testing.TB, o Options) *Choird {
	t.Helper()
	return Start(t, WithTwoAgents(o))
}

// FastHeartbeat is a 100 ms heartbeat and a 3 s crash threshold.
func FastHeartbeat(cfg *config.Config, _ config.Secrets) {
	cfg.HeartbeatIntervalMS = 100
	cfg.CrashDetectionThresholdMS = 3000
}

// StartWithAgents runs choird with the process runtime and the real
// agent, on TwoAgents' configuration with a fast heartbeat; edit, when
// set, changes it further.
func StartWithAgents(t testing.TB, edit func(*config.Config)) *Choird {
	t.Helper()
	return StartTwoAgents(t, Options{
		Daemon: daemon.Options{Runtime: "process", AgentBinary: Binary(t, "cmd/choir-agent")},
		Edit: func(cfg *config.Config, _ config.Secrets) {
			FastHeartbeat(cfg, nil)
			if edit != nil {
				edit(cfg)
			}
		}})
}

// UserMessage is a push of text from the console DM "operator".
func UserMessage(text string) rpc.Push {
	return rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: time.Now().UnixNano(),
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: text, ReceivedAt: time.Now()}}
}

// TwoAgentsConfig is TwoAgents' configuration for a choird that is not
// started, validated: for tests of the parts that take a configuration.
func TwoAgentsConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, secrets := starter.Local(t.TempDir(), config.Postgres{Host: "127.0.0.1", Port: 55432, Database: "choir"})
	TwoAgents(cfg, secrets)
	if err := cfg.Validate(secrets); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// SessionCall is the rpc call an agent of s makes.
func SessionCall(s session.StartedSession) rpc.Call {
	return rpc.Call{Session: rpc.Session{ID: s.Session.ID.String(), AgentID: s.Session.AgentID}, Verb: "INIT_HELLO"}
}

// HelloRequest is the INIT_HELLO an agent of s sends.
func HelloRequest(s session.StartedSession) rpc.InitHelloRequest {
	return rpc.InitHelloRequest{AgentID: s.Session.AgentID, SessionID: s.Session.ID.String(),
		ImageVersion: "img-1", ToolManifestHash: "t1", SkillManifestHash: "s1"}
}

// HelloSession starts a session of agentID on its defaults, as choird's
// start does, and returns its id, a client on choird's agent socket that
// has said hello for it, as its agent would, and choird's answer. Unlike a
// stand-in, the client sends nothing else. It closes when the test ends.
func (c *Choird) HelloSession(t testing.TB, agentID string) (string, *client.Client, rpc.InitHelloResponse) {
	t.Helper()
	id, token := c.StartSession(t, agentID)
	cl, err := client.New(client.Options{Socket: c.Socket(), SessionID: id, LeaseToken: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	hello, err := cl.InitHello(context.Background(), rpc.InitHelloRequest{AgentID: agentID, SessionID: id,
		ImageVersion: "img-1", ToolManifestHash: "t1", SkillManifestHash: "s1"})
	if err != nil {
		t.Fatalf("INIT_HELLO: %v", err)
	}
	return id, cl, hello
}

// PushText pushes text from the console DM to agent's latest session.
func (c *Choird) PushText(t testing.TB, agent, text string) {
	t.Helper()
	st := c.LatestStatus(context.Background(), agent)
	if _, err := c.Push(st.SessionID, UserMessage(text)); err != nil {
		t.Fatal(err)
	}
}
