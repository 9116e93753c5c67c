package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestFuseFormula checks the weighted reciprocal-rank formula on a small
// case worked by hand: score = 1/(k + vector rank) + ratio/(k + text rank).
func TestFuseFormula(t *testing.T) {
	vector := []string{"a", "b", "c"}
	text := []string{"c", "d"}
	score := func(f fusion, vr, tr int) float64 {
		s := 0.0
		if vr > 0 {
			s += 1 / (f.k + float64(vr))
		}
		if tr > 0 {
			s += f.ratio / (f.k + float64(tr))
		}
		return s
	}
	// k = 60, ratio 1: c (3rd and 1st) 1/63 + 1/61 beats a (1st only) 1/61;
	// b 1/62 and d 1/62 tie: the vector side's candidate comes first.
	f := fusion{k: 60, ratio: 1}
	if got, want := fuse(f, vector, text), []string{"c", "a", "b", "d"}; !slices.Equal(got, want) {
		t.Errorf("k=60 ratio=1: %v, want %v", got, want)
	}
	if s := score(f, 3, 1); math.Abs(s-(1.0/63+1.0/61)) > 1e-15 {
		t.Errorf("score of c %v", s)
	}
	// k = 1, ratio 0.25: a 1/2 = .5; c 1/4 + .25/2 = .375; b 1/3 = .333;
	// d .25/3 = .083.
	if got, want := fuse(fusion{k: 1, ratio: 0.25}, vector, text), []string{"a", "c", "b", "d"}; !slices.Equal(got, want) {
		t.Errorf("k=1 ratio=0.25: %v, want %v", got, want)
	}
	// k = 1, ratio 4: d 4/3 = 1.333 beats a .5, c 1/4 + 4/2 = 2.25 first.
	if got, want := fuse(fusion{k: 1, ratio: 4}, vector, text), []string{"c", "d", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("k=1 ratio=4: %v, want %v", got, want)
	}
}

// TestFuseOneSideEmpty checks that the other side's order is kept exactly
// when one side found nothing, at every setting of the grid.
func TestFuseOneSideEmpty(t *testing.T) {
	side := []int{7, 3, 9, 1, 4, 8, 2, 6, 5, 0}
	for _, k := range fusionKs {
		for _, r := range fusionRatios {
			f := fusion{k: k, ratio: r}
			if got := fuse(f, side, nil); !slices.Equal(got, side) {
				t.Errorf("%s, text empty: %v", f, got)
			}
			if got := fuse(f, nil, side); !slices.Equal(got, side) {
				t.Errorf("%s, vector empty: %v", f, got)
			}
		}
	}
	if got := fuse(defaultFusion, []int(nil), nil); len(got) != 0 {
		t.Errorf("both empty: %v", got)
	}
}

// TestSweepChoosesOnTuneOnly checks that the sweep picks its setting from
// the tune split's questions and ignores the held-out ones.
func TestSweepChoosesOnTuneOnly(t *testing.T) {
	ids := make([]uuid.UUID, 20)
	for i := range ids {
		ids[i] = uuid.New()
	}
	// The tune question's evidence is the vector side's 20th and the text
	// side's first: only a text weight high enough for the k ranks it
	// first. The held-out question wants the vector side's first, which a
	// low text weight ranks first: chosen over both questions, k=1 ratio
	// 0.25 would win the tie on R@10, R@5 and R@1 and rank the tune
	// evidence 5th.
	vector := slices.Clone(ids)
	text := []uuid.UUID{ids[19]}
	cases := []fusionCase{
		{tune: true, vector: vector, text: text, want: []uuid.UUID{ids[19]}},
		{tune: false, vector: vector, text: text, want: []uuid.UUID{ids[0]}},
	}
	var out bytes.Buffer
	best := sweep(cases, &out)
	got := fuse(best, vector, text)
	if got[0] != ids[19] {
		t.Errorf("chosen %s ranks the tune evidence %d", best, slices.Index(got, ids[19])+1)
	}
	if !strings.Contains(out.String(), "text weight") {
		t.Errorf("sweep output lacks the weights to copy:\n%s", out.String())
	}
}
