package main

import (
	"math"
	"math/rand/v2"
	"strings"
)

// corpus generates synthetic memory chunks whose words follow a Zipf law
// over a made-up vocabulary (so a few words occur in most chunks, as "the
// user", "file" or "error" do in real agent transcripts, and most words are
// rare) and whose embeddings cluster by topic (each chunk is its topic's
// centroid plus noise, as real embeddings of related text are).
type corpus struct {
	rng       *rand.Rand
	dims      int
	vocab     []string
	zipf      *rand.Zipf
	topics    int
	topicWord [][]int     // per topic, the vocabulary indexes it favours
	centroid  [][]float32 // per topic, a unit vector
	noise     float64
	// df counts the chunks each vocabulary word occurs in.
	df []int
}

const (
	vocabSize     = 30000
	topicCount    = 200
	topicWords    = 40
	topicShare    = 0.2
	minChunkWords = 60
	maxChunkWords = 160
)

func newCorpus(seed uint64, dims int) *corpus {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := &corpus{rng: rng, dims: dims, topics: topicCount, noise: 0.9}
	seen := map[string]bool{}
	for len(c.vocab) < vocabSize {
		w := word(rng)
		if !seen[w] {
			seen[w] = true
			c.vocab = append(c.vocab, w)
		}
	}
	c.zipf = rand.NewZipf(rng, 1.07, 2, vocabSize-1)
	c.df = make([]int, vocabSize)
	for range topicCount {
		ws := make([]int, topicWords)
		for i := range ws {
			// Topic words are mid-frequency: ranks 200 to 5000.
			ws[i] = 200 + rng.IntN(4800)
		}
		c.topicWord = append(c.topicWord, ws)
		c.centroid = append(c.centroid, c.unit(nil, 0))
	}
	return c
}

var syllables = strings.Fields("ka lo mi nu ve ra so ti pa de go lu be zi fo ha ne ri mo ta sa va ke li du po")

// word makes a pronounceable non-English word, so Postgres' English stop
// word list and stemmer leave the distribution alone.
func word(rng *rand.Rand) string {
	var b strings.Builder
	for range 2 + rng.IntN(3) {
		b.WriteString(syllables[rng.IntN(len(syllables))])
	}
	b.WriteByte("nrstlx"[rng.IntN(6)])
	return b.String()
}

// unit returns a random unit vector, or base plus Gaussian noise of the
// given scale, normalised.
func (c *corpus) unit(base []float32, scale float64) []float32 {
	v := make([]float32, c.dims)
	var n float64
	for i := range v {
		x := c.rng.NormFloat64()
		if base != nil {
			x = float64(base[i]) + scale*x/math.Sqrt(float64(c.dims))
		}
		v[i] = float32(x)
		n += x * x
	}
	n = math.Sqrt(n)
	for i := range v {
		v[i] = float32(float64(v[i]) / n)
	}
	return v
}

// chunk returns one chunk's topic, text and embedding.
func (c *corpus) chunk() (int, string, []float32) {
	topic := c.rng.IntN(c.topics)
	n := minChunkWords + c.rng.IntN(maxChunkWords-minChunkWords+1)
	var b strings.Builder
	seen := map[int]bool{}
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		var w int
		if c.rng.Float64() < topicShare {
			w = c.topicWord[topic][c.rng.IntN(topicWords)]
		} else {
			w = int(c.zipf.Uint64())
		}
		b.WriteString(c.vocab[w])
		if !seen[w] {
			seen[w] = true
			c.df[w]++
		}
	}
	return topic, b.String(), c.unit(c.centroid[topic], c.noise)
}

// queryVector is a query about topic: its centroid plus noise.
func (c *corpus) queryVector(topic int) []float32 { return c.unit(c.centroid[topic], c.noise) }
