// Package runtime is how choird runs agents: a small [Runtime] interface
// with two implementations that start the same choir-agent binary with the
// same contract. [github.com/choirhq/choir/daemon/runtime/docker] is the
// default and production path: one hardened container per agent (spec
// 15.3). [github.com/choirhq/choir/daemon/runtime/process] runs the binary
// as a child process, for development, demos and tests on machines without
// a Docker engine; it isolates nothing.
//
// # The contract an agent sees
//
// Both runtimes give the agent the same environment ([Env]): its agent id
// and session id, the runtime's name, where its workspace is, how it
// reaches choird (a Unix socket, or an HTTPS endpoint and the certificate
// to trust for it), and a private writable HOME, plus the spec's extra
// non-secret variables. Secrets never travel in the
// environment (spec 14.1): an agent fetches them with GET_SECRETS,
// authenticated by the lease token.
//
// The lease token is not in the environment either, since anything the
// agent starts could read it there (the agent's /proc/<pid>/environ keeps
// the environment it was started with, whatever it unsets). It arrives on
// the agent's standard input ([EnvLeaseTokenFD] says so): a pipe that
// holds the token and then reaches end of file, written by the process
// runtime before the child starts, and through the engine's stdin attach
// by the docker runtime. The agent reads it once at start and puts
// /dev/null in its place. Under docker the workspace is /workspace and the
// socket /run/choir.sock (bind mounts of the host paths); under process
// they are the host paths themselves.
//
// # The HTTP transport
//
// When choird serves the agent protocol over HTTP+SSE ([Spec.ControlAddr]),
// the agent gets CHOIR_CONTROL_PLANE=http, the endpoint as it can reach it
// (CHOIR_ENDPOINT) and the certificate file to trust (CHOIR_CA_CERT), a
// public certificate, never a key. The process runtime gives the loopback
// address (or the address choird listens on, when it names one) and the
// host's file; the docker runtime gives https://[ContainerHostName]:<port>,
// a name the container resolves to the host (the address choird listens
// on, or the default bridge's gateway when choird listens on every
// address), and mounts the certificate read-only at [ContainerCACert]. The
// lease token travels on standard input as with the socket.
//
// # Instances, orphans and exits
//
// An [Instance] is one started agent: a container, or a process group.
// Every instance carries the labels choir.managed=true, choir.agent_id and
// choir.session_id, so that a restarted choird finds what a previous run
// left behind with [Runtime.List] and removes it with [RemoveOrphans].
// [Runtime.Events] reports every instance's death as an [Exit] the moment
// it happens, so that choird's crash handling does not wait for a missed
// heartbeat.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/choirhq/choir/rpc/egress"
)

// Runtime starts, stops and watches agent instances. Implementations are
// safe for concurrent use.
type Runtime interface {
	// Name is "docker" or "process"; agents see it as CHOIR_RUNTIME.
	Name() string
	// Start starts one instance of spec and returns once it runs. On error
	// nothing is left behind.
	Start(ctx context.Context, spec Spec) (Instance, error)
	// Stop asks the instance to stop (SIGTERM), waits up to grace, then
	// kills it, and returns once it has exited. Stopping an instance that
	// is not running is not an error. The instance stays inspectable
	// until Remove.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Remove deletes the instance, killing it first if it still runs.
	Remove(ctx context.Context, id string) error
	// Inspect returns the instance's current state.
	Inspect(ctx context.Context, id string) (Instance, error)
	// List returns every instance this runtime manages, running or not,
	// including those a previous run of choird started.
	List(ctx context.Context) ([]Instance, error)
	// Events reports each instance's death until ctx ends, when the
	// channel is closed. Every call gets its own channel.
	Events(ctx context.Context) (<-chan Exit, error)
	// Close releases the runtime's resources; instances keep running.
	Close() error
}

// ErrNotFound reports an instance id that the runtime does not know, or
// that does not belong to choir.
var ErrNotFound = errors.New("no such agent instance")

// ErrEngineUnreachable reports a container engine that does not answer;
// the error's text says what to do.
var ErrEngineUnreachable = errors.New("container engine unreachable")

// ErrInvalidSpec reports a [Spec] that cannot be started.
var ErrInvalidSpec = errors.New("invalid agent spec")

// Labels every instance carries.
const (
	LabelManaged   = "choir.managed"
	LabelAgentID   = "choir.agent_id"
	LabelSessionID = "choir.session_id"
	LabelRuntime   = "choir.runtime"
)

// The environment contract: variables set by every runtime.
const (
	EnvAgentID   = "CHOIR_AGENT_ID"
	EnvSessionID = "CHOIR_SESSION_ID"
	// EnvLeaseTokenFD names the descriptor on which the agent reads its
	// lease token, to end of file: always "0", standard input.
	EnvLeaseTokenFD = "CHOIR_LEASE_TOKEN_FD"
	// EnvLeaseToken is never set: the token does not travel in the
	// environment. The name is kept so that a spec cannot set it.
	EnvLeaseToken = "CHOIR_LEASE_TOKEN"
	// EnvRuntime is the runtime's Name; the agent runs its sandbox
	// self-check unless it is "process".
	EnvRuntime = "CHOIR_RUNTIME"
	// EnvWorkspace is where the agent sees its workspace.
	EnvWorkspace = "CHOIR_WORKSPACE"
	// EnvSocket is where the agent finds choird's Unix socket; unset when
	// the spec has no ControlSocket (HTTP transport).
	EnvSocket = "CHOIR_SOCKET"
	// EnvControlPlane is the transport to choird: "uds", or "http" when
	// the spec has a ControlAddr.
	EnvControlPlane = "CHOIR_CONTROL_PLANE"
	// EnvEndpoint is choird's HTTPS endpoint as the agent reaches it, and
	// EnvCACert the certificate file it trusts for it (HTTP transport).
	EnvEndpoint = "CHOIR_ENDPOINT"
	EnvCACert   = "CHOIR_CA_CERT"
	// EnvEgressSocket is where the agent finds choird's egress gateway,
	// its one way out (rpc/egress); unset when the spec has none.
	EnvEgressSocket = egress.EnvSocket
	// EnvHome (HOME) is a private writable directory: /tmp in a container,
	// a per-instance directory for a process.
	EnvHome = "HOME"
)

// Paths inside a container.
const (
	ContainerWorkspace = "/workspace"
	ContainerSocket    = "/run/choir.sock"
	// ContainerCACert is choird's certificate, with the HTTP transport.
	ContainerCACert = "/run/choir-ca.pem"
	// ContainerEgressSocket is choird's egress gateway.
	ContainerEgressSocket = egress.ContainerSocket
)

// ContainerHostName is the name by which a container reaches choird's
// HTTP listener on the host; choird's self-signed certificate covers it.
const ContainerHostName = "host.docker.internal"

// Transports, as CHOIR_CONTROL_PLANE names them.
const (
	TransportUDS  = "uds"
	TransportHTTP = "http"
)

// Limits bound an instance's resources. The docker runtime enforces them
// with cgroups; the process runtime cannot, and ignores them.
type Limits struct {
	// CPUs is a number of CPUs, fractions allowed (0: DefaultLimits).
	CPUs float64
	// MemoryBytes caps memory; swap is not allowed on top (0: default).
	MemoryBytes int64
	// PIDs caps the number of processes and threads (0: default).
	PIDs int64
}

// DefaultLimits apply to each zero field of a spec's Limits.
var DefaultLimits = Limits{CPUs: 1, MemoryBytes: 1 << 30, PIDs: 512}

// WithDefaults fills zero fields from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	if l.CPUs == 0 {
		l.CPUs = DefaultLimits.CPUs
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultLimits.MemoryBytes
	}
	if l.PIDs == 0 {
		l.PIDs = DefaultLimits.PIDs
	}
	return l
}

// Spec is what to start.
type Spec struct {
	AgentID   string
	SessionID string
	// LeaseToken authenticates the agent's RPC calls. It is scoped to this
	// session and dies with it; the agent receives it on its standard
	// input, never in its environment.
	LeaseToken string
	// Image is the agent's image (docker only), e.g. choir-agent-x:abc1234.
	Image string
	// Args are passed to the agent binary (the image's entrypoint under
	// docker), e.g. control-plane flags.
	Args []string
	// Env holds further non-secret variables. The contract's names and
	// names outside [A-Z_][A-Z0-9_]* are refused.
	Env map[string]string
	// Workspace is the host directory the agent works in; it must exist.
	Workspace string
	// ControlSocket is choird's Unix socket on the host for this agent;
	// empty when the agent reaches choird over HTTP.
	ControlSocket string
	// ControlAddr is the address (host:port, as bound) of choird's
	// HTTP+SSE listener, when the agent reaches choird over HTTP; each
	// runtime turns it into an endpoint its agent can reach.
	// ControlCACert is the host's PEM file of the certificate that
	// listener presents. Either ControlSocket or ControlAddr, not both.
	ControlAddr   string
	ControlCACert string
	// EgressSocket is choird's egress gateway on the host (a Unix
	// socket): the agent's one way out. Empty: none, and the agent dials
	// directly (tests of the runtimes alone).
	EgressSocket string
	Limits       Limits
	// Labels are further labels; names under "choir." other than the
	// contract's are allowed, the contract's are refused.
	Labels map[string]string
}

var (
	idRE     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}$`)
	envKeyRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
	// sessionRE admits UUIDs and other simple ids; they end up in
	// container names and file names.
	sessionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
)

// Validate checks what both runtimes need: ids, token, workspace
// directory, socket, environment names and labels. It reports every
// problem at once.
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !idRE.MatchString(s.AgentID) {
		bad("agent id %q must match %s", s.AgentID, idRE)
	}
	if !sessionRE.MatchString(s.SessionID) {
		bad("session id %q must match %s", s.SessionID, sessionRE)
	}
	if s.LeaseToken == "" {
		bad("no lease token")
	} else if strings.ContainsAny(s.LeaseToken, "\x00\r\n") || len(s.LeaseToken) > MaxLeaseTokenBytes {
		bad("lease token: must be one line of at most %d bytes", MaxLeaseTokenBytes)
	}
	switch fi, err := os.Stat(s.Workspace); {
	case s.Workspace == "":
		bad("no workspace path")
	case !filepath.IsAbs(s.Workspace):
		bad("workspace %s: not an absolute path", s.Workspace)
	case err != nil:
		bad("workspace %s: %v (create the directory or fix workspaces.<name>.path in config.json)", s.Workspace, errors.Unwrap(err))
	case !fi.IsDir():
		bad("workspace %s: not a directory", s.Workspace)
	}
	if s.ControlSocket != "" {
		switch fi, err := os.Stat(s.ControlSocket); {
		case !filepath.IsAbs(s.ControlSocket):
			bad("control socket %s: not an absolute path", s.ControlSocket)
		case err != nil:
			bad("control socket %s: %v (is choird's agent listener up?)", s.ControlSocket, errors.Unwrap(err))
		case fi.Mode()&os.ModeSocket == 0:
			bad("control socket %s: not a Unix socket", s.ControlSocket)
		}
	}
	if s.EgressSocket != "" {
		if fi, err := os.Stat(s.EgressSocket); err != nil || fi.Mode()&os.ModeSocket == 0 || !filepath.IsAbs(s.EgressSocket) {
			bad("egress socket %s: not an absolute path to a Unix socket (is choird's egress gateway up?)", s.EgressSocket)
		}
	}
	if s.ControlAddr != "" {
		errs = append(errs, s.validateHTTP()...)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		switch {
		case !envKeyRE.MatchString(k):
			bad("environment variable %q: name must match %s", k, envKeyRE)
		case slices.Contains(contractEnv, k):
			bad("environment variable %s: set by the runtime itself", k)
		case strings.ContainsRune(s.Env[k], 0):
			bad("environment variable %s: value contains a NUL byte", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if slices.Contains([]string{LabelManaged, LabelAgentID, LabelSessionID, LabelRuntime}, k) {
			bad("label %s: set by the runtime itself", k)
		}
	}
	l := s.Limits
	if l.CPUs < 0 || l.MemoryBytes < 0 || l.PIDs < 0 {
		bad("limits must not be negative (cpus %g, memory %d, pids %d)", l.CPUs, l.MemoryBytes, l.PIDs)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w for agent %s: %w", ErrInvalidSpec, s.AgentID, err)
	}
	return nil
}

// validateHTTP checks the HTTP transport's fields.
func (s Spec) validateHTTP() []error {
	var errs []error
	if s.ControlSocket != "" {
		errs = append(errs, fmt.Errorf("control socket %s and control address %s: give one transport, not both", s.ControlSocket, s.ControlAddr))
	}
	if _, port, err := net.SplitHostPort(s.ControlAddr); err != nil || port == "" || port == "0" {
		errs = append(errs, fmt.Errorf("control address %q: want the listener's host:port as bound", s.ControlAddr))
	}
	switch fi, err := os.Stat(s.ControlCACert); {
	case s.ControlCACert == "":
		errs = append(errs, fmt.Errorf("control address %s: no certificate file for the agent to trust", s.ControlAddr))
	case !filepath.IsAbs(s.ControlCACert):
		errs = append(errs, fmt.Errorf("control certificate %s: not an absolute path", s.ControlCACert))
	case err != nil:
		errs = append(errs, fmt.Errorf("control certificate %s: %v", s.ControlCACert, errors.Unwrap(err)))
	case !fi.Mode().IsRegular():
		errs = append(errs, fmt.Errorf("control certificate %s: not a regular file", s.ControlCACert))
	}
	return errs
}

var contractEnv = []string{EnvAgentID, EnvSessionID, EnvLeaseToken, EnvLeaseTokenFD, EnvRuntime, EnvWorkspace, EnvSocket, EnvHome,
	EnvControlPlane, EnvEndpoint, EnvCACert, EnvEgressSocket}

// Reach is how an agent reaches choird, as the agent sees it: a Unix
// socket, or an HTTPS endpoint and the certificate file to trust for it.
type Reach struct {
	Socket           string
	Endpoint, CACert string
	// Egress is the egress gateway's socket; empty: none.
	Egress string
}

// MaxLeaseTokenBytes bounds the token an agent reads from its standard
// input.
const MaxLeaseTokenBytes = 1024

// LeaseTokenFD is the value of [EnvLeaseTokenFD]: standard input.
const LeaseTokenFD = "0"

// Env returns the agent's environment, sorted: the contract's variables
// with the paths the agent sees, then spec.Env. It never holds the lease
// token, only where to read it.
func Env(runtimeName string, s Spec, workspace, home string, reach Reach) []string {
	env := []string{
		EnvAgentID + "=" + s.AgentID,
		EnvSessionID + "=" + s.SessionID,
		EnvLeaseTokenFD + "=" + LeaseTokenFD,
		EnvRuntime + "=" + runtimeName,
		EnvWorkspace + "=" + workspace,
		EnvHome + "=" + home,
	}
	switch {
	case reach.Endpoint != "":
		env = append(env, EnvControlPlane+"="+TransportHTTP, EnvEndpoint+"="+reach.Endpoint, EnvCACert+"="+reach.CACert)
	default:
		env = append(env, EnvControlPlane+"="+TransportUDS)
		if reach.Socket != "" {
			env = append(env, EnvSocket+"="+reach.Socket)
		}
	}
	if reach.Egress != "" {
		env = append(env, EnvEgressSocket+"="+reach.Egress)
	}
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// Labels returns the instance labels of s under the named runtime.
func Labels(runtimeName string, s Spec) map[string]string {
	l := maps.Clone(s.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[LabelManaged] = "true"
	l[LabelAgentID] = s.AgentID
	l[LabelSessionID] = s.SessionID
	l[LabelRuntime] = runtimeName
	return l
}

// State is an instance's life stage.
type State string

// States an instance goes through.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	// StateUnknown is an instance whose exit could not be observed, such
	// as a process started by a previous run of choird that is gone.
	StateUnknown State = "unknown"
)

// Instance is a started agent.
type Instance struct {
	ID        string
	Runtime   string
	AgentID   string
	SessionID string
	// Image is the image the container runs (docker), or the binary
	// (process).
	Image string
	State State
	// Pid is the agent's process id on the host while it runs.
	Pid int
	// ExitCode is set once exited: the agent's exit status, or 128+n
	// when killed by signal n (as a shell reports it); -1 if unknown.
	ExitCode   int
	OOMKilled  bool
	StartedAt  time.Time
	FinishedAt time.Time
	Labels     map[string]string
}

// Running reports whether the instance runs.
func (i Instance) Running() bool { return i.State == StateRunning }

// Exit reports an instance's death.
type Exit struct {
	ID        string
	AgentID   string
	SessionID string
	// ExitCode is the exit status, or 128+n when killed by signal n.
	ExitCode  int
	OOMKilled bool
	At        time.Time
}

// RemoveOrphans removes every instance that keep does not claim (all of
// them when keep is nil), as choird does at start-up for whatever a
// previous run left behind. It returns the removed instances and every
// failure.
func RemoveOrphans(ctx context.Context, rt Runtime, keep func(Instance) bool) ([]Instance, error) {
	list, err := rt.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s instances: %w", rt.Name(), err)
	}
	var removed []Instance
	var errs []error
	for _, inst := range list {
		if keep != nil && keep(inst) {
			continue
		}
		if err := rt.Remove(ctx, inst.ID); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("remove orphan %s (agent %s, session %s): %w", inst.ID, inst.AgentID, inst.SessionID, err))
			continue
		}
		removed = append(removed, inst)
	}
	return removed, errors.Join(errs...)
}

// HostEndpoint is the HTTPS endpoint of choird's listener at addr as a
// process on the host reaches it: the address itself, or the loopback
// address when choird listens on every address (0.0.0.0 or ::).
func HostEndpoint(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "https://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "https://" + net.JoinHostPort(host, port)
}
