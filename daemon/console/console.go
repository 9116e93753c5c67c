// Package console is the operator's web console, served by choird on a
// listener of its own (issue 32): server-rendered pages (html/template)
// with a little plain JavaScript for live updates (EventSource). It holds
// no rule of its own: it shows and acts through the control layer, the
// approval service and the usage report, exactly as the admin API does,
// with the scope of the console session (an admin, actor
// "console:<session>"). Logins are package login's. Every response carries
// a strict Content-Security-Policy; every POST needs the session's CSRF
// token and a same-origin request.
package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/audit"
	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/usage"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// CookieName is the session cookie's name.
const CookieName = "choir_console"

// CSP is the Content-Security-Policy of every response: no inline script,
// nothing from elsewhere, no framing, forms only to the console itself.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Proposals give the whole text of a self-evolution proposal, as its
// person was shown it in the chat (propose.Proposer).
type Proposals interface {
	Preview(ctx context.Context, approvalID string) (text string, ok bool, err error)
}

// Options configure the console.
type Options struct {
	Control   *control.Control
	Approvals *approval.Service
	Usage     *usage.Service
	// Audit reads session replays and tool calls.
	Audit  *audit.Reader
	Logins *login.Store
	// Proposals, when set, add a proposal's whole text to its approval's
	// page.
	Proposals Proposals
	Logger    *slog.Logger
	// TLS says the console is served over HTTPS: its cookie is Secure.
	TLS bool
	// PollInterval is how often an open page's live updates look for
	// changes (default 200 ms).
	PollInterval time.Duration
}

// Console serves the web console's pages.
type Console struct {
	o     Options
	tmpl  *template.Template
	feed  *feed
	usage usageCache
}

// New returns the console.
func New(o Options) *Console {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 200 * time.Millisecond
	}
	t := template.Must(template.New("console").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
	c := &Console{o: o, tmpl: t}
	c.feed = &feed{c: c}
	return c
}

// Handler is the console's routes, every one behind the security headers;
// every route but the login link and the static files needs a session.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /login", c.login)
	mux.Handle("GET /{$}", c.session(c.overview))
	mux.Handle("GET /approvals", c.session(c.approvals))
	mux.Handle("GET /approvals/{id}", c.session(c.approval))
	mux.Handle("POST /approvals/{id}/decide", c.session(c.decide))
	mux.Handle("GET /sessions", c.session(c.sessions))
	mux.Handle("GET /usage", c.session(c.usagePage))
	mux.Handle("GET /audit", c.session(c.audit))
	mux.Handle("GET /usage.csv", c.session(c.usageCSV))
	mux.Handle("GET /sessions/{id}", c.session(c.replay))
	mux.Handle("GET /events", c.session(c.events))
	mux.Handle("POST /logout", c.session(c.logout))
	mux.Handle("/", c.session(func(w http.ResponseWriter, r *http.Request, _ login.Session) {
		c.fail(w, r, http.StatusNotFound, "There is no such page.")
	}))
	return headers(mux)
}

// Serve serves the console on ln until ctx ends.
func (c *Console) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(c.o.Logger.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		srv.Shutdown(stop) //nolint:errcheck // Close below ends what is left.
		srv.Close()        //nolint:errcheck
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// headers sets the security headers on every response.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-cache")
		} else {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// session runs h for a request with a live session: without one, the
// answer is 401 and a page saying how to log in. A POST must also come
// from the console's own pages: a same-origin request carrying the
// session's CSRF token.
func (c *Console) session(h func(http.ResponseWriter, *http.Request, login.Session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := c.o.Logins.Authenticate(r.Context(), cookieValue(r))
		if errors.Is(err, login.ErrInvalid) {
			c.fail(w, r, http.StatusUnauthorized, "You are not logged in, or your session has ended. Run choirctl console for a login link.")
			return
		}
		if err != nil {
			c.o.Logger.WarnContext(r.Context(), "console session lookup failed", slog.String("error", err.Error()))
			c.fail(w, r, http.StatusServiceUnavailable, "choird cannot reach its database now; retry shortly.")
			return
		}
		if r.Method == http.MethodPost {
			if err := sameOrigin(r); err != nil {
				c.fail(w, r, http.StatusForbidden, "Refused: "+err.Error()+".")
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(sess.CSRF)) != 1 {
				c.fail(w, r, http.StatusForbidden, "Refused: the form's security token is missing or stale. Reload the page and try again.")
				return
			}
		}
		h(w, r, sess)
	})
}

// sameOrigin refuses a request that a browser says came from another
// site. Sec-Fetch-Site, when sent, decides: only same-origin passes. (A
// browser sends it on every request; it sends Origin: null on our own
// forms, since every page says Referrer-Policy: no-referrer.) Without it,
// the Origin, when sent, must be the console's own.
func sameOrigin(r *http.Request) error {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin":
		return nil
	case "":
	default:
		return errors.New("a cross-site request")
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Host != r.Host {
		return errors.New("a request from another origin")
	}
	return nil
}

// login spends a one-time token for a session cookie and goes to the
// overview. A token already spent, expired or unknown logs no one in.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	sess, secret, err := c.o.Logins.Exchange(r.Context(), r.URL.Query().Get("token"), r.UserAgent())
	if errors.Is(err, login.ErrInvalid) {
		c.fail(w, r, http.StatusUnauthorized, "This login link is not valid: it was used already, or it expired (a link lasts a minute). Run choirctl console for a new one.")
		return
	}
	if err != nil {
		c.o.Logger.WarnContext(r.Context(), "console login failed", slog.String("error", err.Error()))
		c.fail(w, r, http.StatusServiceUnavailable, "choird cannot reach its database now; retry shortly.")
		return
	}
	c.o.Logger.InfoContext(r.Context(), "console login", slog.String("actor", sess.Actor()))
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: secret, Path: "/", Expires: sess.ExpiresAt, HttpOnly: true,
		Secure: c.o.TLS, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout revokes the request's own session.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, sess login.Session) {
	if _, err := c.o.Logins.Revoke(r.Context(), sess.ID.String(), sess.Actor()); err != nil {
		c.o.Logger.WarnContext(r.Context(), "console logout failed", slog.String("error", err.Error()))
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.o.TLS,
		SameSite: http.SameSiteStrictMode})
	c.fail(w, r, http.StatusOK, "You are logged out. Run choirctl console to log in again.")
}
