package callserve

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/choirhq/choir/rpc/internal/check"
)

// Names are the call path's prefix and the envelope's header names, as
// package rpc defines them.
type Names struct {
	RPCPrefix, RequestID, SessionID, Authorization string
}

// Verbs says which verbs exist: Valid reports whether one does, and List
// names them all for an error.
type Verbs struct {
	Valid func(name string) bool
	List  func() string
}

// Envelope is what a call's method, path and headers say.
type Envelope struct {
	Verb, RequestID, SessionID, LeaseToken string
}

func refusef(k Kind, format string, args ...any) *Refusal {
	return refuse(k, fmt.Sprintf(format, args...))
}

// ParseEnvelope reads the envelope of a call from its method, path and
// headers (see rpc.ParseEnvelope).
func ParseEnvelope(method, path string, h http.Header, n *Names, verbs *Verbs) (Envelope, *Refusal) {
	verb, ok := strings.CutPrefix(path, n.RPCPrefix)
	if !ok {
		return Envelope{}, refusef(NotFound, "no such path %s; calls are POST %s<verb>", check.Quote(path), n.RPCPrefix)
	}
	if !verbs.Valid(verb) {
		return Envelope{}, refusef(UnknownVerb, "unknown verb %s; known verbs: %s", check.Quote(verb), verbs.List())
	}
	if method != http.MethodPost {
		return Envelope{}, refusef(BadRequest, "method %s not allowed for %s; use POST", check.Quote(method), verb)
	}
	switch ct := h.Get("Content-Type"); ct {
	case "application/json": // The common case, without parsing.
	case "":
		return Envelope{}, refuse(BadRequest, "missing Content-Type: application/json header")
	default:
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return Envelope{}, refuse(BadRequest, "content type must be application/json")
		}
	}
	env := Envelope{Verb: verb}
	var r *Refusal
	if env.RequestID, r = single(h, n.RequestID); r != nil {
		return Envelope{}, r
	}
	if !check.ValidID(env.RequestID) {
		return Envelope{}, refusef(BadRequest, "header %s: missing or not a valid ID (1-128 of A-Z a-z 0-9 . _ : -)", n.RequestID)
	}
	if env.SessionID, env.LeaseToken, r = ParseAuth(h, n); r != nil {
		return Envelope{}, r
	}
	return env, nil
}

// ParseAuth reads the session ID and lease token headers, shared by calls
// and the event stream.
func ParseAuth(h http.Header, n *Names) (sessionID, token string, r *Refusal) {
	if sessionID, r = single(h, n.SessionID); r != nil {
		return "", "", r
	}
	if !check.IsSessionID(sessionID) { // The path is built only for an error.
		return "", "", refuse(BadRequest, check.SessionID("header "+n.SessionID, sessionID).Error())
	}
	auth, r := single(h, n.Authorization)
	if r != nil {
		return "", "", r
	}
	if auth == "" {
		return "", "", refusef(Unauthenticated, "missing %s: Bearer <lease token> header", n.Authorization)
	}
	scheme, token, _ := strings.Cut(auth, " ")
	if !strings.EqualFold(scheme, "Bearer") || !check.ValidLeaseTokenFormat(token) {
		return "", "", refusef(Unauthenticated, "header %s must be Bearer followed by a lease token (43 base64url characters)", n.Authorization)
	}
	return sessionID, token, nil
}

// single returns the one value of header k, "" if absent; repeating a
// header is a bad request.
func single(h http.Header, k string) (string, *Refusal) {
	vs := h.Values(k)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", refusef(BadRequest, "header %s given %d times", k, len(vs))
}
