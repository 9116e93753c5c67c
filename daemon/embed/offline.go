package embed

import (
	"context"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// OfflineModel is the model name stored with the offline embedder's
// vectors. Changing the algorithm below means a new name, so that
// choirctl memory reembed finds the old vectors (v1 hashed Go-tokenised
// words, all weighing the same).
const OfflineModel = "choir-offline-lexical-idf-v2"

// NewOffline returns the built-in lexical embedder for vectors of dims
// dimensions. It needs no network and is deterministic.
//
// Memory documents and queries are embedded through EmbedLexical: their
// Postgres full-text lexemes (the tsv column's, to_tsvector('english')
// for a query), each weighted by (1 + ln tf) times the square root of its
// inverse document frequency in the agent's store (see IDFVector). Embed, for callers
// without the store's statistics (tool search), hashes Go-tokenised words
// without IDF (see LexicalVector): its vectors compare only with each
// other.
func NewOffline(dims int) *Embedder {
	return newEmbedder("offline", OfflineModel, "", dims, true,
		func(ctx context.Context, texts []string) ([][]float32, int64, error) {
			out := make([][]float32, len(texts))
			for i, t := range texts {
				if err := ctx.Err(); err != nil {
					return nil, 0, err
				}
				out[i] = LexicalVector(t, dims)
			}
			return out, 0, nil
		})
}

// LexicalVector is the offline embedder's vector for text without the
// store's statistics (Embed): its words are normalised (lower case,
// English stop words dropped, common suffixes stripped) and each word and
// each pair of adjacent words is hashed to a signed coordinate (the
// "hashing trick"), weighted by 1 + ln(count); the vector is then scaled
// to length 1, so cosine similarity measures shared vocabulary.
func LexicalVector(text string, dims int) []float32 {
	words := Words(text)
	weights := map[string]float64{}
	for i, w := range words {
		weights[w]++
		if i > 0 {
			weights[words[i-1]+" "+w] += 0.5
		}
	}
	v := make([]float64, dims)
	for f, n := range weights {
		hashInto(v, f, 1+math.Log(n))
	}
	return unit(v)
}

// hashInto adds weight w to the signed coordinate of v that feature f
// hashes to.
func hashInto(v []float64, f string, w float64) {
	h := fnv.New64a()
	h.Write([]byte(f))
	x := h.Sum64()
	if x>>63 == 1 {
		w = -w
	}
	v[x%uint64(len(v))] += w
}

// unit scales v to length 1; a zero v gives a fixed unit vector, since a
// zero vector has no cosine distance to anything.
func unit(v []float64) []float32 {
	dims := len(v)
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	out := make([]float32, dims)
	if norm == 0 {
		out[0] = 1
		return out
	}
	norm = math.Sqrt(norm)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

// Words splits text into the normalised words the offline embedder hashes.
func Words(text string) []string {
	fields := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	out := fields[:0]
	for _, f := range fields {
		if stopWords[f] {
			continue
		}
		out = append(out, stem(f))
	}
	return out
}

// stem strips a few English suffixes, enough that "deploys", "deployed"
// and "deploying" meet.
func stem(w string) string {
	for _, s := range []struct{ suffix, repl string }{
		{"ies", "y"}, {"ing", ""}, {"ed", ""}, {"s", ""},
	} {
		if strings.HasSuffix(w, s.suffix) && len(w)-len(s.suffix)+len(s.repl) >= 3 && !strings.HasSuffix(w, "ss") {
			return w[:len(w)-len(s.suffix)] + s.repl
		}
	}
	return w
}

var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about above after again against all am an and any are as at be because
		been before being below between both but by can could did do does doing down during each few for from
		further had has have having he her here hers herself him himself his how i if in into is it its itself
		just me more most my myself no nor not now of off on once only or other our ours ourselves out over own
		same she should so some such than that the their theirs them themselves then there these they this
		those through to too under until up very was we were what when where which while who whom why will with
		would you your yours yourself yourselves`) {
		m[w] = true
	}
	return m
}()
