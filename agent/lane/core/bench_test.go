package core_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llmtest"
)

// BenchmarkEdgeReplyWithCores measures the edge's reply latency, from a
// user message delivered to its answer handed to Out, first with no core
// job (the floor), then while two jobs run tool-heavy scripts, in the same
// run. The scripted models answer at once, so model time is excluded: what
// is left is the lane, the arbiter, the log and the HTTP round trip to the
// model server. Target: busy ≤ 2× idle. It reports both, their ratio, the
// jobs' steps per reply measured, and the load average.
//
// ToolScripts gives each job step four calls: a write, a read and a search
// of its own files, and a 10 ms command (choir.exec, which the two jobs
// take in turn: it holds workspace:X). HotLoop drops the command: with a
// model that answers at once and tools that take microseconds, the two
// jobs and the scripted model server (in this process) spin on the CPUs,
// the worst case, which no real model allows.
func BenchmarkEdgeReplyWithCores(b *testing.B) {
	b.Run("ToolScripts", func(b *testing.B) { benchEdgeReply(b, true) })
	b.Run("HotLoop", func(b *testing.B) { benchEdgeReply(b, false) })
}

func benchEdgeReply(b *testing.B, exec bool) {
	bench := setupCores(b, coreOpts{budgets: core.Budgets{PerJobMaxSteps: 1 << 30, PerJobMaxToolCalls: 1 << 30}})
	bench.edgeSrv.SetResponder(func(_ context.Context, r *llmtest.Request) llmtest.Step {
		last := r.Last()
		switch {
		case last.Role == "user" && last.Content == "spawn":
			return llmtest.ToolCalls(spawnCall("s1", "a", "Churn a."), spawnCall("s2", "b", "Churn b."))
		case last.Role == "tool":
			return llmtest.Text("started")
		}
		return llmtest.Text("pong")
	})
	bench.coreSrv.SetResponder(func(_ context.Context, r *llmtest.Request) llmtest.Step {
		job := jobOf(r)
		path := job + "/work.txt"
		calls := []llmtest.Call{
			{Name: "choir.fs.write", Arguments: fmt.Sprintf(`{"path":%q,"content":"step %d\n"}`, path, steps(r))},
			{Name: "choir.fs.read", Arguments: fmt.Sprintf(`{"path":%q}`, path)},
			{Name: "choir.fs.search", Arguments: fmt.Sprintf(`{"pattern":"step","path":%q}`, job)}}
		if exec {
			calls = append(calls, llmtest.Call{Name: "choir.exec", Arguments: `{"command":"sleep 0.01"}`})
		}
		return llmtest.ToolCalls(calls...)
	})
	reply := func(i int) time.Duration {
		start := time.Now()
		if err := bench.edge.Deliver(lane.UserMessage{Text: "ping " + strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
		for {
			if m := <-bench.out.got; m == "pong" {
				return time.Since(start)
			}
		}
	}
	measure := func() time.Duration {
		var total time.Duration
		for i := range b.N {
			total += reply(i)
		}
		return total / time.Duration(b.N)
	}
	reply(-1) // warm the connections
	b.ResetTimer()
	idle := measure()

	b.StopTimer()
	bench.edge.Deliver(lane.UserMessage{Text: "spawn"})
	for m := <-bench.out.got; m != "started"; m = <-bench.out.got {
	}
	waitFor(b, "both jobs busy", func() bool { return len(bench.coreSrv.Requests()) >= 10 })
	before := len(bench.coreSrv.Requests())
	b.StartTimer()
	busy := measure()
	b.StopTimer()
	during := len(bench.coreSrv.Requests()) - before
	if !bench.edge.CoresRunning() {
		b.Fatal("the jobs ended while measured")
	}
	bench.jobs.CancelAll("benchmark over")
	for range 2 {
		for m := <-bench.out.got; !strings.Contains(m, "was cancelled"); m = <-bench.out.got {
		}
	}
	b.ReportMetric(float64(idle.Microseconds()), "idle-µs/reply")
	b.ReportMetric(float64(busy.Microseconds()), "busy-µs/reply")
	b.ReportMetric(float64(busy)/float64(idle), "busy/idle")
	b.ReportMetric(float64(during)/float64(b.N), "core-steps/reply")
	b.ReportMetric(loadAverage(), "load1")
}

// loadAverage is the one-minute load average, or -1 where /proc has none.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, err := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	if err != nil {
		return -1
	}
	return f
}
