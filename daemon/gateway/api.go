package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	tele "gopkg.in/telebot.v3"

	"github.com/choirhq/choir/daemon/outbox/message"
)

// bot is one Telegram bot: its token, its update loop and its API calls.
type bot struct {
	g    *Gateway
	name string

	mu       sync.Mutex
	username string // from getMe, for stripping @botname from commands
	// token is the bot's token; retired are the ones secret apply
	// replaced, still redacted from errors. stopRun ends the running
	// update loop, so that it starts again with a new token.
	token   string
	retired []string
	stopRun context.CancelCauseFunc

	// polling is closed once the bot has answered getMe and its
	// getUpdates loop runs.
	polling     chan struct{}
	pollingOnce sync.Once
}

func newBot(g *Gateway, name, token string) *bot {
	return &bot{g: g, name: name, token: token, polling: make(chan struct{})}
}

// ctxTransport runs every request of one telebot.Bot under ctx. telebot's
// API takes no context, so the gateway makes a cheap offline telebot.Bot
// per call whose transport carries the caller's context: cancelling it
// aborts the request, uploads and long polls included.
type ctxTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.WithContext(t.ctx)
	// A message the delivery worker sends carries its send gate: the
	// request's last byte waits until the worker has marked the part as
	// being sent (message.GateBody).
	if message.SendGateFrom(t.ctx) != nil && r.Body != nil {
		r.Body = message.GateBody(t.ctx, r.Body)
		// net/http replays a request that failed before writing anything
		// from GetBody, a fresh body that would pass no gate.
		r.GetBody = nil
	}
	return t.base.RoundTrip(r)
}

// tele returns a telebot.Bot whose requests run under ctx.
func (b *bot) tele(ctx context.Context) *tele.Bot {
	tb, err := tele.NewBot(tele.Settings{
		URL:     b.g.opts.APIURL,
		Token:   b.currentToken(),
		Client:  &http.Client{Transport: ctxTransport{ctx, b.g.opts.Transport}},
		Offline: true,
		// Updates are read by the gateway's own loop, never by telebot.
		Updates: 1,
		OnError: func(error, tele.Context) {},
	})
	if err != nil {
		// NewBot fails only on getMe, which Offline skips.
		panic(fmt.Sprintf("gateway: offline telebot: %v", err))
	}
	return tb
}

// APIError is an error answer of the Bot API.
type APIError struct {
	Method      string
	Code        int
	Description string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("telegram %s: %s (%d)", e.Method, e.Description, e.Code)
}

// Temporary reports whether retrying may help: not for bad requests, a
// revoked token, a blocked bot or an unknown method.
func (e *APIError) Temporary() bool {
	switch e.Code {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return false
	}
	return true
}

// RateLimitError is Telegram's 429 Too Many Requests.
type RateLimitError struct {
	Method string
	After  time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("telegram %s: too many requests, retry after %s", e.Method, e.After)
}

// RetryAfter is how long Telegram asked to wait.
func (e *RateLimitError) RetryAfter() time.Duration { return e.After }

// permanentError is a send that can never succeed.
type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() error   { return e.err }
func (e permanentError) Temporary() bool { return false }

func permanent(err error) error { return permanentError{err} }

// redactedError carries an error message with the bot token removed. It
// unwraps only to the context errors, never to the original error, whose
// message (a *url.Error's, say) still holds the token.
type redactedError struct {
	msg string
	ctx error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.ctx }

// redact returns err with the token, and every earlier one, removed from
// its message.
func (b *bot) redact(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	redacted := msg
	for _, t := range b.tokens() {
		redacted = strings.ReplaceAll(redacted, t, "<token>")
	}
	if redacted == msg {
		return err
	}
	r := &redactedError{msg: redacted}
	switch {
	case errors.Is(err, context.Canceled):
		r.ctx = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		r.ctx = context.DeadlineExceeded
	}
	return r
}

// apiResponse is the Bot API's envelope.
type apiResponse struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

// call invokes a JSON method and decodes its result into out (if not nil).
// Error answers become *APIError or *RateLimitError; transport errors are
// returned with the token redacted.
func (b *bot) call(ctx context.Context, method string, params map[string]any, out any) error {
	data, err := b.tele(ctx).Raw(method, params)
	if len(data) == 0 {
		if err == nil {
			err = errors.New("empty response")
		}
		return b.redact(fmt.Errorf("telegram %s: %w", method, err))
	}
	var resp apiResponse
	if jerr := json.Unmarshal(data, &resp); jerr != nil {
		return fmt.Errorf("telegram %s: decode response: %w", method, jerr)
	}
	if !resp.OK {
		if resp.ErrorCode == http.StatusTooManyRequests {
			return &RateLimitError{Method: method, After: time.Duration(max(resp.Parameters.RetryAfter, 1)) * time.Second}
		}
		return &APIError{Method: method, Code: resp.ErrorCode, Description: resp.Description}
	}
	if out != nil {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return fmt.Errorf("telegram %s: decode result: %w", method, err)
		}
	}
	return nil
}

// classify turns an error of a telebot call into the gateway's errors:
// *RateLimitError, *APIError (with its Temporary verdict), or the error
// with the token redacted.
func (b *bot) classify(method string, err error) error {
	if err == nil {
		return nil
	}
	var flood tele.FloodError
	if errors.As(err, &flood) {
		return &RateLimitError{Method: method, After: time.Duration(max(flood.RetryAfter, 1)) * time.Second}
	}
	var group tele.GroupError
	if errors.As(err, &group) {
		return &APIError{Method: method, Code: http.StatusBadRequest, Description: group.Error()}
	}
	var te *tele.Error
	if errors.As(err, &te) {
		return &APIError{Method: method, Code: te.Code, Description: te.Description}
	}
	return b.redact(fmt.Errorf("telegram %s: %w", method, err))
}

func (b *bot) getMe(ctx context.Context) error {
	var me tele.User
	if err := b.call(ctx, "getMe", nil, &me); err != nil {
		return err
	}
	b.mu.Lock()
	b.username = me.Username
	b.mu.Unlock()
	return nil
}

func (b *bot) botUsername() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.username
}
