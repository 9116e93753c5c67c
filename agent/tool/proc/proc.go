package proc

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/choirhq/choir/agent/sandbox"
)

// waitDelay is how long a killed process group gets to close its pipes
// before Wait gives up on them (a grandchild that ignored the kill, or one
// that escaped the group, must not hang the call).
const waitDelay = 2 * time.Second

// passEnv are the variables of the agent's environment that commands and
// external tools inherit. Secrets are never in the environment (spec
// 14.1), but the agent's environment is still not theirs to see whole.
var passEnv = []string{"PATH", "HOME", "LANG", "LC_ALL", "TZ", "USER", "SSH_AUTH_SOCK"}

// proxyEnv points children at the agent's local egress proxy, once the
// agent has one (SetProxyEnv).
var proxyEnv atomic.Pointer[[]string]

// callProxy, when set, gives one call's children a proxy of their own
// that announces the lane's untrusted sources (SetCallProxy).
var callProxy atomic.Pointer[func(ctx context.Context) ([]string, func())]

// SetCallProxy sets f, which returns the proxy variables for the children
// of one call made in ctx and a release to run once the call is done, or
// nil variables to keep the agent-wide proxy.
func SetCallProxy(f func(ctx context.Context) ([]string, func())) { callProxy.Store(&f) }

// CallProxyEnv returns the proxy variables of one call's children (to pass
// as extras to ChildEnv, where they override the agent-wide ones) and the
// release to defer.
func CallProxyEnv(ctx context.Context) ([]string, func()) {
	if f := callProxy.Load(); f != nil {
		if env, release := (*f)(ctx); env != nil {
			return env, release
		}
	}
	return nil, func() {}
}

// SetProxyEnv sets the variables that point every child at the agent's
// local egress proxy (netout.ProxyEnv); they override any inherited
// spelling of the same names.
func SetProxyEnv(env []string) { proxyEnv.Store(&env) }

// ChildEnv builds a child's environment from the pass list, the proxy
// variables and extras.
func ChildEnv(ws string, extra ...string) []string {
	env := make([]string, 0, len(passEnv)+8+len(extra))
	for _, k := range passEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if _, ok := os.LookupEnv("PATH"); !ok {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
	}
	env = append(env, "CHOIR_WORKSPACE="+ws)
	if p := proxyEnv.Load(); p != nil {
		env = append(env, *p...)
	}
	return append(env, extra...)
}

var unconfinedOnce sync.Once

// StartConfined starts cmd with start, which puts it in a Landlock domain
// of its own ([sandbox.StartConfined]), so that it
// cannot read the /proc entries of the agent's other processes (an
// external tool's secrets on fd 3 above all). On a kernel without Landlock
// it starts cmd unconfined, and logs once that tool processes are not
// kept apart.
func StartConfined(cmd *exec.Cmd, start func(*exec.Cmd) error) error {
	err := start(cmd)
	if errors.Is(err, sandbox.ErrNoLandlock) {
		unconfinedOnce.Do(func() {
			slog.Warn("tool processes start unconfined: a command of choir.exec may read the /proc entries "+
				"(descriptors, memory) of an external tool running beside it; run the agent on Linux 5.13 or "+
				"later with Landlock enabled", slog.String("error", err.Error()))
		})
		return cmd.Start()
	}
	return err
}

// SetProcessGroup makes cmd the leader of a new process group and makes
// cancellation kill the whole group, so a command's children die with it.
func SetProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = waitDelay
}

// ExitStatus describes how a finished command ended: its exit code, or -1
// and the signal that killed it.
func ExitStatus(ps *os.ProcessState) (code int, signal string) {
	if ps == nil {
		return -1, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, ws.Signal().String()
	}
	return ps.ExitCode(), ""
}

// HeadTail keeps the first and last bytes written to it, up to a total of
// limit, and counts everything.
type HeadTail struct {
	limit int
	head  []byte
	tail  []byte // ring buffer once full
	start int    // index of the oldest byte in tail when full
	total int64
}

func NewHeadTail(limit int) *HeadTail { return &HeadTail{limit: limit} }

func (h *HeadTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += int64(n)
	headMax := h.limit / 2
	if len(h.head) < headMax {
		k := min(headMax-len(h.head), len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	tailMax := h.limit - headMax
	for len(p) > 0 {
		if len(h.tail) < tailMax {
			k := min(tailMax-len(h.tail), len(p))
			h.tail = append(h.tail, p[:k]...)
			p = p[k:]
			continue
		}
		if len(p) >= tailMax {
			copy(h.tail, p[len(p)-tailMax:])
			h.start = 0
			break
		}
		k := copy(h.tail[h.start:], p)
		p = p[k:]
		h.start = (h.start + k) % tailMax
		if len(p) > 0 {
			k = copy(h.tail, p)
			p = p[k:]
			h.start = k
		}
	}
	return n, nil
}

// kept returns the bytes kept, and how many were dropped in the middle.
func (h *HeadTail) kept() (head, tail []byte, dropped int64) {
	tail = append(append([]byte(nil), h.tail[h.start:]...), h.tail[:h.start]...)
	return h.head, tail, h.total - int64(len(h.head)) - int64(len(tail))
}

// Text renders the kept output, marking a gap.
func (h *HeadTail) Text() string {
	head, tail, dropped := h.kept()
	if dropped == 0 {
		return string(head) + string(tail)
	}
	return string(head) + "\n[... " + strconv.FormatInt(dropped, 10) + " bytes not kept ...]\n" + string(tail)
}

// Capped keeps up to Limit bytes and notes an overflow.
type Capped struct {
	Limit    int
	Buf      []byte
	Overflow bool
}

func (c *Capped) Write(p []byte) (int, error) {
	room := c.Limit - len(c.Buf)
	if len(p) > room {
		c.Overflow = true
	}
	c.Buf = append(c.Buf, p[:min(room, len(p))]...)
	return len(p), nil
}
