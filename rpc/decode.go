package rpc

import (
	"errors"
	"math"
	"strings"

	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/strictjson"
)

// Limits bound what one session may send. A zero field takes its default.
type Limits struct {
	// RequestsPerSecond is the sustained request rate per session,
	// counting calls and event-stream connections (default 100;
	// math.Inf(1) disables the limit).
	RequestsPerSecond float64
	// Burst is how many requests a session may make at once (default
	// twice RequestsPerSecond, at least 1).
	Burst int
	// MaxPayloadBytes caps a request payload (default 4 MiB).
	MaxPayloadBytes int
	// MaxDepth caps the nesting of a payload (default 64).
	MaxDepth int
	// PushBuffer is how many pushes are kept per session (default 1024).
	PushBuffer int
}

// Default limits.
const (
	DefaultRequestsPerSecond = 100
	DefaultMaxPayloadBytes   = 4 << 20
	DefaultMaxDepth          = 64
	DefaultPushBuffer        = 1024
)

func (l Limits) withDefaults() Limits {
	if l.RequestsPerSecond <= 0 || math.IsNaN(l.RequestsPerSecond) {
		l.RequestsPerSecond = DefaultRequestsPerSecond
	}
	if l.Burst <= 0 {
		l.Burst = int(min(max(2*l.RequestsPerSecond, 1), math.MaxInt32))
	}
	if l.MaxPayloadBytes <= 0 {
		l.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.PushBuffer <= 0 {
		l.PushBuffer = DefaultPushBuffer
	}
	return l
}

// Payload is implemented by every request, response and push type.
type Payload interface {
	Validate() error
}

// Decode strictly decodes data as a T and validates it: unknown fields,
// duplicate keys, trailing data, a document over maxBytes or nested deeper
// than maxDepth, and values failing T's Validate are all rejected with a
// *Error of code bad_request whose message names the JSON path (or
// payload_too_large for size). Zero limits take strictjson's defaults.
func Decode[T Payload](data []byte, maxBytes, maxDepth int) (T, error) {
	var v T
	if maxBytes > 0 && len(data) > maxBytes {
		return v, wire.Errorf(wire.CodePayloadTooLarge, "payload is %d bytes, over the limit of %d bytes", len(data), maxBytes)
	}
	if err := strictjson.Decode(data, &v, strictjson.Limits{MaxBytes: maxBytes, MaxDepth: maxDepth}); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			msgs := make([]string, len(se.Problems))
			for i, p := range se.Problems {
				msgs[i] = p.String()
			}
			return v, &wire.Error{Code: wire.CodeBadRequest, Message: strings.Join(msgs, "; ")}
		}
		return v, wire.Errorf(wire.CodeBadRequest, "%v", err)
	}
	if err := v.Validate(); err != nil {
		return v, &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
	}
	return v, nil
}
