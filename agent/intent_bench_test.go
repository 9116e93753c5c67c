package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
)

// BenchmarkStepOfFourCalls measures what write-ahead intents cost (issue
// 31, item 1): one model step of four calls through the whole agent (the
// arbiter, the log, the heartbeat to a real choird and Postgres, the next
// prompt), from the model's answer with the calls to the next request.
// Writes (choir.fs.write, each waiting for its intent to be acknowledged)
// and reads (choir.fs.read, which write nothing ahead) run side by side;
// step-p50-ms is reported for each.
func BenchmarkStepOfFourCalls(b *testing.B) {
	for _, kind := range []string{"Writes", "Reads"} {
		b.Run(kind, func(b *testing.B) {
			srv := llmtest.NewServer(b)
			var mu sync.Mutex
			var answered time.Time
			var steps []time.Duration
			srv.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
				last := r.Last()
				mu.Lock()
				defer mu.Unlock()
				if last.Role == "tool" {
					steps = append(steps, time.Since(answered))
					return llmtest.Text("done")
				}
				calls := make([]llmtest.Call, 4)
				for i := range calls {
					calls[i] = llmtest.Call{Name: "choir.fs.read", Arguments: fmt.Sprintf(`{"path":"f%d.txt"}`, i)}
					if kind == "Writes" {
						calls[i] = llmtest.Call{Name: "choir.fs.write",
							Arguments: fmt.Sprintf(`{"path":"f%d.txt","content":"line %d of a file the step rewrites\n"}`, i, r.Index)}
					}
				}
				defer func() { answered = time.Now() }()
				return llmtest.ToolCalls(calls...)
			})
			bu := setupWith(b, srv, nil)
			for i := range 4 {
				if err := os.WriteFile(filepath.Join(bu.d.Workspace("main"), fmt.Sprintf("f%d.txt", i)), []byte("start\n"), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				want := len(steps) + 1
				bu.say(b, int64(100+i), fmt.Sprintf("step %d", i))
				bu.waitFor(b, "the step's answer", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(steps) >= want
				})
			}
			b.StopTimer()
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(steps)
			b.ReportMetric(float64(steps[len(steps)/2].Microseconds())/1000, "step-p50-ms")
			b.ReportMetric(float64(steps[len(steps)*95/100].Microseconds())/1000, "step-p95-ms")
		})
	}
}
