package rpc

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/choirhq/choir/rpc/internal/callserve"
	"github.com/choirhq/choir/rpc/wire"
)

// Session is an authenticated agent session.
type Session struct {
	ID      string
	AgentID string
}

// Authenticator checks a lease token against a session. It returns an
// error wrapping ErrUnauthenticated when the token is wrong or the session
// is not active (the token is revoked), and any other error when it cannot
// tell (the database is down): the caller then sees unavailable.
//
// choird implements it against choir_control.sessions: the SHA-256 of the
// token, compared in constant time with lease_token_hash (see
// LeaseTokenMatches), while the session's status is active or stopping.
type Authenticator interface {
	Authenticate(ctx context.Context, sessionID, leaseToken string) (Session, error)
}

// IdentityAuthenticator is an Authenticator that can also check only that
// a lease token is the session's, whatever the session's state, and may
// answer from memory (the token of a session never changes). The server
// uses it for verbs whose handler fences the session itself (see
// Verb.FencedByHandler). It returns an error wrapping ErrUnauthenticated
// when the token is wrong or the session unknown.
type IdentityAuthenticator interface {
	Authenticator
	AuthenticateIdentity(ctx context.Context, sessionID, leaseToken string) (Session, error)
}

// AuthenticatorFunc adapts a function to Authenticator.
type AuthenticatorFunc func(ctx context.Context, sessionID, leaseToken string) (Session, error)

// Authenticate calls f.
func (f AuthenticatorFunc) Authenticate(ctx context.Context, sessionID, leaseToken string) (Session, error) {
	return f(ctx, sessionID, leaseToken)
}

// Call describes the call a handler serves.
type Call struct {
	Session   Session
	RequestID string
	Verb      Verb
}

// ControlPlaneHandler serves the agent protocol on choird (spec 12.2). The
// server has authenticated the session, applied its limits, decoded and
// validated the request and, for mutating verbs, ruled out a replay before
// calling a method. A method returns an error wrapping a sentinel
// (ErrNotFound, ErrConflict, ErrPermissionDenied, ...) or an *Error to
// choose the code the agent sees; any other error reaches the agent as
// internal, without its text, and is logged.
type ControlPlaneHandler interface {
	HandleInitHello(ctx context.Context, call Call, req InitHelloRequest) (InitHelloResponse, error)
	HandleGetSecrets(ctx context.Context, call Call, req GetSecretsRequest) (GetSecretsResponse, error)
	HandleHeartbeat(ctx context.Context, call Call, req HeartbeatRequest) (HeartbeatResponse, error)
	HandleRequestApproval(ctx context.Context, call Call, req ApprovalRequest) (ApprovalResponse, error)
	HandleReportStatus(ctx context.Context, call Call, req ReportStatusRequest) (ReportStatusResponse, error)
	HandleTerminateSelf(ctx context.Context, call Call, req TerminateSelfRequest) (TerminateSelfResponse, error)
	HandleFetchDynamicConfig(ctx context.Context, call Call, req FetchDynamicConfigRequest) (FetchDynamicConfigResponse, error)
	HandleExecuteHostTool(ctx context.Context, call Call, req ExecuteHostToolRequest) (ExecuteHostToolResponse, error)
	HandleSendOutbound(ctx context.Context, call Call, req SendOutboundRequest) (SendOutboundResponse, error)
}

// verbDef binds a verb to its payload types and handler method.
type verbDef struct {
	decode func(data []byte, lim Limits) (Payload, error)
	call   func(ctx context.Context, h ControlPlaneHandler, c Call, req Payload) (Payload, error)
}

func defineVerb[Req, Resp Payload](m func(ControlPlaneHandler, context.Context, Call, Req) (Resp, error)) verbDef {
	return verbDef{
		decode: func(data []byte, lim Limits) (Payload, error) {
			return Decode[Req](data, lim.MaxPayloadBytes, lim.MaxDepth)
		},
		call: func(ctx context.Context, h ControlPlaneHandler, c Call, req Payload) (Payload, error) {
			return m(h, ctx, c, req.(Req))
		},
	}
}

var verbDefs = map[Verb]verbDef{
	VerbInitHello:          defineVerb(ControlPlaneHandler.HandleInitHello),
	VerbGetSecrets:         defineVerb(ControlPlaneHandler.HandleGetSecrets),
	VerbHeartbeat:          defineVerb(ControlPlaneHandler.HandleHeartbeat),
	VerbRequestApproval:    defineVerb(ControlPlaneHandler.HandleRequestApproval),
	VerbReportStatus:       defineVerb(ControlPlaneHandler.HandleReportStatus),
	VerbTerminateSelf:      defineVerb(ControlPlaneHandler.HandleTerminateSelf),
	VerbFetchDynamicConfig: defineVerb(ControlPlaneHandler.HandleFetchDynamicConfig),
	VerbExecuteHostTool:    defineVerb(ControlPlaneHandler.HandleExecuteHostTool),
	VerbSendOutbound:       defineVerb(ControlPlaneHandler.HandleSendOutbound),
}

// Defaults of the guards that keep one agent from starving choird or the
// other agents (see ServerOptions).
const (
	// DefaultMaxConns caps the connections of one listener: far above what
	// honest agents use (each keeps a few pooled call connections and one
	// event stream), far below the process's descriptor limit.
	DefaultMaxConns = callserve.DefaultMaxConns
	// DefaultFailedAuthRate and DefaultFailedAuthBurst bound the failed
	// authentications a listener allows before it stops looking tokens up:
	// an honest agent fails only once its session is revoked, and a
	// failed lookup is one indexed read, so 20/s costs the database
	// nothing noticeable.
	DefaultFailedAuthRate  = callserve.DefaultFailedAuthRate
	DefaultFailedAuthBurst = callserve.DefaultFailedAuthBurst
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Handler serves the verbs. Required.
	Handler ControlPlaneHandler
	// Authenticator checks lease tokens. Required.
	Authenticator Authenticator
	// Replay keeps the outcomes of mutating calls (default: a
	// MemoryReplayStore with default bounds).
	Replay ReplayStore
	// Limits bound each session.
	Limits Limits
	// Logger receives errors and debug traces; payloads and tokens are
	// never logged (default: discard).
	Logger *slog.Logger
	// StreamPing is how often an idle event stream carries a keep-alive
	// comment, so that dead connections are noticed (default 15 s).
	StreamPing time.Duration
	// ShutdownTimeout bounds how long Serve waits for calls in flight when
	// its context ends (default 10 s).
	ShutdownTimeout time.Duration
	// MaxConns caps the open connections of each listener Serve runs on
	// (default DefaultMaxConns). At the cap, a new connection takes the
	// place of the one idle the longest (waiting for its next call, or an
	// idle connection net/http keeps); when every one is busy in a call or
	// an event stream, the new one is closed at once.
	MaxConns int
	// FailedAuthRate and FailedAuthBurst are the failed authentications
	// each listener allows per second, and at once (defaults
	// DefaultFailedAuthRate, DefaultFailedAuthBurst). Past them, the
	// server stops asking the Authenticator about tokens it does not know:
	// a call whose token the server remembers from its session's earlier
	// calls is still served (a HEARTBEAT from memory alone, any other
	// verb after the usual lookup), and every other call is refused as
	// rate_limited until the budget refills. A flood of bad tokens thus
	// costs the database nothing and the honest agents nothing.
	FailedAuthRate  float64
	FailedAuthBurst int
}

// Server serves the agent protocol over HTTP/1.1: POST /rpc/<verb> for
// calls and GET /events for pushes. It is an http.Handler, and Serve runs
// it on any listener (ListenUnix, ListenTCP), so both transports share
// every line of protocol logic.
type Server struct {
	h      ControlPlaneHandler
	auth   Authenticator
	replay ReplayStore
	lim    Limits
	// core holds each session's rate limiter, push queue and remembered
	// token (CloseSession drops them), the push epoch and the listeners'
	// guards.
	core    *callserve.Server
	flights callserve.Flights[outcome]
}

// NewServer returns a server for opts.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Handler == nil {
		return nil, errors.New("new rpc server: no handler")
	}
	if opts.Authenticator == nil {
		return nil, errors.New("new rpc server: no authenticator")
	}
	s := &Server{
		h:      opts.Handler,
		auth:   opts.Authenticator,
		replay: opts.Replay,
		lim:    opts.Limits.withDefaults(),
	}
	s.core = callserve.New(callserve.Config{
		Limits:     callserve.Limits{RequestsPerSecond: s.lim.RequestsPerSecond, Burst: s.lim.Burst, PushBuffer: s.lim.PushBuffer},
		MaxPayload: s.lim.MaxPayloadBytes, Hash: HashLeaseToken, Match: LeaseTokenMatches,
		Log: opts.Logger, Ping: opts.StreamPing, Grace: opts.ShutdownTimeout,
		MaxConns: opts.MaxConns, FailedAuthRate: opts.FailedAuthRate, FailedAuthBurst: opts.FailedAuthBurst,
	})
	if s.replay == nil {
		s.replay = NewMemoryReplayStore(MemoryReplayOptions{})
	}
	return s, nil
}

// Serve serves calls on ln until ctx ends, then shuts down gracefully:
// event streams end, calls in flight get ShutdownTimeout to finish. It
// closes ln. Serve may run on several listeners at once.
//
// Calls run in a loop of Serve's own over each connection (see package
// rpc/internal/fastpath); a connection that asks for anything else is
// handed to a net/http server, which serves the event stream.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.core.Serve(ctx, ln, s, http.MethodPost+" "+PathRPCPrefix,
		func(msg string) []byte { return encodeErrorBody(&wire.Error{Code: wire.CodeBadRequest, Message: msg}) })
}

// ServeHTTP routes POST /rpc/<verb> and GET /events.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == PathEvents {
		s.serveEvents(w, r)
		return
	}
	s.serveCall(w, r)
}

// CloseSession drops everything the server keeps for a session: its push
// queue (ending its event stream), its rate limiter and its replay records.
// choird calls it when the session ends or crashes, after revoking the
// token, and pushes nothing to the session afterwards (a later Push would
// start a new queue).
func (s *Server) CloseSession(ctx context.Context, sessionID string) error {
	s.core.Sessions.Drop(sessionID)
	if err := s.replay.Forget(ctx, sessionID); err != nil {
		return fmt.Errorf("close session %s: forget replays: %w", sessionID, err)
	}
	return nil
}

// authenticate checks the lease token and applies the rate limit (see
// callserve.Sessions.Authenticate and ServerOptions.FailedAuthRate).
func (s *Server) authenticate(ctx context.Context, verb Verb, sessionID, token string) (Session, *callserve.Session, *wire.Error) {
	ia, identityOnly := s.auth.(IdentityAuthenticator)
	identityOnly = identityOnly && verb.FencedByHandler()
	agentID, st, r := s.core.Sessions.Authenticate(ctx, s.core.Log, identityOnly, sessionID, token,
		func(ctx context.Context, identityOnly bool) (string, string, bool, error) {
			var sess Session
			var err error
			if identityOnly {
				sess, err = ia.AuthenticateIdentity(ctx, sessionID, token)
			} else {
				sess, err = s.auth.Authenticate(ctx, sessionID, token)
			}
			return sess.ID, sess.AgentID, errors.Is(err, wire.ErrUnauthenticated), err
		})
	if r != nil {
		return Session{}, nil, s.refusal(ctx, r)
	}
	return Session{ID: sessionID, AgentID: agentID}, st, nil
}

// refusalCodes are the wire codes of callserve's refusals.
var refusalCodes = [...]wire.Code{
	callserve.BadRequest: wire.CodeBadRequest, callserve.Unauthenticated: wire.CodeUnauthenticated,
	callserve.NotFound: wire.CodeNotFound, callserve.UnknownVerb: wire.CodeUnknownVerb,
	callserve.Conflict: wire.CodeConflict, callserve.PayloadTooLarge: wire.CodePayloadTooLarge,
	callserve.RateLimited: wire.CodeRateLimited, callserve.Unavailable: wire.CodeUnavailable, callserve.Internal: wire.CodeInternal,
}

// refusal turns a refusal into its wire error, logging an internal one.
func (s *Server) refusal(ctx context.Context, r *callserve.Refusal) *wire.Error {
	if r.Err != nil {
		return s.internal(ctx, refusalCodes[r.Kind], r.What, r.Err)
	}
	return refusalError(r)
}

// refusalError is the wire error of a refusal that is not internal.
func refusalError(r *callserve.Refusal) *wire.Error {
	return &wire.Error{Code: refusalCodes[r.Kind], Message: r.Message, RetryAfter: r.RetryAfter}
}

// internal logs err under a fresh reference and returns an error of code
// that names the reference but not err.
func (s *Server) internal(ctx context.Context, code wire.Code, what string, err error) *wire.Error {
	var b [4]byte
	rand.Read(b[:])
	ref := hex.EncodeToString(b[:])
	s.core.Log.ErrorContext(ctx, "rpc "+what+" failed", slog.String("ref", ref), slog.String("code", string(code)), slog.Any("err", err))
	msg := "internal error"
	if code == wire.CodeUnavailable {
		msg = "temporarily unavailable"
	}
	return wire.Errorf(code, "%s (ref %s)", msg, ref)
}

// outcome is the result of a call, ready for the wire.
type outcome struct {
	resp []byte
	err  *wire.Error
}

func (o outcome) cacheable() bool {
	return o.err == nil || (o.err.Code != wire.CodeInternal && o.err.Code != wire.CodeUnavailable)
}

func (s *Server) serveCall(w http.ResponseWriter, r *http.Request) {
	env, err := ParseEnvelope(r.Method, r.URL.Path, r.Header)
	if err != nil {
		s.reject(w, r, err.(*wire.Error))
		return
	}
	w.Header().Set(HeaderRequestID, env.RequestID)
	ctx := r.Context()
	sess, _, aerr := s.authenticate(ctx, env.Verb, env.SessionID, env.LeaseToken)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	body, berr := callserve.ReadBody(w, r, s.lim.MaxPayloadBytes)
	if berr != nil {
		s.writeError(w, s.refusal(ctx, berr))
		return
	}
	def := verbDefs[env.Verb]
	req, err := def.decode(body, s.lim)
	if err != nil {
		e := err.(*wire.Error)
		e.Message = fmt.Sprintf("invalid %s payload: %s", env.Verb, e.Message)
		s.writeError(w, e)
		return
	}
	if hello, ok := req.(InitHelloRequest); ok {
		if hello.SessionID != sess.ID {
			s.writeError(w, wire.Errorf(wire.CodeBadRequest, "invalid %s payload: $.session_id: differs from header %s", env.Verb, HeaderSessionID))
			return
		}
		if sess.AgentID != "" && hello.AgentID != sess.AgentID {
			s.writeError(w, wire.Errorf(wire.CodePermissionDenied, "session %s belongs to agent %s, not %s", sess.ID, sess.AgentID, hello.AgentID))
			return
		}
	}
	c := Call{Session: sess, RequestID: env.RequestID, Verb: env.Verb}
	run := func() outcome { return s.invoke(ctx, def, c, req) }
	var out outcome
	replayed := false
	if env.Verb.Mutating() {
		out, replayed = s.once(ctx, ReplayKey{SessionID: sess.ID, RequestID: env.RequestID}, env.Verb, sha256.Sum256(body), run)
	} else {
		out = run()
	}
	if out.err != nil && out.err.Code == wire.CodeUnauthenticated && env.Verb.FencedByHandler() {
		// The handler found the session revoked: keep nothing for it.
		s.core.Sessions.Drop(sess.ID)
	}
	if replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	if out.err != nil {
		s.writeError(w, out.err)
		return
	}
	callserve.WriteJSON(w, http.StatusOK, out.resp)
}

// invoke runs the handler, turning a panic into an internal error, and
// encodes and validates its response.
func (s *Server) invoke(ctx context.Context, def verbDef, c Call, req Payload) (out outcome) {
	defer func() {
		if p := recover(); p != nil {
			out = outcome{err: s.internal(ctx, wire.CodeInternal, string(c.Verb)+" handler",
				fmt.Errorf("panic: %v\n%s", p, debug.Stack()))}
		}
	}()
	resp, err := def.call(ctx, s.h, c, req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// The caller went away; nobody reads this, and a retry runs again.
			return outcome{err: wire.Errorf(wire.CodeUnavailable, "request canceled")}
		}
		if e, ok := wire.AsError(err); ok && e.Code.Valid() && e.Code != wire.CodeInternal {
			return outcome{err: &wire.Error{Code: e.Code, Message: e.Message, RetryAfter: e.RetryAfter}}
		}
		return outcome{err: s.internal(ctx, wire.CodeInternal, string(c.Verb)+" handler", err)}
	}
	if err := resp.Validate(); err != nil {
		return outcome{err: s.internal(ctx, wire.CodeInternal, string(c.Verb)+" handler",
			fmt.Errorf("handler returned an invalid response: %w", err))}
	}
	b, err := Encode(resp)
	if err != nil {
		return outcome{err: s.internal(ctx, wire.CodeInternal, string(c.Verb)+" handler", fmt.Errorf("encode response: %w", err))}
	}
	return outcome{resp: b}
}

// once runs a mutating call at most once per key: a duplicate that arrives
// while the first runs waits for it, one that arrives later finds the
// stored outcome. It reports whether out is a replay.
func (s *Server) once(ctx context.Context, key ReplayKey, verb Verb, digest [sha256.Size]byte, run func() outcome) (outcome, bool) {
	tag := callserve.Tag{Verb: string(verb), Digest: digest}
	out, replayed, r := s.flights.Do(ctx, callserve.Key(key), tag, func() (outcome, bool, bool) {
		return s.replayOrRun(ctx, key, tag, run)
	})
	if r != nil {
		return outcome{err: s.refusal(ctx, r)}, false
	}
	return out, replayed
}

// replayOrRun returns the stored outcome of key, or runs the call and
// stores its outcome; cached reports that the outcome is stored.
func (s *Server) replayOrRun(ctx context.Context, key ReplayKey, tag callserve.Tag, run func() outcome) (out outcome, cached, replayed bool) {
	var rec ReplayRecord
	var found bool
	var err error
	if k, ok := s.replay.(ReplayKeeper); !ok || k.Keeps(Verb(tag.Verb)) {
		rec, found, err = s.replay.Load(ctx, key)
	}
	if err != nil {
		return outcome{err: s.internal(ctx, wire.CodeUnavailable, "replay load", err)}, false, false
	}
	if found {
		if r := callserve.Mismatch(key.RequestID, callserve.Tag{Verb: string(rec.Verb), Digest: rec.Digest}, tag); r != nil {
			return outcome{err: s.refusal(ctx, r)}, false, false
		}
		if rec.Trimmed {
			return outcome{err: wire.Errorf(wire.CodeConflict, "request %s was already executed; its response is no longer retained", key.RequestID)}, false, false
		}
		out = outcome{resp: rec.Response}
		if rec.ErrCode != "" {
			out = outcome{err: &wire.Error{Code: rec.ErrCode, Message: rec.ErrMessage}}
		}
		return out, true, true
	}

	out = run()
	if out.cacheable() {
		rec := ReplayRecord{Verb: Verb(tag.Verb), Digest: tag.Digest, Response: out.resp}
		if out.err != nil {
			rec.ErrCode, rec.ErrMessage = out.err.Code, out.err.Message
		}
		// The call has run whatever happens next, so a failure to save is
		// logged, not returned: a later replay may then run it again, and
		// the handlers' own idempotency keys (revisions, approval request
		// IDs, message IDs) are the second line of defence.
		if err := s.replay.Save(context.WithoutCancel(ctx), key, rec); err != nil {
			s.internal(ctx, wire.CodeInternal, "replay save", err)
		} else {
			cached = true
		}
	}
	return out, cached, false
}

// reject answers a call refused before its body was read.
func (s *Server) reject(w http.ResponseWriter, r *http.Request, e *wire.Error) {
	callserve.Drain(w, r, s.lim.MaxPayloadBytes)
	s.writeError(w, e)
}

func (s *Server) writeError(w http.ResponseWriter, e *wire.Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10))
	}
	callserve.WriteJSON(w, e.Code.HTTPStatus(), encodeErrorBody(e))
}

// encodeErrorBody renders e's wire form, without HTML escaping so that
// messages read as written.
func encodeErrorBody(e *wire.Error) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e.Body()); err != nil { // Cannot happen: two strings and an integer.
		return []byte(`{"error":"internal error","code":"internal"}`)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
