package notion

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// APIVersion is the Notion-Version header every request carries: the
// version whose JSON shapes the tool reads.
const APIVersion = "2022-06-28"

// DefaultBaseURL is Notion's public API.
const DefaultBaseURL = "https://api.notion.com/v1"

// Defaults of [Config].
const (
	defaultMaxRetries = 3
	defaultMaxWait    = 30 * time.Second
	maxResponseBytes  = 8 << 20
)

// APIError is an error answer of the Notion API: its HTTP status, Notion's
// error code ("unauthorized", "object_not_found", "rate_limited",
// "validation_error", ...) and message, and for a 429 how long Notion
// asked to wait.
type APIError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("notion API %d %s: %s", e.Status, e.Code, e.Message)
}

// ErrUnreachable wraps a failure to reach the Notion API at all.
var ErrUnreachable = errors.New("notion API unreachable")

// client makes Notion API calls with one integration token.
type client struct {
	cfg   Config
	token string
}

// do sends one request and decodes the answer into out, waiting out a 429
// as Notion's Retry-After says, at most cfg.MaxRetries times.
func (c *client) do(ctx context.Context, method, path string, body, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		err := c.once(ctx, method, path, payload, out)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || attempt >= c.cfg.MaxRetries {
			return err
		}
		wait := ae.RetryAfter
		if wait <= 0 {
			wait = time.Second
		}
		if wait > c.cfg.MaxWait {
			return err // longer than the tool may wait: the model retries later
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return err
		}
		c.cfg.Logger.WarnContext(ctx, "notion rate limited; waiting as Retry-After says",
			slog.Duration("retry_after", wait), slog.Int("attempt", attempt+1))
		if err := c.cfg.SleepFunc(ctx, wait); err != nil {
			return err
		}
	}
}

// once is one HTTP exchange.
func (c *client) once(ctx context.Context, method, path string, payload []byte, out any) error {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.BaseURL+path, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Notion-Version", APIVersion)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, c.cfg.BaseURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("%w at %s: read answer: %v", ErrUnreachable, c.cfg.BaseURL, err)
	}
	if len(b) > maxResponseBytes {
		return fmt.Errorf("notion answer larger than %d bytes", maxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Status: resp.StatusCode, Code: http.StatusText(resp.StatusCode)}
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &e) == nil && e.Code != "" {
			ae.Code, ae.Message = e.Code, e.Message
		} else {
			ae.Message = strings.TrimSpace(string(b[:min(len(b), 300)]))
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			ae.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode notion answer: %w", err)
	}
	return nil
}

// retryAfter parses a Retry-After header: seconds, or an HTTP date.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// list is a paginated Notion list: results, has_more and next_cursor.
type list struct {
	Object     string            `json:"object"`
	Results    []json.RawMessage `json:"results"`
	HasMore    bool              `json:"has_more"`
	NextCursor *string           `json:"next_cursor"`
}

// collect pages through a list endpoint until limit results are in or
// Notion has no more, and returns the results and the cursor to continue
// from ("" when there is nothing more). fetch gets a cursor ("" first) and
// a page size.
func collect(limit int, cursor string, fetch func(cursor string, size int) (list, error)) ([]json.RawMessage, string, error) {
	var out []json.RawMessage
	for {
		l, err := fetch(cursor, min(limit-len(out), 100))
		if err != nil {
			return nil, "", err
		}
		out = append(out, l.Results...)
		cursor = ""
		if l.HasMore && l.NextCursor != nil {
			cursor = *l.NextCursor
		}
		// A server that sends more than the page size asked for keeps
		// them all: cutting them off would lose the rows between the cut
		// and the cursor.
		if cursor == "" || len(out) >= limit {
			return out, cursor, nil
		}
	}
}

var hex32 = regexp.MustCompile(`([0-9a-fA-F]{8})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{4})-?([0-9a-fA-F]{12})$`)

// normalizeID accepts a Notion id with or without dashes, or a page URL
// ending in one, and returns the dashed form.
func normalizeID(field, s string) (string, error) {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	m := hex32.FindStringSubmatch(s)
	if m == nil {
		return "", fmt.Errorf("%s %q is not a Notion id: give the 32 hex digits of the id (dashes optional) or the page's URL", field, s)
	}
	return strings.ToLower(strings.Join(m[1:], "-")), nil
}
