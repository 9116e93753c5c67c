// Package unixsock listens on Unix sockets the way Choir's daemons need:
// the socket file is created with mode 0600 in a 0700 directory, a stale
// socket left by a dead process is replaced, a live one never is (the error
// names the process holding it), and the peer's credentials are read with
// SO_PEERCRED. choird's agent socket (rpc) and admin socket (rpc/admin)
// both use it.
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrInUse is matched by the error Listen returns when another process
// serves the socket.
var ErrInUse = errors.New("socket in use")

// InUseError says which process holds a socket.
type InUseError struct {
	Path string
	// PID is the holder's process ID, 0 if it could not be found.
	PID int
	// Command is the holder's command name from /proc, if readable.
	Command string
}

func (e *InUseError) Error() string {
	holder := "another process"
	switch {
	case e.PID > 0 && e.Command != "":
		holder = fmt.Sprintf("%s (pid %d)", e.Command, e.PID)
	case e.PID > 0:
		holder = fmt.Sprintf("pid %d", e.PID)
	}
	return fmt.Sprintf("socket %s is in use by %s; stop it first, or choose another socket path", e.Path, holder)
}

// Is matches ErrInUse.
func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// maxPathLen is the room in sockaddr_un.sun_path, less the final NUL.
const maxPathLen = 107

// Listen listens on the Unix socket at path. It creates the parent
// directory (mode 0700) if needed, and the socket with mode 0600, which
// never appears with wider permissions: the socket is bound under a
// temporary name, restricted, then renamed into place.
//
// A lock file beside the socket (path + ".lock", held with flock) serialises
// two daemons starting at once. A socket file nobody listens on is removed
// and replaced; one that accepts connections is left alone and Listen
// returns an *InUseError naming the process that holds it. Closing the
// listener removes the socket and releases the lock.
func Listen(ctx context.Context, path string) (net.Listener, error) {
	path = filepath.Clean(path)
	if len(path) > maxPathLen {
		return nil, fmt.Errorf("listen on %s: path is %d bytes, over the limit of %d for a Unix socket", path, len(path), maxPathLen)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	lock, err := lockFile(ctx, path+".lock")
	if err != nil {
		return nil, err
	}
	ln, err := listenLocked(ctx, path)
	if err != nil {
		lock.Close()
		return nil, err
	}
	return &listener{UnixListener: ln, path: path, lock: lock}, nil
}

func listenLocked(ctx context.Context, path string) (*net.UnixListener, error) {
	if err := removeStale(ctx, path); err != nil {
		return nil, err
	}
	// Bind under a temporary name in the same directory, so that rename
	// is atomic and the socket is never reachable before chmod.
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	direct := len(tmp) > maxPathLen
	bindAt := tmp
	if direct {
		// No room for the temporary name. The 0700 directory still keeps
		// other users out during the moment before chmod.
		bindAt = path
	}
	_ = os.Remove(bindAt) // A leftover of a crashed start of ours.
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "unix", bindAt)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln := l.(*net.UnixListener)
	ln.SetUnlinkOnClose(false)
	fail := func(err error) (*net.UnixListener, error) {
		ln.Close()
		os.Remove(bindAt)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(bindAt, 0o600); err != nil {
		return fail(err)
	}
	if !direct {
		if err := os.Rename(tmp, path); err != nil {
			return fail(err)
		}
	}
	return ln, nil
}

// removeStale removes the socket at path if nobody listens on it, and
// returns an *InUseError if somebody does.
func removeStale(ctx context.Context, path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen on %s: the path exists and is not a socket; refusing to replace it", path)
	}
	holder, err := probe(ctx, path)
	if holder != nil {
		return holder
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("listen on %s: probe existing socket: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listen on %s: remove stale socket: %w", path, err)
	}
	return nil
}

// lockFile takes an exclusive flock on path, creating it. flock locks
// belong to the open file, so a second Listen in the same process is
// refused too. When the lock is held, the error names the holder if it is
// already listening on the socket.
func lockFile(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	// A lock just released can stay held for a moment by a child process
	// forked, but not yet exec'd, while the lock file was open (fork copies
	// every descriptor, close-on-exec ones included, until the exec). So a
	// busy lock with nobody listening is tried again briefly before Listen
	// calls the path in use.
	for deadline := time.Now().Add(time.Second); errors.Is(err, syscall.EWOULDBLOCK) && time.Now().Before(deadline); {
		if holder, _ := probe(ctx, strings.TrimSuffix(path, ".lock")); holder != nil {
			break
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err == nil {
		return f, nil
	}
	f.Close()
	if errors.Is(err, syscall.EWOULDBLOCK) {
		e := &InUseError{Path: strings.TrimSuffix(path, ".lock")}
		if holder, _ := probe(ctx, e.Path); holder != nil {
			e = holder
		}
		return nil, e
	}
	return nil, fmt.Errorf("lock %s: %w", path, err)
}

// probe connects to the socket at path and, if something accepts, returns
// an *InUseError naming it; otherwise the dial error.
func probe(ctx context.Context, path string) (*InUseError, error) {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	e := &InUseError{Path: path}
	if cred, err := PeerCred(conn); err == nil {
		e.PID = int(cred.PID)
		e.Command = command(e.PID)
	}
	return e, nil
}

// command returns the command name of a process, "" if unknown.
func command(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// listener removes its socket and releases its lock on Close.
type listener struct {
	*net.UnixListener
	path      string
	lock      *os.File
	closeOnce sync.Once
	closeErr  error
}

// Addr returns the socket's path, not the temporary name it was bound to.
func (l *listener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Close stops listening, removes the socket and releases the lock. The
// socket is removed before the lock is released, so a successor never
// finds and removes it as stale while it is ours.
func (l *listener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = l.UnixListener.Close()
		if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) && l.closeErr == nil {
			l.closeErr = err
		}
		l.lock.Close()
	})
	return l.closeErr
}

// Cred is a peer's credentials, as the kernel recorded them when it
// connected (or, for a probed listener, when it listened).
type Cred struct {
	PID int32
	UID uint32
	GID uint32
}

// PeerCred returns the credentials of the process at the other end of a
// Unix-socket connection.
func PeerCred(conn net.Conn) (Cred, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return Cred{}, fmt.Errorf("peer credentials: %T is not a Unix connection", conn)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *syscall.Ucred
	var serr error
	err = raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	return Cred{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid}, nil
}
