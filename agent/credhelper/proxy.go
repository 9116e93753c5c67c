package credhelper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Proxy is the way git reaches a leased identity's remotes without ever
// holding its token: git is told (url.<prefix>.insteadOf) to send every
// request for https://<host>/ to the proxy, on the agent's loopback, and
// the proxy, inside the agent's own non-dumpable process, forwards the
// git smart-HTTP requests (info/refs, git-upload-pack, git-receive-pack)
// to https://<host>/ with the token added. A command of choir.exec can
// push through it as before, but no process outside the agent holds the
// token at any time: there is no helper to ask (git credential fill
// answers nothing), no socket that hands it out, no git process whose
// memory or descriptors carry it.
//
// The proxy answers only under a random path key, so that a process that
// did not read the agent's git configuration (another agent's, under the
// process runtime) cannot use it; only to the identity's hosts; only
// over HTTPS upstream; and never follows a redirect.
type Proxy struct {
	// Hosts are the remote hosts (host or host:port) the token may be
	// sent to.
	Hosts []string
	// Username accompanies the token; empty means [DefaultUsername].
	Username string
	// TokenFunc returns the token, from the agent's memory.
	TokenFunc func() (string, bool)
	// Transport reaches the remotes; nil means a default HTTPS transport.
	Transport http.RoundTripper
	// Logger receives every refusal.
	Logger *slog.Logger

	key  string
	addr string
}

// Listen starts the proxy on a loopback port until ctx ends.
func (p *Proxy) Listen(ctx context.Context) error {
	var k [16]byte
	if _, err := rand.Read(k[:]); err != nil {
		return fmt.Errorf("git proxy key: %w", err)
	}
	p.key = hex.EncodeToString(k[:])
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("git proxy: %w", err)
	}
	p.addr = ln.Addr().String()
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	go srv.Serve(ln) //nolint:errcheck // ends with ctx
	return nil
}

// Prefix is the proxy's URL for host, which git's url.<prefix>.insteadOf
// maps https://<host>/ to.
func (p *Proxy) Prefix(host string) string {
	return "http://" + p.addr + "/" + p.key + "/" + normalizeHost(host) + "/"
}

// hopHeaders are not forwarded either way; nor are credentials from the
// client.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Authorization", "Cookie"}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, path, err := p.route(r)
	if err != nil {
		if p.Logger != nil {
			p.Logger.Warn("git proxy request refused", slog.String("method", r.Method),
				slog.String("path", redactKey(r.URL.Path, p.key)), slog.String("reason", err.Error()))
		}
		http.Error(w, "choir git proxy: "+err.Error(), http.StatusForbidden)
		return
	}
	tok, ok := "", false
	if p.TokenFunc != nil {
		tok, ok = p.TokenFunc()
	}
	if !ok || tok == "" {
		http.Error(w, "choir git proxy: the leased git identity has no token", http.StatusForbidden)
		return
	}
	up, err := http.NewRequestWithContext(r.Context(), r.Method, (&url.URL{Scheme: "https", Host: host, Path: path,
		RawQuery: r.URL.RawQuery}).String(), r.Body)
	if err != nil {
		http.Error(w, "choir git proxy: "+err.Error(), http.StatusBadRequest)
		return
	}
	up.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		up.Header.Del(h)
	}
	up.ContentLength = r.ContentLength
	user := p.Username
	if user == "" {
		user = DefaultUsername
	}
	up.SetBasicAuth(user, tok)
	rt := p.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(up)
	if err != nil {
		http.Error(w, "choir git proxy: "+strings.ReplaceAll(err.Error(), tok, "[token]"), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		if !slices.Contains(hopHeaders, http.CanonicalHeaderKey(k)) {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body) //nolint:errcheck // the client sees a short body
}

// route checks a request: the key, an allowed host, and a git smart-HTTP
// endpoint; it returns the upstream host and path.
func (p *Proxy) route(r *http.Request) (host, path string, err error) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/"+p.key+"/")
	if p.key == "" || !ok {
		return "", "", errors.New("not a request of this agent's git")
	}
	host, path, _ = strings.Cut(rest, "/")
	path = "/" + path
	if !slices.ContainsFunc(p.Hosts, func(h string) bool { return normalizeHost(h) == normalizeHost(host) }) {
		return "", "", fmt.Errorf("host %s is not one of the git identity's hosts (%s)", host, strings.Join(p.Hosts, ", "))
	}
	switch service := r.URL.Query().Get("service"); {
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/info/refs") &&
		(service == "git-upload-pack" || service == "git-receive-pack"):
	case r.Method == http.MethodPost && (strings.HasSuffix(path, "/git-upload-pack") || strings.HasSuffix(path, "/git-receive-pack")):
	default:
		return "", "", fmt.Errorf("%s %s is not a git smart-HTTP request (info/refs, git-upload-pack, git-receive-pack)", r.Method, path)
	}
	if strings.Contains(path, "/../") || strings.HasSuffix(path, "/..") {
		return "", "", errors.New("a path with .. is not forwarded")
	}
	return host, path, nil
}

// redactKey keeps the proxy's key out of the log.
func redactKey(path, key string) string {
	if key == "" {
		return path
	}
	return strings.ReplaceAll(path, key, "[key]")
}
