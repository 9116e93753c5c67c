package embed

import (
	"context"
	"errors"
	"math"
	"slices"
)

// Term is one full-text lexeme of a text, as Postgres's
// to_tsvector('english') makes it, with its positions in the text and
// Docs, how many documents of the store hold it.
type Term struct {
	Lexeme    string
	Positions []int32
	Docs      int64
}

// LexicalText is a text as the offline embedder weighs it: its terms and
// Docs, how many documents the store holds (the N of IDF).
type LexicalText struct {
	Terms []Term
	Docs  int64
}

// IDF is BM25's inverse document frequency of a lexeme found in df of n
// documents: ln(1 + (n - df + 0.5) / (df + 0.5)), always positive.
func IDF(df, n int64) float64 {
	if df < 0 {
		df = 0
	}
	if n < df {
		n = df
	}
	return math.Log(1 + (float64(n-df)+0.5)/(float64(df)+0.5))
}

// pairWeight scales the feature of two adjacent lexemes against a single
// lexeme's: a shared pair adds to a shared vocabulary, it does not replace
// it.
const pairWeight = 0.5

// IDFVector is the offline embedder's vector for a lexical text: each
// lexeme is hashed to a signed coordinate weighted (1 + ln tf) · idf, and
// each pair of lexemes adjacent in the text (by position, stop words
// skipped) weighted pairWeight · (1 + ln tf) · the mean idf of the two;
// the vector is then scaled to length 1, so cosine similarity measures
// shared vocabulary, rare words counting more than common ones.
func IDFVector(t LexicalText, dims int) []float32 {
	v := make([]float64, dims)
	type at struct {
		pos int32
		i   int
	}
	var seq []at
	idf := make([]float64, len(t.Terms))
	for i, term := range t.Terms {
		idf[i] = IDF(term.Docs, t.Docs)
		tf := max(len(term.Positions), 1)
		hashInto(v, term.Lexeme, (1+math.Log(float64(tf)))*idf[i])
		for _, p := range term.Positions {
			seq = append(seq, at{p, i})
		}
	}
	slices.SortFunc(seq, func(a, b at) int { return int(a.pos) - int(b.pos) })
	pairs := map[[2]int]int{}
	for k := 1; k < len(seq); k++ {
		if seq[k].i != seq[k-1].i {
			pairs[[2]int{seq[k-1].i, seq[k].i}]++
		}
	}
	for p, n := range pairs {
		w := pairWeight * (1 + math.Log(float64(n))) * (idf[p[0]] + idf[p[1]]) / 2
		hashInto(v, t.Terms[p[0]].Lexeme+" "+t.Terms[p[1]].Lexeme, w)
	}
	return unit(v)
}

// ErrNotLexical is EmbedLexical's error for an embedder that embeds texts
// through a provider: only the offline embedder weighs lexemes.
var ErrNotLexical = errors.New("this embedder is not the offline lexical one: embed texts with Embed")

// Lexical reports whether the embedder wants lexical texts (EmbedLexical)
// for memory documents and queries: true for the offline embedder.
func (e *Embedder) Lexical() bool { return e.offline }

// EmbedLexical returns the offline embedder's vector of each lexical text,
// in order (see IDFVector), and records the call in the status as Embed
// does.
func (e *Embedder) EmbedLexical(ctx context.Context, texts []LexicalText) ([][]float32, error) {
	if !e.offline {
		return nil, ErrNotLexical
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if err := ctx.Err(); err != nil {
			e.record(len(texts), err)
			return nil, err
		}
		out[i] = IDFVector(t, e.dims)
	}
	e.record(len(texts), nil)
	return out, nil
}
