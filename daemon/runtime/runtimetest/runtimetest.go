// Package runtimetest holds what the tests of the runtimes (and of the
// agent build) share: a stand-in agent binary, a control-socket listener
// that collects its hellos, Docker helpers that build FROM-scratch images
// without a registry, and a conformance suite that both runtimes pass.
//
// Docker-needing tests call [RequireDocker]: without a reachable engine
// they skip, unless CHOIR_REQUIRE_DOCKER=1 (set by CI) makes them fail.
package runtimetest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/choirhq/choir/daemon/runtime/internal/agentproto"
)

// Hello is the stand-in agent's report of its environment.
type Hello = agentproto.Hello

// EnvRequireDocker set to 1 turns a missing engine into a test failure.
const EnvRequireDocker = "CHOIR_REQUIRE_DOCKER"

// LabelTest marks every image and container the tests create.
const LabelTest = "choir.test"

// RandomHex returns n random bytes, hex-encoded.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// RequireDocker returns a client of the local engine (DOCKER_HOST or the
// default socket), closed when the test ends.
func RequireDocker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
		if err != nil {
			cli.Close()
		}
	}
	if err != nil {
		if os.Getenv(EnvRequireDocker) == "1" {
			t.Fatalf("%s=1 but the Docker engine is not reachable: %v", EnvRequireDocker, err)
		}
		t.Skipf("no Docker engine (%v); set %s=1 to make this a failure", err, EnvRequireDocker)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// BuildStatic builds the Go package pkg (an import path, or a directory
// relative to the test's package) as a static binary and returns its path.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// BuildAgent builds the stand-in agent.
func BuildAgent(t testing.TB) string {
	return BuildStatic(t, "github.com/choirhq/choir/daemon/runtime/internal/testagent")
}

// File is one file of an image made by [ImportImage].
type File struct {
	// Source is a host file to copy, or empty to use Data.
	Source string
	Data   []byte
	Mode   int64
	// Link makes the entry a symbolic link to Link.
	Link string
}

// TarFiles packs files (path in the archive -> file) into a tar stream.
func TarFiles(t testing.TB, files map[string]File) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for name, f := range files {
		for d := filepath.Dir(name); d != "." && d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
				t.Fatal(err)
			}
		}
		if f.Link != "" {
			if err := tw.WriteHeader(&tar.Header{Name: name, Linkname: f.Link, Mode: 0o777, Typeflag: tar.TypeSymlink}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data := f.Data
		if f.Source != "" {
			var err error
			if data, err = os.ReadFile(f.Source); err != nil {
				t.Fatal(err)
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// ImportImage makes a FROM-scratch image of files with `docker import`
// (no builder, no registry), with the given Dockerfile changes
// (ENTRYPOINT, LABEL, ...) and the test label, tagged repo:<random>. It is
// removed when the test ends.
func ImportImage(t testing.TB, cli *client.Client, repo string, files map[string]File, changes ...string) string {
	t.Helper()
	ref := repo + ":" + RandomHex(4)
	changes = append(changes, "LABEL "+LabelTest+"=1")
	res, err := cli.ImageImport(context.Background(), client.ImageImportSource{Source: TarFiles(t, files), SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: changes})
	if err != nil {
		t.Fatalf("import image %s: %v", ref, err)
	}
	res.Close()
	t.Cleanup(func() { RemoveImage(t, cli, ref) })
	return ref
}

// RemoveImage removes an image, reporting a failure other than its
// absence.
func RemoveImage(t testing.TB, cli *client.Client, ref string) {
	_, err := cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !isNotFound(err) {
		t.Errorf("remove image %s: %v", ref, err)
	}
}

// isNotFound reports an image the engine no longer has. "unrecognized
// image ID" is how it answers when the tag still resolved but another
// removal (a parallel test's, pruning shared parents) took the image
// between the two steps.
func isNotFound(err error) bool {
	var nf interface{ NotFound() }
	return errors.As(err, &nf) || (err != nil && (bytes.Contains([]byte(err.Error()), []byte("No such image")) ||
		bytes.Contains([]byte(err.Error()), []byte("unrecognized image ID"))))
}

// BusyboxImage makes a FROM-scratch image of Debian's static busybox
// (apt-get install busybox-static) with /bin/sh and the common applets,
// to serve as an OS image for RUN steps. It skips the test when busybox
// is not installed, unless CHOIR_REQUIRE_DOCKER=1.
func BusyboxImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err == nil {
		if out, _ := exec.Command(bb, "--help").CombinedOutput(); !bytes.Contains(out, []byte("BusyBox")) {
			err = fmt.Errorf("%s is not busybox", bb)
		}
	}
	if err != nil {
		msg := fmt.Sprintf("no static busybox (%v): apt-get install busybox-static", err)
		if os.Getenv(EnvRequireDocker) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	files := map[string]File{"bin/busybox": {Source: bb, Mode: 0o755}, "tmp/.keep": {}}
	for _, applet := range []string{"sh", "echo", "printf", "mkdir", "chmod", "cat", "ls", "test", "false", "true", "sleep", "env", "rm", "cp"} {
		files["bin/"+applet] = File{Link: "busybox"}
	}
	return ImportImage(t, cli, "choir-test-os", files, `CMD ["/bin/sh"]`, "ENV PATH=/bin")
}

// AgentImage builds the stand-in agent into a FROM-scratch image whose
// entrypoint it is.
func AgentImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	bin := BuildAgent(t)
	return ImportImage(t, cli, "choir-test-agent", map[string]File{
		"choir-agent": {Source: bin, Mode: 0o755},
	}, `ENTRYPOINT ["/choir-agent"]`)
}

// Listener is a control socket that collects the stand-in agents' hellos,
// by session id.
type Listener struct {
	// Path is the socket's path.
	Path string

	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	slots map[string]chan *Conn
	conns []net.Conn
}

// NewListener listens on a fresh socket in a short temporary directory (a
// socket path may not exceed 107 bytes) until the test ends.
func NewListener(t testing.TB) *Listener {
	t.Helper()
	dir, err := os.MkdirTemp("", "crt")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{Path: filepath.Join(dir, "choir.sock"), slots: map[string]chan *Conn{}}
	if l.ln, err = net.Listen("unix", l.Path); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	l.wg.Add(1)
	go l.accept()
	t.Cleanup(func() {
		l.ln.Close()
		l.mu.Lock()
		for _, c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
		os.RemoveAll(dir)
	})
	return l
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			conn := &Conn{c: c, r: bufio.NewReader(c)}
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if err := conn.read(&conn.Hello); err != nil {
				c.Close()
				return
			}
			c.SetReadDeadline(time.Time{})
			select {
			case l.slot(conn.Hello.SessionID) <- conn:
			default: // a second hello for the session: nobody waits for it
				c.Close()
			}
		}()
	}
}

func (l *Listener) slot(session string) chan *Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.slots[session]
	if !ok {
		ch = make(chan *Conn, 1)
		l.slots[session] = ch
	}
	return ch
}

// Wait returns the connection of the agent of the given session once it
// has said hello.
func (l *Listener) Wait(ctx context.Context, session string) (*Conn, error) {
	select {
	case c := <-l.slot(session):
		return c, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the hello of session %s: %w", session, ctx.Err())
	}
}

// Conn is one stand-in agent's connection.
type Conn struct {
	Hello Hello
	c     net.Conn
	r     *bufio.Reader
}

func (c *Conn) read(v any) error {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return err
	}
	return json.Unmarshal(line, v)
}

// Send sends a command line (exit N, hang, spawn, oom).
func (c *Conn) Send(cmd string) error {
	_, err := c.c.Write([]byte(cmd + "\n"))
	return err
}

// Reply reads the agent's next JSON line into v.
func (c *Conn) Reply(v any) error {
	c.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer c.c.SetReadDeadline(time.Time{})
	return c.read(v)
}

// ReadGzip returns the content of a gzip file, failing the test on a
// missing or corrupt one.
func ReadGzip(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}
