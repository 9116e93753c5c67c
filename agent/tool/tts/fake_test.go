package tts_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// tone is real audio: half a second of a 440 Hz sine, 48 kHz mono,
// encoded by Debian's opusenc 0.2 (opus-tools) at 24 kbit/s, as
// ElevenLabs answers an opus_48000_* request: one Ogg Opus stream.
func tone(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/tone.ogg")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// speechCall is one request the fake received.
type speechCall struct {
	VoiceID, Format, Key string
	Body                 struct {
		Text          string         `json:"text"`
		ModelID       string         `json:"model_id"`
		VoiceSettings map[string]any `json:"voice_settings"`
		PreviousText  string         `json:"previous_text"`
		NextText      string         `json:"next_text"`
	}
}

// fakeElevenLabs speaks the ElevenLabs text-to-speech protocol: POST
// /v1/text-to-speech/{voice_id}?output_format=..., the key in xi-api-key,
// a JSON body; it answers real Ogg Opus audio, or ElevenLabs' error
// bodies ({"detail": {"status", "message"}}, a 422 list, a 429 with
// Retry-After).
type fakeElevenLabs struct {
	*httptest.Server
	key   string
	audio []byte

	mu      sync.Mutex
	calls   []speechCall
	limited int    // answer this many next requests with 429
	mp3     bool   // answer MP3 bytes whatever the format
	fail    string // answer every request with this detail status and a 400
}

func newFakeElevenLabs(t *testing.T) *fakeElevenLabs {
	f := &fakeElevenLabs{key: "xi-test-key", audio: tone(t)}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// Endpoint is the provider endpoint as config.json names it.
func (f *fakeElevenLabs) Endpoint() string { return f.Server.URL + "/v1" }

func (f *fakeElevenLabs) Calls() []speechCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]speechCall(nil), f.calls...)
}

func detailError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"detail": map[string]string{"status": code, "message": msg}}) //nolint:errcheck
}

func (f *fakeElevenLabs) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	voice, ok := strings.CutPrefix(r.URL.Path, "/v1/text-to-speech/")
	if r.Method != http.MethodPost || !ok || voice == "" || strings.Contains(voice, "/") {
		detailError(w, 404, "not_found", "Not Found")
		return
	}
	c := speechCall{VoiceID: voice, Format: r.URL.Query().Get("output_format"), Key: r.Header.Get("xi-api-key")}
	if err := json.NewDecoder(r.Body).Decode(&c.Body); err != nil || c.Body.Text == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(422)
		w.Write([]byte(`{"detail":[{"type":"missing","loc":["body","text"],"msg":"Field required","input":null}]}`)) //nolint:errcheck
		return
	}
	if c.Key != f.key {
		detailError(w, 401, "invalid_api_key", "Invalid API key")
		return
	}
	f.calls = append(f.calls, c)
	switch {
	case f.limited > 0:
		f.limited--
		w.Header().Set("Retry-After", "3")
		detailError(w, 429, "too_many_concurrent_requests", "Too many concurrent requests for your plan.")
	case f.fail != "":
		detailError(w, 400, f.fail, "The voice could not be used.")
	case f.mp3:
		w.Header().Set("Content-Type", "audio/mpeg")
		w.Write(append([]byte("ID3\x04\x00\x00\x00\x00\x00\x00"), make([]byte, 400)...)) //nolint:errcheck
	case !strings.HasPrefix(c.Format, "opus_48000_"):
		detailError(w, 400, "invalid_output_format", "this fake answers only opus formats")
	default:
		w.Header().Set("Content-Type", "audio/opus")
		w.Write(f.audio) //nolint:errcheck
	}
}
