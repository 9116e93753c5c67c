// Package process is the runtime that starts choir-agent as a child
// process of choird, for development, demos and tests on machines without
// a Docker engine. It honours the same contract as the docker runtime (the
// environment of [runtime.Env], labels, stop and exit semantics) but
// isolates nothing and enforces no resource limits: the agent runs with
// choird's user and sees the host, and so does every command its tools
// run. [New] and every [Runtime.Start] log a warning saying so.
//
// # What a tool still cannot reach
//
// The lease token reaches the agent on a pipe on its standard input,
// never in its environment. choird makes itself non-dumpable when it
// makes this runtime (prctl PR_SET_DUMPABLE 0), as the agent does at its
// start, so that their /proc/<pid>/environ, mem and fd entries are closed
// to processes of the same user; the agent also drops CAP_SYS_PTRACE from
// its bounding set (with CAP_SYS_ADMIN and CAP_PERFMON, which open them as well), so that its tools cannot read them even as root. What
// same-user tools can read on the host (choird's secrets.json among it)
// stays readable: use the docker runtime for anything but development.
//
// # Process groups
//
// Each agent is the leader of its own process group, and the group is the
// instance: Stop sends SIGTERM to the whole group, then SIGKILL after the
// grace period, and when the leader exits the rest of the group is killed,
// as a container's death takes every process in it. Tool subprocesses that
// start their own process group escape this, as they would not in a
// container.
//
// # Orphans
//
// Instances outlive choird, as containers do. Each start writes a state
// file <StateDir>/<id>.json (pid, the process's start time in clock ticks
// so that a reused pid is never mistaken for the agent, ids and labels),
// removed by Remove. A restarted choird's [Runtime.List] reads these files,
// so [runtime.RemoveOrphans] finds and kills what a previous run left
// behind. Such adopted instances produce no [runtime.Exit]: only a child's
// death can be waited for.
//
// # Output
//
// The agent's stdout and stderr are appended to <LogDir>/<agent-id>.log,
// or discarded when LogDir is empty. They are files, not pipes, so that
// the agent does not die of SIGPIPE when choird restarts. When a child
// exits, its session is over: its log is archived to
// <LogDir>/archive/<agent-id>/<ts>.log.gz before Stop returns or the exit
// is reported, so the next instance of the agent starts a new file (spec
// 22.2).
package process

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/choirhq/choir/daemon/logfile"
	"github.com/choirhq/choir/daemon/runtime"
)

// Name is the runtime's name.
const Name = "process"

// IsolationWarning is logged when the runtime is made and at every agent
// start.
const IsolationWarning = "the process runtime isolates nothing: agents and the commands their tools run have choird's user " +
	"and see the host, its files and choird's secrets.json; use the docker runtime for anything but development"

// EgressWarning is logged at every agent start with an egress gateway: the
// tools are told to use it, and nothing makes them.
const EgressWarning = "the process runtime cannot enforce the egress gateway: the agent's tools get HTTP_PROXY, HTTPS_PROXY " +
	"and ALL_PROXY pointing at it, but a command that ignores them reaches the host's network directly; " +
	"use the docker runtime, whose containers have no other way out"

// DefaultBaseEnv are the variables of choird's own environment passed on
// to agents; nothing else is (choird's environment may hold credentials).
var DefaultBaseEnv = []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TMPDIR"}

// pollInterval is how often the liveness of an adopted process is checked.
const pollInterval = 10 * time.Millisecond

// StateDir is where choird whose home is home keeps the state files:
// <home>/run/process.
func StateDir(home string) string { return filepath.Join(home, "run", "process") }

// Options configure the runtime.
type Options struct {
	// Binary is the choir-agent executable (required).
	Binary string
	// StateDir holds one state file per instance, and each instance's
	// HOME (required; <home>/run/process under .choir.d).
	StateDir string
	// LogDir receives <agent-id>.log; empty discards the output.
	LogDir string
	// BaseEnv names the variables of choird's environment passed on to
	// agents (nil: DefaultBaseEnv).
	BaseEnv []string
	// Logger receives instance starts and exits (default: discard).
	Logger *slog.Logger
}

// Runtime runs agents as child processes.
type Runtime struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	procs  map[string]*proc // started by this Runtime
	subs   map[*subscriber]struct{}
	closed bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// record is an instance's state file.
type record struct {
	ID         string            `json:"id"`
	AgentID    string            `json:"agent_id"`
	SessionID  string            `json:"session_id"`
	Binary     string            `json:"binary"`
	Pid        int               `json:"pid"`
	StartTicks uint64            `json:"start_ticks"`
	StartedAt  time.Time         `json:"started_at"`
	Home       string            `json:"home"`
	Labels     map[string]string `json:"labels"`
	// Set when this runtime saw the process exit.
	Exited     bool      `json:"exited,omitempty"`
	ExitCode   int       `json:"exit_code,omitempty"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// proc is an instance this Runtime started, hence can wait for.
type proc struct {
	done chan struct{} // closed once reaped; rec is final then
	mu   sync.Mutex
	rec  record
}

func (p *proc) record() record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec
}

// New returns a process runtime. It checks the binary and creates
// StateDir.
func New(opts Options) (*Runtime, error) {
	if opts.Binary == "" {
		return nil, errors.New("process runtime: no choir-agent binary given")
	}
	bin, err := exec.LookPath(opts.Binary)
	if err != nil {
		return nil, fmt.Errorf("process runtime: choir-agent binary %s: %w (build it with `go build ./cmd/choir-agent`)", opts.Binary, err)
	}
	if opts.Binary, err = filepath.Abs(bin); err != nil {
		return nil, fmt.Errorf("process runtime: %w", err)
	}
	if opts.StateDir == "" {
		return nil, errors.New("process runtime: no state directory given")
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("process runtime: state directory: %w", err)
	}
	if opts.LogDir != "" {
		if err := os.MkdirAll(opts.LogDir, 0o700); err != nil {
			return nil, fmt.Errorf("process runtime: log directory: %w", err)
		}
	}
	if opts.BaseEnv == nil {
		opts.BaseEnv = DefaultBaseEnv
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Agents' tools run as choird's own user: keep choird's memory and
	// environment (its secrets) out of their reach through /proc.
	if err := runtime.SetNonDumpable(); err != nil {
		return nil, fmt.Errorf("process runtime: make choird non-dumpable: %w", err)
	}
	log.Warn(IsolationWarning, slog.Int("uid", os.Getuid()))
	return &Runtime{opts: opts, log: log, procs: map[string]*proc{}, subs: map[*subscriber]struct{}{}}, nil
}

// Name returns "process".
func (r *Runtime) Name() string { return Name }

// Start starts the binary with spec's arguments in its workspace.
func (r *Runtime) Start(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Instance{}, err
	}
	if err := spec.Validate(); err != nil {
		return runtime.Instance{}, err
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return runtime.Instance{}, errors.New("start agent: process runtime is closed")
	}

	id := newID()
	home := filepath.Join(r.opts.StateDir, id+".home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return runtime.Instance{}, fmt.Errorf("start agent %s: create home: %w", spec.AgentID, err)
	}
	out, err := r.output(spec.AgentID)
	if err != nil {
		os.RemoveAll(home)
		return runtime.Instance{}, fmt.Errorf("start agent %s: %w", spec.AgentID, err)
	}
	defer out.Close() // the child holds its own descriptor

	token, err := tokenPipe(spec.LeaseToken)
	if err != nil {
		os.RemoveAll(home)
		return runtime.Instance{}, fmt.Errorf("start agent %s: %w", spec.AgentID, err)
	}
	defer token.Close() // the child holds its own descriptor

	cmd := exec.Command(r.opts.Binary, spec.Args...)
	cmd.Dir = spec.Workspace
	reach := runtime.Reach{Socket: spec.ControlSocket}
	if spec.ControlAddr != "" {
		reach = runtime.Reach{Endpoint: runtime.HostEndpoint(spec.ControlAddr), CACert: spec.ControlCACert}
	}
	reach.Egress = spec.EgressSocket
	cmd.Env = append(r.baseEnv(), runtime.Env(Name, spec, spec.Workspace, home, reach)...)
	cmd.Stdin = token
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(home)
		return runtime.Instance{}, fmt.Errorf("start agent %s: %w", spec.AgentID, err)
	}
	pid := cmd.Process.Pid
	ticks, _, err := procStat(pid)
	rec := record{
		ID: id, AgentID: spec.AgentID, SessionID: spec.SessionID, Binary: r.opts.Binary,
		Pid: pid, StartTicks: ticks, StartedAt: time.Now().UTC(), Home: home,
		Labels: runtime.Labels(Name, spec),
	}
	if err == nil {
		err = r.writeRecord(rec)
	}
	if err != nil {
		// Nothing half-started: without a state file a restarted choird
		// could not find this process again.
		syscall.Kill(-pid, syscall.SIGKILL)
		cmd.Wait()
		os.RemoveAll(home)
		os.Remove(r.recordPath(id))
		return runtime.Instance{}, fmt.Errorf("start agent %s: record state: %w", spec.AgentID, err)
	}

	p := &proc{done: make(chan struct{}), rec: rec}
	r.mu.Lock()
	r.procs[id] = p
	r.mu.Unlock()
	go r.wait(cmd, p)
	r.log.Info("agent process started", slog.String("instance", id), slog.String("agent_id", spec.AgentID),
		slog.String("session_id", spec.SessionID), slog.Int("pid", pid))
	r.log.Warn(IsolationWarning, slog.String("agent_id", spec.AgentID), slog.Int("uid", os.Getuid()))
	if spec.EgressSocket != "" {
		r.log.Warn(EgressWarning, slog.String("agent_id", spec.AgentID), slog.String("egress_socket", spec.EgressSocket))
	}
	return instanceOf(rec, true), nil
}

// tokenPipe returns the read end of a pipe that holds token and then ends:
// the agent's standard input. The write end is closed before the child
// exists, so the child never holds it and reads end of file after the
// token; a token is far smaller than a pipe's buffer, so the write never
// blocks.
func tokenPipe(token string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("lease token pipe: %w", err)
	}
	_, err = w.WriteString(token)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("lease token pipe: %w", err)
	}
	return r, nil
}

func (r *Runtime) output(agentID string) (*os.File, error) {
	if r.opts.LogDir == "" {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	f, err := os.OpenFile(filepath.Join(r.opts.LogDir, agentID+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open agent log: %w", err)
	}
	return f, nil
}

// archiveLog archives the agent's log once its process group is dead.
func (r *Runtime) archiveLog(agentID string) {
	if r.opts.LogDir == "" {
		return
	}
	path, err := logfile.Archive(filepath.Join(r.opts.LogDir, agentID+".log"),
		filepath.Join(r.opts.LogDir, "archive", agentID), time.Now())
	if err != nil {
		r.log.Warn("agent log not archived", slog.String("agent_id", agentID), slog.String("error", err.Error()))
	} else if path != "" {
		r.log.Info("agent log archived", slog.String("agent_id", agentID), slog.String("archive", path))
	}
}

func (r *Runtime) baseEnv() []string {
	var env []string
	for _, k := range r.opts.BaseEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// wait reaps the child, kills what is left of its group, records the exit
// and reports it.
func (r *Runtime) wait(cmd *exec.Cmd, p *proc) {
	cmd.Wait()
	pid := cmd.Process.Pid
	// The group's other members keep the group id from being reused, so
	// this reaches only processes the agent started.
	syscall.Kill(-pid, syscall.SIGKILL)
	code := exitCode(cmd.ProcessState)
	now := time.Now().UTC()

	p.mu.Lock()
	p.rec.Exited, p.rec.ExitCode, p.rec.FinishedAt = true, code, now
	rec := p.rec
	p.mu.Unlock()
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	// After Close the state belongs to the next runtime on StateDir; a
	// removed instance's file stays removed.
	if _, err := os.Stat(r.recordPath(rec.ID)); err == nil && !closed {
		if err := r.writeRecord(rec); err != nil {
			r.log.Warn("record agent exit", slog.String("instance", rec.ID), slog.Any("error", err))
		}
	}
	r.archiveLog(rec.AgentID)
	close(p.done)
	r.log.Info("agent process exited", slog.String("instance", rec.ID), slog.String("agent_id", rec.AgentID),
		slog.Int("exit_code", code))
	r.broadcast(runtime.Exit{ID: rec.ID, AgentID: rec.AgentID, SessionID: rec.SessionID, ExitCode: code, At: now})
}

func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// Stop sends SIGTERM to the instance's process group, then SIGKILL after
// grace, and waits for the agent to exit.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	p, rec, err := r.lookup(id)
	if err != nil {
		return err
	}
	if !r.alive(p, rec) {
		return nil
	}
	syscall.Kill(-rec.Pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	if exited, err := r.waitExit(ctx, p, rec, t.C); err != nil || exited {
		return err
	}
	r.log.Warn("agent did not stop within the grace period; killing it", slog.String("instance", id), slog.Duration("grace", grace))
	return r.kill(ctx, p, rec)
}

// kill sends SIGKILL to the group and waits for the leader's death.
func (r *Runtime) kill(ctx context.Context, p *proc, rec record) error {
	syscall.Kill(-rec.Pid, syscall.SIGKILL)
	if _, err := r.waitExit(ctx, p, rec, nil); err != nil {
		return fmt.Errorf("kill agent instance %s: %w", rec.ID, err)
	}
	if p == nil {
		killStragglers(rec)
	}
	return nil
}

// waitExit waits for the instance to exit, for timeout or for ctx.
func (r *Runtime) waitExit(ctx context.Context, p *proc, rec record, timeout <-chan time.Time) (bool, error) {
	if p != nil {
		select {
		case <-p.done:
			return true, nil
		case <-timeout:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for r.alive(nil, rec) {
		select {
		case <-tick.C:
		case <-timeout:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

// Remove kills the instance if it runs and deletes its state and home.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	p, rec, err := r.lookup(id)
	if err != nil {
		return err
	}
	if r.alive(p, rec) {
		if err := r.kill(ctx, p, rec); err != nil {
			return err
		}
	} else if p == nil {
		killStragglers(rec)
	}
	if p != nil {
		select { // the waiter is about to finish; let it record the exit
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("remove agent instance %s: %w", id, ctx.Err())
		}
	}
	if err := os.Remove(r.recordPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove agent instance %s: %w", id, err)
	}
	if rec.Home != "" && filepath.Dir(rec.Home) == filepath.Clean(r.opts.StateDir) {
		if err := os.RemoveAll(rec.Home); err != nil {
			return fmt.Errorf("remove agent instance %s: home: %w", id, err)
		}
	}
	r.mu.Lock()
	delete(r.procs, id)
	r.mu.Unlock()
	return nil
}

// Inspect returns the instance's state.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtime.Instance, error) {
	p, rec, err := r.lookup(id)
	if err != nil {
		return runtime.Instance{}, err
	}
	return instanceOf(rec, r.alive(p, rec)), nil
}

// List returns every instance with a state file: this run's and those a
// previous run left behind.
func (r *Runtime) List(ctx context.Context) ([]runtime.Instance, error) {
	entries, err := os.ReadDir(r.opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("list agent processes: %w", err)
	}
	var out []runtime.Instance
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		p, rec, err := r.lookup(id)
		if errors.Is(err, runtime.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, instanceOf(rec, r.alive(p, rec)))
	}
	slices.SortFunc(out, func(a, b runtime.Instance) int { return a.StartedAt.Compare(b.StartedAt) })
	return out, nil
}

// lookup finds an instance: one this runtime started, else a state file.
func (r *Runtime) lookup(id string) (*proc, record, error) {
	if !validID(id) {
		return nil, record{}, fmt.Errorf("agent instance %q: %w", id, runtime.ErrNotFound)
	}
	r.mu.Lock()
	p := r.procs[id]
	r.mu.Unlock()
	if p != nil {
		return p, p.record(), nil
	}
	data, err := os.ReadFile(r.recordPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, record{}, fmt.Errorf("agent instance %s: %w", id, runtime.ErrNotFound)
	}
	if err != nil {
		return nil, record{}, fmt.Errorf("read agent instance %s: %w", id, err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil || rec.ID != id || rec.Pid <= 0 {
		return nil, record{}, fmt.Errorf("read agent instance %s: corrupt state file %s (remove it, and kill the process by hand if it runs)", id, r.recordPath(id))
	}
	return nil, rec, nil
}

// alive reports whether the instance's leader runs: for a child, until it
// is reaped; for an adopted process, while a process with its pid and
// start time exists and is not a zombie.
func (r *Runtime) alive(p *proc, rec record) bool {
	if p != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	if rec.Exited {
		return false
	}
	ticks, state, err := procStat(rec.Pid)
	return err == nil && ticks == rec.StartTicks && state != 'Z' && state != 'X'
}

// killStragglers kills what is left of an adopted instance's process
// group: processes in the group started no earlier than its leader.
func killStragglers(rec record) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := readStat(pid)
		if err == nil && f.pgrp == rec.Pid && f.start >= rec.StartTicks {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

type statFields struct {
	state byte
	pgrp  int
	start uint64
}

// readStat parses /proc/<pid>/stat (proc(5)); the command name may hold
// spaces and parentheses, so fields are counted from the last ')'.
func readStat(pid int) (statFields, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return statFields{}, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return statFields{}, errors.New("malformed stat")
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state), f[2] field 5 (pgrp), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return statFields{}, errors.New("malformed stat")
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return statFields{}, errors.New("malformed stat")
	}
	return statFields{state: f[0][0], pgrp: pgrp, start: start}, nil
}

func procStat(pid int) (uint64, byte, error) {
	f, err := readStat(pid)
	return f.start, f.state, err
}

func instanceOf(rec record, alive bool) runtime.Instance {
	inst := runtime.Instance{
		ID: rec.ID, Runtime: Name, AgentID: rec.AgentID, SessionID: rec.SessionID,
		Image: rec.Binary, StartedAt: rec.StartedAt, Labels: rec.Labels, ExitCode: -1,
	}
	switch {
	case alive:
		inst.State, inst.Pid = runtime.StateRunning, rec.Pid
	case rec.Exited:
		inst.State, inst.ExitCode, inst.FinishedAt = runtime.StateExited, rec.ExitCode, rec.FinishedAt
	default:
		inst.State = runtime.StateUnknown
	}
	return inst
}

func (r *Runtime) recordPath(id string) string { return filepath.Join(r.opts.StateDir, id+".json") }

// writeRecord writes the state file atomically.
func (r *Runtime) writeRecord(rec record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := r.recordPath(rec.ID) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.recordPath(rec.ID))
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "p" + hex.EncodeToString(b)
}

func validID(id string) bool {
	if len(id) != 17 || id[0] != 'p' {
		return false
	}
	_, err := hex.DecodeString(id[1:])
	return err == nil
}

// subscriber is one Events channel.
type subscriber struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // held while sending, so that close never races a send
	ch     chan runtime.Exit
	closed bool
}

func (s *subscriber) send(e runtime.Exit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.ch <- e:
	case <-s.ctx.Done():
	}
}

func (s *subscriber) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
}

// Events reports the exits of the children this runtime started. A slow
// reader delays the others: read promptly.
func (r *Runtime) Events(ctx context.Context) (<-chan runtime.Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errors.New("watch agent exits: process runtime is closed")
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &subscriber{ctx: sctx, cancel: cancel, ch: make(chan runtime.Exit, 16)}
	r.subs[s] = struct{}{}
	go func() {
		<-sctx.Done()
		r.mu.Lock()
		delete(r.subs, s)
		r.mu.Unlock()
		s.close()
	}()
	return s.ch, nil
}

func (r *Runtime) broadcast(e runtime.Exit) {
	r.mu.Lock()
	subs := make([]*subscriber, 0, len(r.subs))
	for s := range r.subs {
		subs = append(subs, s)
	}
	r.mu.Unlock()
	for _, s := range subs {
		s.send(e)
	}
}

// Close ends every Events channel. Running agents keep running; a new
// Runtime on the same StateDir finds them.
func (r *Runtime) Close() error {
	r.mu.Lock()
	r.closed = true
	subs := make([]*subscriber, 0, len(r.subs))
	for s := range r.subs {
		subs = append(subs, s)
	}
	r.mu.Unlock()
	for _, s := range subs {
		s.cancel()
	}
	return nil
}
