// Package callserve is choird's side of the agent protocol around its
// handlers, below the messages package rpc defines: parsing a call's
// envelope from its path and headers, what the server keeps per session
// (rate limiter, push queue, the lease token remembered after its first
// success), each listener's budget of failed authentications and the
// choice it makes of whether to ask the authenticator at all, the single
// flight that runs a mutating call once while its duplicates wait, reading
// a payload under its cap (draining one that is too large so that the
// connection survives), resuming a session's event stream, and running
// the listeners with their defaults. Package rpc supplies the
// authenticator, the replay store and the handlers, and turns each
// Refusal into the wire error of its Kind.
package callserve

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Kind classifies a refusal; package rpc maps each to its wire code.
type Kind uint8

// The kinds of refusal.
const (
	BadRequest Kind = iota + 1
	Unauthenticated
	NotFound
	UnknownVerb
	Conflict
	PayloadTooLarge
	RateLimited
	Unavailable
	Internal
)

// Refusal is why a call is not served. When Err is set, the failure is
// internal: package rpc logs Err under a fresh reference (What names the
// step that failed) and tells the agent only the reference.
type Refusal struct {
	Kind       Kind
	Message    string
	RetryAfter time.Duration
	What       string
	Err        error
}

func refuse(k Kind, msg string) *Refusal { return &Refusal{Kind: k, Message: msg} }

// DrainLimit is how much of an unwanted request body the server reads and
// discards so that the connection can carry the next request, for a
// payload cap of maxPayload; beyond it the connection is closed instead.
func DrainLimit(maxPayload int) int64 { return int64(maxPayload) + 1<<20 }

// ReadBody reads the payload under the size cap. An oversize payload is
// drained, within DrainLimit, so the connection survives.
func ReadBody(w http.ResponseWriter, r *http.Request, maxPayload int) ([]byte, *Refusal) {
	limit := int64(maxPayload)
	tooLarge := func(n string) *Refusal {
		return refuse(PayloadTooLarge, "payload is "+n+" bytes, over the limit of "+strconv.FormatInt(limit, 10)+" bytes (max_payload_bytes)")
	}
	if r.ContentLength > limit {
		Drain(w, r, maxPayload)
		return nil, tooLarge(strconv.FormatInt(r.ContentLength, 10))
	}
	if r.ContentLength >= 0 {
		// The common case, in one allocation: net/http ends the body at
		// its declared length.
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, refuse(BadRequest, "read payload: "+err.Error())
		}
		return b, nil
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, refuse(BadRequest, "read payload: "+err.Error())
	}
	if n > limit {
		Drain(w, r, maxPayload)
		return nil, tooLarge("more than " + strconv.FormatInt(limit, 10))
	}
	return buf.Bytes(), nil
}

// Drain discards the rest of the request body, or marks the connection for
// closing if there is too much of it.
func Drain(w http.ResponseWriter, r *http.Request, maxPayload int) {
	limit := DrainLimit(maxPayload)
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		return
	}
	n, _ := io.CopyN(io.Discard, r.Body, limit)
	if n == limit {
		w.Header().Set("Connection", "close")
	}
}

// jsonContentType is shared by every response: net/http only reads it.
var jsonContentType = []string{"application/json"}

// WriteJSON answers with status and the JSON body b.
func WriteJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
