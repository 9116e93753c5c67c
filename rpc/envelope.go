package rpc

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	"github.com/choirhq/choir/rpc/internal/check"
)

// HTTP mapping of the envelope. Both transports speak HTTP/1.1; only the
// byte stream underneath differs (a Unix socket, or TCP with TLS).
const (
	// PathRPCPrefix prefixes POST /rpc/<verb>.
	PathRPCPrefix = "/rpc/"
	// PathEvents is the SSE stream of pushes (GET).
	PathEvents = "/events"

	// HeaderRequestID carries the envelope's request_id, which is also the
	// replay key of mutating verbs.
	HeaderRequestID = "X-Choir-Request-Id"
	// HeaderSessionID carries the envelope's session_id.
	HeaderSessionID = "X-Choir-Session-Id"
	// HeaderAuthorization carries the lease token as "Bearer <token>".
	HeaderAuthorization = "Authorization"
	// HeaderReplayed is set to "true" on a response served from the replay
	// store rather than by running the handler.
	HeaderReplayed = "X-Choir-Replayed"
	// HeaderLastEventID is the SSE resume header: the last push ID seen.
	HeaderLastEventID = "Last-Event-ID"
)

// Envelope is the common part of every call (spec 12.5). On HTTP its
// fields travel in the path and headers and the payload in the body; the
// JSON tags give its logical form.
type Envelope struct {
	RequestID  string          `json:"request_id"`
	SessionID  string          `json:"session_id"`
	LeaseToken string          `json:"lease_token"`
	Verb       Verb            `json:"verb"`
	Payload    json.RawMessage `json:"payload"`
}

// LogValue omits the lease token and the payload.
func (e Envelope) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("request_id", e.RequestID),
		slog.String("session_id", e.SessionID),
		slog.String("verb", string(e.Verb)),
	)
}

// String omits the lease token and the payload.
func (e Envelope) String() string {
	return fmt.Sprintf("%s request %s session %s", e.Verb, e.RequestID, e.SessionID)
}

// ParseEnvelope reads the envelope of an RPC call from its HTTP method,
// path and headers; the payload is read separately, under the size cap.
// Problems are returned as *Error: not_found or unknown_verb for the path,
// bad_request for the method, content type, request ID or session ID, and
// unauthenticated for a missing or malformed lease token.
func ParseEnvelope(method, path string, h http.Header) (Envelope, error) {
	name, ok := strings.CutPrefix(path, PathRPCPrefix)
	if !ok {
		return Envelope{}, Errorf(CodeNotFound, "no such path %s; calls are POST %s<verb>", check.Quote(path), PathRPCPrefix)
	}
	verb := Verb(name)
	if !verb.Valid() {
		return Envelope{}, Errorf(CodeUnknownVerb, "unknown verb %s; known verbs: %s", check.Quote(name), verbList())
	}
	if method != http.MethodPost {
		return Envelope{}, Errorf(CodeBadRequest, "method %s not allowed for %s; use POST", check.Quote(method), verb)
	}
	switch ct := h.Get("Content-Type"); ct {
	case "application/json": // The common case, without parsing.
	case "":
		return Envelope{}, Errorf(CodeBadRequest, "missing Content-Type: application/json header")
	default:
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return Envelope{}, Errorf(CodeBadRequest, "content type must be application/json")
		}
	}
	env := Envelope{Verb: verb}
	var err error
	if env.RequestID, err = single(h, HeaderRequestID); err != nil {
		return Envelope{}, err
	}
	if !ValidID(env.RequestID) {
		return Envelope{}, Errorf(CodeBadRequest, "header %s: missing or not a valid ID (1-128 of A-Z a-z 0-9 . _ : -)", HeaderRequestID)
	}
	if env.SessionID, env.LeaseToken, err = parseAuth(h); err != nil {
		return Envelope{}, err
	}
	return env, nil
}

// parseAuth reads the session ID and lease token headers, shared by calls
// and the event stream.
func parseAuth(h http.Header) (sessionID, token string, err error) {
	if sessionID, err = single(h, HeaderSessionID); err != nil {
		return "", "", err
	}
	if err := check.SessionID("header "+HeaderSessionID, sessionID); err != nil {
		return "", "", &Error{Code: CodeBadRequest, Message: err.Error()}
	}
	auth, err := single(h, HeaderAuthorization)
	if err != nil {
		return "", "", err
	}
	if auth == "" {
		return "", "", Errorf(CodeUnauthenticated, "missing %s: Bearer <lease token> header", HeaderAuthorization)
	}
	scheme, token, _ := strings.Cut(auth, " ")
	if !strings.EqualFold(scheme, "Bearer") || !ValidLeaseTokenFormat(token) {
		return "", "", Errorf(CodeUnauthenticated, "header %s must be Bearer followed by a lease token (43 base64url characters)", HeaderAuthorization)
	}
	return sessionID, token, nil
}

// single returns the one value of header k, "" if absent; repeating a
// header is a bad request.
func single(h http.Header, k string) (string, error) {
	vs := h.Values(k)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", Errorf(CodeBadRequest, "header %s given %d times", k, len(vs))
}

func verbList() string {
	names := make([]string, len(Verbs))
	for i, v := range Verbs {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

// NewLeaseToken returns a fresh lease token, 256 random bits in unpadded
// base64url (43 characters), and its SHA-256, which is all choird stores
// (sessions.lease_token_hash).
func NewLeaseToken() (token string, hash []byte) {
	var b [check.LeaseTokenBytes]byte
	rand.Read(b[:]) // Never fails: crypto/rand crashes the program instead.
	token = base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashLeaseToken(token)
}

// HashLeaseToken returns the SHA-256 of a lease token.
func HashLeaseToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// LeaseTokenMatches reports whether token hashes to hash, comparing in
// constant time.
func LeaseTokenMatches(token string, hash []byte) bool {
	return subtle.ConstantTimeCompare(HashLeaseToken(token), hash) == 1
}

// ValidLeaseTokenFormat reports whether token has the form NewLeaseToken
// produces. A malformed token is refused before any lookup.
func ValidLeaseTokenFormat(token string) bool { return check.ValidLeaseTokenFormat(token) }
