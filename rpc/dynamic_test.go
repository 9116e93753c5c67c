package rpc_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/choirhq/choir/rpc"
)

// TestDynamicConfigRoundTrip decodes the documents choird sends in
// FETCH_DYNAMIC_CONFIG, written out by hand from the fields and tags of
// the struct choird has always encoded, and encodes them again: every key
// survives, in choird's order, and the omitempty keys stay out when empty.
func TestDynamicConfigRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, doc string
	}{
		{"Full", `{
			"models":{"local":{"provider":"openai-compatible","model":"llama3.1","endpoint":"http://127.0.0.1:11434/v1",
				"temperature":0.2,"reasoning_effort":"low","secret":"local-key"},
				"smart":{"provider":"openai-compatible","model":"big-2","endpoint":"https://api.example.com/v1",
				"temperature":null,"reasoning_effort":null}},
			"tts":{"eleven":{"provider":"elevenlabs","model_id":"eleven_v3","endpoint":"https://api.elevenlabs.io","secret":"eleven-key"}},
			"voice_profiles":{"calm":{"tts":"eleven","voice_id":"v1","output_format":"mp3_44100_128",
				"voice_settings":{"stability":0.5,"similarity_boost":0.75,"style":0,"use_speaker_boost":true,"speed":1}}},
			"search":{"brave":{"secret":"brave-key"}},
			"git_identities":{"bot":{"name":"Choir Bot","email":"bot@example.com","secret":"gh-token","hosts":["github.com"]}},
			"heartbeat_interval_ms":2000,
			"rate_limit_retry_ms":5000,
			"session_summary_timeout_ms":30000,
			"snapshot_every_events":200,
			"budgets":{"max_core_jobs":4,"total_session_tokens":5000000,"max_tool_calls_per_session":2000,
				"max_steps_per_message":20,"per_job_max_steps":50,"per_job_max_tool_calls":200,
				"per_job_wall_time_ms":1800000,"max_injections_per_job":10},
			"compaction_threshold_percent":80,
			"llm":"smart",
			"voice_profile":"calm",
			"secrets":["eleven-key","local-key"]
		}`},
		{"EmptyOptionalsLeftOut", `{
			"models":{"local":{"provider":"openai-compatible","model":"llama3.1","endpoint":"http://127.0.0.1:11434/v1",
				"temperature":null,"reasoning_effort":null}},
			"heartbeat_interval_ms":2000,
			"rate_limit_retry_ms":5000,
			"session_summary_timeout_ms":30000,
			"snapshot_every_events":200,
			"budgets":{"max_core_jobs":0,"total_session_tokens":0,"max_tool_calls_per_session":0,
				"max_steps_per_message":0,"per_job_max_steps":0,"per_job_max_tool_calls":0,
				"per_job_wall_time_ms":0,"max_injections_per_job":0},
			"compaction_threshold_percent":0,
			"secrets":null
		}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var want bytes.Buffer
			if err := json.Compact(&want, []byte(c.doc)); err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(want.Bytes()))
			dec.DisallowUnknownFields()
			var d rpc.DynamicConfig
			if err := dec.Decode(&d); err != nil {
				t.Fatalf("decode: %v", err)
			}
			got, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Errorf("round trip changed the document:\n got %s\nwant %s", got, want.Bytes())
			}
		})
	}
}
