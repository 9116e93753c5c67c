package main

import (
	"reflect"
	"strings"
	"testing"
)

// TestGenerate checks that the set is deterministic, well formed, has the
// kinds in their proportions, and is as hard as it is meant to be for BM25.
func TestGenerate(t *testing.T) {
	a, b := generate(3, 20, 30, 100), generate(3, 20, 30, 100)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two different conversations")
	}
	if len(a.turns) != 600 || len(a.questions) != 100 {
		t.Fatalf("%d turns and %d questions, want 600 and 100", len(a.turns), len(a.questions))
	}
	kinds := map[string]int{}
	for _, q := range a.questions {
		kinds[q.kind]++
		if strings.Contains(q.text, "%!") || len(q.evidence) == 0 {
			t.Errorf("bad question %+v", q)
		}
		for _, e := range q.evidence {
			if e < 0 || e >= len(a.turns) {
				t.Errorf("question %q: evidence %d out of range", q.text, e)
			}
		}
	}
	if kinds["single-hop"] != 40 || kinds["update"] != 20 || kinds["multi-hop"] != 20 || kinds["temporal"] != 20 {
		t.Errorf("kinds %v", kinds)
	}
	var texts []string
	for _, tu := range a.turns {
		if tu.user == "" || strings.Contains(tu.user, "%!") {
			t.Errorf("bad turn %+v", tu)
		}
		texts = append(texts, "user: "+tu.user+"\nassistant: "+tu.reply)
	}
	bm := newBM25(texts)
	var found, n float64
	for _, q := range a.questions {
		sc := bm.scores(q.text)
		for _, e := range q.evidence {
			if rankIn(sc, e) > 0 {
				found += 1 / float64(len(q.evidence))
			}
		}
		n++
	}
	if r := found / n; r < 0.35 || r > 0.8 {
		t.Errorf("BM25 R@10 %.3f on one conversation: the set is no longer as hard as meant (about 0.5-0.7)", r)
	}
}
