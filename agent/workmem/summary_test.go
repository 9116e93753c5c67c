package workmem_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/workmem"
)

func TestParseDelta(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer string
		want   workmem.Delta // compared when ok
		ok     bool
	}{
		{"AppendWithFacts", `{"memory_delta": {"mode": "append", "summary_update": "Ada set a code.",
			"add_fact": [{"key": "door_code", "value": "4417", "source_event": "1a2b3c4d5e6f"}], "add_references": ["1a2b3c4d5e6f"]}}`,
			workmem.Delta{Mode: "append", SummaryUpdate: "Ada set a code.", AddReferences: []string{"1a2b3c4d5e6f"}}, true},
		{"OneFactAsAnObject", `{"memory_delta": {"mode": "append", "add_fact": {"key": "cat", "value": "Miso"}}}`,
			workmem.Delta{Mode: "append"}, true},
		{"InACodeFence", "```json\n{\"memory_delta\": {\"mode\": \"overwrite\", \"summary_update\": \"short\"}}\n```",
			workmem.Delta{Mode: "overwrite", SummaryUpdate: "short"}, true},
		{"RemoveFactByKey", `{"memory_delta": {"mode": "append", "remove_fact": {"key": "cat"}}}`, workmem.Delta{Mode: "append"}, true},
		{"NoWrapper", `{"mode": "append", "summary_update": "x"}`, workmem.Delta{}, false},
		{"UnknownMode", `{"memory_delta": {"mode": "replace", "summary_update": "x"}}`, workmem.Delta{}, false},
		{"NoMode", `{"memory_delta": {"summary_update": "x"}}`, workmem.Delta{}, false},
		{"OverwriteWithNothing", `{"memory_delta": {"mode": "overwrite", "summary_update": ""}}`, workmem.Delta{}, false},
		{"OverwriteWithoutUpdate", `{"memory_delta": {"mode": "overwrite"}}`, workmem.Delta{}, false},
		{"UnknownField", `{"memory_delta": {"mode": "append", "wipe": true}}`, workmem.Delta{}, false},
		{"FactWithoutValue", `{"memory_delta": {"mode": "append", "add_fact": {"key": "cat"}}}`, workmem.Delta{}, false},
		{"FactWithAnEmptyKey", `{"memory_delta": {"mode": "append", "add_fact": [{"key": "", "value": "x"}]}}`, workmem.Delta{}, false},
		{"DuplicateKeys", `{"memory_delta": {"mode": "append", "mode": "overwrite"}}`, workmem.Delta{}, false},
		{"Prose", `Here is the summary: the user likes tea.`, workmem.Delta{}, false},
		{"TrailingData", `{"memory_delta": {"mode": "append"}} and more`, workmem.Delta{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := workmem.ParseDelta(tc.answer)
			if !tc.ok {
				if !errors.Is(err, workmem.ErrRejectedDelta) {
					t.Fatalf("ParseDelta = %+v, %v; want ErrRejectedDelta", d, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Mode != tc.want.Mode || d.SummaryUpdate != tc.want.SummaryUpdate || !slices.Equal(d.AddReferences, tc.want.AddReferences) {
				t.Errorf("delta = %+v", d)
			}
		})
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	base := workmem.ReferenceSummary{Summary: "Ada lives in Lisbon.",
		Facts:            []workmem.Fact{{Key: "door_code", Value: "4417"}, {Key: "cat", Value: "Miso"}},
		ReferencedEvents: []string{"aaaaaaaaaaaa"}}
	delta := func(s string) workmem.Delta {
		t.Helper()
		d, err := workmem.ParseDelta(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, tc := range []struct {
		name  string
		delta string
		check func(t *testing.T, got workmem.ReferenceSummary)
	}{
		{"AppendAddsALine", `{"memory_delta": {"mode": "append", "summary_update": "She has a cat."}}`,
			func(t *testing.T, got workmem.ReferenceSummary) {
				if got.Summary != "Ada lives in Lisbon.\nShe has a cat." || len(got.Facts) != 2 {
					t.Errorf("got %+v", got)
				}
			}},
		{"OverwriteReplacesTheTextAndKeepsFacts", `{"memory_delta": {"mode": "overwrite", "summary_update": "Ada, Lisbon."}}`,
			func(t *testing.T, got workmem.ReferenceSummary) {
				if got.Summary != "Ada, Lisbon." || len(got.Facts) != 2 {
					t.Errorf("got %+v", got)
				}
			}},
		{"FactWithAKnownKeyIsReplaced", `{"memory_delta": {"mode": "append", "add_fact": [{"key": "door_code", "value": "9001"}, {"key": "wifi", "value": "orange-42"}]}}`,
			func(t *testing.T, got workmem.ReferenceSummary) {
				want := []workmem.Fact{{Key: "door_code", Value: "9001"}, {Key: "cat", Value: "Miso"}, {Key: "wifi", Value: "orange-42"}}
				if !slices.Equal(got.Facts, want) {
					t.Errorf("facts = %+v", got.Facts)
				}
			}},
		{"RemoveFact", `{"memory_delta": {"mode": "append", "remove_fact": [{"key": "cat"}, {"key": "no-such-fact"}]}}`,
			func(t *testing.T, got workmem.ReferenceSummary) {
				if len(got.Facts) != 1 || got.Facts[0].Key != "door_code" {
					t.Errorf("facts = %+v", got.Facts)
				}
			}},
		{"ReferencesAreSortedIntoEventsAndSessions", `{"memory_delta": {"mode": "append", "remove_references": ["aaaaaaaaaaaa"],
			"add_references": ["1a2b3c4d5e6f", "session-7f3e", "1a2b3c4d5e6f", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"]}}`,
			func(t *testing.T, got workmem.ReferenceSummary) {
				if !slices.Equal(got.ReferencedEvents, []string{"1a2b3c4d5e6f"}) ||
					!slices.Equal(got.ReferencedSessions, []string{"session-7f3e", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}) {
					t.Errorf("references = %v, %v", got.ReferencedEvents, got.ReferencedSessions)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := base.Apply(delta(tc.delta), 10_000)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
			if base.Summary != "Ada lives in Lisbon." || base.Facts[0].Value != "4417" || len(base.Facts) != 2 || len(base.ReferencedEvents) != 1 {
				t.Errorf("Apply changed the summary it was called on: %+v", base)
			}
		})
	}

	t.Run("OverTheCapIsRejectedAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		d := delta(`{"memory_delta": {"mode": "append", "summary_update": "` + strings.Repeat("blah ", 400) + `",
			"add_fact": {"key": "door_code", "value": "0000"}}}`)
		got, err := base.Apply(d, 300)
		if !errors.Is(err, workmem.ErrRejectedDelta) || !strings.Contains(err.Error(), "overwrite") {
			t.Fatalf("Apply = %v", err)
		}
		if got.Summary != base.Summary || got.Facts[0].Value != "4417" || base.Facts[0].Value != "4417" {
			t.Errorf("a rejected delta changed something: %+v, %+v", got, base)
		}
	})
}

func TestReferenceSummaryJSON(t *testing.T) {
	t.Parallel()
	t.Run("AnOldSnapshotsStringIsItsText", func(t *testing.T) {
		t.Parallel()
		var s workmem.ReferenceSummary
		if err := json.Unmarshal([]byte(`"The user is Ada."`), &s); err != nil || s.Summary != "The user is Ada." || len(s.Facts) != 0 {
			t.Errorf("summary = %+v, %v", s, err)
		}
	})
	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		in := workmem.ReferenceSummary{Summary: "s", Facts: []workmem.Fact{{Key: "k", Value: "v", SourceEvent: "1a2b"}},
			ReferencedSessions: []string{"sess"}, ReferencedEvents: []string{"1a2b3c4d"}}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out workmem.ReferenceSummary
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if out.Summary != in.Summary || !slices.Equal(out.Facts, in.Facts) || !slices.Equal(out.ReferencedEvents, in.ReferencedEvents) {
			t.Errorf("round trip = %+v", out)
		}
	})
	t.Run("EmptyIsOmittedAndRendersNothing", func(t *testing.T) {
		t.Parallel()
		b, _ := json.Marshal(struct {
			S workmem.ReferenceSummary `json:"s,omitzero"`
		}{})
		if string(b) != "{}" || (workmem.ReferenceSummary{}).Render() != "" {
			t.Errorf("empty summary = %s", b)
		}
	})
}
