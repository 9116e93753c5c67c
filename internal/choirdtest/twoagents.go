package choirdtest

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/rpc"
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

// Choirctl runs choirctl on home with args, in process, and returns its
// exit code, standard output and standard error.
func Choirctl(t testing.TB, home string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := ctl.Run(context.Background(), append([]string{"--home", home}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// UserMessage is a push of text from the console DM "operator".
func UserMessage(text string) rpc.Push {
	return rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: time.Now().UnixNano(),
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: text, ReceivedAt: time.Now()}}
}
