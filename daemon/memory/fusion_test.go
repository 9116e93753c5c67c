package memory_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/sql/seam"
)

// fused is one row of a hybrid search, as both stores report it.
type fused struct {
	id                   uuid.UUID
	score                float64
	vectorRank, textRank int32
}

// TestRankFusionIsOne: session memory and knowledge fuse their vector and
// full-text candidates by the same weighted reciprocal rank fusion, with
// the store's weights. The same documents, with the same texts and
// vectors, in both stores rank the same, each scored weight/(k + rank)
// summed over the sides that found it.
func TestRankFusionIsOne(t *testing.T) {
	t.Parallel()
	const fusionK, vectorWeight, textWeight = 10, 0.5, 2
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	const agent = "fusion"
	if _, err := seam.Queries(pool).AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: agent, Dimensions: 3}); err != nil {
		t.Fatal(err)
	}
	// Eight documents: the nearer to [1 0 0] the lower their index; the
	// even ones mention apples, more often the lower their index modulo 3.
	// Five candidates a side leave 1 and 3 to the vector side, 6 to the
	// full-text side, and 0, 2 and 4 to both.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 8 {
			id := uuid.MustParse(fmt.Sprintf("00000000-0000-0000-0000-%012d", i+1))
			text := fmt.Sprintf("bananas only, document %d", i)
			if i%2 == 0 {
				text = strings.Repeat("apple ", i%3+1) + fmt.Sprintf("and more, document %d", i)
			}
			vec := pgvector.NewVector([]float32{1, float32(i) / 4, 0})
			for _, stmt := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO choir_fusion.memory_documents (id, session_id, tier, chunk_index, text, embedding_state)
				  VALUES ($1, gen_random_uuid(), 'mid_term', 0, $2, 'embedded')`, []any{id, text}},
				{`INSERT INTO choir_fusion.memory_embeddings (document_id, embedding) VALUES ($1, $2)`, []any{id, vec}},
				{`INSERT INTO choir_fusion.knowledge_documents (id, text, embedding_state) VALUES ($1, $2, 'embedded')`,
					[]any{id, text}},
				{`INSERT INTO choir_fusion.knowledge_embeddings (document_id, embedding) VALUES ($1, $2)`, []any{id, vec}},
			} {
				if _, err := tx.Exec(ctx, stmt.sql, stmt.args...); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	tuning := memory.SearchTuning{Candidates: 5, FusionK: fusionK, VectorWeight: vectorWeight, TextWeight: textWeight}
	store := memory.New(memory.Options{Pool: pool, Search: tuning, MaxConcurrentQueries: 4})
	// With one query slot the two sides run one after the other, not at
	// once: the same ranking.
	serial := memory.New(memory.Options{Pool: pool, Search: tuning, MaxConcurrentQueries: 1})
	var mem, know, memSerial []fused
	for _, st := range []struct {
		store *memory.Store
		name  string
		out   *[]fused
	}{{store, memory.StoreSession, &mem}, {store, memory.StoreKnowledge, &know}, {serial, memory.StoreSession, &memSerial}} {
		res, err := st.store.QueryAsOperator(ctx, []byte(`{"store":"`+st.name+`","target_agent":"`+agent+
			`","query":"apple","vector":[1,0,0],"limit":20}`))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res.Chunks {
			*st.out = append(*st.out, fused{c.DocumentID, c.Score, int32(c.VectorRank), int32(c.TextRank)})
		}
		for _, d := range res.Documents {
			*st.out = append(*st.out, fused{d.ID, d.Score, int32(d.VectorRank), int32(d.TextRank)})
		}
	}

	if len(mem) != 6 {
		t.Fatalf("memory search found %d documents, want 6: %v", len(mem), mem)
	}
	if fmt.Sprint(mem) != fmt.Sprint(memSerial) {
		t.Errorf("sides run at once and one after the other rank differently:\n  at once: %v\n  serial:  %v", mem, memSerial)
	}
	if fmt.Sprint(mem) != fmt.Sprint(know) {
		t.Errorf("the stores rank the same documents differently:\n  memory:    %v\n  knowledge: %v", mem, know)
	}
	var both, vectorOnly, textOnly int
	for _, f := range mem {
		want := 0.0
		for i, rank := range []int32{f.vectorRank, f.textRank} {
			if rank > 0 {
				want += []float64{vectorWeight, textWeight}[i] / (fusionK + float64(rank))
			}
		}
		if math.Abs(f.score-want) > 1e-12 {
			t.Errorf("document %s ranked %d and %d scores %v, want %v", f.id, f.vectorRank, f.textRank, f.score, want)
		}
		switch {
		case f.vectorRank > 0 && f.textRank > 0:
			both++
		case f.vectorRank > 0:
			vectorOnly++
		default:
			textOnly++
		}
	}
	if both != 3 || vectorOnly != 2 || textOnly != 1 {
		t.Errorf("found by both sides %d, by vectors only %d, by text only %d: want 3, 2, 1", both, vectorOnly, textOnly)
	}
}
