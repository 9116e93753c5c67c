package rpc

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/choirhq/choir/rpc/internal/callserve"
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
	env, r := callserve.ParseEnvelope(method, path, h, &envelopeNames, &verbTable)
	if r != nil {
		return Envelope{}, refusalError(r)
	}
	return Envelope{RequestID: env.RequestID, SessionID: env.SessionID, LeaseToken: env.LeaseToken, Verb: Verb(env.Verb)}, nil
}

// envelopeNames and verbTable tell callserve the envelope's names and the
// verbs.
var (
	envelopeNames = callserve.Names{RPCPrefix: PathRPCPrefix, RequestID: HeaderRequestID, SessionID: HeaderSessionID, Authorization: HeaderAuthorization}
	verbTable     = callserve.Verbs{Valid: func(v string) bool { return Verb(v).Valid() }, List: verbList}
)

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
