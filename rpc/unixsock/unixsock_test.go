package unixsock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/rpc/unixsock"
)

// holderEnv makes the test binary a helper process that listens on the
// socket it names, prints "ready" and waits for stdin to close.
const holderEnv = "UNIXSOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if path := os.Getenv(holderEnv); path != "" {
		ln, err := unixsock.Listen(context.Background(), path)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		bufio.NewReader(os.Stdin).ReadString('\n')
		ln.Close()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func sockPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "us")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "socks", "test.sock")
}

func listen(t *testing.T, path string) net.Listener {
	t.Helper()
	ln, err := unixsock.Listen(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestListen(t *testing.T) {
	t.Parallel()

	t.Run("SocketIsPrivate", func(t *testing.T) {
		t.Parallel()
		path := sockPath(t)
		ln := listen(t, path)
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket mode %s, want socket 0600", fi.Mode())
		}
		di, err := os.Stat(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if di.Mode().Perm() != 0o700 {
			t.Errorf("directory mode %s, want 0700", di.Mode().Perm())
		}
		if ln.Addr().String() != path {
			t.Errorf("Addr %s, want %s", ln.Addr(), path)
		}
		entries, _ := os.ReadDir(filepath.Dir(path))
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".tmp") {
				t.Errorf("temporary %s left behind", e.Name())
			}
		}
	})

	t.Run("AcceptsConnections", func(t *testing.T) {
		t.Parallel()
		path := sockPath(t)
		ln := listen(t, path)
		go func() {
			c, err := net.Dial("unix", path)
			if err == nil {
				c.Write([]byte("hi"))
				c.Close()
			}
		}()
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cred, err := unixsock.PeerCred(c)
		if err != nil {
			t.Fatal(err)
		}
		if int(cred.PID) != os.Getpid() || int(cred.UID) != os.Getuid() || int(cred.GID) != os.Getgid() {
			t.Errorf("peer %+v, want this process", cred)
		}
	})

	t.Run("StaleSocketIsReplaced", func(t *testing.T) {
		t.Parallel()
		path := sockPath(t)
		os.MkdirAll(filepath.Dir(path), 0o700)
		// A socket left by a process that died: the file stays, nobody
		// listens. It is bound and never listened on, so no process, not
		// even a child forked meanwhile holding a copy of the descriptor,
		// can answer on it: a connect is refused, as on a dead one.
		fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
			syscall.Close(fd)
			t.Fatal(err)
		}
		syscall.Close(fd)
		ln := listen(t, path)
		go func() {
			if c, err := net.Dial("unix", path); err == nil {
				c.Close()
			}
		}()
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})

	t.Run("LiveSocketInThisProcessIsRefused", func(t *testing.T) {
		t.Parallel()
		path := sockPath(t)
		listen(t, path)
		_, err := unixsock.Listen(t.Context(), path)
		var ie *unixsock.InUseError
		if !errors.Is(err, unixsock.ErrInUse) || !errors.As(err, &ie) || ie.PID != os.Getpid() {
			t.Fatalf("got %v, want in use by pid %d", err, os.Getpid())
		}
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("the live socket was removed: %v", err)
		}
	})

	t.Run("LiveSocketOfAnotherProcessIsRefusedNamingIt", func(t *testing.T) {
		t.Parallel()
		path := sockPath(t)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), holderEnv+"="+path)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			stdin.Close()
			cmd.Wait()
		})
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "ready\n" {
			t.Fatalf("helper said %q", line)
		}
		_, err = unixsock.Listen(t.Context(), path)
		var ie *unixsock.InUseError
		if !errors.As(err, &ie) || ie.PID != cmd.Process.Pid {
			t.Fatalf("got %v, want in use by pid %d", err, cmd.Process.Pid)
		}
		want := fmt.Sprintf("socket %s is in use by %s (pid %d)", path, ie.Command, cmd.Process.Pid)
		if ie.Command == "" || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("message %q, want it to start %q", err, want)
		}
		// Once the holder exits, the socket is ours.
		stdin.Close()
		cmd.Wait()
		listen(t, path)
	})

	t.Run("NonSocketIsNotReplaced", func(t *testing.T) {
		t.Parallel()
		path := sockPath(t)
		os.MkdirAll(filepath.Dir(path), 0o700)
		if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := unixsock.Listen(t.Context(), path); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("got %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "precious" {
			t.Error("the file was replaced")
		}
	})

	t.Run("CloseRemovesTheSocketAndFreesThePath", func(t *testing.T) {
		t.Parallel()
		path := sockPath(t)
		ln, err := unixsock.Listen(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("socket still there: %v", err)
		}
		listen(t, path)
	})

	t.Run("OverlongPathIsRefused", func(t *testing.T) {
		t.Parallel()
		path := "/tmp/" + strings.Repeat("d", 120) + "/s.sock"
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := unixsock.Listen(ctx, path); err == nil || !strings.Contains(err.Error(), "over the limit") {
			t.Errorf("got %v", err)
		}
	})
}
