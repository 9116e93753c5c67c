// Command reachprobe is run by choir.exec in the tests that check what a
// tool's subprocess can reach (issue 13, spec 14.1 and 14.3). It tries
// every way to a secret or the lease token that a command has, prints one
// line per attempt with what it got, and never fails: the test reads its
// output from the tool result.
//
//	reachprobe -socket <choird's agent socket> -session <id> -cred <credential socket> -git-host <host>
//
// Lines: "environ <pid> (<comm>): <contents or error>", "mem <pid>
// (<comm>): denied: <error>" or "mem ...: READ <n> bytes", "socket: ...",
// "cred ...: ...".
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/choirhq/choir/agent/credhelper"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
)

func main() {
	socket := flag.String("socket", "", "choird's agent socket")
	session := flag.String("session", "", "the session to ask secrets for")
	cred := flag.String("cred", "", "the agent's git credential socket")
	gitHost := flag.String("git-host", "", "the leased git identity's host, to ask git's credentials for")
	flag.Parse()
	if *gitHost != "" {
		gitCredentials(*gitHost)
	}

	// Every process's environment, the agent's ($PPID or further up) and
	// PID 1 included.
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		pid := filepath.Base(p)
		b, err := os.ReadFile(p + "/environ")
		if err != nil {
			fmt.Printf("environ %s (%s): denied: %v\n", pid, comm(pid), err)
			continue
		}
		fmt.Printf("environ %s (%s): %s\n", pid, comm(pid), bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
	}
	// The memory of every ancestor, and of PID 1.
	seen := map[string]bool{}
	for pid := strconv.Itoa(os.Getppid()); pid != "0" && !seen[pid]; pid = ppid(pid) {
		seen[pid] = true
		mem(pid)
	}
	if !seen["1"] {
		mem("1")
	}

	// choird's socket, without the token.
	if *socket != "" {
		c, err := net.DialTimeout("unix", *socket, 5*time.Second)
		if err != nil {
			fmt.Printf("socket: connect: %v\n", err)
		} else {
			c.Close()
			fmt.Printf("socket: connect: ok\n")
		}
		cl, err := client.New(client.Options{Socket: *socket, SessionID: *session, LeaseToken: "no-token-found", Retries: -1})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, err := cl.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"model-key", "git-token"}})
			cancel()
			cl.Close()
			if err != nil {
				fmt.Printf("socket: GET_SECRETS refused: %v\n", err)
			} else {
				fmt.Printf("socket: GET_SECRETS GOT %v\n", got.Secrets)
			}
		}
	}

	// The agent's git credential socket: bare, and for a host not allowed.
	if *cred != "" {
		if c, err := net.DialTimeout("unix", *cred, 5*time.Second); err != nil {
			fmt.Printf("cred bare: connect: %v\n", err)
		} else {
			c.(*net.UnixConn).CloseWrite()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(c)
			c.Close()
			fmt.Printf("cred bare: got %q\n", b)
		}
		if c, err := net.DialTimeout("unix", *cred, 5*time.Second); err != nil {
			fmt.Printf("cred evil: connect: %v\n", err)
		} else {
			tok, err := credhelper.Ask(c, credhelper.Request{Protocol: "https", Host: "evil.example.com"})
			c.Close()
			fmt.Printf("cred evil: got %q, %v\n", tok, err)
		}
	}
}

// gitCredentials asks for the git identity's token the ways a command
// can: git credential fill (with a real git), every credential helper in
// the global git configuration run by hand as git would (with a stand-in
// git), and choird's git route, found in that configuration, asked for a
// path that is not git's. Each answer is printed as it is and in
// base64 ("b64 <data>"), as a model would to get past the scrubber.
func gitCredentials(host string) {
	req := "protocol=https\nhost=" + host + "\n\n"
	if _, err := exec.LookPath("git"); err == nil {
		cmd := exec.Command("git", "credential", "fill")
		cmd.Stdin = strings.NewReader(req)
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false")
		out, err := cmd.CombinedOutput()
		fmt.Printf("git fill: %q, %v\nb64 %s\n", out, err, base64.StdEncoding.EncodeToString(out))
	}
	home, _ := os.UserHomeDir()
	cfg, err := os.ReadFile(filepath.Join(home, ".gitconfig"))
	fmt.Printf("gitconfig: %q, %v\nb64 %s\n", cfg, err, base64.StdEncoding.EncodeToString(cfg))
	for _, line := range strings.Split(string(cfg), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if k = strings.TrimSpace(k); !ok || (k != "helper" && k != "credential.helper") {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		cmd := exec.Command(f[0], append(f[1:], "get")...)
		cmd.Stdin = strings.NewReader(req)
		out, err := cmd.CombinedOutput()
		fmt.Printf("helper %s: %q, %v\nb64 %s\n", f[0], out, err, base64.StdEncoding.EncodeToString(out))
	}
	if m := regexp.MustCompile(`http://127\.0\.0\.1:\d+/svc/git/[^/"\s]+/[^/"\s]+/`).Find(cfg); m != nil {
		for _, path := range []string{"api/user", "r.git/info/refs?service=git-upload-pack"} {
			c := &http.Client{Timeout: 20 * time.Second}
			resp, err := c.Get(string(m) + path)
			if err != nil {
				fmt.Printf("proxy %s: %v\n", path, err)
				continue
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			fmt.Printf("proxy %s: %d %q\nb64 %s\n", path, resp.StatusCode, b, base64.StdEncoding.EncodeToString(b))
		}
	} else {
		fmt.Printf("proxy: none in the git configuration\n")
	}
}

func comm(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.TrimSpace(string(b))
}

func ppid(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "0"
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return "0"
	}
	return f[1]
}

// mem reads the first readable mapping of pid's memory.
func mem(pid string) {
	f, err := os.Open("/proc/" + pid + "/mem")
	if err != nil {
		fmt.Printf("mem %s (%s): denied: %v\n", pid, comm(pid), err)
		return
	}
	defer f.Close()
	maps, err := os.ReadFile("/proc/" + pid + "/maps")
	if err != nil {
		fmt.Printf("mem %s (%s): denied: maps: %v\n", pid, comm(pid), err)
		return
	}
	for _, line := range strings.Split(string(maps), "\n") {
		f0, _, _ := strings.Cut(line, " ")
		lo, _, ok := strings.Cut(f0, "-")
		if !ok {
			continue
		}
		addr, err := strconv.ParseUint(lo, 16, 64)
		if err != nil {
			continue
		}
		buf := make([]byte, 4096)
		if n, err := f.ReadAt(buf, int64(addr)); n > 0 {
			fmt.Printf("mem %s (%s): READ %d bytes\n", pid, comm(pid), n)
			return
		} else if err != nil {
			continue
		}
	}
	fmt.Printf("mem %s (%s): denied: nothing readable\n", pid, comm(pid))
}
