package arbiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
)

// stepCallTime is what each call of the step benchmarks takes: the 200 ms
// of issue 15's target ("one model step returning 4 calls with disjoint
// locks, each taking 200 ms, completes in under 300 ms").
const stepCallTime = 200 * time.Millisecond

func benchStep(b *testing.B, calls int, run func(ctx context.Context, bn *bundle, ps []arbiter.Proposal) error) {
	st := newSpanTool("test.slow", fileLock, stepCallTime)
	bn := setup(b, []tool.Tool{st}, nil, nil)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ps := make([]arbiter.Proposal, calls)
		for j := range ps {
			id := fmt.Sprintf("c%d-%d", i, j)
			ps[j] = slow(lock.Edge, id, fmt.Sprintf("f%d.txt", j))
		}
		if err := run(ctx, bn, ps); err != nil {
			b.Fatal(err)
		}
		for range calls {
			<-st.started
		}
	}
}

// BenchmarkStepFourDisjointCalls is one model step of four calls with
// disjoint locks, each taking 200 ms, through one ProposeAll. Compare it
// with BenchmarkStepFloorOneCall, run in the same go test -bench: the
// step should take about one call's time.
func BenchmarkStepFourDisjointCalls(b *testing.B) {
	benchStep(b, 4, func(ctx context.Context, bn *bundle, ps []arbiter.Proposal) error {
		outs, err := bn.arb.ProposeAll(ctx, ps)
		for _, o := range outs {
			if err == nil && o.Result.Status != tool.StatusSuccess {
				err = fmt.Errorf("outcome %+v %+v", o.Rejected, o.Result)
			}
		}
		return err
	})
}

// BenchmarkStepFloorOneCall is the floor of the step benchmarks: a single
// 200 ms call through Propose.
func BenchmarkStepFloorOneCall(b *testing.B) {
	benchStep(b, 1, func(ctx context.Context, bn *bundle, ps []arbiter.Proposal) error {
		_, err := bn.arb.Propose(ctx, ps[0])
		return err
	})
}

// BenchmarkStepFourCallsOneByOne is the same step run the old way, one
// Propose after another, for contrast.
func BenchmarkStepFourCallsOneByOne(b *testing.B) {
	benchStep(b, 4, func(ctx context.Context, bn *bundle, ps []arbiter.Proposal) error {
		for _, p := range ps {
			if _, err := bn.arb.Propose(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
}
