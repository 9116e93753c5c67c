package main

import (
	"maps"
	"math"
	"slices"

	"github.com/choirhq/choir/daemon/embed"
)

// bm25 is a plain BM25 over the chunks (k1 1.2, b 0.75), with the
// offline embedder's words: stop words removed, light stemming.
type bm25 struct {
	docs [][]string
	df   map[string]int
	avg  float64
}

func newBM25(texts []string) *bm25 {
	b := &bm25{df: map[string]int{}}
	var total float64
	for _, t := range texts {
		w := embed.Words(t)
		b.docs = append(b.docs, w)
		total += float64(len(w))
		seen := map[string]bool{}
		for _, x := range w {
			if !seen[x] {
				seen[x] = true
				b.df[x]++
			}
		}
	}
	b.avg = total / float64(len(texts))
	return b
}

// scores are every document's BM25 score for the query.
func (b *bm25) scores(q string) []float64 {
	const k1, bb = 1.2, 0.75
	terms := map[string]bool{}
	for _, w := range embed.Words(q) {
		terms[w] = true
	}
	// Summed in a fixed order, so that ties break the same in every run.
	order := slices.Sorted(maps.Keys(terms))
	n := float64(len(b.docs))
	scores := make([]float64, len(b.docs))
	for i, d := range b.docs {
		tf := map[string]float64{}
		for _, w := range d {
			if terms[w] {
				tf[w]++
			}
		}
		for _, w := range order {
			f := tf[w]
			if f == 0 {
				continue
			}
			idf := math.Log(1 + (n-float64(b.df[w])+0.5)/(float64(b.df[w])+0.5))
			scores[i] += idf * f * (k1 + 1) / (f + k1*(1-bb+bb*float64(len(d))/b.avg))
		}
	}
	return scores
}

// rankIn returns the 1-based rank of document want among the top 10 by
// score (0: not found or not matched; ties broken by document order).
func rankIn(scores []float64, want int) int {
	if scores[want] == 0 {
		return 0
	}
	better := 0
	for i, s := range scores {
		if s > scores[want] || (s == scores[want] && i < want) {
			better++
		}
	}
	if better >= 10 {
		return 0
	}
	return better + 1
}
