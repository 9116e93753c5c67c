package logjson_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/choirhq/choir/internal/logjson"
)

func TestDurationsAreMilliseconds(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	slog.New(logjson.NewHandler(&buf, slog.LevelInfo)).Info("m", slog.Duration("grace", 30*time.Second),
		slog.Any("wait", 1500*time.Millisecond), slog.Duration("timeout_ms", 2*time.Millisecond),
		slog.Group("g", slog.Duration("backoff", time.Minute)), slog.Int("count", 7))
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	for key, want := range map[string]float64{"grace_ms": 30000, "wait_ms": 1500, "timeout_ms": 2, "count": 7} {
		if line[key] != want {
			t.Errorf("%s = %v, want %v in %s", key, line[key], want, buf.Bytes())
		}
	}
	if g, _ := line["g"].(map[string]any); g["backoff_ms"] != float64(60000) {
		t.Errorf("g.backoff_ms = %v in %s", g["backoff_ms"], buf.Bytes())
	}
	for _, key := range []string{"grace", "wait"} {
		if _, ok := line[key]; ok {
			t.Errorf("%s still logged in nanoseconds: %s", key, buf.Bytes())
		}
	}
}
