package agent

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/credhelper"
	"github.com/choirhq/choir/config"
)

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestGitCredentialSocketChecksTheHost talks to the agent's credential
// socket as any process of the agent's user can (a command run by
// choir.exec): the token goes only to an HTTPS request for an allowed host,
// and every refusal is logged.
func TestGitCredentialSocketChecksTheHost(t *testing.T) {
	t.Parallel()
	const token = "ghp-canary-5e1d0c"
	dir, err := os.MkdirTemp("", "gcs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "cred.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedLog{}
	gi := config.GitIdentity{Name: "Dev", Email: "dev@choir.local", Secret: "git-token", Hosts: []string{"git.example.com"}}
	secret := func(name string) (string, bool) {
		if name == "git-token" {
			return token, true
		}
		return "", false
	}
	go serveGitCredentials(t.Context(), ln, gi, secret, slog.New(slog.NewTextHandler(logs, nil)))

	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("ConnectingAloneGetsNothing", func(t *testing.T) {
		c := dial(t)
		c.(*net.UnixConn).CloseWrite()
		got, _ := io.ReadAll(c)
		if bytes.Contains(got, []byte(token)) {
			t.Fatalf("a bare connection got the token: %q", got)
		}
	})
	for _, tt := range []struct{ name, protocol, host string }{
		{"OtherHostIsRefused", "https", "evil.example.com"},
		{"PlainHTTPIsRefused", "http", "git.example.com"},
		{"NoHostIsRefused", "https", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := credhelper.Ask(dial(t), credhelper.Request{Protocol: tt.protocol, Host: tt.host})
			if tok != "" || !errors.Is(err, credhelper.ErrDenied) {
				t.Fatalf("ask %s://%s: token %q, err %v; want nothing and ErrDenied", tt.protocol, tt.host, tok, err)
			}
		})
	}
	t.Run("AllowedHostGetsTheToken", func(t *testing.T) {
		tok, err := credhelper.Ask(dial(t), credhelper.Request{Protocol: "https", Host: "GIT.example.com:443"})
		if err != nil || tok != token {
			t.Fatalf("ask the allowed host: token %q, err %v", tok, err)
		}
	})
	t.Run("RefusalsAreLogged", func(t *testing.T) {
		log := logs.String()
		if !strings.Contains(log, "git credential request refused") || !strings.Contains(log, "host=evil.example.com") {
			t.Errorf("the agent's log does not name the refused request:\n%s", log)
		}
		if strings.Contains(log, token) {
			t.Errorf("the token is in the agent's log")
		}
	})
}
