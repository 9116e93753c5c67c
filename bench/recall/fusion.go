package main

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/memory"
)

// fusion is one setting of hybrid search's weighted reciprocal-rank
// fusion: a candidate ranked vr by the vector side and tr by the text side
// (1-based) scores 1/(k + vr) + ratio/(k + tr), a side that did not find
// it adding 0. The vector weight is fixed at 1: scaling both weights
// alike changes no ranking, so only the text-to-vector ratio matters.
type fusion struct{ k, ratio float64 }

func (f fusion) String() string { return fmt.Sprintf("k=%g ratio=%g", f.k, f.ratio) }

// defaultFusion is plain reciprocal rank fusion, k = 60 and both weights
// 1: the store's fusion with an embedding provider (memory's
// DefaultSearchTuning).
var defaultFusion = fusion{k: 60, ratio: 1}

// storeFusion is the store's fusion with the offline embedder, which this
// benchmark runs (memory.OfflineFusion): what its hybrid search does.
var storeFusion = fusion{k: float64(memory.OfflineFusion.FusionK),
	ratio: memory.OfflineFusion.TextWeight / memory.OfflineFusion.VectorWeight}

// The grid the sweep tries.
var (
	fusionKs     = []float64{1, 5, 10, 20, 30, 60}
	fusionRatios = []float64{0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12}
)

// fuse ranks the union of the vector side's and the text side's
// candidates (each best first, without repeats) by f, best first. Equal
// scores keep the vector side's candidates first, in its order, then the
// text side's others in theirs; so when one side is empty the other
// side's order is kept exactly (its scores strictly fall with rank).
func fuse[T comparable](f fusion, vector, text []T) []T {
	score := make(map[T]float64, len(vector)+len(text))
	var order []T
	for i, id := range vector {
		if _, ok := score[id]; !ok {
			order = append(order, id)
		}
		score[id] += 1 / (f.k + float64(i+1))
	}
	for i, id := range text {
		if _, ok := score[id]; !ok {
			order = append(order, id)
		}
		score[id] += f.ratio / (f.k + float64(i+1))
	}
	slices.SortStableFunc(order, func(a, b T) int {
		switch sa, sb := score[a], score[b]; {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return order
}

// fusionCase is one question's input to the sweep: each side's ranking at
// the store's candidate count, the evidence chunks, and the store's
// hybrid top 10 to compare its fusion done here with.
type fusionCase struct {
	q                    question
	split                string
	tune                 bool
	vector, text, hybrid []uuid.UUID
	want                 []uuid.UUID
}

// ranksIn is the 1-based rank of each wanted id in the first 10 of got,
// 0 where it is absent.
func ranksIn(got, want []uuid.UUID) []int {
	got = got[:min(10, len(got))]
	ranks := make([]int, len(want))
	for i, w := range want {
		ranks[i] = slices.Index(got, w) + 1
	}
	return ranks
}

// better says whether tally a beats b: R@10, then R@5, then R@1 (sums
// over the same questions, so counts compare as recalls do).
func better(a, b tally) bool {
	if a.at10 != b.at10 {
		return a.at10 > b.at10
	}
	if a.at5 != b.at5 {
		return a.at5 > b.at5
	}
	return a.at1 > b.at1
}

// sweep fuses every case at every grid setting, writes the tune split's
// R@10 per setting to w, and returns the setting that is best on the tune
// split (the first in grid order on a tie).
func sweep(cases []fusionCase, w io.Writer) fusion {
	var best fusion
	var bestT tally
	fmt.Fprintf(w, "fusion sweep: R@10 on the tune split; rows k, columns ratio = text weight / vector weight (vector 1)\n")
	fmt.Fprintf(w, "   k \\ ratio")
	for _, r := range fusionRatios {
		fmt.Fprintf(w, " %6g", r)
	}
	fmt.Fprintln(w)
	for _, k := range fusionKs {
		fmt.Fprintf(w, "   %-9g", k)
		for _, r := range fusionRatios {
			f := fusion{k: k, ratio: r}
			var t tally
			for _, c := range cases {
				if c.tune {
					t.add(ranksIn(fuse(f, c.vector, c.text), c.want))
				}
			}
			fmt.Fprintf(w, " %6.3f", t.at10/t.n)
			if t.n > 0 && (bestT.n == 0 || better(t, bestT)) {
				best, bestT = f, t
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "chosen on the tune split (best R@10, then R@5, then R@1): %s  (tune %s)\n", best, bestT)
	fmt.Fprintf(w, "for the store's defaults (memory.OfflineFusion): k = %g, vector weight 1, text weight %g\n", best.k,
		best.ratio)
	return best
}

// agreement compares the offline default fusion's top 10 with SQL
// hybrid's, question by question: how many are the same list, and how
// many the same set in another order.
func agreement(cases []fusionCase) string {
	same, set := 0, 0
	for _, c := range cases {
		off := fuse(storeFusion, c.vector, c.text)
		off = off[:min(10, len(off))]
		if slices.Equal(off, c.hybrid) {
			same++
		}
		a, b := slices.Clone(off), slices.Clone(c.hybrid)
		cmp := func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) }
		slices.SortFunc(a, cmp)
		slices.SortFunc(b, cmp)
		if slices.Equal(a, b) {
			set++
		}
	}
	return fmt.Sprintf("offline %s against the store's hybrid: the same top 10 for %d of %d questions, the same set for %d",
		storeFusion, same, len(cases), set)
}
