// Package toolsearch is choird's semantic tool search: one index per agent
// image, keyed by the hash of its tool manifest, holding every tool's
// search text embedded by the memory pipeline's embedder, and searched by
// the hybrid SQL memory search uses (vector and full-text candidates fused
// by choir_rank_fusion). Agents reach it through EXECUTE_HOST_TOOL: the
// discovery tools call choir.tools.semantic_search, and send their corpus
// with choir.tools.index when choird has no index for their hash, which is
// how a new image's index is built.
package toolsearch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	pgvector "github.com/pgvector/pgvector-go"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc/toolindex"
	"github.com/choirhq/choir/sql/seam"
)

// Names of the host tools.
const (
	SearchTool = "choir.tools.semantic_search"
	IndexTool  = "choir.tools.index"
)

// ErrInvalidInput is wrapped by every refused input; agentapi turns it into
// an error result for the model.
var ErrInvalidInput = errors.New("invalid input")

// IndexMissing is the error a search answers when choird has no index for
// the manifest hash: the agent then sends its corpus with IndexTool.
const IndexMissing = "index_missing"

// Embedder embeds texts: daemon/memory's Store, whose embedder is the
// memory pipeline's. No vectors and no error means no embedder.
type Embedder interface {
	Embed(ctx context.Context, texts []string) (vecs [][]float32, model string, err error)
}

// Index is the tool index.
type Index struct {
	pool   *pgxpool.Pool
	emb    Embedder
	logger *slog.Logger
}

// New returns the index over pool, embedding with emb (nil: full text
// only).
func New(pool *pgxpool.Pool, emb Embedder, logger *slog.Logger) *Index {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Index{pool: pool, emb: emb, logger: logger}
}

var hashRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// maxEntries bounds one manifest.
const maxEntries = 5000

// ErrHashMismatch is an index whose tools do not hash to the manifest
// hash it names: an agent filing tools of its own under another image's
// hash would poison every search of that image.
var ErrHashMismatch = errors.New("manifest hash does not match the tools")

// Build indexes a manifest's tools unless it is indexed already. The hash
// is recomputed from the tools (toolindex.Hash) and a mismatch refused.
// Texts are embedded in one batch; if the embedder fails they are indexed
// without vectors, for full-text search, and the failure is logged.
func (x *Index) Build(ctx context.Context, hash string, entries []toolindex.Entry) (indexed int, err error) {
	if !hashRe.MatchString(hash) {
		return 0, fmt.Errorf("%w: manifest_hash %q: want 64 lowercase hex digits", ErrInvalidInput, hash)
	}
	if len(entries) == 0 || len(entries) > maxEntries {
		return 0, fmt.Errorf("%w: tools: %d entries, want 1 to %d", ErrInvalidInput, len(entries), maxEntries)
	}
	for i, e := range entries {
		if e.Name == "" {
			return 0, fmt.Errorf("%w: tools[%d].name is empty", ErrInvalidInput, i)
		}
	}
	if got := toolindex.Hash(entries); got != hash {
		return 0, fmt.Errorf("%w: %w: manifest_hash %s does not match the %d tools sent (they hash to %s); "+
			"send the corpus and the hash that Registry.Corpus returns together", ErrInvalidInput, ErrHashMismatch, hash, len(entries), got)
	}
	q := seam.Queries(x.pool)
	if n, err := q.ToolIndexCount(ctx, hash); err != nil {
		return 0, fmt.Errorf("count tool index %s: %w", hash, err)
	} else if n > 0 {
		return int(n), nil
	}
	texts := make([]string, len(entries))
	for i, e := range entries {
		texts[i] = e.Text
	}
	vecs, model, eerr := x.emb.Embed(ctx, texts)
	if eerr != nil {
		x.logger.WarnContext(ctx, "tool index built without vectors: full-text search only",
			slog.String("manifest_hash", hash), slog.String("error", eerr.Error()))
		vecs = nil
	}
	err = pgx.BeginFunc(ctx, x.pool, func(tx pgx.Tx) error {
		qt := seam.Queries(tx)
		for i, e := range entries {
			p := db.ToolIndexInsertParams{ManifestHash: hash, Name: e.Name, SearchText: e.Text}
			if vecs != nil {
				v := pgvector.NewVector(vecs[i])
				p.Embedding, p.EmbeddingModel = &v, &model
			}
			if err := qt.ToolIndexInsert(ctx, p); err != nil {
				return fmt.Errorf("index tool %s: %w", e.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	x.logger.InfoContext(ctx, "tool index built", slog.String("manifest_hash", hash),
		slog.Int("tools", len(entries)), slog.Bool("vectors", vecs != nil))
	return len(entries), nil
}

// Search returns up to limit tool names of a manifest for a query, best
// first; missing reports that the manifest has no index.
func (x *Index) Search(ctx context.Context, hash, query string, limit int) (names []string, missing bool, err error) {
	if !hashRe.MatchString(hash) {
		return nil, false, fmt.Errorf("%w: manifest_hash %q: want 64 lowercase hex digits", ErrInvalidInput, hash)
	}
	if strings.TrimSpace(query) == "" {
		return nil, false, fmt.Errorf("%w: query is empty", ErrInvalidInput)
	}
	limit = min(max(limit, 1), 50)
	q := seam.Queries(x.pool)
	n, err := q.ToolIndexCount(ctx, hash)
	if err != nil {
		return nil, false, fmt.Errorf("count tool index %s: %w", hash, err)
	}
	if n == 0 {
		return nil, true, nil
	}
	p := db.ToolIndexSearchHybridParams{ManifestHash: hash, QueryText: query, MaxResults: int32(limit),
		Candidates: int32(max(3*limit, 30))}
	if vecs, model, err := x.emb.Embed(ctx, []string{query}); err != nil {
		x.logger.WarnContext(ctx, "tool search query not embedded: full text only", slog.String("error", err.Error()))
	} else if len(vecs) == 1 {
		v := pgvector.NewVector(vecs[0])
		p.QueryVector, p.EmbeddingModel = &v, &model
	}
	rows, err := q.ToolIndexSearchHybrid(ctx, p)
	if err != nil {
		return nil, false, fmt.Errorf("search tool index %s: %w", hash, err)
	}
	names = make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.Name
	}
	return names, false, nil
}

// HostTool is agentapi's host tool signature.
type HostTool = func(ctx context.Context, agentID string, input json.RawMessage) (json.RawMessage, error)

// HostTools returns SearchTool and IndexTool; wrap turns a refused input
// into the host's error for the model.
func (x *Index) HostTools(wrap func(error) error) map[string]HostTool {
	return map[string]HostTool{
		SearchTool: func(ctx context.Context, agentID string, in json.RawMessage) (json.RawMessage, error) {
			// Embedding the query is billed to the caller's caps.
			ctx = embed.ForAgent(ctx, agentID, "tool_search")
			var req struct {
				Query        string `json:"query"`
				Limit        int    `json:"limit"`
				ManifestHash string `json:"manifest_hash"`
			}
			if err := json.Unmarshal(in, &req); err != nil {
				return nil, wrap(fmt.Errorf("%w: %v", ErrInvalidInput, err))
			}
			names, missing, err := x.Search(ctx, req.ManifestHash, req.Query, req.Limit)
			if err != nil {
				return nil, wrap(err)
			}
			if missing {
				return json.Marshal(map[string]any{"tools": []string{}, "error": IndexMissing})
			}
			return json.Marshal(map[string]any{"tools": names})
		},
		IndexTool: func(ctx context.Context, agentID string, in json.RawMessage) (json.RawMessage, error) {
			// Embedding the corpus is billed to the agent that sent it.
			ctx = embed.ForAgent(ctx, agentID, "tool_index")
			var req struct {
				ManifestHash string            `json:"manifest_hash"`
				Tools        []toolindex.Entry `json:"tools"`
			}
			if err := json.Unmarshal(in, &req); err != nil {
				return nil, wrap(fmt.Errorf("%w: %v", ErrInvalidInput, err))
			}
			n, err := x.Build(ctx, req.ManifestHash, req.Tools)
			if errors.Is(err, ErrHashMismatch) {
				x.logger.WarnContext(ctx, "tool index refused: manifest hash does not match the tools sent",
					slog.String("agent_id", agentID), slog.String("manifest_hash", req.ManifestHash), slog.Int("tools", len(req.Tools)))
			}
			if err != nil {
				return nil, wrap(err)
			}
			return json.Marshal(map[string]any{"indexed": n})
		},
	}
}
