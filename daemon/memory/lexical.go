package memory

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/db/agentdb"
)

// LexicalEmbedder is an embedder that embeds memory documents and queries
// as lexical texts: their full-text lexemes weighed by the store's
// statistics (daemon/embed's offline embedder, when Lexical reports true).
// The embedding worker and semantic queries detect it; an API embedder
// implements it with Lexical false, or not at all, and embeds texts.
type LexicalEmbedder interface {
	Lexical() bool
	EmbedLexical(ctx context.Context, texts []embed.LexicalText) ([][]float32, error)
}

// AsLexical returns e as a LexicalEmbedder when it wants lexical texts,
// else nil.
func AsLexical(e any) LexicalEmbedder {
	if lx, ok := e.(LexicalEmbedder); ok && lx.Lexical() {
		return lx
	}
	return nil
}

// lexical returns the store's embedder as a LexicalEmbedder when it wants
// lexical texts, else nil.
func (s *Store) lexical() LexicalEmbedder { return AsLexical(s.embedder) }

// statsStore names the full-text statistics (lexeme_totals.store) of a
// query store: memory for the session store, knowledge for knowledge.
func statsStore(store string) string {
	if store == StoreKnowledge {
		return EmbedStoreKnowledge
	}
	return EmbedStoreMemory
}

// embedQuery embeds the text of a query of agent target's store: as a
// lexical text with today's statistics for a lexical embedder, else
// through the provider.
func (s *Store) embedQuery(ctx context.Context, target, store, text string) ([]float32, error) {
	if s.lexical() != nil {
		return s.lexicalQueryVector(ctx, scope{schema: target}, store, text)
	}
	vecs, err := s.embedder.Embed(ctx, []string{text})
	if err != nil {
		return nil, err
	}
	return vecs[0], nil
}

// EmbedQuery returns the vector that semantic search would make of text
// for agent target's store (session or knowledge): what a benchmark passes
// as a query vector to measure the vector side alone.
func (s *Store) EmbedQuery(ctx context.Context, target, store, text string) ([]float32, error) {
	if s.embedder == nil {
		return nil, fmt.Errorf("no embedder configured")
	}
	return s.embedQuery(ctx, target, store, text)
}

// lexicalQueryVector embeds a query text for a lexical embedder: its
// lexemes (to_tsvector('english'), as the documents' tsv) and their
// document counts in the store, read in one short read-only transaction
// in the target agent's schema with choird's role (the statistics hold
// nothing a query of that memory could not read).
func (s *Store) lexicalQueryVector(ctx context.Context, sc scope, store, text string) ([]float32, error) {
	var lt embed.LexicalText
	err := s.inScope(ctx, sc, true, func(_ pgx.Tx, aq *agentdb.Queries) error {
		rows, err := aq.LexicalQueryTerms(ctx, agentdb.LexicalQueryTermsParams{Store: statsStore(store), QueryText: text})
		if err != nil {
			return fmt.Errorf("read the word statistics of agent %s: %w", sc.schema, err)
		}
		for _, r := range rows {
			lt.Terms = append(lt.Terms, embed.Term{Lexeme: r.Lexeme, Positions: r.Positions, Docs: int64(r.Docs)})
			lt.Docs = r.Total
		}
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	vecs, err := s.lexical().EmbedLexical(ctx, []embed.LexicalText{lt})
	if err != nil {
		return nil, err
	}
	return vecs[0], nil
}

// lexicalDrift reads how far each store's IDF weights have drifted from
// the basis its vectors were last re-embedded with (LexemeDrift), in nats.
func lexicalDrift(ctx context.Context, aq *agentdb.Queries) (mem, know float64, err error) {
	for _, d := range []struct {
		store string
		out   *float64
	}{{EmbedStoreMemory, &mem}, {EmbedStoreKnowledge, &know}} {
		r, err := aq.LexemeDrift(ctx, d.store)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return 0, 0, fmt.Errorf("measure the drift of %s word statistics: %w", d.store, err)
		}
		*d.out = r.Drift
	}
	return mem, know, nil
}
