package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/notion"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/agent/tool/tts"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
)

// secretValues are the session's secrets; no tool output may contain any
// of them unless the tool declared it.
var secretValues = map[string]string{
	"notion-work": "ntn_WORK_VALUE_1", "notion-home": "ntn_HOME_VALUE_2",
	"eleven-key": "xi_ELEVEN_VALUE_3", "other-key": "xi_OTHER_VALUE_4", "model-key": "sk_MODEL_VALUE_5",
}

// bindingSession is a session bound to the Notion integration "work" and
// the voice profile "calm", with the dynamic configuration choird sends.
func bindingSession(notionBinding string) *session {
	s := &session{secrets: &secretStore{}, logger: slog.New(slog.DiscardHandler)}
	s.hello.ResourceBindings = rpc.ResourceBindings{Notion: notionBinding, VoiceProfile: "calm"}
	s.secrets.swap(secretValues)
	s.dyn.Store(&rpc.DynamicConfig{
		NotionIntegrations: map[string]config.NotionIntegration{"work": {Secret: "notion-work"}, "home": {Secret: "notion-home"}},
		TTS: map[string]config.TTS{
			"eleven": {Provider: "elevenlabs", ModelID: "eleven_multilingual_v2", Endpoint: "http://127.0.0.1:9/v1", Secret: "eleven-key"},
			"other":  {Provider: "elevenlabs", ModelID: "eleven_flash_v2_5", Endpoint: "http://127.0.0.1:9/v1", Secret: "other-key"},
		},
		VoiceProfiles: map[string]config.VoiceProfile{
			"calm":   {TTS: "eleven", VoiceID: "v-calm", OutputFormat: "opus_48000_64"},
			"bright": {TTS: "other", VoiceID: "v-bright", OutputFormat: "mp3_44100_128"},
		},
		VoiceProfile: "calm",
	})
	return s
}

func TestBindingSecretsFollowTheSession(t *testing.T) {
	t.Parallel()
	s := bindingSession("work")
	if v, ok := s.secret(tool.SecretNotion); !ok || v != secretValues["notion-work"] {
		t.Errorf("notion binding = %q %v, want the work integration's secret", v, ok)
	}
	if v, ok := s.secret(tool.SecretTTS); !ok || v != secretValues["eleven-key"] {
		t.Errorf("tts binding = %q %v, want eleven-key", v, ok)
	}
	// /voice bright: choird sends a new configuration; the next lookup
	// and the next voice resolution follow it.
	d := *s.dyn.Load()
	d.VoiceProfile = "bright"
	s.dyn.Store(&d)
	if v, _ := s.secret(tool.SecretTTS); v != secretValues["other-key"] {
		t.Errorf("after /voice the tts binding = %q, want other-key", v)
	}
	if v, err := s.voice(); err != nil || v.VoiceID != "v-bright" || v.ModelID != "eleven_flash_v2_5" {
		t.Errorf("voice after /voice = %+v %v", v, err)
	}
	if _, ok := bindingSession("").secret(tool.SecretNotion); ok {
		t.Error("a session without a Notion integration obtained a Notion secret")
	}
}

// probe is a Go tool that reports every secret its environment answers.
type probe struct {
	name    string
	secrets []string
}

var probedNames = append([]string{tool.SecretNotion, tool.SecretTTS}, slices.Sorted(func(yield func(string) bool) {
	for k := range secretValues {
		if !yield(k) {
			return
		}
	}
})...)

func (p probe) Spec() tool.Spec {
	return tool.Spec{LLM: tool.LLMView{Name: p.name, Description: "probe", Parameters: json.RawMessage(`{"type": "object"}`)},
		Runtime: tool.Runtime{TimeoutMS: 5000, SideEffect: tool.SideEffectRead, Version: "1", SecretResources: p.secrets}}
}

func (p probe) Execute(_ context.Context, env tool.Env, _ json.RawMessage) (tool.Result, error) {
	got := map[string]string{}
	for _, n := range probedNames {
		if v, ok := env.Secret(n); ok {
			got[n] = v
		}
	}
	return tool.SuccessResult("probed", got), nil
}

// TestOnlyTheirToolsObtainTheBindingSecrets builds the agent's registry as
// a session does and shows that choir.notion.query alone declares the
// Notion secret and choir.tts.speak alone the TTS key; that a tool
// declaring neither, Go or external, obtains no secret at all; that one
// declaring the TTS key obtains nothing else; and that choir.exec's
// processes see none of the values.
func TestOnlyTheirToolsObtainTheBindingSecrets(t *testing.T) {
	t.Parallel()
	s := bindingSession("work")
	global := t.TempDir()
	tooltest.AddTool(t, global, "envdump", tooltest.Manifest("x.envdump", ""),
		`out=$( (env; echo FDS; ls /proc/self/fd; cat <&3 2>/dev/null) | tr -d '"\\' | tr '\n\t' '  ')
printf '{"status":"success","summary":"dumped","output":"%s"}' "$out"`)
	cfg := builtin.Config{GlobalDir: global, AgentDir: filepath.Join(t.TempDir(), "none"),
		Tools: []tool.Tool{probe{name: "x.probe.none"}, probe{name: "x.probe.tts", secrets: []string{tool.SecretTTS}}}}
	s.serviceTools(&cfg)
	reg, err := builtin.Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range reg.Names() {
		d, _ := reg.Get(name)
		declared := d.Runtime().SecretResources
		switch name {
		case notion.Name:
			if !slices.Equal(declared, []string{tool.SecretNotion}) {
				t.Errorf("%s declares %v, want only %s", name, declared, tool.SecretNotion)
			}
		case tts.Name, "x.probe.tts":
			if !slices.Equal(declared, []string{tool.SecretTTS}) {
				t.Errorf("%s declares %v, want only %s", name, declared, tool.SecretTTS)
			}
		default:
			if len(declared) != 0 {
				t.Errorf("%s declares secrets %v", name, declared)
			}
		}
	}

	ws := t.TempDir()
	env := tool.Env{Workspace: ws, SecretFunc: s.secret}
	call := func(name, input string) tool.Result {
		t.Helper()
		d, err := reg.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		r, err := d.Execute(t.Context(), env, json.RawMessage(input))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	if r := call("x.probe.none", `{}`); string(r.Output) != "{}" {
		t.Errorf("a tool declaring no secret obtained %s", r.Output)
	}
	if r := call("x.probe.tts", `{}`); string(r.Output) != `{"binding.tts":"`+secretValues["eleven-key"]+`"}` {
		t.Errorf("a tool declaring the TTS key obtained %s", r.Output)
	}
	for _, c := range []struct{ name, input string }{
		{tool.NameExec, `{"command": "env; cat /proc/self/environ; ls -l /proc/self/fd; cat <&3"}`},
		{"x.envdump", `{}`},
	} {
		r := call(c.name, c.input)
		out := string(r.JSON())
		if !strings.Contains(out, "PATH=") {
			t.Fatalf("%s printed no environment, so proves nothing: %s", c.name, out)
		}
		for n, v := range secretValues {
			if strings.Contains(out, v) {
				t.Errorf("%s obtained secret %s:\n%s", c.name, n, out)
			}
		}
		if strings.Contains(out, "CHOIR_SECRETS_FD") {
			t.Errorf("%s was handed a secrets pipe", c.name)
		}
	}
}
