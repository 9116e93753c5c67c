package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
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
