package lock_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/lock"
)

func requests(t *testing.T, s string) []lock.Request {
	t.Helper()
	var out []lock.Request
	for _, f := range strings.Fields(s) {
		r, err := lock.ParseRequest(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestConflict checks Conflict against a table, and against the manager
// itself: for one owner holding a, a lockset b is granted at once exactly
// when Conflict says the two do not conflict, and refused as a
// self-deadlock otherwise.
func TestConflict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"file:a.go:X", "file:b.go:X", false},
		{"file:a.go:X", "file:a.go:X", true},
		{"file:a.go:S", "file:a.go:S", false},
		{"file:a.go:S", "file:a.go:X", true},
		{"file:src:S", "file:src/a.go:S", false},
		{"file:src:S", "file:src/a.go:X", true},
		{"file:src:X", "file:src/a.go:S", true},
		{"file:src:X", "file:srcs/a.go:X", false},
		{"workspace:X", "file:a.go:S", true},
		{"workspace:S", "file:a.go:S", false},
		{"workspace:S", "file:a.go:X", true},
		{"workspace:X", "choirtmp:X", false},
		{"choirtmp:X", "choirtmp:S", true},
		{"net:api.example.com:X", "net:other.example.com:X", false},
		{"file:a.go:S file:b.go:X", "file:c.go:X file:b.go:S", true},
		{"file:a.go:S file:b.go:S", "file:c.go:X file:b.go:S", false},
		{"", "workspace:X", false},
	} {
		t.Run(tc.a+"|"+tc.b, func(t *testing.T) {
			t.Parallel()
			a, b := requests(t, tc.a), requests(t, tc.b)
			if got := lock.Conflict(a, b); got != tc.want {
				t.Errorf("Conflict(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := lock.Conflict(b, a); got != tc.want {
				t.Errorf("Conflict(%s, %s) = %v, not symmetric", tc.b, tc.a, got)
			}
			for _, owner := range []lock.Owner{lock.Edge, mustCore(t, "a")} {
				m := lock.New()
				release, ok, err := m.TryAcquire(owner, a)
				if !ok || err != nil {
					t.Fatalf("take %s: %v %v", tc.a, ok, err)
				}
				release2, ok, err := m.TryAcquire(owner, b)
				if ok == tc.want || (tc.want && !errors.Is(err, lock.ErrWouldSelfDeadlock)) {
					t.Errorf("%s holding %s, then %s: granted %v, %v; the manager disagrees with Conflict", owner, tc.a, tc.b, ok, err)
				}
				release2()
				release()
			}
		})
	}
}

func mustCore(t *testing.T, job string) lock.Owner {
	t.Helper()
	o, err := lock.Core(job)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
