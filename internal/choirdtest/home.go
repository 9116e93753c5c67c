package choirdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/starter"
	"github.com/choirhq/choir/dbtest"
)

// Home is a .choir.d ready for choird.
type Home struct {
	// Dir is the directory; Config and Secrets are what its files hold.
	Dir     string
	Config  *config.Config
	Secrets config.Secrets
	// DatabaseURL is the database its configuration names.
	DatabaseURL string
}

// WriteHome makes the home o describes: config.Local's configuration for
// o.DatabaseURL (a fresh database when empty) changed as o says, written
// into o.Home (a temporary directory when empty), with every workspace
// made. A home that already holds a config.json (a restart) is read, not
// written.
func WriteHome(t testing.TB, o Options) Home {
	t.Helper()
	h := Home{Dir: o.Home, DatabaseURL: o.DatabaseURL}
	if h.DatabaseURL == "" {
		h.DatabaseURL = dbtest.NewDatabase(t)
	}
	if h.Dir == "" {
		h.Dir = t.TempDir()
	}
	if err := h.write(o); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *Home) write(o Options) error {
	if _, err := os.Stat(filepath.Join(h.Dir, config.ConfigFile)); err == nil {
		cfg, secrets, err := config.Load(h.Dir)
		h.Config, h.Secrets = cfg, secrets
		return err
	}
	pc, err := pgx.ParseConfig(h.DatabaseURL)
	if err != nil {
		return err
	}
	h.Config, h.Secrets = starter.Local(h.Dir, config.Postgres{Host: pc.Host, Port: int(pc.Port), Database: pc.Database})
	if o.ModelEndpoint != "" {
		m := h.Config.Models["local"]
		m.Endpoint = o.ModelEndpoint
		h.Config.Models["local"] = m
	}
	if o.FastHeartbeat {
		h.Config.HeartbeatIntervalMS = 100
		h.Config.CrashDetectionThresholdMS = 5000
	}
	if o.Edit != nil {
		o.Edit(h.Config, h.Secrets)
	}
	if err := config.WriteFiles(h.Dir, h.Config, h.Secrets, false); err != nil {
		return err
	}
	for name, ws := range h.Config.Workspaces {
		if err := os.MkdirAll(ws.Path, 0o755); err != nil {
			return fmt.Errorf("workspace %s: %w", name, err)
		}
	}
	return nil
}

// Workspace is the directory of a configured workspace.
func (h Home) Workspace(name string) string { return h.Config.Workspaces[name].Path }

// binaries are the commands Binary built, by package, once per test binary.
var binaries struct {
	sync.Mutex
	dir   string
	paths map[string]string
}

// Binary builds a main package of this module (such as "cmd/choird") once
// per test binary, without cgo as make and the images build it, and
// returns the executable's path. Build tags, if any, give another
// executable (the kill-anywhere suite's agent is built with choirfault).
func Binary(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	binaries.Lock()
	defer binaries.Unlock()
	id := strings.Join(append([]string{pkg}, tags...), "+")
	if p, ok := binaries.paths[id]; ok {
		return p
	}
	if binaries.dir == "" {
		dir, err := os.MkdirTemp("", "choirdtest-bin-")
		if err != nil {
			t.Fatal(err)
		}
		binaries.dir, binaries.paths = dir, map[string]string{}
	}
	out := filepath.Join(binaries.dir, strings.Join(append([]string{filepath.Base(pkg)}, tags...), "-"))
	// Static: without cgo the agent drops capabilities on every thread at
	// once (sandbox.Harden). -trimpath, as runtimetest.BuildStatic and make
	// demo's test binary build: one configuration, so the packages they
	// share are compiled once, whatever the checkout's directory.
	cmd := exec.Command("go", "build", "-trimpath", "-tags", strings.Join(tags, ","), "-o", out, "github.com/choirhq/choir/"+pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", pkg, err, b)
	}
	binaries.paths[id] = out
	return out
}
