package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/dbtest"
	choirsql "github.com/choirhq/choir/sql"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// home writes a local configuration for the database behind url.
func home(t *testing.T, url string) string {
	t.Helper()
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg, secrets := config.Local(dir, config.Postgres{Host: pc.Host, Port: int(pc.Port), Database: pc.Database})
	cfg.Agents["second-agent"] = cfg.Agents["assistant"]
	if err := config.WriteFiles(dir, cfg, secrets, false); err != nil {
		t.Fatal(err)
	}
	return dir
}

// syncBuffer is a bytes.Buffer safe for the daemon's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func logMessages(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var msgs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Msg    string `json:"msg"`
			Source string `json:"source"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if line.Source != "choird" {
			t.Errorf("log line without source=choird: %s", sc.Text())
		}
		msgs = append(msgs, line.Msg)
	}
	return msgs
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("StartsInOrderReachesReadyAndStopsOnCancel", func(t *testing.T) {
		t.Parallel()
		url := dbtest.NewDatabase(t)
		dir := home(t, url)
		ctx, cancel := context.WithCancel(context.Background())
		var stderr syncBuffer
		ready := make(chan *daemon.Daemon, 1)
		done := make(chan error, 1)
		go func() {
			done <- daemon.Run(ctx, daemon.Options{Home: dir, Stderr: &stderr, Ready: func(d *daemon.Daemon) { ready <- d }})
		}()
		var d *daemon.Daemon
		select {
		case d = <-ready:
		case err := <-done:
			t.Fatalf("choird exited before ready: %v\n%s", err, stderr.String())
		case <-time.After(time.Minute):
			t.Fatal("choird not ready within a minute")
		}
		if d.ConfigVersion() < 1 {
			t.Errorf("config version %d", d.ConfigVersion())
		}
		var schemas int
		d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.agent_schemas
			WHERE schema_name IN ('choir_assistant', 'choir_second_agent') AND dimensions = 384`).Scan(&schemas)
		if schemas != 2 {
			t.Errorf("%d agent schemas provisioned, want 2", schemas)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		msgs := logMessages(t, filepath.Join(dir, "logs", "choird.log"))
		want := []string{"choird starting", "step 1: config.json read and validated", "step 2: secrets.json read and validated",
			"step 3: connected to Postgres", "step 4: agent schema ready", "step 5: connection pool and job queues running",
			"choird ready", "choird stopping", "choird stopped"}
		i := 0
		for _, m := range msgs {
			if i < len(want) && m == want[i] {
				i++
			}
		}
		if i != len(want) {
			t.Errorf("log lacks %q in order; got %q", want[i], msgs)
		}
		if !strings.Contains(stderr.String(), `"msg":"choird ready"`) {
			t.Errorf("stderr does not carry the log")
		}
	})

	t.Run("SecondStartKeepsTheConfigVersionAndSchemas", func(t *testing.T) {
		t.Parallel()
		url := dbtest.NewDatabase(t)
		dir := home(t, url)
		var versions []int64
		for range 2 {
			ctx, cancel := context.WithCancel(context.Background())
			err := daemon.Run(ctx, daemon.Options{Home: dir, Stderr: &syncBuffer{},
				Ready: func(d *daemon.Daemon) { versions = append(versions, d.ConfigVersion()); cancel() }})
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(versions) != 2 || versions[0] != versions[1] {
			t.Errorf("config versions across restarts = %v, want equal", versions)
		}
	})

	t.Run("UnmigratedDatabaseIsRefusedWithTheCommandToRun", func(t *testing.T) {
		t.Parallel()
		dir := home(t, dbtest.NewEmptyDatabase(t))
		err := daemon.Run(context.Background(), daemon.Options{Home: dir, Stderr: &syncBuffer{}})
		if !errors.Is(err, daemon.ErrNotMigrated) || !strings.Contains(err.Error(), "choirctl db migrate") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("UnreachablePostgresIsOneLineNamingHostPortAndKey", func(t *testing.T) {
		t.Parallel()
		dir := home(t, "postgres://postgres@127.0.0.1:1/choir")
		err := daemon.Run(context.Background(), daemon.Options{Home: dir, Stderr: &syncBuffer{}})
		if !errors.Is(err, choirsql.ErrUnreachable) {
			t.Fatalf("err = %v", err)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "config.json postgres") {
			t.Errorf("err = %q", msg)
		}
	})

	t.Run("InvalidConfigIsRefusedBeforeAnythingStarts", func(t *testing.T) {
		t.Parallel()
		dir := home(t, dbtest.DefaultURL)
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"agents": {"x": {}}, "bogus": 1}`), 0o644)
		err := daemon.Run(context.Background(), daemon.Options{Home: dir, Stderr: &syncBuffer{}})
		var cerr *config.Error
		if !errors.As(err, &cerr) || !strings.Contains(err.Error(), "bogus") {
			t.Fatalf("err = %v", err)
		}
	})
}
