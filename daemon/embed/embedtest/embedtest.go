// Package embedtest runs a fake OpenAI-compatible embeddings server for
// tests: it answers POST /embeddings with the offline embedder's vectors
// (so similarity is predictable), can inject rate limits, server errors and
// hangs at given rates, and records what it served.
package embedtest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/embed"
)

// Faults are the rates (0 to 1) at which requests fail. A hang holds the
// request until the client gives up (or Hang passes), answering nothing.
type Faults struct {
	RateLimit   float64
	ServerError float64
	Timeout     float64
	// Down fails every request with 503.
	Down bool
}

// Server is a fake embeddings API.
type Server struct {
	*httptest.Server
	t    testing.TB
	dims int
	key  string

	mu        sync.Mutex
	rng       *rand.Rand
	faults    Faults
	requests  int
	failures  map[int]int
	served    map[string]int
	servedAt  map[string][]time.Time
	batches   []int
	oversized int
	hang      time.Duration
}

// Options configure a Server.
type Options struct {
	Dimensions int
	// APIKey, when set, must arrive as a bearer token.
	APIKey string
	Faults Faults
	// Seed makes fault injection repeatable.
	Seed uint64
	// Hang is the longest a hanging request is held (default 10 s).
	Hang time.Duration
}

// New starts a server, closed when the test ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{t: t, dims: opts.Dimensions, key: opts.APIKey, faults: opts.Faults,
		rng: rand.New(rand.NewPCG(opts.Seed, 7)), failures: map[int]int{}, served: map[string]int{},
		servedAt: map[string][]time.Time{},
		hang:     opts.Hang}
	if s.hang <= 0 {
		s.hang = 10 * time.Second
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	t.Cleanup(s.Close)
	return s
}

// SetFaults changes the fault rates for later requests.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Requests is the number of requests received.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Failures returns how many requests were failed, by HTTP status (0 for
// hangs).
func (s *Server) Failures() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]int{}
	for k, v := range s.failures {
		out[k] = v
	}
	return out
}

// Served returns how many successful responses carried each text. A
// response the server wrote may still miss the client's deadline, so a
// text can be served again without ever having been stored.
func (s *Server) Served() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.served))
	for k, v := range s.served {
		out[k] = v
	}
	return out
}

// ServedAt returns when each text was in a successful response (the time
// just before the response was written).
func (s *Server) ServedAt() map[string][]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]time.Time, len(s.servedAt))
	for k, v := range s.servedAt {
		out[k] = append([]time.Time(nil), v...)
	}
	return out
}

// Batches returns the size of every request's input, in arrival order.
func (s *Server) Batches() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.batches...)
}

// Oversized counts requests with more than embed.MaxBatch texts.
func (s *Server) Oversized() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oversized
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/embeddings") {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Model          string   `json:"model"`
		Input          []string `json:"input"`
		Dimensions     int      `json:"dimensions"`
		EncodingFormat string   `json:"encoding_format"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad json: "+err.Error())
		return
	}
	if req.Dimensions != 0 && req.Dimensions != s.dims {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("dimensions %d not supported", req.Dimensions))
		return
	}

	s.mu.Lock()
	s.requests++
	s.batches = append(s.batches, len(req.Input))
	if s.key != "" && r.Header.Get("Authorization") != "Bearer "+s.key {
		s.failures[http.StatusUnauthorized]++
		s.mu.Unlock()
		writeError(w, http.StatusUnauthorized, "invalid api key")
		return
	}
	if len(req.Input) > embed.MaxBatch {
		s.oversized++
	}
	f := s.faults
	x := s.rng.Float64()
	hang := s.hang
	fail := 0
	switch {
	case f.Down:
		fail = http.StatusServiceUnavailable
	case x < f.RateLimit:
		fail = http.StatusTooManyRequests
	case x < f.RateLimit+f.ServerError:
		fail = []int{500, 502, 503}[s.rng.IntN(3)]
	case x < f.RateLimit+f.ServerError+f.Timeout:
		fail = -1
	}
	if fail != 0 {
		s.failures[max(fail, 0)]++
	}
	s.mu.Unlock()

	switch {
	case fail == -1:
		select {
		case <-r.Context().Done():
		case <-time.After(hang):
		}
		return
	case fail == http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "0")
		writeError(w, fail, "rate limit exceeded")
		return
	case fail != 0:
		writeError(w, fail, "upstream trouble")
		return
	}

	body := answer(req.Model, req.Input, s.dims)
	w.Header().Set("Content-Type", "application/json")
	// Taken before writing, so that it precedes anything the client does
	// with the answer.
	now := time.Now()
	if _, err := w.Write(body); err != nil {
		return
	}
	s.mu.Lock()
	for _, in := range req.Input {
		s.served[in]++
		s.servedAt[in] = append(s.servedAt[in], now)
	}
	s.mu.Unlock()
}

// answer is the body of a successful response: the vectors of inputs,
// out of order (clients must place vectors by index), and the usage a
// provider bills, as OpenAI reports it: the input's tokens, here one a
// word.
func answer(model string, inputs []string, dims int) []byte {
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	type usage struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	}
	resp := struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []item `json:"data"`
		Usage  usage  `json:"usage"`
	}{Object: "list", Model: model}
	for _, in := range inputs {
		n := int64(len(strings.Fields(in)))
		resp.Usage.PromptTokens += n
		resp.Usage.TotalTokens += n
	}
	for i := len(inputs) - 1; i >= 0; i-- {
		resp.Data = append(resp.Data, item{Object: "embedding", Index: i, Embedding: embed.LexicalVector(inputs[i], dims)})
	}
	body, _ := json.Marshal(resp)
	return body
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"message":%q,"type":"test"}}`, msg)
}
