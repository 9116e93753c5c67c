package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// runSessionCommands runs choirctl with --home, returning the exit code,
// stdout and stderr.
func runSessionCommands(home string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(context.Background(), append([]string{"--home", home}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// startChoird runs choird, without an agent runtime, on a fresh database
// with a second model and two voice profiles.
func startChoird(t *testing.T) string {
	t.Helper()
	return startChoirdOn(t, dbtest.NewDatabase(t))
}

// startChoirdOn is startChoird on the migrated database behind url.
func startChoirdOn(t *testing.T, url string) string {
	t.Helper()
	c := choirdtest.Start(t, choirdtest.Options{DatabaseURL: url, Edit: func(cfg *config.Config, _ config.Secrets) {
		cfg.Models["big"] = cfg.Models["local"]
		cfg.TTS = map[string]config.TTS{"eleven": {Provider: "elevenlabs", ModelID: "eleven_v2", Endpoint: "http://127.0.0.1:9"}}
		cfg.VoiceProfiles = map[string]config.VoiceProfile{
			"calm": {TTS: "eleven", VoiceID: "v-calm", OutputFormat: "mp3_44100_128", VoiceSettings: config.VoiceSettings{Speed: 1}},
		}
	}})
	return c.Home
}

func TestSessionModelVoiceApprovalCommands(t *testing.T) {
	t.Parallel()
	home := startChoird(t)

	t.Run("ModelList", func(t *testing.T) {
		code, out, errs := runSessionCommands(home, "model", "list")
		if code != ExitOK || !strings.Contains(out, "big") || !strings.Contains(out, "eleven") || !strings.Contains(out, "tts") {
			t.Errorf("exit %d: %s%s", code, out, errs)
		}
		code, out, _ = runSessionCommands(home, "voice", "list", "--json")
		var voices []admin.NamedVoice
		if code != ExitOK || json.Unmarshal([]byte(out), &voices) != nil || len(voices) != 1 || voices[0].VoiceID != "v-calm" {
			t.Errorf("voice list --json: exit %d: %s", code, out)
		}
	})
	t.Run("GetOfAStoppedAgentShowsItsDefaults", func(t *testing.T) {
		code, out, errs := runSessionCommands(home, "model", "get", "assistant")
		if code != ExitOK || !strings.Contains(out, "not running") || !strings.Contains(out, "model:         local") {
			t.Errorf("exit %d: %s%s", code, out, errs)
		}
	})
	t.Run("SetNeedsARunningAgentAndAKnownName", func(t *testing.T) {
		code, _, errs := runSessionCommands(home, "model", "set", "assistant")
		if code != ExitUsage || !strings.Contains(errs, "--llm is required") {
			t.Errorf("no --llm: exit %d: %s", code, errs)
		}
		code, _, errs = runSessionCommands(home, "model", "set", "assistant", "--llm", "big")
		if code != ExitError || !strings.Contains(errs, "assistant has no live session") {
			t.Errorf("stopped agent: exit %d: %s", code, errs)
		}
		code, _, errs = runSessionCommands(home, "voice", "set", "assistant", "loud")
		if code != ExitError || !strings.Contains(errs, `no voice profile "loud"`) || !strings.Contains(errs, "voice profiles: calm") {
			t.Errorf("unknown voice: exit %d: %s", code, errs)
		}
	})
	t.Run("Session", func(t *testing.T) {
		code, _, errs := runSessionCommands(home, "session", "cores", "assistant")
		if code != ExitError || !strings.Contains(errs, "assistant has never run") {
			t.Errorf("cores: exit %d: %s", code, errs)
		}
		code, _, errs = runSessionCommands(home, "session", "events", "ghost")
		if code != ExitError || !strings.Contains(errs, `agent "ghost" is not in config.json`) {
			t.Errorf("events of an unknown agent: exit %d: %s", code, errs)
		}
		code, _, errs = runSessionCommands(home, "session", "events", "assistant", "-n", "0")
		if code != ExitUsage {
			t.Errorf("-n 0: exit %d: %s", code, errs)
		}
	})
	t.Run("Approvals", func(t *testing.T) {
		code, out, errs := runSessionCommands(home, "approval", "list", "--json")
		if code != ExitOK || strings.TrimSpace(out) != "[]" {
			t.Errorf("list: exit %d: %q %s", code, out, errs)
		}
		code, _, errs = runSessionCommands(home, "approval", "approve", "not-an-id")
		if code != ExitError || !strings.Contains(errs, "is not an approval id") {
			t.Errorf("malformed: exit %d: %s", code, errs)
		}
		code, _, errs = runSessionCommands(home, "approval", "show", "00000000-0000-4000-8000-000000000000")
		if code != ExitError || !strings.Contains(errs, "not found") {
			t.Errorf("unknown: exit %d: %s", code, errs)
		}
		code, _, errs = runSessionCommands(home, "approval", "list", "--agent", "ghost")
		if code != ExitError || !strings.Contains(errs, `agent "ghost" is not in config.json`) {
			t.Errorf("unknown agent: exit %d: %s", code, errs)
		}
	})
}

// TestSessionLanesCommands shows a live session's lanes and core jobs, as
// its agent reported them, through choirctl session cores, session status,
// agent status and status.
func TestSessionLanesCommands(t *testing.T) {
	t.Parallel()
	a := startChatAgent(t, func(context.Context, *chatAgent, string) {})
	code, out, errs := runSessionCommands(a.home, "session", "cores", "assistant")
	if code != ExitOK || !strings.HasPrefix(out, "assistant runs no core job (session ") {
		t.Errorf("no job yet: exit %d: %q %s", code, out, errs)
	}
	n := func(v int64) *int64 { return &v }
	for _, st := range []rpc.ReportStatusRequest{
		{Lane: "edge", State: "EDGE_REASONING", BudgetRemaining: wire.Budget{ToolCalls: n(1990), Tokens: n(4_999_000)}},
		{Lane: "core:old", State: "CORE_TERMINATED", Steps: 2, Progress: "cancelled"},
		{Lane: "core:research", State: "CORE_WAITING_TOOL", Steps: 7, Skill: "survey", Step: "search",
			Progress:        "reading a very long page about the history of choral music in the Baltic states, chapter two",
			BudgetRemaining: wire.Budget{Steps: n(43), ToolCalls: n(180), TimeMS: n(1_450_000)},
			Sources:         []string{"web:https://choirs.example/baltic"}},
	} {
		if _, err := a.cl.ReportStatus(t.Context(), st); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs = runSessionCommands(a.home, "session", "cores", "assistant")
	want := strings.Join([]string{
		"JOB       STATE                                  STEPS  BUDGET LEFT                       LAST PROGRESS" +
			"                                                RUNNING",
		"research  waiting for a tool (survey at search)  7      43 steps, 180 tool calls, 24m10s  " +
			"reading a very long page about the history of choral music…  true",
		"old       terminated                             2      -                                 cancelled" +
			"                                                    false",
		""}, "\n")
	if code != ExitOK || out != want {
		t.Errorf("session cores: exit %d %s\n got:\n%s\nwant:\n%s", code, errs, out, want)
	}
	lanes := []string{
		"\nAGENT      LANE           STATE                                  STEPS  BUDGET LEFT                       LAST PROGRESS" +
			"                                                READ FROM OUTSIDE\n",
		"\nassistant  core:old       terminated                             2      -                                 cancelled" +
			"                                                    -\n",
		"\nassistant  core:research  waiting for a tool (survey at search)  7      43 steps, 180 tool calls, 24m10s  " +
			"reading a very long page about the history of choral music…  web:https://choirs.example/baltic\n",
		"\nassistant  edge           reasoning                              -      1990 tool calls, 4999000 tokens   -" +
			"                                                            -\n",
	}
	for _, args := range [][]string{{"session", "status", "assistant"}, {"agent", "status", "assistant"}, {"status"}} {
		code, out, errs := runSessionCommands(a.home, args...)
		if code != ExitOK {
			t.Errorf("%v: exit %d: %s%s", args, code, out, errs)
			continue
		}
		for _, l := range lanes {
			if !strings.Contains(out, l) {
				t.Errorf("%v: no line %q in\n%s", args, l, out)
			}
		}
	}
	code, out, errs = runSessionCommands(a.home, "session", "cancel", "assistant", "old")
	if code != ExitError || !strings.Contains(errs, `no running core job "old" (running: research;`) {
		t.Errorf("cancel of a finished job: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = runSessionCommands(a.home, "session", "cancel", "assistant", "research")
	if code != ExitOK || !strings.HasPrefix(out, "cancel sent to research (session ") {
		t.Errorf("cancel: exit %d: %s%s", code, out, errs)
	}
	if p := a.push(t); p.Kind != rpc.PushCancel || p.Cancel.Scope != rpc.CancelCore || p.Cancel.JobName != "research" ||
		!strings.HasPrefix(p.Cancel.Reason, "cancelled by choirctl:") {
		t.Errorf("cancel push = %+v %+v", p, p.Cancel)
	}
	code, out, errs = runSessionCommands(a.home, "session", "compact", "assistant")
	if code != ExitOK || !strings.HasPrefix(out, "compaction requested (session ") {
		t.Errorf("compact: exit %d: %s%s", code, out, errs)
	}
	if p := a.push(t); p.Kind != rpc.PushCompact || p.Compact == nil {
		t.Errorf("compact push = %+v", p)
	}
	code, out, _ = runSessionCommands(a.home, "session", "status", "assistant", "--json")
	var st admin.AgentStatus
	if code != ExitOK || json.Unmarshal([]byte(out), &st) != nil || len(st.Lanes) != 3 || st.Lanes[0].Progress != "cancelled" ||
		st.Lanes[1].Steps != 7 || *st.Lanes[1].BudgetRemaining.Steps != 43 {
		t.Errorf("session status --json: exit %d: %s", code, out)
	}
}

// TestLogsIsAChoirctlCommand runs choirctl logs through choirctl itself:
// an unknown agent is bad input (exit 2) naming the known ones.
func TestLogsIsAChoirctlCommand(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, "config.json"), []byte(`{"agents": {"alice": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runSessionCommands(home, "logs", "bob")
	if code != ExitUsage || !strings.Contains(errs, `unknown agent "bob"`) || !strings.Contains(errs, "alice, choird") {
		t.Fatalf("choirctl logs bob = %d, %q", code, errs)
	}
}
