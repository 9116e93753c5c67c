// Package egress is the wire contract of choird's egress gateway, the one
// way out of an agent's container: the socket's place in a container, the
// environment variable that names it, and the hello every connection
// starts with. After the hello the connection speaks the HTTP proxy
// protocol (CONNECT host:port, absolute-form http:// requests, and
// origin-form /svc/ requests for choird's service routes); a refusal is an
// HTTP 403 whose body says why, and a failed hello a 407.
package egress

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// Where an agent finds the gateway.
const (
	// EnvSocket names the gateway's Unix socket as the agent sees it.
	EnvSocket = "CHOIR_EGRESS_SOCKET"
	// ContainerSocket is the socket's place in a container.
	ContainerSocket = "/run/choir-egress.sock"
)

// Origins of a connection.
const (
	// OriginProxy is the agent's local proxy: a command of choir.exec, an
	// external tool, an MCP server's process, git. Its connections face
	// the agent's egress policy.
	OriginProxy = "proxy"
	// OriginBuiltinPrefix starts the origin of the agent's own clients:
	// "builtin:choir.web.fetch", "builtin:mcp", "builtin:service".
	OriginBuiltinPrefix = "builtin:"
	// OriginService is the agent's clients of configured services (the
	// model, search, speech, Notion, git remotes).
	OriginService = OriginBuiltinPrefix + "service"
)

// ServiceHost is the host name by which the agent's HTTP clients reach
// the gateway's own service routes (http://choir-egress/svc/...): a
// connection to it is the gateway itself, with no tunnel, so choird adds
// the service's credentials and meters the call. It never resolves
// anywhere else.
const ServiceHost = "choir-egress"

// ServiceURL is the base URL of the service route of one resource, for
// example ServiceURL("llm", "fast") for the model "fast".
func ServiceURL(service, name string) string {
	return "http://" + ServiceHost + "/svc/" + service + "/" + name
}

// GitPath is the path under which the gateway's git route serves git
// identity's remote host: git's smart-HTTP requests for
// https://<host>/<owner>/<repo>.git/... go to
// GitPath(identity, host)+"<owner>/<repo>.git/...", and choird forwards
// them with the identity's token. The agent's git reaches it through the
// tools' loopback proxy: http://<proxy>+GitPath(identity, host).
func GitPath(identity, host string) string {
	return GitPrefix + url.PathEscape(identity) + "/" + host + "/"
}

// GitPrefix is the path prefix of the git route.
const GitPrefix = "/svc/git/"

// The request headers by which the agent labels a call to a metered
// service route (a model call, a search query, speech). The gateway reads
// them and never forwards them to the provider.
const (
	// HeaderSpendKey names the call in the agent's own record of it (a
	// model call's llm_call_committed, a tool's usage record, as
	// spend_key), so that the usage views count it once: 1 to 64
	// letters, digits, _ or -, unique in the session (NewSpendKey).
	HeaderSpendKey = "Choir-Spend-Key"
	// HeaderLane, HeaderJob and HeaderPurpose attribute the call to a
	// lane, a core job and a purpose in the usage reports.
	HeaderLane    = "Choir-Lane"
	HeaderJob     = "Choir-Job"
	HeaderPurpose = "Choir-Purpose"
)

// NewSpendKey is a fresh spend key: 128 random bits.
func NewSpendKey() string { return "sk-" + rand.Text() }

// HeaderRefused marks a response of the gateway that refuses a connection;
// its value is the decision ("refused").
const HeaderRefused = "X-Choir-Egress"

// maxHello bounds a hello line.
const maxHello = 16 << 10

// Hello opens every connection to the gateway: who is calling, from where.
// Sources are the untrusted sources of the lane, shown to a person asked
// to approve the connection.
type Hello struct {
	SessionID  string   `json:"session_id"`
	LeaseToken string   `json:"lease_token"`
	Lane       string   `json:"lane,omitempty"`
	Origin     string   `json:"origin"`
	Sources    []string `json:"sources,omitempty"`
}

// Builtin reports whether the hello's origin is one of the agent's own
// clients.
func (h Hello) Builtin() bool { return strings.HasPrefix(h.Origin, OriginBuiltinPrefix) }

// Validate checks the fields the gateway needs.
func (h Hello) Validate() error {
	switch {
	case h.SessionID == "" || h.LeaseToken == "":
		return errors.New("the hello has no session id or lease token")
	case h.Origin != OriginProxy && !(h.Builtin() && len(h.Origin) > len(OriginBuiltinPrefix)):
		return fmt.Errorf("unknown origin %q: want %q or %q<tool>", h.Origin, OriginProxy, OriginBuiltinPrefix)
	}
	return nil
}

// WriteHello writes h as one JSON line.
func WriteHello(w io.Writer, h Hello) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadHello reads a hello line from r.
func ReadHello(r *bufio.Reader) (Hello, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxHello {
			return Hello{}, errors.New("the hello is too long")
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return Hello{}, fmt.Errorf("read the hello: %w", err)
		}
	}
	var h Hello
	if err := json.Unmarshal(line, &h); err != nil {
		return Hello{}, fmt.Errorf("the hello is not JSON: %w", err)
	}
	return h, h.Validate()
}

// RefusedError is the gateway's refusal of a connection, as a client of
// the gateway reports it.
type RefusedError struct {
	// Target is the host:port asked for.
	Target string
	// Status is the gateway's HTTP status (403 refused, 407 hello failed,
	// 502 unreachable).
	Status int
	// Reason is the gateway's word.
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("egress gateway refused %s: %s", e.Target, e.Reason)
}
