// Package embed turns texts into embedding vectors for Choir's memory. An
// [Embedder] is either a client of an OpenAI-compatible /embeddings
// endpoint or the offline embedder built into choird: a deterministic,
// lexical stand-in (feature hashing of words) for machines without an
// embedding provider, which finds texts sharing words but knows nothing of
// meaning. Every Embedder keeps a [Status] for choirctl status: which
// provider, whether it is the offline one, and the last failure.
package embed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc/admin"
)

// MaxBatch is the most texts one Embed call takes: one API request.
const MaxBatch = 32

// MaxInputBytes bounds each text sent to a provider; longer texts are cut
// at a character boundary (the provider would refuse them, or truncate).
const MaxInputBytes = 16 << 10

// Embedder embeds texts with one model into vectors of one size.
type Embedder struct {
	provider string
	model    string
	dims     int
	offline  bool
	endpoint string
	embed    func(ctx context.Context, texts []string) ([][]float32, int64, error)
	now      func() time.Time
	// secret names the API key in secrets.json, and setKey replaces the
	// key the client sends (SetSecrets); both are empty without a key.
	secret string
	setKey func(string)
	// pricePerMTok and usageFunc count what the provider bills
	// (SetUsage).
	pricePerMTok float64
	usageFunc    func(ctx context.Context, u Usage)

	mu     sync.Mutex
	status admin.EmbeddingStatus
}

// OfflineNote labels the offline embedder wherever it is reported.
const OfflineNote = "offline lexical embedder (built in), IDF-weighted: vectors hash the words of a text, rare words " +
	"weighing more than common ones (inverse document frequency in the agent's own memory), so semantic " +
	"search finds texts sharing words, not meaning; configure an embedding provider for real semantics"

// Options tune an API client.
type Options struct {
	// HTTPClient sends the requests (default: a client without timeout;
	// Timeout bounds each request instead).
	HTTPClient *http.Client
	// Timeout bounds one request (default 30 s).
	Timeout time.Duration
}

// New returns the embedder that cfg configures: the offline embedder for
// provider "offline", else an API client whose key is the named secret.
func New(cfg config.Embedding, secrets config.Secrets, opts Options) (*Embedder, error) {
	if cfg.Dimensions < 1 || cfg.Dimensions > config.MaxEmbeddingDimensions {
		return nil, fmt.Errorf("embedding dimensions %d: want 1 to %d", cfg.Dimensions, config.MaxEmbeddingDimensions)
	}
	if cfg.Provider == config.EmbeddingOffline {
		return NewOffline(cfg.Dimensions), nil
	}
	var key string
	if cfg.Secret != "" {
		v, ok := secrets[cfg.Secret]
		if !ok {
			return nil, fmt.Errorf("embedding secret %q is not in secrets.json", cfg.Secret)
		}
		key = v
	}
	e, err := NewClient(ClientConfig{Provider: cfg.Provider, Endpoint: cfg.Endpoint, Model: cfg.Model,
		Dimensions: cfg.Dimensions, APIKey: key}, opts)
	if err != nil {
		return nil, err
	}
	e.secret = cfg.Secret
	return e, nil
}

// SetSecrets takes the API key again from secrets, for choirctl secret
// apply: the next request sends it. An embedder without a key secret (the
// offline one, or a provider that needs no key) has nothing to change; a
// key secret missing from secrets is an error, and the old key stays.
func (e *Embedder) SetSecrets(secrets config.Secrets) error {
	if e.secret == "" || e.setKey == nil {
		return nil
	}
	key, ok := secrets[e.secret]
	if !ok {
		return fmt.Errorf("embedding secret %q is not in secrets.json; the embedder keeps its key", e.secret)
	}
	e.setKey(key)
	return nil
}

func newEmbedder(provider, model, endpoint string, dims int, offline bool,
	fn func(context.Context, []string) ([][]float32, int64, error)) *Embedder {
	e := &Embedder{provider: provider, model: model, dims: dims, offline: offline, endpoint: endpoint, embed: fn,
		now: time.Now}
	e.status = admin.EmbeddingStatus{Provider: provider, Model: model, Dimensions: dims, Offline: offline, Endpoint: endpoint,
		Note: "OpenAI-compatible embeddings API"}
	if offline {
		e.status.Note = OfflineNote
	}
	return e
}

// Provider is the configured provider name ("offline" for the built-in one).
func (e *Embedder) Provider() string { return e.provider }

// Model names the model; it is stored with every vector, so that vectors
// of another model can be found and re-embedded.
func (e *Embedder) Model() string { return e.model }

// Dimensions is the size of the vectors.
func (e *Embedder) Dimensions() int { return e.dims }

// Offline reports whether this is the built-in lexical embedder.
func (e *Embedder) Offline() bool { return e.offline }

// Status returns a copy of the embedder's status.
func (e *Embedder) Status() admin.EmbeddingStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

// ErrBatchTooLarge is returned for more than MaxBatch texts.
var ErrBatchTooLarge = fmt.Errorf("more than %d texts in one embedding call", MaxBatch)

// Embed returns one vector per text, in order. Failures are *Error values
// saying whether retrying may help (see IsTemporary).
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	if len(texts) > MaxBatch {
		return nil, ErrBatchTooLarge
	}
	in := make([]string, len(texts))
	for i, t := range texts {
		in[i] = truncate(t, MaxInputBytes)
	}
	vecs, tokens, err := e.embed(ctx, in)
	if err == nil {
		err = e.check(vecs, len(texts))
	}
	e.record(len(texts), err)
	if vecs != nil {
		// Answered, so billed, even when the answer is refused.
		e.count(ctx, in, tokens)
	}
	if err != nil {
		return nil, err
	}
	return vecs, nil
}

func (e *Embedder) check(vecs [][]float32, n int) error {
	if len(vecs) != n {
		return &Error{Retry: true, Err: fmt.Errorf("provider returned %d vectors for %d texts", len(vecs), n)}
	}
	for i, v := range vecs {
		if len(v) != e.dims {
			return &Error{Err: fmt.Errorf("provider returned a vector of %d dimensions for text %d, configured %d: "+
				"set embedding.dimensions to what model %s returns (then run choirctl memory reembed)", len(v), i, e.dims, e.model)}
		}
		var norm float64
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return &Error{Retry: true, Err: fmt.Errorf("provider returned a non-finite value in vector %d", i)}
			}
			norm += float64(x) * float64(x)
		}
		if norm == 0 {
			return &Error{Retry: true, Err: fmt.Errorf("provider returned a zero vector for text %d", i)}
		}
	}
	return nil
}

func (e *Embedder) record(texts int, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	e.status.Calls++
	if err != nil {
		e.status.Failures++
		e.status.ConsecutiveFailures++
		e.status.LastError = err.Error()
		e.status.LastErrorAt = now
		return
	}
	e.status.Texts += int64(texts)
	e.status.ConsecutiveFailures = 0
	e.status.LastSuccessAt = now
}

// Usage is one embedding request an API provider billed, and who it was
// for (ForAgent).
type Usage struct {
	// AgentID is the agent whose memory or tools were embedded, or whose
	// query; Purpose what for ("memory", "query", "tool_search"). Both
	// are empty when the context named no agent.
	AgentID, Purpose string
	// Service is the provider and model.
	Service string
	// Tokens is the input's tokens as the provider reported them, or, when
	// it reported none, estimated at 4 bytes a token (Estimated).
	Tokens    int64
	Estimated bool
	// CostUSD is Tokens at embedding.price_per_mtok, zero when unpriced.
	CostUSD float64
}

type agentKey struct{}

type attribution struct{ agentID, purpose string }

// ForAgent names, in ctx, the agent an embedding is done for and why, so
// that its cost is counted against that agent's caps.
func ForAgent(ctx context.Context, agentID, purpose string) context.Context {
	return context.WithValue(ctx, agentKey{}, attribution{agentID, purpose})
}

// SetUsage makes e report each request its provider billed to fn, priced
// at pricePerMTok US dollars per million tokens (embedding.price_per_mtok;
// zero: unpriced). The offline embedder bills nothing and reports nothing.
func (e *Embedder) SetUsage(pricePerMTok float64, fn func(ctx context.Context, u Usage)) {
	e.pricePerMTok, e.usageFunc = pricePerMTok, fn
}

// count reports one billed request of texts (tokens as the provider
// reported them) to the usage function.
func (e *Embedder) count(ctx context.Context, texts []string, tokens int64) {
	if e.offline || e.usageFunc == nil {
		return
	}
	u := Usage{Service: e.provider + "/" + e.model, Tokens: tokens}
	if a, ok := ctx.Value(agentKey{}).(attribution); ok {
		u.AgentID, u.Purpose = a.agentID, a.purpose
	}
	if u.Tokens <= 0 {
		var n int
		for _, t := range texts {
			n += len(t)
		}
		u.Tokens, u.Estimated = int64((n+3)/4), true
	}
	u.CostUSD = float64(u.Tokens) * e.pricePerMTok / 1e6
	e.usageFunc(ctx, u)
}

// truncate cuts s to at most n bytes at a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Error is a failed embedding call.
type Error struct {
	// StatusCode is the HTTP status, 0 when no response arrived.
	StatusCode int
	// RetryAfter is the provider's Retry-After, when it sent one.
	RetryAfter time.Duration
	// Retry is true when the same call may succeed later: rate limits,
	// server errors, timeouts, broken connections.
	Retry bool
	Err   error
}

func (e *Error) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("embedding provider answered %d: %v", e.StatusCode, e.Err)
	}
	return fmt.Sprintf("embedding call failed: %v", e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Temporary reports whether retrying the call may help.
func (e *Error) Temporary() bool { return e.Retry }

// RetryAfterDuration is the provider's Retry-After (0 when it sent none).
func (e *Error) RetryAfterDuration() time.Duration { return e.RetryAfter }

// IsTemporary reports whether retrying err may help. Errors that are not
// an *Error (a cancelled context, say) count as temporary.
func IsTemporary(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Retry
	}
	return true
}
