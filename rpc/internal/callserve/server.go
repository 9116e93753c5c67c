package callserve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/choirhq/choir/rpc/internal/fastpath"
)

// Defaults of the guards against abuse; package rpc exports them and says
// why they are what they are.
const (
	DefaultMaxConns        = 1024
	DefaultFailedAuthRate  = 20
	DefaultFailedAuthBurst = 100
)

// Config configures a Server; a zero field takes its default (see
// rpc.ServerOptions).
type Config struct {
	Limits     Limits
	MaxPayload int
	// Hash and Match are the lease token's hash and its constant-time
	// comparison.
	Hash  func(token string) []byte
	Match func(token string, hash []byte) bool

	Log             *slog.Logger
	Ping, Grace     time.Duration
	MaxConns        int
	FailedAuthRate  float64
	FailedAuthBurst int
}

// Server is what choird's agent server keeps besides its handlers: the
// sessions, the epoch of this run's push IDs, and how it serves listeners.
type Server struct {
	Sessions *Sessions
	Log      *slog.Logger
	// Epoch names this run of the push queues (see stream.EventID).
	Epoch string
	// Ping is how often an idle event stream carries a keep-alive.
	Ping time.Duration
	cfg  Config
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Ping <= 0 {
		cfg.Ping = 15 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 10 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.FailedAuthRate <= 0 {
		cfg.FailedAuthRate = DefaultFailedAuthRate
	}
	if cfg.FailedAuthBurst <= 0 {
		cfg.FailedAuthBurst = DefaultFailedAuthBurst
	}
	var b [8]byte
	rand.Read(b[:])
	return &Server{
		Sessions: NewSessions(cfg.Limits, cfg.Hash, cfg.Match),
		Log:      cfg.Log,
		Epoch:    hex.EncodeToString(b[:]),
		Ping:     cfg.Ping,
		cfg:      cfg,
	}
}

// stopKey carries, in a request's context, the channel Serve closes when it
// begins to shut down, so that event streams end and let it finish.
type stopKey struct{}

// Stopping returns the channel closed when the Serve that serves ctx's
// request begins to shut down.
func Stopping(ctx context.Context) <-chan struct{} {
	stop, _ := ctx.Value(stopKey{}).(<-chan struct{})
	return stop
}

// Serve serves h on ln until ctx ends (see rpc.Server.Serve): requests
// whose line starts with callPrefix in fastpath's call loop, anything
// else through net/http; badRequest renders the body of a malformed
// call's answer. Each listener gets its own Guard.
func (s *Server) Serve(ctx context.Context, ln net.Listener, h http.Handler, callPrefix string, badRequest func(msg string) []byte) error {
	stop := make(chan struct{})
	base := context.WithValue(context.Background(), stopKey{}, (<-chan struct{})(stop))
	base = WithGuard(base, s.cfg.FailedAuthRate, s.cfg.FailedAuthBurst)
	return fastpath.Serve(ctx, ln, fastpath.Config{
		Handler:     h,
		BaseContext: base,
		OnShutdown:  func() { close(stop) },
		CallPrefix:  callPrefix,
		MaxConns:    s.cfg.MaxConns,
		DrainLimit:  DrainLimit(s.cfg.MaxPayload),
		BadRequest:  badRequest,
		Log:         s.Log,
		Grace:       s.cfg.Grace,
	})
}
