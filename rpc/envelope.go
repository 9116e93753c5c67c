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
		return Envelope{}, Errorf(CodeNotFound, "no such path %s; calls are POST %s<verb>", quotePath(path), PathRPCPrefix)
	}
	verb := Verb(name)
	if !verb.Valid() {
		return Envelope{}, Errorf(CodeUnknownVerb, "unknown verb %s; known verbs: %s", quotePath(name), verbList())
	}
	if method != http.MethodPost {
		return Envelope{}, Errorf(CodeBadRequest, "method %s not allowed for %s; use POST", quotePath(method), verb)
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
	if err := checkSessionID("header "+HeaderSessionID, sessionID); err != nil {
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

// checkSessionID requires a UUID in canonical lowercase form, as
// choir_control.sessions.session_id renders it.
func checkSessionID(path, id string) error {
	if id == "" {
		return invalid(path, "required")
	}
	if !isSessionID(id) {
		return invalid(path, "not a session ID (want a lowercase UUID)")
	}
	return nil
}

// isSessionID reports whether id is a UUID as uuid.UUID.String writes it:
// lowercase hex digits grouped 8-4-4-4-12. It checks every call, so it
// avoids parsing and re-rendering the UUID.
func isSessionID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// quotePath quotes s for an error message, truncated: it comes from the
// peer and may be long.
func quotePath(s string) string {
	const limit = 64
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return fmt.Sprintf("%q", s)
}

func verbList() string {
	names := make([]string, len(Verbs))
	for i, v := range Verbs {
		names[i] = string(v)
	}
	return strings.Join(names, ", ")
}

// leaseTokenBytes is the entropy of a lease token: 256 bits.
const leaseTokenBytes = 32

// NewLeaseToken returns a fresh lease token, 256 random bits in unpadded
// base64url (43 characters), and its SHA-256, which is all choird stores
// (sessions.lease_token_hash).
func NewLeaseToken() (token string, hash []byte) {
	var b [leaseTokenBytes]byte
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
func ValidLeaseTokenFormat(token string) bool {
	// Strict unpadded base64url of 32 bytes: 43 characters of the
	// alphabet, the last carrying 2 bits of padding that must be zero.
	// Checked by hand, without decoding into a fresh buffer, on every call.
	if len(token) != base64.RawURLEncoding.EncodedLen(leaseTokenBytes) {
		return false
	}
	for i := 0; i < len(token); i++ {
		if base64URLValue(token[i]) < 0 {
			return false
		}
	}
	return base64URLValue(token[len(token)-1])&3 == 0
}

// base64URLValue is the 6-bit value of a base64url character, or -1.
func base64URLValue(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '-':
		return 62
	case c == '_':
		return 63
	}
	return -1
}
