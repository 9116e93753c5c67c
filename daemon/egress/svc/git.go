package svc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/internal/repopattern"
	wire "github.com/choirhq/choir/rpc/egress"
)

// GitPrefix is the path prefix of the git route (rpc/egress.GitPath):
// git's smart-HTTP requests for https://<host>/<owner>/<repo>.git reach
// the gateway as
//
//	/svc/git/<identity>/<host>/<owner>/<repo>.git/info/refs?service=git-upload-pack (or git-receive-pack)
//	/svc/git/<identity>/<host>/<owner>/<repo>.git/git-upload-pack (POST)
//	/svc/git/<identity>/<host>/<owner>/<repo>.git/git-receive-pack (POST)
//
// and choird forwards them to https://<host>/<owner>/<repo>.git/... with
// the identity's token, for the identity the caller's session is bound to,
// its hosts and its repositories only (config.GitIdentity). The agent
// points git at the route with url.<route>.insteadOf https://<host>/, so
// that neither it nor any command it runs ever holds the token.
const GitPrefix = wire.GitPrefix

// GitUsername accompanies the token in the Basic authorization: GitHub
// and GitLab accept any non-empty username with a token.
const GitUsername = "x-access-token"

// gitRoute is one git request: what the path names, and the token.
type gitRoute struct {
	identity string
	// host is the identity's configured spelling of the host the path
	// names; repo is the repository's path on it.
	host, repo string
	// endpoint is "info/refs", "git-upload-pack" or "git-receive-pack";
	// service is info/refs's service.
	endpoint, service string
	token             string
}

type gitRouteKey struct{}

// newGitProxy is the git route's reverse proxy: both bodies stream (a
// pack is never held whole), nothing is metered, and no call timeout
// applies (a large push takes what it takes; the caller's going away
// ends it).
func (h *Handler) newGitProxy(tr http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:       gitRewrite,
		Transport:     tr,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			// git must never ask a person or a helper for a password:
			// the token is choird's to give.
			resp.Header.Del("WWW-Authenticate")
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			rt := r.Context().Value(gitRouteKey{}).(*gitRoute)
			msg := strings.ReplaceAll(err.Error(), rt.token, "[token]")
			h.logger.WarnContext(r.Context(), "git route: host not reached", slog.String("host", rt.host), slog.String("error", msg))
			gitError(w, http.StatusBadGateway, fmt.Sprintf("%s not reached: %s", rt.host, msg))
		},
		ErrorLog: slog.NewLogLogger(h.logger.Handler(), slog.LevelWarn),
	}
}

// serveGit serves the git route for caller.
func (h *Handler) serveGit(w http.ResponseWriter, r *http.Request, caller egress.Caller) {
	rt, status, err := h.resolveGit(r, caller)
	if err != nil {
		h.logger.WarnContext(r.Context(), "git route: request refused", slog.String("agent_id", caller.AgentID),
			slog.String("session_id", caller.SessionID), slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("reason", err.Error()))
		gitError(w, status, err.Error())
		return
	}
	if r.Method == http.MethodPost {
		h.logger.InfoContext(r.Context(), "git route: "+rt.endpoint, slog.String("agent_id", caller.AgentID),
			slog.String("git_identity", rt.identity), slog.String("host", rt.host), slog.String("repo", rt.repo))
	}
	h.gitProxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), gitRouteKey{}, rt)))
}

// errGitPath is a request that is not one of git's smart-HTTP requests.
var errGitPath = errors.New("not a git smart-HTTP request: the git route serves " + GitPrefix +
	"<identity>/<host>/<owner>/<repo>/ info/refs?service=git-upload-pack or git-receive-pack (GET), " +
	"git-upload-pack and git-receive-pack (POST)")

// parseGitPath reads the identity, host, repository and endpoint of r's
// path, matched on its escaped form so that no encoded slash or dot
// segment passes.
func parseGitPath(r *http.Request) (*gitRoute, error) {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), GitPrefix), "/")
	if len(segs) < 4 {
		return nil, errGitPath
	}
	rt := &gitRoute{identity: segs[0], host: segs[1]}
	n := len(segs)
	switch {
	case r.Method == http.MethodGet && n >= 5 && segs[n-2] == "info" && segs[n-1] == "refs":
		rt.endpoint, rt.repo = "info/refs", strings.Join(segs[2:n-2], "/")
		rt.service = r.URL.Query().Get("service")
		if rt.service != "git-upload-pack" && rt.service != "git-receive-pack" {
			return nil, errGitPath
		}
	case r.Method == http.MethodPost && (segs[n-1] == "git-upload-pack" || segs[n-1] == "git-receive-pack"):
		rt.endpoint, rt.repo = segs[n-1], strings.Join(segs[2:n-1], "/")
	default:
		return nil, errGitPath
	}
	if !repopattern.Valid(rt.repo) || rt.identity == "" {
		return nil, errGitPath
	}
	return rt, nil
}

// resolveGit checks a git request: its path, then whether the caller's
// session is bound to the identity, the host is one of the identity's,
// and the repository one of its repositories; and finds the token.
func (h *Handler) resolveGit(r *http.Request, caller egress.Caller) (*gitRoute, int, error) {
	rt, err := parseGitPath(r)
	if err != nil {
		return nil, http.StatusNotFound, err
	}
	cfg, secrets := h.config()
	gi, ok := cfg.GitIdentities[rt.identity]
	if !ok {
		return nil, http.StatusNotFound, fmt.Errorf("no git identity %q in config.json", rt.identity)
	}
	if err := h.gitBound(r.Context(), cfg, caller, rt.identity); err != nil {
		return nil, http.StatusForbidden, err
	}
	i := slices.IndexFunc(gi.Hosts, func(h string) bool { return sameHost(h, rt.host) })
	if i < 0 {
		return nil, http.StatusForbidden, fmt.Errorf("host %s is not allowed: git identity %s may reach %s", rt.host,
			rt.identity, orNone(gi.Hosts))
	}
	rt.host = gi.Hosts[i]
	if !gi.AllowsRepo(rt.repo) {
		return nil, http.StatusForbidden, fmt.Errorf("repository %s is not allowed: git identity %s may reach %s on %s",
			repopattern.Normalize(rt.repo), rt.identity, strings.Join(gi.Repos, ", "), rt.host)
	}
	if gi.Secret == "" {
		return nil, http.StatusForbidden, fmt.Errorf("git identity %s has no secret to push or fetch with: "+
			"an admin sets git_identities.%s.secret in config.json", rt.identity, rt.identity)
	}
	tok, ok := secrets[gi.Secret]
	if !ok || tok == "" {
		return nil, http.StatusServiceUnavailable, fmt.Errorf("git identity %s: secret %s is not in secrets.json: "+
			"an admin sets it with choirctl secret set %s, then choirctl secret apply", rt.identity, gi.Secret, gi.Secret)
	}
	rt.token = tok
	return rt, 0, nil
}

// gitBound checks that caller's session is bound to the git identity,
// reading the session again before it refuses.
func (h *Handler) gitBound(ctx context.Context, cfg *config.Config, caller egress.Caller, identity string) error {
	sid, err := uuid.Parse(caller.SessionID)
	if err != nil {
		return fmt.Errorf("caller session %q is no session id", caller.SessionID)
	}
	b, fresh, err := h.bound(ctx, cfg, sid, false)
	if err == nil && !fresh && b.git != identity {
		b, _, err = h.bound(ctx, cfg, sid, true)
	}
	if err != nil {
		h.logger.WarnContext(ctx, "git route: session not read", slog.String("session_id", caller.SessionID),
			slog.String("error", err.Error()))
		return fmt.Errorf("session %s: not found", caller.SessionID)
	}
	if b.git != identity {
		return fmt.Errorf("git identity %s is not yours: agent %s's session is bound to %s", identity, caller.AgentID,
			orNone([]string{b.git}))
	}
	return nil
}

// gitRewrite makes the forwarded request: https://<host>/<repo>/<endpoint>,
// git's own headers without any credential or label of the caller's, and
// the token.
func gitRewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(gitRouteKey{}).(*gitRoute)
	pr.Out.URL = &url.URL{Scheme: "https", Host: rt.host, Path: "/" + rt.repo + "/" + rt.endpoint}
	if rt.service != "" {
		pr.Out.URL.RawQuery = url.Values{"service": {rt.service}}.Encode()
	}
	pr.Out.Host = ""
	for name := range pr.Out.Header {
		if strings.HasPrefix(name, "Choir-") {
			pr.Out.Header.Del(name)
		}
	}
	for _, name := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
		pr.Out.Header.Del(name)
	}
	pr.Out.SetBasicAuth(GitUsername, rt.token)
}

// sameHost compares two hosts as git names them: without regard to case
// or a trailing dot, and with :443, HTTPS's port, the same as none.
func sameHost(a, b string) bool { return normalHost(a) == normalHost(b) }

func normalHost(h string) string {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if host, port, err := net.SplitHostPort(h); err == nil && port == "443" {
		h = strings.TrimSuffix(host, ".")
	}
	return strings.Trim(h, "[]")
}

func orNone(list []string) string {
	if len(list) == 0 || (len(list) == 1 && list[0] == "") {
		return "none"
	}
	return strings.Join(list, ", ")
}

// gitError answers in plain text, which git shows its user after
// "remote:", so that a refused push says why.
func gitError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, "choird git route: %s\n", msg)
}
