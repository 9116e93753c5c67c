// Package docker is the production runtime: one hardened container per
// agent, through the Docker Engine API (github.com/moby/moby/client).
//
// # The security profile (spec 15.3)
//
// Every container is created with:
//
//   - all capabilities dropped, no-new-privileges, the engine's default
//     seccomp profile (never "unconfined") and its default AppArmor
//     profile where AppArmor exists;
//   - a read-only root filesystem, with tmpfs on /tmp (1777) and /run;
//   - CPU, memory (no swap on top) and pids limits;
//   - its own PID and IPC namespaces, no devices, not privileged;
//   - exactly two mounts: the workspace at /workspace and, with the Unix
//     transport, choird's socket at /run/choir.sock (read-only: connecting
//     needs no write access to the mount, and the agent cannot chmod or
//     replace the socket), or with the HTTP transport choird's public
//     certificate at /run/choir-ca.pem (read-only). No engine socket, ever.
//   - with the HTTP transport, one extra host: [runtime.ContainerHostName]
//     resolves to the address choird listens on, or to the engine's
//     host-gateway (the default bridge's gateway on the host) when choird
//     listens on every address. A listener on loopback alone cannot be
//     reached from a container and is refused ([CheckControlAddr]).
//   - no network ([DefaultNetwork] "none": a loopback interface and no
//     route anywhere): the agent's one way out is choird's egress gateway,
//     a Unix socket mounted read-only at [runtime.ContainerEgressSocket],
//     which decides every connection (daemon/egress). A command of
//     choir.exec that ignores the proxy variables reaches nothing, and no
//     name resolves. [Options.Network] may name another network, never
//     the host's ("host" is refused). With the HTTP transport the agent
//     must reach choird over a network, so a container whose network is
//     "none" gets "bridge" instead, and choird says that such agents have
//     a route out.
//
// The agent never runs as host root. It runs as choird's own uid:gid when
// choird is not root, so that files it writes in the workspace belong to
// the operator; when choird is root, it runs as [DefaultUser], a dedicated
// unprivileged uid, and the workspace is handed to that uid at the first
// start (see [Runtime.Start]). [Options.User] must be numeric, and uid 0
// is refused unless the engine remaps user namespaces (userns-remap),
// where the container's root is an unprivileged uid on the host: a root
// agent could otherwise leave a setuid-root binary in the bind-mounted
// workspace for the host to run. The agent binary is PID 1 and must reap
// the orphans its tools leave, unless [Options.Init] adds the engine's init
// process.
//
// # The lease token
//
// The token never enters the container's configuration (docker inspect
// shows the environment): the container is created with an open standard
// input that closes after the first attach ends, and Start attaches to
// it, writes the token, closes the stream and only then starts the
// container. The agent reads it to end of file at its start.
//
// Images are never pulled: a missing image is an error that says to run
// `choirctl agent build`.
//
// # Finding instances
//
// Containers carry choir.managed=true, choir.agent_id, choir.session_id,
// choir.runtime=docker and choir.scope=[Options.Scope], and are named
// choir-<agent>-<session prefix>. Inspect, Stop, Remove and List touch
// only containers with the managed label and this runtime's scope, so two
// choird installations (or test runs) on one engine never remove each
// other's agents.
//
// # Exits
//
// [Runtime.Events] follows the engine's event stream (die and oom of
// managed containers of the scope). When the stream breaks it reconnects
// with backoff and asks for the events since the last one it saw, so a
// death during the outage is still reported (the engine keeps its recent
// events in memory); duplicates at the seam are dropped.
package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/choirhq/choir/config/workspace"
	"github.com/choirhq/choir/daemon/runtime"
)

// Name is the runtime's name.
const Name = "docker"

// LabelScope separates the instances of different choird installations
// sharing one engine.
const LabelScope = "choir.scope"

// Defaults of [Options].
const (
	DefaultScope   = "default"
	DefaultNetwork = "none"
	// httpNetwork is the network of an agent that reaches choird over
	// the HTTP transport, when Network is "none".
	httpNetwork    = "bridge"
	DefaultTmpSize = 256 << 20
	DefaultRunSize = 16 << 20
	// DefaultUser is the agent's uid:gid when choird runs as root.
	DefaultUser = "65532:65532"
)

// ErrRootUser reports an agent user that would be root on the host.
var ErrRootUser = errors.New("agents never run as host root")

// ScopeFor returns the scope of the choird whose home is home: "h"
// followed by 12 hex digits of the hash of its absolute path, so that two
// installations on one engine never touch each other's containers.
func ScopeFor(home string) string {
	if abs, err := filepath.Abs(home); err == nil {
		home = abs
	}
	sum := sha256.Sum256([]byte(filepath.Clean(home)))
	return "h" + hex.EncodeToString(sum[:6])
}

// Options configure the runtime.
type Options struct {
	// Host is the engine's address (unix:///var/run/docker.sock,
	// tcp://...); empty uses DOCKER_HOST and the other DOCKER_*
	// variables, else the default socket.
	Host string
	// Scope is stamped on every container as choir.scope and limits what
	// List and RemoveOrphans see; choird uses one per installation.
	Scope string
	// Network is the network mode: "none" (the default: the egress
	// gateway is the only way out) or a bridge network's name. "host"
	// and container:<id> are refused.
	Network string
	// User is the numeric uid[:gid] the agent runs as; empty means
	// choird's own uid:gid, or DefaultUser when choird is root. Uid 0 is
	// refused unless the engine remaps user namespaces.
	User string
	// Init runs the engine's init process as PID 1, to reap orphans.
	Init bool
	// TmpSize and RunSize bound the /tmp and /run tmpfs (bytes).
	TmpSize, RunSize int64
	// ReconnectMin and ReconnectMax bound the event stream's reconnect
	// backoff (defaults 100 ms and 5 s).
	ReconnectMin, ReconnectMax time.Duration
	// Logger receives starts, event-stream breaks and the like.
	Logger *slog.Logger
	// LogDir receives each agent's output as <agent-id>.log, archived
	// when its container exits (output.go); empty discards it.
	LogDir string
	// Protected are directories no workspace may be, hold or sit inside
	// (choird's home first, see workspace.CheckPath): the
	// workspace's hand-over to the agent's uid refuses them, and the
	// system directories, whatever the configuration let through.
	Protected []string
}

// Runtime runs agents as containers.
type Runtime struct {
	cli      *client.Client
	host     string
	opts     Options
	log      *slog.Logger
	uid, gid int

	mu sync.Mutex
	// copies holds, per container id, a channel closed once its output
	// is copied and its log archived.
	copies map[string]chan struct{}
}

var _ runtime.Runtime = (*Runtime)(nil)

// New connects to the engine and checks that it answers.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.Scope == "" {
		opts.Scope = DefaultScope
	}
	if opts.Network == "" {
		opts.Network = DefaultNetwork
	}
	if n := container.NetworkMode(opts.Network); n.IsHost() || n.IsContainer() {
		return nil, fmt.Errorf("docker runtime: network %q is not allowed: agents never share the host's or another container's network namespace", opts.Network)
	}
	if opts.User == "" {
		opts.User = fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
		if os.Getuid() == 0 {
			opts.User = DefaultUser
		}
	}
	uid, gid, ok := numericUser(opts.User)
	if !ok || uid < 0 || gid < 0 {
		return nil, fmt.Errorf("docker runtime: agent user %q refused: give a numeric uid[:gid], so that no image's /etc/passwd decides who the agent is", opts.User)
	}
	if opts.TmpSize == 0 {
		opts.TmpSize = DefaultTmpSize
	}
	if opts.RunSize == 0 {
		opts.RunSize = DefaultRunSize
	}
	if opts.ReconnectMin == 0 {
		opts.ReconnectMin = 100 * time.Millisecond
	}
	if opts.ReconnectMax == 0 {
		opts.ReconnectMax = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	copts := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		copts = append(copts, client.WithHost(opts.Host))
	}
	cli, err := client.New(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker runtime: %w", err)
	}
	r := &Runtime{cli: cli, host: cli.DaemonHost(), opts: opts, log: log, uid: uid, gid: gid,
		copies: map[string]chan struct{}{}}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, r.engineErr("docker runtime", err)
	}
	if uid == 0 {
		remapped, err := r.usernsRemapped(ctx)
		if err != nil {
			cli.Close()
			return nil, err
		}
		if !remapped {
			cli.Close()
			return nil, fmt.Errorf("docker runtime: agent user %q refused: %w, and this engine does not remap user namespaces, so uid 0 in the container is root on the host; "+
				"leave the user unset (choird picks %s when it runs as root) or enable userns-remap in the engine", opts.User, ErrRootUser, DefaultUser)
		}
		log.Info("agents run as uid 0 inside their containers, remapped by the engine to an unprivileged host uid")
	}
	return r, nil
}

// usernsRemapped reports whether the engine runs containers in a remapped
// user namespace (dockerd --userns-remap).
func (r *Runtime) usernsRemapped(ctx context.Context) (bool, error) {
	info, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return false, r.engineErr("docker runtime: engine info", err)
	}
	for _, o := range info.Info.SecurityOptions {
		for _, kv := range strings.Split(o, ",") {
			if kv == "name=userns" {
				return true, nil
			}
		}
	}
	return false, nil
}

// Name returns "docker".
func (r *Runtime) Name() string { return Name }

// Host is the engine address in use.
func (r *Runtime) Host() string { return r.host }

// Client is the engine client, for callers that need more of the API
// (the agent build).
func (r *Runtime) Client() *client.Client { return r.cli }

// Close closes the engine connection; containers keep running.
func (r *Runtime) Close() error { return r.cli.Close() }

// EngineError reports an engine that cannot be reached, and what to do.
// It matches [runtime.ErrEngineUnreachable].
type EngineError struct {
	Host string
	Err  error
}

func (e *EngineError) Error() string {
	hint := "is dockerd running? Start it, or point DOCKER_HOST at a running engine"
	if errors.Is(e.Err, fs.ErrPermission) {
		hint = "permission denied: run choird as a user in the docker group (or root)"
	}
	return fmt.Sprintf("cannot reach the Docker engine at %s: %v; %s", e.Host, e.Err, hint)
}

func (e *EngineError) Unwrap() []error { return []error{runtime.ErrEngineUnreachable, e.Err} }

// engineErr turns a connection failure into an [*EngineError] with the
// innermost network error, and wraps anything else with op.
func (r *Runtime) engineErr(op string, err error) error {
	if client.IsErrConnectionFailed(err) {
		cause := err
		var nerr *net.OpError
		if errors.As(err, &nerr) {
			cause = nerr
		}
		return fmt.Errorf("%s: %w", op, &EngineError{Host: r.host, Err: cause})
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Start creates and starts the agent's container and returns it running.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	if err := spec.Validate(); err != nil {
		return runtime.Instance{}, err
	}
	if spec.Image == "" {
		return runtime.Instance{}, fmt.Errorf("%w for agent %s: no image (build one with `choirctl agent build %s`)", runtime.ErrInvalidSpec, spec.AgentID, spec.AgentID)
	}
	for k := range spec.Labels {
		if k == LabelScope {
			return runtime.Instance{}, fmt.Errorf("%w for agent %s: label %s: set by the runtime itself", runtime.ErrInvalidSpec, spec.AgentID, k)
		}
	}
	if err := r.handOverWorkspace(spec.Workspace); err != nil {
		return runtime.Instance{}, fmt.Errorf("start agent %s: %w", spec.AgentID, err)
	}
	for _, sock := range []string{spec.ControlSocket, spec.EgressSocket} {
		if err := r.GrantSocket(sock); err != nil {
			return runtime.Instance{}, fmt.Errorf("start agent %s: %w", spec.AgentID, err)
		}
	}
	if n := r.network(spec); !container.NetworkMode(n).IsNone() {
		r.log.WarnContext(ctx, "the agent's container has a network, so its tools have a route out beside the egress gateway",
			slog.String("agent_id", spec.AgentID), slog.String("network", n),
			slog.Bool("http_transport", spec.ControlAddr != ""))
	}
	if spec.ControlAddr != "" {
		if err := CheckControlAddr(spec.ControlAddr); err != nil {
			return runtime.Instance{}, fmt.Errorf("%w for agent %s: %w", runtime.ErrInvalidSpec, spec.AgentID, err)
		}
	}
	name := ContainerName(spec)
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:       name,
		Config:     r.containerConfig(spec),
		HostConfig: r.hostConfig(spec),
	})
	switch {
	case err == nil:
	case cerrdefs.IsNotFound(err):
		return runtime.Instance{}, fmt.Errorf("start agent %s: image %s is not in the local engine (images are never pulled): build it with `choirctl agent build %s`: %w",
			spec.AgentID, spec.Image, spec.AgentID, err)
	case cerrdefs.IsConflict(err):
		return runtime.Instance{}, fmt.Errorf("start agent %s: container %s already exists, left by an earlier start of this session: remove it (choird removes orphans at start-up): %w",
			spec.AgentID, name, err)
	default:
		return runtime.Instance{}, r.engineErr("start agent "+spec.AgentID+": create container", err)
	}
	for _, w := range created.Warnings {
		r.log.Warn("container created with a warning", slog.String("agent_id", spec.AgentID), slog.String("warning", w))
	}
	// Nothing half-started: a container that did not start, or that
	// cannot be reported as started, is removed.
	discard := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, rerr := r.cli.ContainerRemove(rctx, created.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil {
			r.log.Error("remove container that failed to start", slog.String("container", created.ID), slog.Any("error", rerr))
		}
	}
	if err := r.writeToken(ctx, created.ID, spec.LeaseToken); err != nil {
		discard()
		return runtime.Instance{}, fmt.Errorf("start agent %s: %w", spec.AgentID, err)
	}
	if err := r.attachOutput(ctx, created.ID, spec.AgentID); err != nil {
		discard()
		return runtime.Instance{}, fmt.Errorf("start agent %s: %w", spec.AgentID, err)
	}
	if _, err := r.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		discard()
		return runtime.Instance{}, r.engineErr("start agent "+spec.AgentID+": start container", err)
	}
	inst, err := r.Inspect(ctx, created.ID)
	if err != nil {
		discard()
		return runtime.Instance{}, fmt.Errorf("start agent %s: %w", spec.AgentID, err)
	}
	r.log.Info("agent container started", slog.String("container", shortID(created.ID)), slog.String("agent_id", spec.AgentID),
		slog.String("session_id", spec.SessionID), slog.String("image", spec.Image))
	return inst, nil
}

// writeToken hands the lease token to the created container's standard
// input: attached before the start, the stream holds the token, then ends,
// and the engine closes the container's stdin (StdinOnce) once the agent
// has read it.
func (r *Runtime) writeToken(ctx context.Context, id, token string) error {
	att, err := r.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: true})
	if err != nil {
		return r.engineErr("attach to hand over the lease token", err)
	}
	defer att.Close()
	if _, err := io.WriteString(att.Conn, token); err != nil {
		return fmt.Errorf("hand over the lease token: %w", err)
	}
	if err := att.CloseWrite(); err != nil {
		return fmt.Errorf("hand over the lease token: %w", err)
	}
	return nil
}

// handOverWorkspace makes the workspace the agent's when choird runs as
// root and the agent does not: at the first start (the workspace's root
// directory is not yet the agent's), everything in it is given to the
// agent's uid:gid, so that it can work there without being root. Later
// starts find the root directory the agent's and touch nothing.
func (r *Runtime) handOverWorkspace(ws string) error {
	if os.Geteuid() != 0 || r.uid == 0 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(ws, &st); err != nil {
		return fmt.Errorf("workspace %s: %w", ws, err)
	}
	if int(st.Uid) == r.uid {
		return nil
	}
	if err := r.checkHandOver(ws); err != nil {
		r.log.Error("workspace not given to the agent: refused", slog.String("workspace", ws), slog.Int("uid", r.uid),
			slog.String("reason", err.Error()))
		return err
	}
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, r.uid, r.gid)
	})
	if err != nil {
		return fmt.Errorf("give workspace %s to the agent's uid %d: %w", ws, r.uid, err)
	}
	r.log.Info("workspace given to the agent's unprivileged uid", slog.String("workspace", ws), slog.Int("uid", r.uid))
	return nil
}

// checkHandOver refuses to give the agent a workspace that is, holds or
// sits inside a system directory or a protected one, as written and as
// its links resolve: config validation refuses such a path, and this
// guards the recursive chown itself.
func (r *Runtime) checkHandOver(ws string) error {
	home, _ := os.UserHomeDir()
	paths := []string{filepath.Clean(ws)}
	if real, err := filepath.EvalSymlinks(ws); err == nil && real != paths[0] {
		paths = append(paths, real)
	}
	for _, p := range paths {
		if err := workspace.CheckPath(p, home, r.opts.Protected...); err != nil {
			return fmt.Errorf("%w: workspace %s is not given to the agent's uid %d: %w; fix workspaces in config.json",
				runtime.ErrInvalidSpec, ws, r.uid, err)
		}
	}
	return nil
}

// GrantSocket lets the agent's uid connect to choird's control socket
// when choird runs as root and the agent does not: the socket (mode 0600)
// is given to the agent's uid, root keeps its access. It is bind-mounted
// as a file, so the host directory it lives in stays closed to everyone
// else. Start calls it; whoever listens on the socket anew (a restarted
// choird whose agents run on) calls it too. An empty path is a no-op.
func (r *Runtime) GrantSocket(path string) error {
	if path == "" || os.Geteuid() != 0 || r.uid == 0 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if int(st.Uid) == r.uid {
		return nil
	}
	if err := os.Lchown(path, r.uid, r.gid); err != nil {
		return fmt.Errorf("give control socket %s to the agent's uid %d: %w", path, r.uid, err)
	}
	return nil
}

// ContainerName is choir-<agent>-<first 12 characters of the session id>.
func ContainerName(spec runtime.Spec) string {
	s := spec.SessionID
	if len(s) > 12 {
		s = s[:12]
	}
	return "choir-" + spec.AgentID + "-" + s
}

func (r *Runtime) labels(spec runtime.Spec) map[string]string {
	l := runtime.Labels(Name, spec)
	l[LabelScope] = r.opts.Scope
	return l
}

// CheckControlAddr refuses an HTTP listener address that no container can
// reach: one on loopback alone (the container's loopback is its own).
func CheckControlAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("choird's agent listener %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return fmt.Errorf("choird's agent listener %s is on loopback, which no container can reach: "+
			"start choird with --listen on the Docker bridge's gateway (for example --listen 172.17.0.1:%s) or on 0.0.0.0:%s", addr, port, port)
	}
	return nil
}

// hostAddress is what [runtime.ContainerHostName] resolves to in the
// container: the address choird listens on, or the engine's host-gateway
// when it listens on every address.
func hostAddress(addr string) string {
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || ip == nil || ip.IsUnspecified() {
		return "host-gateway"
	}
	return host
}

// reach is how the container's agent reaches choird.
func reach(spec runtime.Spec) runtime.Reach {
	var r runtime.Reach
	switch {
	case spec.ControlAddr != "":
		_, port, _ := net.SplitHostPort(spec.ControlAddr)
		r = runtime.Reach{Endpoint: "https://" + net.JoinHostPort(runtime.ContainerHostName, port), CACert: runtime.ContainerCACert}
	case spec.ControlSocket != "":
		r = runtime.Reach{Socket: runtime.ContainerSocket}
	}
	if spec.EgressSocket != "" {
		r.Egress = runtime.ContainerEgressSocket
	}
	return r
}

// network is the network mode of spec's container: the configured one,
// except that an agent reaching choird over HTTP needs a network to do
// so.
func (r *Runtime) network(spec runtime.Spec) string {
	if spec.ControlAddr != "" && container.NetworkMode(r.opts.Network).IsNone() {
		return httpNetwork
	}
	return r.opts.Network
}

func (r *Runtime) containerConfig(spec runtime.Spec) *container.Config {
	cfg := &container.Config{
		Image:      spec.Image,
		Env:        runtime.Env(Name, spec, runtime.ContainerWorkspace, "/tmp", reach(spec)),
		Labels:     r.labels(spec),
		WorkingDir: runtime.ContainerWorkspace,
		User:       r.opts.User,
		Hostname:   spec.AgentID,
		StopSignal: "SIGTERM",
		// The lease token arrives on stdin (see writeToken).
		OpenStdin:   true,
		StdinOnce:   true,
		AttachStdin: true,
	}
	if len(spec.Args) > 0 {
		cfg.Cmd = spec.Args
	}
	return cfg
}

// HostConfig is the security profile and resources of spec's container
// (see the package documentation).
func (r *Runtime) HostConfig(spec runtime.Spec) *container.HostConfig { return r.hostConfig(spec) }

func (r *Runtime) hostConfig(spec runtime.Spec) *container.HostConfig {
	l := spec.Limits.WithDefaults()
	pids := l.PIDs
	mounts := []mount.Mount{{
		Type:        mount.TypeBind,
		Source:      spec.Workspace,
		Target:      runtime.ContainerWorkspace,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	}}
	if spec.ControlSocket != "" {
		mounts = append(mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      spec.ControlSocket,
			Target:      runtime.ContainerSocket,
			ReadOnly:    true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
	}
	if spec.EgressSocket != "" {
		mounts = append(mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      spec.EgressSocket,
			Target:      runtime.ContainerEgressSocket,
			ReadOnly:    true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
	}
	var extraHosts []string
	if spec.ControlAddr != "" {
		mounts = append(mounts, mount.Mount{
			Type:        mount.TypeBind,
			Source:      spec.ControlCACert,
			Target:      runtime.ContainerCACert,
			ReadOnly:    true,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
		extraHosts = []string{runtime.ContainerHostName + ":" + hostAddress(spec.ControlAddr)}
	}
	run := fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,mode=0755", r.opts.RunSize)
	if uid, gid, ok := numericUser(r.opts.User); ok && uid != 0 {
		// A non-root agent must be able to use /run (ssh-agent socket).
		run += fmt.Sprintf(",uid=%d,gid=%d", uid, gid)
	}
	init := r.opts.Init
	return &container.HostConfig{
		Mounts:     mounts,
		ExtraHosts: extraHosts,
		Tmpfs: map[string]string{
			"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%d,mode=1777", r.opts.TmpSize),
			"/run": run,
		},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: true,
		Privileged:     false,
		NetworkMode:    container.NetworkMode(r.network(spec)),
		IpcMode:        container.IPCModePrivate,
		PidMode:        "",
		Init:           &init,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Resources: container.Resources{
			NanoCPUs:   int64(math.Round(l.CPUs * 1e9)),
			Memory:     l.MemoryBytes,
			MemorySwap: l.MemoryBytes,
			PidsLimit:  &pids,
		},
	}
}

func numericUser(u string) (uid, gid int, ok bool) {
	us, gs, _ := strings.Cut(u, ":")
	uid, err1 := strconv.Atoi(us)
	if gs == "" {
		gs = us
	}
	gid, err2 := strconv.Atoi(gs)
	return uid, gid, err1 == nil && err2 == nil
}

// Stop stops the container: SIGTERM, then SIGKILL after grace (the engine
// counts whole seconds, so grace is rounded up).
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	inst, err := r.Inspect(ctx, id)
	if err != nil {
		return err
	}
	if !inst.Running() {
		r.waitOutput(ctx, inst.ID)
		return nil
	}
	secs := int(math.Ceil(grace.Seconds()))
	if _, err := r.cli.ContainerStop(ctx, inst.ID, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("stop agent instance %s: %w", id, runtime.ErrNotFound)
		}
		return r.engineErr("stop agent instance "+id, err)
	}
	r.waitOutput(ctx, inst.ID)
	return nil
}

// Remove removes the container, killing it if it runs.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	inst, err := r.Inspect(ctx, id)
	if err != nil {
		return err
	}
	_, err = r.cli.ContainerRemove(ctx, inst.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	switch {
	case err == nil:
		r.waitOutput(ctx, inst.ID)
		return nil
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("remove agent instance %s: %w", id, runtime.ErrNotFound)
	case cerrdefs.IsConflict(err):
		// Someone else is removing it ("removal ... already in progress"):
		// done when it is gone.
		return r.waitGone(ctx, inst.ID)
	default:
		return r.engineErr("remove agent instance "+id, err)
	}
}

func (r *Runtime) waitGone(ctx context.Context, id string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("remove agent instance %s: wait for a concurrent removal: %w", id, ctx.Err())
		}
	}
}

// Inspect returns the container's state. A container without the managed
// label or of another scope is not found.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtime.Instance, error) {
	if id == "" {
		return runtime.Instance{}, fmt.Errorf("agent instance %q: %w", id, runtime.ErrNotFound)
	}
	res, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return runtime.Instance{}, fmt.Errorf("agent instance %s: %w", id, runtime.ErrNotFound)
	}
	if err != nil {
		return runtime.Instance{}, r.engineErr("inspect agent instance "+id, err)
	}
	c := res.Container
	if c.Config == nil || c.State == nil || !r.owns(c.Config.Labels) {
		return runtime.Instance{}, fmt.Errorf("agent instance %s: not a choir container of scope %s: %w", id, r.opts.Scope, runtime.ErrNotFound)
	}
	return instanceOf(c), nil
}

func (r *Runtime) owns(labels map[string]string) bool {
	return labels[runtime.LabelManaged] == "true" && labels[LabelScope] == r.opts.Scope
}

func instanceOf(c container.InspectResponse) runtime.Instance {
	st := c.State
	inst := runtime.Instance{
		ID: c.ID, Runtime: Name, Image: c.Config.Image, Labels: c.Config.Labels,
		AgentID: c.Config.Labels[runtime.LabelAgentID], SessionID: c.Config.Labels[runtime.LabelSessionID],
		OOMKilled: st.OOMKilled, ExitCode: -1,
		StartedAt: parseTime(st.StartedAt), FinishedAt: parseTime(st.FinishedAt),
	}
	switch st.Status {
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		inst.State, inst.Pid = runtime.StateRunning, st.Pid
	case container.StateCreated:
		inst.State = runtime.StateCreated
	case container.StateExited, container.StateDead, container.StateRemoving:
		inst.State, inst.ExitCode = runtime.StateExited, st.ExitCode
	default:
		inst.State = runtime.StateUnknown
	}
	return inst
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() <= 1 {
		return time.Time{}
	}
	return t
}

// List returns the managed containers of the runtime's scope, running or
// not.
func (r *Runtime) List(ctx context.Context) ([]runtime.Instance, error) {
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: r.filters()})
	if err != nil {
		return nil, r.engineErr("list agent containers", err)
	}
	out := make([]runtime.Instance, 0, len(res.Items))
	for _, s := range res.Items {
		inst, err := r.Inspect(ctx, s.ID)
		if errors.Is(err, runtime.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, inst)
	}
	return out, nil
}

func (r *Runtime) filters() client.Filters {
	return make(client.Filters).Add("label", runtime.LabelManaged+"=true", LabelScope+"="+r.opts.Scope)
}
