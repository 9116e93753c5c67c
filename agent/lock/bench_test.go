package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/choirhq/choir/agent/lock"
)

// BenchmarkAcquireUncontended measures Acquire plus release of the locksets
// the built-in tools take, with nothing else held, and beside eight reads
// by edge of files elsewhere (compatible even with workspace:X, by the
// dirty-read exception).
func BenchmarkAcquireUncontended(b *testing.B) {
	ctx := context.Background()
	core := mustOwner(b, "core:refactor-auth")
	for _, bc := range []struct {
		name  string
		locks []string
	}{
		{"FsRead", []string{"file:src/auth/session.go:S"}},
		{"FsWrite", []string{"file:src/auth/session.go:X"}},
		{"Exec", []string{"workspace:X"}},
		{"TTS", []string{"choirtmp:X"}},
		{"ThreeKeys", []string{"file:src/auth/session.go:X", "file:docs/auth.md:S", "choirtmp:X"}},
	} {
		set := reqs(b, bc.locks...)
		for _, others := range []int{0, 8} {
			b.Run(fmt.Sprintf("%s/Others%d", bc.name, others), func(b *testing.B) {
				m := lock.New()
				for i := range others {
					release, ok, err := m.TryAcquire(lock.Edge, reqs(b, fmt.Sprintf("file:other/%d.go:S", i)))
					if err != nil || !ok {
						b.Fatal(ok, err)
					}
					defer release()
				}
				b.ReportAllocs()
				for b.Loop() {
					release, err := m.Acquire(ctx, core, set)
					if err != nil {
						b.Fatal(err)
					}
					release()
				}
			})
		}
	}
}

// BenchmarkAcquireContended runs one core lane per goroutine, four
// goroutines per P, over four keys with a mix of S and X (and an occasional
// workspace:X), so goroutines wait for each other even with -cpu 1.
func BenchmarkAcquireContended(b *testing.B) {
	keys := []string{"file:a.go", "file:b.go", "file:src/c.go", "choirtmp"}
	for _, xPercent := range []int{10, 50} {
		b.Run(fmt.Sprintf("X%d", xPercent), func(b *testing.B) {
			m := lock.New()
			ctx := context.Background()
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				id := next.Add(1)
				owner := mustOwner(b, fmt.Sprintf("core:job-%d", id))
				rng := rand.New(rand.NewPCG(uint64(id), 1))
				// Pre-build the locksets so the loop measures the manager.
				sets := make([][]lock.Request, 64)
				for i := range sets {
					mode := func() string {
						if rng.IntN(100) < xPercent {
							return ":X"
						}
						return ":S"
					}
					if rng.IntN(100) < 5 {
						sets[i] = reqs(b, "workspace:X")
						continue
					}
					sets[i] = reqs(b, keys[rng.IntN(len(keys))]+mode(), keys[rng.IntN(len(keys))]+mode())
				}
				i := 0
				for pb.Next() {
					release, err := m.Acquire(ctx, owner, sets[i%len(sets)])
					if err != nil {
						b.Error(err)
						return
					}
					release()
					i++
				}
			})
		})
	}
}
