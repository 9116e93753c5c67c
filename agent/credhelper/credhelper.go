// Package credhelper is the git credential helper of spec 14.4, kept for
// its protocol code and host checks; the agent no longer answers it with
// a token. git reaches a leased identity's remotes through choird's git
// route instead (daemon/egress/svc, issue 34), where choird adds the
// token, so that neither the agent nor any process a tool starts ever
// holds it.
//
// The helper: When the agent binary is run as git-cred-helper (argv[0],
// see [Invoked]), git speaks its credential helper protocol with it on
// stdin and stdout; [Helper.Run] answers a "get" with what
// [Helper.TokenFunc] gives, but only for the allowed remote host and only
// over HTTPS. "store" and "erase" are accepted and ignored. The agent's
// TokenFunc gives nothing, so a "get" is always denied; nothing here reads
// the environment or a file.
package credhelper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
)

// Name is the argv[0] under which the agent binary acts as the helper.
const Name = "git-cred-helper"

// DefaultUsername is sent with the token when [Helper.Username] is empty;
// GitHub accepts any non-empty username with a token, GitLab too.
const DefaultUsername = "x-access-token"

// maxRequestBytes bounds what the helper reads from git.
const maxRequestBytes = 64 << 10

// Invoked reports whether argv0 (os.Args[0]) names the helper, whatever
// directory it was called from.
func Invoked(argv0 string) bool { return filepath.Base(argv0) == Name }

// Request is what git asks for. Unknown attributes (capability[],
// wwwauth[], ...) are ignored.
type Request struct {
	Protocol string
	// Host is host[:port], as git sends it.
	Host     string
	Path     string
	Username string
}

// Credential is the answer to a get.
type Credential struct {
	Username string
	Password string
}

// Helper answers git's credential requests for one leased git identity.
type Helper struct {
	// AllowedHosts are the remote hosts (host or host:port, compared
	// without regard to case) that may receive the token. An empty list
	// allows none.
	AllowedHosts []string
	// Username accompanies the token; empty means [DefaultUsername].
	Username string
	// TokenFunc returns the identity's token for req, which Allowed has
	// passed; the agent's side checks req again (see [Answer]).
	TokenFunc func(ctx context.Context, req Request) (string, error)
}

// ErrDenied reports a request the helper refused to answer; Run answers it
// with no credentials (git then fails or asks another helper).
var ErrDenied = errors.New("credentials denied")

// Run handles one helper invocation: args are the arguments after the
// program name (git passes the action: get, store or erase). A denied get
// writes nothing to stdout and a one-line reason to stderr, and returns
// nil: not answering is the protocol's way to refuse. It returns an error
// only for a malformed request or a failing token source.
func (h *Helper) Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: %s get|store|erase (git runs it as a credential helper)", Name)
	}
	req, err := ReadRequest(stdin)
	if err != nil {
		return err
	}
	switch args[0] {
	case "get":
	case "store", "erase":
		return nil // nothing is kept: the token lives in the agent's memory
	default:
		return nil // the protocol says to ignore unknown actions
	}
	cred, err := h.Get(ctx, req)
	if errors.Is(err, ErrDenied) {
		fmt.Fprintf(stderr, "%s: %v\n", Name, err)
		return nil
	}
	if err != nil {
		return err
	}
	return WriteCredential(stdout, cred)
}

// Get returns the credential for req, or an error wrapping [ErrDenied]
// saying why req may not have it.
func (h *Helper) Get(ctx context.Context, req Request) (Credential, error) {
	if err := h.Allowed(req); err != nil {
		return Credential{}, err
	}
	if h.TokenFunc == nil {
		return Credential{}, errors.New("no token source configured")
	}
	tok, err := h.TokenFunc(ctx, req)
	if err != nil {
		return Credential{}, fmt.Errorf("read git token: %w", err)
	}
	if tok == "" {
		return Credential{}, fmt.Errorf("%w: the leased git identity has no token", ErrDenied)
	}
	user := h.Username
	if user == "" {
		user = DefaultUsername
	}
	c := Credential{Username: user, Password: tok}
	if err := checkValue("username", c.Username); err != nil {
		return Credential{}, err
	}
	if err := checkValue("token", c.Password); err != nil {
		return Credential{}, err
	}
	return c, nil
}

// Allowed returns nil if req may receive the token: HTTPS, and a host in
// AllowedHosts (":443" is the same host).
func (h *Helper) Allowed(req Request) error {
	if req.Protocol != "https" {
		return fmt.Errorf("%w: protocol %q, only https may carry the token", ErrDenied, req.Protocol)
	}
	host := normalizeHost(req.Host)
	if host == "" {
		return fmt.Errorf("%w: no host in the request", ErrDenied)
	}
	for _, a := range h.AllowedHosts {
		if normalizeHost(a) == host {
			return nil
		}
	}
	if len(h.AllowedHosts) == 0 {
		return fmt.Errorf("%w: host %s: no remote host is allowed for this git identity", ErrDenied, req.Host)
	}
	return fmt.Errorf("%w: host %s is not the allowed remote host (%s)", ErrDenied, req.Host, strings.Join(h.AllowedHosts, ", "))
}

// normalizeHost lowercases a host and drops the default HTTPS port and a
// trailing dot.
func normalizeHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if host, port, err := net.SplitHostPort(h); err == nil && port == "443" {
		h = host
		if strings.Contains(h, ":") {
			h = "[" + h + "]"
		}
	}
	return strings.TrimSuffix(h, ".")
}

// ReadRequest reads key=value lines up to a blank line or the end of the
// input. A url= attribute is split into its parts, as git itself does.
func ReadRequest(r io.Reader) (Request, error) {
	var req Request
	sc := bufio.NewScanner(io.LimitReader(r, maxRequestBytes))
	sc.Buffer(make([]byte, 0, 4096), maxRequestBytes)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			break
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return Request{}, fmt.Errorf("read credential request: line %q is not key=value", line)
		}
		switch k {
		case "protocol":
			req.Protocol = v
		case "host":
			req.Host = v
		case "path":
			req.Path = v
		case "username":
			req.Username = v
		case "url":
			u, err := url.Parse(v)
			if err != nil {
				return Request{}, fmt.Errorf("read credential request: url: %w", err)
			}
			req.Protocol, req.Host, req.Path = u.Scheme, u.Host, strings.TrimPrefix(u.Path, "/")
			if u.User != nil {
				req.Username = u.User.Username()
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Request{}, fmt.Errorf("read credential request: %w", err)
	}
	return req, nil
}

// WriteCredential writes c in the protocol's key=value form.
func WriteCredential(w io.Writer, c Credential) error {
	for _, kv := range [][2]string{{"username", c.Username}, {"password", c.Password}} {
		if err := checkValue(kv[0], kv[1]); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "username=%s\npassword=%s\n", c.Username, c.Password)
	if err != nil {
		return fmt.Errorf("write credential: %w", err)
	}
	return nil
}

// checkValue refuses what would break the line protocol (and let a value
// inject further attributes). The value itself is never echoed.
func checkValue(what, v string) error {
	if strings.ContainsAny(v, "\n\r\x00") {
		return fmt.Errorf("%s contains a newline or NUL byte and cannot be passed to git", what)
	}
	return nil
}
