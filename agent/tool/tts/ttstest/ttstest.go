// Package ttstest is a local server speaking the ElevenLabs
// text-to-speech protocol, for tests: POST
// /v1/text-to-speech/{voice_id}?output_format=..., the key in the
// xi-api-key header, a JSON body. It answers real audio, [Tone], as
// ElevenLabs answers an opus_48000_* request, or ElevenLabs' error bodies
// ({"detail": {"status", "message"}}, a 422 list, a 429 with Retry-After).
// It is for tests only.
package ttstest

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// tone is half a second of a 440 Hz sine, 48 kHz mono, encoded by Debian's
// opusenc 0.2 (opus-tools) at 24 kbit/s: one Ogg Opus stream of 25 audio
// packets of 20 ms, pre-skip 312.
//
//go:embed tone.ogg
var tone []byte

// Tone returns a copy of the audio the server answers.
func Tone() []byte { return append([]byte(nil), tone...) }

// ToneSeconds is the playing time of [Tone].
const ToneSeconds = 0.5

// Call is one request the server accepted (a valid body and key).
type Call struct {
	VoiceID, Format, Key string
	Body                 struct {
		Text          string         `json:"text"`
		ModelID       string         `json:"model_id"`
		VoiceSettings map[string]any `json:"voice_settings"`
		PreviousText  string         `json:"previous_text"`
		NextText      string         `json:"next_text"`
	}
}

// Server is the fake provider. Its zero faults answer [Tone].
type Server struct {
	srv *httptest.Server
	// Key is the API key it accepts.
	Key string

	mu      sync.Mutex
	calls   []Call
	limited int    // answer this many next requests with 429
	mp3     bool   // answer MP3 bytes whatever the format
	fail    string // answer every request with this detail status and a 400
}

// NewServer starts a server that the test's cleanup stops.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{Key: "xi-test-key"}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// Endpoint is the provider endpoint as config.json names it.
func (s *Server) Endpoint() string { return s.srv.URL + "/v1" }

// Calls returns the accepted requests, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// RateLimit answers the next n accepted requests with 429 and
// Retry-After: 3.
func (s *Server) RateLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limited = n
}

// Fail answers every accepted request with a 400 of detail status code.
func (s *Server) Fail(code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = code
}

// AnswerMP3 answers MP3 bytes whatever format is asked for, as a provider
// plan without Opus might.
func (s *Server) AnswerMP3() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mp3 = true
}

func detailError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"detail": map[string]string{"status": code, "message": msg}}) //nolint:errcheck
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	voice, ok := strings.CutPrefix(r.URL.Path, "/v1/text-to-speech/")
	if r.Method != http.MethodPost || !ok || voice == "" || strings.Contains(voice, "/") {
		detailError(w, 404, "not_found", "Not Found")
		return
	}
	c := Call{VoiceID: voice, Format: r.URL.Query().Get("output_format"), Key: r.Header.Get("xi-api-key")}
	if err := json.NewDecoder(r.Body).Decode(&c.Body); err != nil || c.Body.Text == "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(422)
		w.Write([]byte(`{"detail":[{"type":"missing","loc":["body","text"],"msg":"Field required","input":null}]}`)) //nolint:errcheck
		return
	}
	if c.Key != s.Key {
		detailError(w, 401, "invalid_api_key", "Invalid API key")
		return
	}
	s.calls = append(s.calls, c)
	switch {
	case s.limited > 0:
		s.limited--
		w.Header().Set("Retry-After", "3")
		detailError(w, 429, "too_many_concurrent_requests", "Too many concurrent requests for your plan.")
	case s.fail != "":
		detailError(w, 400, s.fail, "The voice could not be used.")
	case s.mp3:
		w.Header().Set("Content-Type", "audio/mpeg")
		w.Write(append([]byte("ID3\x04\x00\x00\x00\x00\x00\x00"), make([]byte, 400)...)) //nolint:errcheck
	case !strings.HasPrefix(c.Format, "opus_48000_"):
		detailError(w, 400, "invalid_output_format", "this fake answers only opus formats")
	default:
		w.Header().Set("Content-Type", "audio/opus")
		w.Write(tone) //nolint:errcheck
	}
}
