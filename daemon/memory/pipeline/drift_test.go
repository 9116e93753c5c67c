package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"testing"

	"github.com/pgvector/pgvector-go"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/daemon/memory/pipeline"
)

// cosine is the cosine similarity of two vectors.
func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestIDFEmbedding loads a knowledge base where a name is in nearly every
// document, and checks that IDF weights rank the document with the rare
// word first (v1 did not), that query and document vectors agree, that
// drift re-embeds once and rebases, that a tiny store never re-embeds, and
// that v1 vectors are stale for reembed.
func TestIDFEmbedding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupMemory(t, embed.NewOffline(testDims), 1)
	b.provision(t, "idf")
	b.provision(t, "tiny")
	store := memory.New(memory.Options{Pool: b.pool, Inserter: b.client, Embedder: embed.NewOffline(testDims)})
	const common, rare = "Alice met Bob", "the zeppelin drifted over the harbour cranes at dusk"
	put := func(agent, key, text string) {
		t.Helper()
		if _, err := store.KnowledgePut(ctx, agent, key, text, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("idf", "common", common)
	put("idf", "rare", rare)
	for i := range 130 {
		put("idf", fmt.Sprintf("filler-%d", i), fmt.Sprintf("Alice wrote note %d about topic%d and topic%d", i, i%7, i%11))
	}
	for i := range 20 {
		put("tiny", fmt.Sprintf("t-%d", i), fmt.Sprintf("word%d other%d", i, i))
	}
	b.waitIdle(t)

	first, err := pipeline.CheckDrift(ctx, b.pool, b.client, discard(), "idf", "knowledge", embed.OfflineModel)
	if err != nil {
		t.Fatal(err)
	}
	b.waitIdle(t)
	t.Run("DriftReembedsOnceAndRebases", func(t *testing.T) {
		again, err := pipeline.CheckDrift(ctx, b.pool, b.client, discard(), "idf", "knowledge", embed.OfflineModel)
		if err != nil {
			t.Fatal(err)
		}
		// The worker checks after each batch, so it may have re-embedded
		// during the load already: one way or the other, once.
		if again.Reembedded != 0 || again.Drift >= pipeline.DriftThreshold {
			t.Errorf("second check: %+v, want no re-embed and a drift under the threshold after %+v", again, first)
		}
		if n := b.count(t, "SELECT count(*) FROM choir_idf.idf_basis_totals WHERE docs >= $1", pipeline.DriftMinDocs); n != 1 {
			t.Errorf("basis of %d stores with at least %d documents, want 1", n, pipeline.DriftMinDocs)
		}
	})
	t.Run("TinyStoreDoesNotThrash", func(t *testing.T) {
		r, err := pipeline.CheckDrift(ctx, b.pool, b.client, discard(), "tiny", "knowledge", embed.OfflineModel)
		if err != nil {
			t.Fatal(err)
		}
		if r.Reembedded != 0 || r.Drift < pipeline.DriftThreshold {
			t.Errorf("tiny store: %+v, want a large drift left alone below %d documents", r, pipeline.DriftMinDocs)
		}
	})
	t.Run("RareWordRanksFirst", func(t *testing.T) {
		const q = "alice zeppelin"
		if cosine(embed.LexicalVector(q, testDims), embed.LexicalVector(common, testDims)) <=
			cosine(embed.LexicalVector(q, testDims), embed.LexicalVector(rare, testDims)) {
			t.Fatal("v1 already ranks the rare-word document first: the test proves nothing")
		}
		v, err := store.EmbedQuery(ctx, "idf", memory.StoreKnowledge, q)
		if err != nil {
			t.Fatal(err)
		}
		var cRare, cCommon float64
		for key, c := range map[string]*float64{"rare": &cRare, "common": &cCommon} {
			var e pgvector.Vector
			if err := b.pool.QueryRow(ctx, `SELECT e.embedding FROM choir_idf.knowledge_embeddings e
				JOIN choir_idf.knowledge_documents d ON d.id = e.document_id WHERE d.key = $1`, key).Scan(&e); err != nil {
				t.Fatal(err)
			}
			*c = cosine(v, e.Slice())
		}
		if cRare <= cCommon {
			t.Errorf("cosine to the rare-word document %.3f, to the common-word one %.3f: want rare first", cRare, cCommon)
		}
	})
	t.Run("QueryAndDocumentVectorsAgree", func(t *testing.T) {
		v, err := store.EmbedQuery(ctx, "idf", memory.StoreKnowledge, rare)
		if err != nil {
			t.Fatal(err)
		}
		var e pgvector.Vector
		if err := b.pool.QueryRow(ctx, `SELECT e.embedding FROM choir_idf.knowledge_embeddings e
			JOIN choir_idf.knowledge_documents d ON d.id = e.document_id WHERE d.key = 'rare'`).Scan(&e); err != nil {
			t.Fatal(err)
		}
		if c := cosine(v, e.Slice()); c < 0.95 {
			t.Errorf("the query of a document's own text has cosine %.4f to its vector, want 1", c)
		}
	})
	t.Run("V1VectorsAreStale", func(t *testing.T) {
		if _, err := b.pool.Exec(ctx, `UPDATE choir_idf.knowledge_embeddings SET model = 'choir-offline-lexical-v1'
			WHERE document_id = (SELECT id FROM choir_idf.knowledge_documents WHERE key = 'common')`); err != nil {
			t.Fatal(err)
		}
		res, err := store.Reembed(ctx, memory.ReembedOptions{AgentID: "idf"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || res[0].Knowledge != 1 {
			t.Errorf("reembed: %+v, want the one v1 vector", res)
		}
		b.waitIdle(t)
	})
}

// discard is a logger that drops everything.
func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
