package daemon

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/dbtest"
)

// BenchmarkStartToFirstHeartbeat measures, per runtime, the time from
// AgentStart to the first heartbeat choird acknowledges from the new
// agent, and stops the agent between runs (not timed).
func BenchmarkStartToFirstHeartbeat(b *testing.B) {
	b.Run("Process", func(b *testing.B) {
		benchStart(b, Options{Runtime: "process", AgentBinary: buildAgent(b)})
	})
	b.Run("Docker", func(b *testing.B) {
		cli := runtimetest.RequireDocker(b)
		bin := runtimetest.BuildStatic(b, "github.com/choirhq/choir/cmd/choir-agent")
		image := runtimetest.ImportImage(b, cli, "choir-agent-bench", map[string]runtimetest.File{
			"choir-agent": {Source: bin, Mode: 0o755}}, `ENTRYPOINT ["/choir-agent"]`)
		benchStart(b, Options{Runtime: "docker", AgentImage: image})
	})
}

func benchStart(b *testing.B, opts Options) {
	home := lifecycleHome(b, dbtest.NewDatabase(b))
	r := startChoirdWith(b, home, opts)
	defer r.stop(b)
	ctx := context.Background()
	sc := Scope{Admin: true, Actor: "bench"}
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		begin := time.Now()
		st, err := r.d.AgentStart(ctx, sc, "assistant", StartOverrides{})
		if err != nil {
			b.Fatal(err)
		}
		for {
			var beat, hello *time.Time
			r.d.pool.QueryRow(ctx, "SELECT hello_at, last_heartbeat_at FROM choir_control.sessions WHERE session_id = $1",
				st.SessionID).Scan(&hello, &beat)
			if hello != nil && beat != nil && beat.After(*hello) {
				lat = append(lat, beat.Sub(begin))
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.StopTimer()
		if _, err := r.d.AgentStop(ctx, sc, "assistant"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Milliseconds()), "p95-ms")
}
