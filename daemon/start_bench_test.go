package daemon_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// BenchmarkStartToFirstHeartbeat measures, per runtime, the time from
// AgentStart to the first heartbeat choird acknowledges from the new
// agent, and stops the agent between runs (not timed).
func BenchmarkStartToFirstHeartbeat(b *testing.B) {
	b.Run("Process", func(b *testing.B) {
		benchStart(b, daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(b, "cmd/choir-agent")})
	})
	b.Run("Docker", func(b *testing.B) {
		cli := runtimetest.RequireDocker(b)
		bin := runtimetest.BuildStatic(b, "github.com/choirhq/choir/cmd/choir-agent")
		image := runtimetest.ImportImage(b, cli, "choir-agent-bench", map[string]runtimetest.File{
			"choir-agent": {Source: bin, Mode: 0o755}}, `ENTRYPOINT ["/choir-agent"]`)
		benchStart(b, daemon.Options{Runtime: "docker", AgentImage: image})
	})
}

func benchStart(b *testing.B, opts daemon.Options) {
	d := choirdtest.StartTwoAgents(b, choirdtest.Options{Daemon: opts, Edit: choirdtest.FastHeartbeat})
	ctx := context.Background()
	sc := control.Scope{Admin: true, Actor: "bench"}
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		begin := time.Now()
		st, err := d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{})
		if err != nil {
			b.Fatal(err)
		}
		for {
			var beat, hello *time.Time
			d.Pool().QueryRow(ctx, "SELECT hello_at, last_heartbeat_at FROM choir_control.sessions WHERE session_id = $1",
				st.SessionID).Scan(&hello, &beat)
			if hello != nil && beat != nil && beat.After(*hello) {
				lat = append(lat, beat.Sub(begin))
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		b.StopTimer()
		if _, err := d.AgentStop(ctx, sc, "assistant"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*95/100].Milliseconds()), "p95-ms")
}
