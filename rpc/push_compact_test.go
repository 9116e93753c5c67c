package rpc_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc"
)

func TestPushCompact(t *testing.T) {
	t.Parallel()
	t.Run("IsAKnownKind", func(t *testing.T) {
		t.Parallel()
		if !slices.Contains(rpc.PushKinds, rpc.PushCompact) {
			t.Errorf("PushKinds = %v, want compact among them", rpc.PushKinds)
		}
	})
	for _, c := range []struct {
		name    string
		p       rpc.Push
		wantErr string
	}{
		{"Valid", rpc.Push{Kind: rpc.PushCompact, Compact: &rpc.Compact{Reason: "user asked with /compact"}}, ""},
		{"ValidWithoutReason", rpc.Push{Kind: rpc.PushCompact, Compact: &rpc.Compact{}}, ""},
		{"MissingBody", rpc.Push{Kind: rpc.PushCompact}, "exactly"},
		{"BodyOfAnotherKind", rpc.Push{Kind: rpc.PushShutdown, Compact: &rpc.Compact{}}, "exactly"},
		{"TwoBodies", rpc.Push{Kind: rpc.PushCompact, Compact: &rpc.Compact{}, Cancel: &rpc.Cancel{Scope: rpc.CancelAll}}, "exactly"},
		{"ReasonTooLong", rpc.Push{Kind: rpc.PushCompact, Compact: &rpc.Compact{Reason: strings.Repeat("x", 5000)}}, "$.compact.reason"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.p.Validate()
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("Validate = %v, want an error mentioning %q", err, c.wantErr)
			}
		})
	}
	t.Run("RoundTripsAsJSON", func(t *testing.T) {
		t.Parallel()
		in := rpc.Push{Epoch: "e1", Seq: 3, Kind: rpc.PushCompact, Compact: &rpc.Compact{Reason: "context is long"}}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"epoch":"e1","seq":3,"kind":"compact","compact":{"reason":"context is long"}}`; string(b) != want {
			t.Errorf("wire form = %s, want %s", b, want)
		}
		out, err := rpc.Decode[rpc.Push](b, 1<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != rpc.PushCompact || out.Compact == nil || out.Compact.Reason != "context is long" {
			t.Errorf("decoded %+v", out)
		}
	})
}
