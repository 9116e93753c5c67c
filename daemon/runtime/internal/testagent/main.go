// Command testagent stands in for choir-agent in the runtime tests. It
// reads the runtime's environment contract and its lease token from
// standard input, runs the sandbox self-check
// under docker, probes what it may write, then dials the control socket
// and sends one JSON hello line. It then obeys line commands from the
// socket:
//
//	exit N   exit with status N
//	hang     ignore SIGTERM from now on
//	spawn    start a child process (in the same process group) and
//	         answer {"child": pid}
//	oom      allocate memory until the kernel kills it
//
// SIGTERM makes it exit 0 (unless hang). Run as "testagent child" it only
// sleeps.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/choirhq/choir/agent/sandbox"
	"github.com/choirhq/choir/daemon/runtime/internal/agentproto"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		for {
			time.Sleep(time.Hour)
		}
	}
	var hang atomic.Bool
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for range sigs {
			if !hang.Load() {
				os.Exit(0)
			}
		}
	}()

	h := agentproto.Hello{
		AgentID:   os.Getenv("CHOIR_AGENT_ID"),
		SessionID: os.Getenv("CHOIR_SESSION_ID"),
		Uid:       os.Getuid(),
		Gid:       os.Getgid(),
		Runtime:   os.Getenv("CHOIR_RUNTIME"),
		Workspace: os.Getenv("CHOIR_WORKSPACE"),
		Socket:    os.Getenv("CHOIR_SOCKET"),
		Home:      os.Getenv("HOME"),
		Pid:       os.Getpid(),
		Env:       os.Environ(),
		Args:      os.Args[1:],
	}
	h.Cwd, _ = os.Getwd()
	if os.Getenv("CHOIR_LEASE_TOKEN_FD") == "0" {
		// The token, then end of file: read it all, as choir-agent does.
		done := make(chan struct{})
		go func() {
			defer close(done)
			b, err := io.ReadAll(io.LimitReader(os.Stdin, 4096))
			h.LeaseToken, h.TokenEOF = string(b), err == nil
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			fmt.Fprintln(os.Stderr, "testagent: no end of file on stdin after the lease token")
			os.Exit(2)
		}
	}
	if h.Runtime == "docker" {
		r := sandbox.Run(sandbox.DefaultProbe())
		h.Sandbox = &r
	}
	h.WorkspaceWritable = writable(filepath.Join(h.Workspace, ".testagent-"+h.SessionID))
	h.HomeWritable = writable(filepath.Join(h.Home, ".testagent"))
	h.TmpWritable = writable(filepath.Join(os.TempDir(), ".testagent-"+h.SessionID))
	h.RootWritable = writable("/.testagent-" + h.SessionID)
	fmt.Println("ready")

	if h.Socket == "" {
		select {}
	}
	conn, err := net.Dial("unix", h.Socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testagent: dial control socket:", err)
		os.Exit(2)
	}
	enc := json.NewEncoder(conn)
	if err := enc.Encode(h); err != nil {
		fmt.Fprintln(os.Stderr, "testagent: send hello:", err)
		os.Exit(2)
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "exit":
			n, _ := strconv.Atoi(arg)
			os.Exit(n)
		case "hang":
			hang.Store(true)
			enc.Encode(map[string]bool{"hanging": true})
		case "spawn":
			self, _ := os.Executable()
			c := exec.Command(self, "child")
			if err := c.Start(); err != nil {
				enc.Encode(map[string]string{"error": err.Error()})
				continue
			}
			enc.Encode(map[string]int{"child": c.Process.Pid})
		case "oom":
			var hog [][]byte
			for {
				b := make([]byte, 1<<20)
				for i := range b {
					b[i] = 1
				}
				hog = append(hog, b)
			}
		}
	}
	select {} // the socket closed: keep running until signalled
}

// writable reports whether a file can be created at p (and removes it).
func writable(p string) bool {
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		return false
	}
	os.Remove(p)
	return true
}
