// Command unitbrowse starts choird's browser worker (daemon/browser) the
// way choird does, loads a page that a script renders, and prints what it
// found as JSON: the page's text, the user it ran as, whether Chromium's
// renderers sit in user namespaces of their own (its sandbox is on), and
// whether the worker could put the browser in its own cgroup.
// TestServiceUnitLetsChromiumSandboxRun (deploy_test.go) runs it under
// systemd with the properties of deploy/choird.service.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/browser"
)

type result struct {
	Text           string   `json:"text"`
	UID            int      `json:"uid"`
	ExecPath       string   `json:"exec_path"`
	Renderers      int      `json:"renderers"`
	SandboxedUsers int      `json:"renderers_in_own_user_namespace"`
	Unconfined     bool     `json:"unconfined"`
	Log            []string `json:"log"`
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "unitbrowse:", err)
		os.Exit(1)
	}
}

func run(stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><p id="t"></p><script>document.getElementById("t").textContent = "rendered " + (1+1);</script></body></html>`)
	}))
	var logs strings.Builder
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	web := config.Web{AllowHosts: []string{ln.Addr().String()}}
	w, err := browser.New(browser.Config{SettingsFunc: func(string) config.Web { return web }, Logger: logger})
	if err != nil {
		return fmt.Errorf("start the browser worker: %w\n%s", err, logs.String())
	}
	defer w.Close()
	ws, err := os.MkdirTemp("", "unitbrowse-ws-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := w.Browse(ctx, "unit", json.RawMessage(`{"url": "http://`+ln.Addr().String()+`/"}`),
		func(context.Context) (string, error) { return ws, nil })
	if err != nil {
		return fmt.Errorf("browse: %w\n%s", err, logs.String())
	}
	res := result{Text: out.Text, UID: os.Geteuid(), Unconfined: strings.Contains(logs.String(), "WITHOUT memory and CPU limits")}
	res.Renderers, res.SandboxedUsers = renderers()
	for line := range strings.Lines(logs.String()) {
		res.Log = append(res.Log, strings.TrimSpace(line))
		if strings.Contains(line, `"browser started"`) {
			var l struct{ Path string }
			_ = json.Unmarshal([]byte(line), &l)
			res.ExecPath = l.Path
		}
	}
	return json.NewEncoder(stdout).Encode(res)
}

// renderers counts Chromium's renderer processes and those in a user
// namespace other than this process's: the namespace sandbox at work.
func renderers() (all, own int) {
	self, _ := os.Readlink("/proc/self/ns/user")
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmd, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.Contains(string(cmd), "--type=renderer") {
			continue
		}
		all++
		if ns, err := os.Readlink(filepath.Join(d, "ns", "user")); err == nil && ns != self {
			own++
		}
	}
	return all, own
}
