package embed

import (
	"context"
	"errors"
	"math"
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

// IDFVector is the offline embedder's vector for a lexical text: each
// lexeme is hashed to a signed coordinate weighted (1 + ln tf) · √idf, and
// the vector is scaled to length 1. Both a document and a query carry the
// square root, so in their cosine each shared word counts by its inverse
// document frequency once, as TF-IDF weighs a match: rare words count
// more than common ones.
//
// Measured on bench/recall's conversations (bench/recall/RESULTS.txt):
// weighing both sides by the full idf (idf² in the cosine) lost 0.06 of
// recall at 10 against unweighted words, and hashing pairs of adjacent
// lexemes as well lost recall at 1 without gaining at 10.
func IDFVector(t LexicalText, dims int) []float32 {
	v := make([]float64, dims)
	for _, term := range t.Terms {
		tf := max(len(term.Positions), 1)
		hashInto(v, term.Lexeme, (1+math.Log(float64(tf)))*math.Sqrt(IDF(term.Docs, t.Docs)))
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
