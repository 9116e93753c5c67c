package agent

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/choirhq/choir/rpc"
)

func TestDynamicConfig(t *testing.T) {
	t.Parallel()
	const raw = `{"models":{"fast":{"provider":"openai-compatible","model":"small-1","endpoint":"http://127.0.0.1:1/v1","secret":"fast-key"},
"smart":{"provider":"openai-compatible","model":"big-2","endpoint":"http://127.0.0.1:2/v1"}},
"heartbeat_interval_ms":100,"session_summary_timeout_ms":1500,"llm":"smart","voice_profile":"calm"}`
	var d rpc.DynamicConfig
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatal(err)
	}
	if d.LLM != "smart" || d.VoiceProfile != "calm" || summaryTimeout(&d) != 1500*time.Millisecond {
		t.Fatalf("decoded %+v", d)
	}
	secret := func(name string) (string, bool) { return map[string]string{"fast-key": "k1"}[name], name == "fast-key" }
	for _, c := range []struct {
		name, llm, bound, want, wantModel string
	}{
		{"ChosenModelWins", "smart", "fast", "smart", "big-2"},
		{"UnsetKeepsTheBoundOne", "", "fast", "fast", "small-1"},
		{"UnknownChoiceKeepsTheBoundOne", "gpt-9", "fast", "fast", "small-1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := d
			d.LLM = c.llm
			m := modelSettings(&d, c.bound, secret)
			if m.Name != c.want || m.Model != c.wantModel {
				t.Errorf("model = %s (%s), want %s (%s)", m.Name, m.Model, c.want, c.wantModel)
			}
			if c.want == "fast" && m.APIKey != "k1" {
				t.Errorf("api key of fast = %q", m.APIKey)
			}
		})
	}
	t.Run("SummaryTimeoutDefaultsTo30s", func(t *testing.T) {
		t.Parallel()
		if got := summaryTimeout(&rpc.DynamicConfig{}); got != 30*time.Second {
			t.Errorf("default = %s", got)
		}
	})
}
