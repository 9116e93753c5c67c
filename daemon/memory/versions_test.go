package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/rpc/admin"
)

// TestKnowledgeExpectVersion covers optimistic concurrency of knowledge
// writes: a write that names the version it read applies only to that
// version, and one without stays last-writer-wins.
func TestKnowledgeExpectVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{}, "ver")
	b.upsert(t, "ver", `{"op":"insert","key":"plan","text":"plan A"}`)

	conflict := func(t *testing.T, err error, expected, current int, deleted bool) {
		t.Helper()
		var vc *memory.VersionConflictError
		if !errors.As(err, &vc) || !errors.Is(err, memory.ErrConflict) || vc.Expected != expected ||
			vc.Current != current || vc.Deleted != deleted {
			t.Fatalf("err = %v (%+v), want a conflict expecting %d at %d (deleted %v)", err, vc, expected, current, deleted)
		}
	}
	t.Run("TheVersionReadIsWritten", func(t *testing.T) {
		r := b.upsert(t, "ver", `{"op":"update","key":"plan","text":"plan B","expect_version":1}`)
		if r.Action != "updated" || r.Version != 2 {
			t.Errorf("result = %+v", r)
		}
	})
	t.Run("AStaleVersionIsRefusedAndNothingWritten", func(t *testing.T) {
		_, err := b.store.Upsert(ctx, "ver", json.RawMessage(`{"op":"insert","key":"plan","text":"plan C","expect_version":1}`))
		conflict(t, err, 1, 2, false)
		if !strings.Contains(err.Error(), "is at version 2, not version 1") {
			t.Errorf("message %q names neither version", err)
		}
		if k, _ := b.store.KnowledgeGet(ctx, "ver", "plan"); k.Version != 2 || k.Text != "plan B" {
			t.Errorf("document = %+v", k)
		}
	})
	t.Run("ZeroMeansTheKeyMustBeNew", func(t *testing.T) {
		_, err := b.store.Upsert(ctx, "ver", json.RawMessage(`{"op":"insert","key":"plan","text":"plan D","expect_version":0}`))
		conflict(t, err, 0, 2, false)
		r := b.upsert(t, "ver", `{"op":"insert","key":"fresh","text":"new","expect_version":0}`)
		if r.Action != "inserted" || r.Version != 1 {
			t.Errorf("result = %+v", r)
		}
	})
	t.Run("DeleteChecksTooAndALaterWriteNamesTheDeletion", func(t *testing.T) {
		_, err := b.store.Upsert(ctx, "ver", json.RawMessage(`{"op":"delete","key":"fresh","expect_version":2}`))
		conflict(t, err, 2, 1, false)
		b.upsert(t, "ver", `{"op":"delete","key":"fresh","expect_version":1}`)
		_, err = b.store.Upsert(ctx, "ver", json.RawMessage(`{"op":"update","key":"fresh","text":"x","expect_version":1}`))
		conflict(t, err, 1, 2, true)
	})
	t.Run("ExpectVersionNeedsADocument", func(t *testing.T) {
		for _, in := range []string{`{"op":"insert","text":"x","expect_version":0}`, `{"op":"insert","key":"k","text":"x","expect_version":-1}`} {
			var ie *memory.InputError
			if _, err := b.store.Upsert(ctx, "ver", json.RawMessage(in)); !errors.As(err, &ie) || ie.Field != "$.expect_version" {
				t.Errorf("%s: %v", in, err)
			}
		}
	})
}

// TestKnowledgeRacingWritersExpectingOneVersion races two writers that
// read the same version, many times: exactly one wins, the other is
// refused naming the winner's version, and history holds every version
// once. Without the check both would win and one change would be lost
// from the document (though kept in history) without anyone knowing.
func TestKnowledgeRacingWritersExpectingOneVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{}, "race")
	const trials = 40

	// write is one racer: the agent's upsert or the operator's put.
	write := func(i int, key, text string, expect int) (*admin.MemoryWriteResult, error) {
		if i%2 == 0 {
			return b.store.Upsert(ctx, "race", json.RawMessage(fmt.Sprintf(
				`{"op":"insert","key":%q,"text":%q,"expect_version":%d}`, key, text, expect)))
		}
		return b.store.KnowledgePut(ctx, "race", key, text, &expect)
	}
	for _, c := range []struct {
		name string
		// prior is how many versions the document has before the race
		// (0: the racers both create it, expecting 0).
		prior int
	}{{"UpdatesOfOneVersion", 3}, {"CreatesOfANewKey", 0}} {
		t.Run(c.name, func(t *testing.T) {
			for trial := range trials {
				key := fmt.Sprintf("%s.%d", c.name, trial)
				for v := 1; v <= c.prior; v++ {
					b.upsert(t, "race", fmt.Sprintf(`{"op":"insert","key":%q,"text":"v%d"}`, key, v))
				}
				var wg sync.WaitGroup
				start := make(chan struct{})
				res := make([]*admin.MemoryWriteResult, 2)
				errs := make([]error, 2)
				for i := range 2 {
					wg.Go(func() {
						<-start
						res[i], errs[i] = write(trial+i, key, fmt.Sprintf("racer %d", i), c.prior)
					})
				}
				close(start)
				wg.Wait()
				won := -1
				for i := range 2 {
					var vc *memory.VersionConflictError
					switch {
					case errs[i] == nil && res[i].Version == c.prior+1:
						if won >= 0 {
							t.Fatalf("trial %d: both writers won (%+v, %+v)", trial, res[0], res[1])
						}
						won = i
					case errors.As(errs[i], &vc) && vc.Expected == c.prior && vc.Current == c.prior+1:
					default:
						t.Fatalf("trial %d: writer %d: %+v, %v", trial, i, res[i], errs[i])
					}
				}
				if won < 0 {
					t.Fatalf("trial %d: no writer won: %v, %v", trial, errs[0], errs[1])
				}
				h, err := b.store.History(ctx, "race", key)
				if err != nil {
					t.Fatal(err)
				}
				if len(h) != c.prior+1 || h[0].Version != c.prior+1 || h[0].Text != fmt.Sprintf("racer %d", won) || !h[0].Current {
					t.Fatalf("trial %d: history %+v, want %d versions ending with racer %d's", trial, h, c.prior+1, won)
				}
				for j, v := range h {
					if v.Version != c.prior+1-j {
						t.Fatalf("trial %d: history versions %+v are not contiguous", trial, h)
					}
				}
			}
		})
	}

	t.Run("WithoutExpectBothWinAndNoVersionIsLost", func(t *testing.T) {
		b.upsert(t, "race", `{"op":"insert","key":"lww","text":"v1"}`)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() {
				<-start
				_, errs[i] = b.store.KnowledgePut(ctx, "race", "lww", fmt.Sprintf("racer %d", i), nil)
			})
		}
		close(start)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("errors: %v, %v", errs[0], errs[1])
		}
		h, err := b.store.History(ctx, "race", "lww")
		if err != nil || len(h) != 3 || h[0].Version != 3 || h[1].Version != 2 {
			t.Fatalf("history %+v, %v: want versions 3, 2, 1", h, err)
		}
	})
}
