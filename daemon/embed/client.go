package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ClientConfig locates an OpenAI-compatible embeddings API.
type ClientConfig struct {
	// Provider is the configured provider name, for status and logs.
	Provider string
	// Endpoint is the API's base URL; requests go to Endpoint + "/embeddings".
	Endpoint   string
	Model      string
	Dimensions int
	// APIKey is sent as a bearer token when not empty.
	APIKey string
}

// NewClient returns an Embedder that calls POST {endpoint}/embeddings with
// the configured model and dimensions.
func NewClient(cfg ClientConfig, opts Options) (*Embedder, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("embedding endpoint %q: want an http or https URL", cfg.Endpoint)
	}
	if cfg.Model == "" {
		return nil, errors.New("embedding model is empty")
	}
	c := &client{cfg: cfg, url: strings.TrimRight(cfg.Endpoint, "/") + "/embeddings", http: opts.HTTPClient,
		timeout: opts.Timeout}
	c.key.Store(&cfg.APIKey)
	if c.http == nil {
		c.http = &http.Client{}
	}
	if c.timeout <= 0 {
		c.timeout = 30 * time.Second
	}
	e := newEmbedder(cfg.Provider, cfg.Model, u.Scheme+"://"+u.Host, cfg.Dimensions, false, c.embed)
	e.setKey = func(k string) { c.key.Store(&k) }
	return e, nil
}

type client struct {
	cfg ClientConfig
	// key is the API key, replaced by secret apply (Embedder.SetSecrets);
	// cfg.APIKey is only the first one.
	key     atomic.Pointer[string]
	url     string
	http    *http.Client
	timeout time.Duration
}

type embeddingsRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	Dimensions     int      `json:"dimensions,omitempty"`
	EncodingFormat string   `json:"encoding_format"`
}

type embeddingsResponse struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	// Usage is what the provider bills: the input's tokens.
	Usage *struct {
		PromptTokens int64 `json:"prompt_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	} `json:"usage"`
}

// maxResponseBytes bounds a response: 32 vectors of 2000 floats written as
// JSON take about 1.5 MB.
const maxResponseBytes = 16 << 20

// embed makes one request; tokens is the input the provider billed, as
// its usage reports it (zero when it reports none).
func (c *client) embed(ctx context.Context, texts []string) (vecs [][]float32, tokens int64, err error) {
	body, err := json.Marshal(embeddingsRequest{Model: c.cfg.Model, Input: texts, Dimensions: c.cfg.Dimensions,
		EncodingFormat: "float"})
	if err != nil {
		return nil, 0, &Error{Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, &Error{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if key := *c.key.Load(); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s", c.timeout)
		}
		return nil, 0, &Error{Retry: true, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, 0, &Error{StatusCode: resp.StatusCode, Retry: true, Err: fmt.Errorf("read response: %w", err)}
	}
	if resp.StatusCode/100 != 2 {
		return nil, 0, statusError(resp, data)
	}
	if len(data) > maxResponseBytes {
		return nil, 0, &Error{StatusCode: resp.StatusCode, Err: fmt.Errorf("response larger than %d bytes", maxResponseBytes)}
	}
	var r embeddingsResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, 0, &Error{StatusCode: resp.StatusCode, Retry: true, Err: fmt.Errorf("decode response: %w", err)}
	}
	out := make([][]float32, len(texts))
	for _, d := range r.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil {
			return nil, 0, &Error{StatusCode: resp.StatusCode, Retry: true,
				Err: fmt.Errorf("response has a bad or repeated index %d for %d texts", d.Index, len(texts))}
		}
		out[d.Index] = d.Embedding
	}
	for i, v := range out {
		if v == nil {
			return nil, 0, &Error{StatusCode: resp.StatusCode, Retry: true,
				Err: fmt.Errorf("response has no vector for text %d of %d", i, len(texts))}
		}
	}
	if u := r.Usage; u != nil {
		tokens = max(u.PromptTokens, u.TotalTokens, 0)
	}
	return out, tokens, nil
}

// statusError turns a non-2xx response into an *Error: 408, 409, 429 and
// 5xx are temporary, any other status (a bad key, an unknown model, a
// refused parameter) will not change by retrying.
func statusError(resp *http.Response, body []byte) *Error {
	msg := strings.TrimSpace(string(body))
	var apiErr struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &apiErr) == nil && apiErr.Error.Message != "" {
		msg = apiErr.Error.Message
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	code := resp.StatusCode
	e := &Error{StatusCode: code, Err: errors.New(msg),
		Retry: code == http.StatusRequestTimeout || code == http.StatusConflict ||
			code == http.StatusTooManyRequests || code >= 500}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(s); err == nil && secs >= 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		} else if t, err := http.ParseTime(s); err == nil {
			e.RetryAfter = max(0, time.Until(t))
		}
	}
	return e
}
