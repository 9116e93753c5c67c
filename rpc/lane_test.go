package rpc

import (
	"strings"
	"testing"
)

// FuzzValidLane checks ValidLane against the regexp it replaces.
func FuzzValidLane(f *testing.F) {
	for _, s := range []string{"edge", "system", "core:a", "core:", "core:-a", "core:a-b.c_d", "edge\n", "core:" + strings.Repeat("a", 64), "core:" + strings.Repeat("a", 65), "Edge", "core:é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lane string) {
		if got, want := ValidLane(lane), laneRe.MatchString(lane); got != want {
			t.Fatalf("ValidLane(%q) = %v, the regexp says %v", lane, got, want)
		}
	})
}
