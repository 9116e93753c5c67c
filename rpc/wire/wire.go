// Package wire holds what the agent protocol (package rpc) and the admin
// API (package rpc/admin) both put on the wire: the error codes, the
// [Error] that carries one and its JSON body, and a lane's remaining
// [Budget]. It imports nothing of the project, so that choirctl links the
// admin contract without the agent protocol's server, and a handler of
// either API chooses the code its caller sees by wrapping a sentinel
// (fmt.Errorf("approval %s: %w", id, wire.ErrNotFound)).
package wire

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Code is the stable, machine-readable class of an error, carried on the
// wire next to its human-readable message. Codes never change meaning; new
// ones may be added.
type Code string

// The error codes. Each maps to one HTTP status and one sentinel error.
const (
	// CodeBadRequest: the envelope or payload is malformed, fails strict
	// decoding, or fails validation. Nothing was executed.
	CodeBadRequest Code = "bad_request"
	// CodeUnauthenticated: the lease token is missing, wrong, or revoked,
	// or the session is not active. Nothing was executed.
	CodeUnauthenticated Code = "unauthenticated"
	// CodePermissionDenied: the caller is authenticated but not allowed to
	// do this (a secret not bound to the agent, an admin peer of another
	// uid).
	CodePermissionDenied Code = "permission_denied"
	// CodeNotFound: the path or the named object does not exist.
	CodeNotFound Code = "not_found"
	// CodeUnknownVerb: POST /rpc/<verb> names no verb.
	CodeUnknownVerb Code = "unknown_verb"
	// CodeConflict: the request conflicts with the current state, for
	// example a request_id reused with a different payload.
	CodeConflict Code = "conflict"
	// CodePayloadTooLarge: the payload exceeds the size cap.
	CodePayloadTooLarge Code = "payload_too_large"
	// CodeRateLimited: the session exceeded its request-rate limit.
	CodeRateLimited Code = "rate_limited"
	// CodeUnavailable: the server cannot serve the request now (shutting
	// down, a dependency unreachable); retrying later may succeed.
	CodeUnavailable Code = "unavailable"
	// CodeInternal: the server failed. The message carries a reference to
	// the server's log entry, never the internal error itself.
	CodeInternal Code = "internal"
)

// Sentinel errors, one per code. An [*Error] matches the sentinel of its
// code with errors.Is, and a handler may return any error wrapping a
// sentinel (fmt.Errorf("approval %s: %w", id, wire.ErrNotFound)) to choose
// the code its caller sees; the wrapped error's text becomes the message.
var (
	ErrBadRequest       = errors.New(string(CodeBadRequest))
	ErrUnauthenticated  = errors.New(string(CodeUnauthenticated))
	ErrPermissionDenied = errors.New(string(CodePermissionDenied))
	ErrNotFound         = errors.New(string(CodeNotFound))
	ErrUnknownVerb      = errors.New(string(CodeUnknownVerb))
	ErrConflict         = errors.New(string(CodeConflict))
	ErrPayloadTooLarge  = errors.New(string(CodePayloadTooLarge))
	ErrRateLimited      = errors.New(string(CodeRateLimited))
	ErrUnavailable      = errors.New(string(CodeUnavailable))
	ErrInternal         = errors.New(string(CodeInternal))
)

type codeInfo struct {
	status   int
	sentinel error
}

var codes = map[Code]codeInfo{
	CodeBadRequest:       {http.StatusBadRequest, ErrBadRequest},
	CodeUnauthenticated:  {http.StatusUnauthorized, ErrUnauthenticated},
	CodePermissionDenied: {http.StatusForbidden, ErrPermissionDenied},
	CodeNotFound:         {http.StatusNotFound, ErrNotFound},
	CodeUnknownVerb:      {http.StatusNotFound, ErrUnknownVerb},
	CodeConflict:         {http.StatusConflict, ErrConflict},
	CodePayloadTooLarge:  {http.StatusRequestEntityTooLarge, ErrPayloadTooLarge},
	CodeRateLimited:      {http.StatusTooManyRequests, ErrRateLimited},
	CodeUnavailable:      {http.StatusServiceUnavailable, ErrUnavailable},
	CodeInternal:         {http.StatusInternalServerError, ErrInternal},
}

// Codes lists every code. Its order is the one in which AsError tries the
// sentinels, so an error wrapping two of them is classified the same way
// every time.
var Codes = []Code{
	CodeBadRequest, CodeUnauthenticated, CodePermissionDenied, CodeNotFound, CodeUnknownVerb,
	CodeConflict, CodePayloadTooLarge, CodeRateLimited, CodeUnavailable, CodeInternal,
}

// Valid reports whether c is a known code.
func (c Code) Valid() bool { _, ok := codes[c]; return ok }

// HTTPStatus returns the HTTP status that carries c (500 for an unknown
// code).
func (c Code) HTTPStatus() int {
	if i, ok := codes[c]; ok {
		return i.status
	}
	return http.StatusInternalServerError
}

// Error is an error with a stable code, as it travels on the wire. Clients
// return it for every error response; servers send it as the JSON body
// {"error": message, "code": code}.
type Error struct {
	Code    Code
	Message string
	// RetryAfter, when positive, is how long the caller should wait before
	// retrying (set with CodeRateLimited).
	RetryAfter time.Duration
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error returns the message prefixed with the code.
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is makes an *Error match the sentinel of its code.
func (e *Error) Is(target error) bool {
	i, ok := codes[e.Code]
	return ok && i.sentinel == target
}

// ErrorBody is the JSON form of an error response, shared by the agent
// protocol and the admin API.
type ErrorBody struct {
	Error string `json:"error"`
	Code  Code   `json:"code"`
	// RetryAfterMS accompanies rate_limited.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// Body returns the wire form of e.
func (e *Error) Body() ErrorBody {
	b := ErrorBody{Error: e.Message, Code: e.Code}
	if e.RetryAfter > 0 {
		b.RetryAfterMS = max(e.RetryAfter.Milliseconds(), 1)
	}
	return b
}

// Err turns a decoded error body back into an *Error. An unknown code is
// kept as sent, so errors.Is matches no sentinel but the text survives.
func (b ErrorBody) Err() *Error {
	return &Error{Code: b.Code, Message: b.Error, RetryAfter: time.Duration(b.RetryAfterMS) * time.Millisecond}
}

// Validate checks an error body.
func (b ErrorBody) Validate() error {
	if b.Code == "" {
		return errors.New("$.code: required")
	}
	if b.RetryAfterMS < 0 {
		return errors.New("$.retry_after_ms: negative")
	}
	return nil
}

// AsError classifies err for the wire: an *Error in its chain is returned
// as is; an error wrapping a sentinel gets the sentinel's code and err's
// text as message; anything else reports false, and the caller must treat
// it as internal without revealing its text.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	for _, code := range Codes {
		if errors.Is(err, codes[code].sentinel) {
			return &Error{Code: code, Message: err.Error()}, true
		}
	}
	return nil, false
}

// Budget is what remains of a lane's budgets; a nil field is not tracked.
type Budget struct {
	Tokens    *int64 `json:"tokens,omitempty"`
	ToolCalls *int64 `json:"tool_calls,omitempty"`
	TimeMS    *int64 `json:"time_ms,omitempty"`
	// Steps are the model steps a core job has left.
	Steps *int64 `json:"steps,omitempty"`
}
