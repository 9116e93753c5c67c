package adminapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// jsonLines parses r's lines, failing on one that is not a JSON object.
func jsonLines(t *testing.T, name string, data []byte) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: line is not JSON: %q", name, sc.Text())
		}
		lines = append(lines, m)
	}
	return lines
}

func msgIndex(lines []map[string]any, msg string) int {
	return slices.IndexFunc(lines, func(m map[string]any) bool { return m["msg"] == msg })
}

func TestChoirdLog(t *testing.T) {
	t.Parallel()

	t.Run("ArchivedPastTheThresholdWithDurationsInMilliseconds", func(t *testing.T) {
		t.Parallel()
		const threshold = 4
		d := choirdtest.Start(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
			cfg.LogArchiveThresholdLines = threshold
		}})
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		archives, _ := filepath.Glob(filepath.Join(d.Home, "logs", "archive", "choird", "*.log.gz"))
		slices.Sort(archives)
		if len(archives) < 2 {
			t.Fatalf("archives %v: want choird.log archived every %d lines", archives, threshold)
		}
		var all []map[string]any
		for i, a := range archives {
			lines := jsonLines(t, a, []byte(runtimetest.ReadGzip(t, a)))
			// The first archive also holds the lines written before
			// config.json's threshold was read.
			if i > 0 && len(lines) != threshold {
				t.Errorf("%s holds %d lines, want %d", filepath.Base(a), len(lines), threshold)
			}
			all = append(all, lines...)
		}
		cur, _ := os.ReadFile(filepath.Join(d.Home, "logs", "choird.log"))
		all = append(all, jsonLines(t, "choird.log", cur)...)
		// Every line once, in order: the start-up steps through stopped.
		order := []string{"choird starting", "step 1: config.json read and validated", "step 3: connected to Postgres",
			"step 5: connection pool and job queues running", "choird ready", "choird stopping", "choird stopped"}
		last := -1
		for _, msg := range order {
			i := msgIndex(all, msg)
			if i <= last {
				t.Fatalf("%q at line %d, after line %d: lines lost or out of order across archives", msg, i, last)
			}
			if n := slices.IndexFunc(all[i+1:], func(m map[string]any) bool { return m["msg"] == msg }); n >= 0 {
				t.Errorf("%q logged twice across archives", msg)
			}
			last = i
		}
		for _, m := range all {
			if m["source"] != "choird" || m["time"] == nil || m["level"] == nil {
				t.Errorf("line without time, level and source=choird: %v", m)
			}
		}
		step5 := all[msgIndex(all, "step 5: connection pool and job queues running")]
		if step5["crash_detection_threshold_ms"] != float64(d.Config.CrashDetectionThreshold().Milliseconds()) ||
			step5["crash_detection_threshold"] != nil {
			t.Errorf("step 5 logs the threshold as %v: want crash_detection_threshold_ms in milliseconds", step5)
		}
	})

	t.Run("ReadyAfterTheBotsPollAndNoRiverCountsAtInfo", func(t *testing.T) {
		t.Parallel()
		tg := telegramtest.NewServer(t)
		tg.AddBot("123:log-test", "choir_log_bot")
		d := choirdtest.Start(t, choirdtest.Options{
			Edit: func(cfg *config.Config, secrets config.Secrets) {
				cfg.Gateways["tg"] = config.Gateway{Type: config.GatewayTelegram, Secret: "tg-token"}
				secrets["tg-token"] = "123:log-test"
			},
			Daemon: daemon.Options{TelegramAPIURL: tg.URL()},
		})
		// River reports its producers' job counts every 5 s.
		time.Sleep(6 * time.Second)
		if err := d.Stop(); err != nil {
			t.Fatal(err)
		}
		cur, _ := os.ReadFile(filepath.Join(d.Home, "logs", "choird.log"))
		lines := jsonLines(t, "choird.log", cur)
		polling, ready := msgIndex(lines, "telegram bot polling"), msgIndex(lines, "choird ready")
		if polling < 0 || ready < polling {
			t.Errorf(`"telegram bot polling" at line %d, "choird ready" at %d: spec 6.2 wants the bots polling first`, polling, ready)
		}
		if ready >= 0 && !slices.Equal(lines[ready]["gateways_polling"].([]any), []any{"tg"}) {
			t.Errorf("choird ready: gateways_polling = %v, want [tg]", lines[ready]["gateways_polling"])
		}
		for _, m := range lines {
			if msg, _ := m["msg"].(string); strings.HasSuffix(msg, "Producer job counts") {
				t.Errorf("River's job counts reached the log at %v: %v", m["level"], m)
			}
		}
	})
}

func TestAgentLogArchivedWhenItsSessionEnds(t *testing.T) {
	t.Parallel()
	d := choirdtest.StartWithAgents(t, nil)
	sc := control.Scope{Admin: true, Actor: "test"}
	if _, err := d.AgentStart(context.Background(), sc, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	st := d.WaitState(t, "assistant", admin.AgentActive)
	active := filepath.Join(d.Home, "logs", "assistant.log")
	if _, err := os.Stat(active); err != nil {
		t.Fatalf("no agent log while it runs: %v", err)
	}
	if _, err := d.AgentStop(context.Background(), sc, "assistant"); err != nil {
		t.Fatal(err)
	}
	archives, _ := filepath.Glob(filepath.Join(d.Home, "logs", "archive", "assistant", "*.log.gz"))
	if len(archives) != 1 {
		t.Fatalf("archives %v, want the session's log", archives)
	}
	lines := jsonLines(t, archives[0], []byte(runtimetest.ReadGzip(t, archives[0])))
	if len(lines) == 0 {
		t.Fatal("archived agent log is empty")
	}
	for _, m := range lines {
		if m["source"] != "assistant" || m["session_id"] != st.SessionID {
			t.Errorf("agent line without source=assistant and session_id=%s: %v", st.SessionID, m)
		}
	}
	if _, err := os.Stat(active); !os.IsNotExist(err) {
		t.Errorf("active agent log still there after the session ended: %v", err)
	}
}
