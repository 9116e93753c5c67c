// Package admin is the API choirctl speaks to choird: JSON over HTTP/1.1 on
// a Unix socket (.choir.d/socks/admin.sock) of mode 0600, where choird
// checks each connection's peer uid with SO_PEERCRED and admits only its
// own uid and root. Errors have the agent protocol's form,
// {"error": ..., "code": ...} (see wire.ErrorBody).
//
// It is the whole admin contract: every path (paths.go), every request and
// result type, and a Client with a typed method per command, which says in
// one line when choird is not running. choird mounts its handlers on a Mux
// with Handle and serves it with Serve; choirctl calls the Client.
package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/choirhq/choir/rpc/unixsock"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/strictjson"
)

// SocketPath returns the admin socket of the Choir directory choirDir
// (usually ~/.choir.d).
func SocketPath(choirDir string) string {
	return filepath.Join(choirDir, "socks", "admin.sock")
}

// Listen listens on the admin socket: mode 0600, a stale socket replaced,
// a live one (a running choird) refused naming its process.
func Listen(ctx context.Context, path string) (net.Listener, error) {
	return unixsock.Listen(ctx, path)
}

type peerKey struct{}

// PeerFromContext returns the peer of the connection a request came on.
func PeerFromContext(ctx context.Context) (unixsock.Cred, bool) {
	p, ok := ctx.Value(peerKey{}).(unixsock.Cred)
	return p, ok
}

// MaxRequestBytes caps an admin request body.
const MaxRequestBytes = 1 << 20

// Empty is the input of a handler that takes none, and the output of one
// that returns none.
type Empty struct{}

// Mux routes admin requests to typed handlers and answers every unknown
// path or method with a JSON error.
type Mux struct {
	mux *http.ServeMux
	log *slog.Logger
}

// NewMux returns an empty Mux. logger receives internal errors (nil:
// discard).
func NewMux(logger *slog.Logger) *Mux {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Mux{mux: http.NewServeMux(), log: logger}
}

// Handle mounts fn at method and pattern (a net/http pattern path such as
// /v1/agents/{id}/stop; path values are in the request, see PathValue). The
// request body, if any, is decoded strictly into In (unknown fields,
// duplicate keys, trailing data refused; a bodiless request gets In's zero
// value) and validated when In has a Validate() error method. fn's
// error chooses the response code as for the agent protocol (wire.AsError):
// an error of no known code is reported as internal, its text only logged.
func Handle[In, Out any](m *Mux, method, pattern string, fn func(ctx context.Context, in In) (Out, error)) {
	m.mux.HandleFunc(method+" "+pattern, func(w http.ResponseWriter, r *http.Request) {
		var in In
		body, err := readBody(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := strictjson.Decode(body, &in, strictjson.Limits{MaxBytes: MaxRequestBytes}); err != nil {
				writeError(w, wire.Errorf(wire.CodeBadRequest, "invalid request body: %v", oneLine(err)))
				return
			}
		}
		if v, ok := any(in).(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				writeError(w, wire.Errorf(wire.CodeBadRequest, "invalid request: %v", err))
				return
			}
		}
		ctx := contextWithRequest(r.Context(), r)
		out, err := fn(ctx, in)
		if err != nil {
			if e, ok := wire.AsError(err); ok && e.Code != wire.CodeInternal {
				writeError(w, e)
				return
			}
			writeError(w, m.internal(ctx, r, err))
			return
		}
		b, err := json.Marshal(out)
		if err != nil {
			writeError(w, m.internal(ctx, r, fmt.Errorf("encode response: %w", err)))
			return
		}
		writeJSON(w, http.StatusOK, b)
	})
}

type requestKey struct{}

func contextWithRequest(ctx context.Context, r *http.Request) context.Context {
	return context.WithValue(ctx, requestKey{}, r)
}

// PathValue returns the named path wildcard of the request a handler
// serves, as http.Request.PathValue does.
func PathValue(ctx context.Context, name string) string {
	r, _ := ctx.Value(requestKey{}).(*http.Request)
	if r == nil {
		return ""
	}
	return r.PathValue(name)
}

func (m *Mux) internal(ctx context.Context, r *http.Request, err error) *wire.Error {
	var b [4]byte
	rand.Read(b[:])
	ref := hex.EncodeToString(b[:])
	m.log.ErrorContext(ctx, "admin request failed", "method", r.Method, "path", r.URL.Path, "ref", ref, "err", err)
	return wire.Errorf(wire.CodeInternal, "internal error (ref %s; see choird's log)", ref)
}

// ServeHTTP routes r, answering unknown paths (404) and methods (405) in
// the JSON error form.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := m.mux.Handler(r)
	if pattern != "" {
		m.mux.ServeHTTP(w, r)
		return
	}
	// Let ServeMux decide between 404 and 405 (and set Allow), then
	// replace its plain-text body.
	sr := &statusRecorder{header: http.Header{}}
	h.ServeHTTP(sr, r)
	if allow := sr.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	e := wire.Errorf(wire.CodeNotFound, "no such admin endpoint %s %s", r.Method, r.URL.Path)
	status := http.StatusNotFound
	if sr.status == http.StatusMethodNotAllowed {
		e = wire.Errorf(wire.CodeBadRequest, "method %s not allowed for %s", r.Method, r.URL.Path)
		status = http.StatusMethodNotAllowed
	}
	writeJSON(w, status, encodeError(e))
}

// statusRecorder captures the status and headers of ServeMux's own error
// responses.
type statusRecorder struct {
	header http.Header
	status int
}

func (s *statusRecorder) Header() http.Header         { return s.header }
func (s *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusRecorder) WriteHeader(status int)      { s.status = status }

func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxRequestBytes {
		return nil, wire.Errorf(wire.CodePayloadTooLarge, "request body is %d bytes, over the limit of %d bytes", r.ContentLength, MaxRequestBytes)
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(r.Body, MaxRequestBytes+1))
	if err != nil {
		return nil, wire.Errorf(wire.CodeBadRequest, "read request body: %v", err)
	}
	if n > MaxRequestBytes {
		return nil, wire.Errorf(wire.CodePayloadTooLarge, "request body over the limit of %d bytes", MaxRequestBytes)
	}
	return buf.Bytes(), nil
}

func writeError(w http.ResponseWriter, err error) {
	e, ok := wire.AsError(err)
	if !ok {
		e = wire.Errorf(wire.CodeInternal, "internal error")
	}
	writeJSON(w, e.Code.HTTPStatus(), encodeError(e))
}

func encodeError(e *wire.Error) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(e.Body()) // Cannot fail: two strings and an integer.
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// oneLine joins a strictjson error's problems with "; ".
func oneLine(err error) string {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return err.Error()
	}
	var b bytes.Buffer
	for i, p := range se.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// AllowUIDs are the peer uids admitted (default: choird's own uid and
	// root).
	AllowUIDs []uint32
	// Logger receives connection errors (default: discard).
	Logger *slog.Logger
	// ShutdownTimeout bounds how long Serve waits for requests in flight
	// when its context ends (default 10 s).
	ShutdownTimeout time.Duration
}

// Serve serves h on ln (from Listen) until ctx ends, admitting only peers
// whose uid is allowed: every other request gets 403 permission_denied. It
// closes ln.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, opts ServeOptions) error {
	allowed := opts.AllowUIDs
	if len(allowed) == 0 {
		allowed = []uint32{uint32(os.Getuid()), 0}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	grace := opts.ShutdownTimeout
	if grace <= 0 {
		grace = 10 * time.Second
	}
	hs := &http.Server{
		Handler:           peerCheck(h, allowed),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			cred, err := unixsock.PeerCred(c)
			if err != nil {
				logger.Warn("admin connection without peer credentials", "err", err)
				return ctx
			}
			return context.WithValue(ctx, peerKey{}, cred)
		},
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve admin API on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("shut down admin API: %w", err), hs.Close())
	}
	<-errc
	return err
}

// peerCheck admits requests from allowed uids only.
func peerCheck(h http.Handler, allowed []uint32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := PeerFromContext(r.Context())
		if !ok {
			writeError(w, wire.Errorf(wire.CodePermissionDenied, "peer credentials unavailable; the admin API is served on a Unix socket only"))
			return
		}
		for _, uid := range allowed {
			if p.UID == uid {
				h.ServeHTTP(w, r)
				return
			}
		}
		writeError(w, wire.Errorf(wire.CodePermissionDenied, "uid %d may not use choird's admin API; run choirctl as uid %d or root", p.UID, allowed[0]))
	})
}
