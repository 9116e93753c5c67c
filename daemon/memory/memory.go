// Package memory is choird's MemoryStore: the session memory (mid-term and
// long-term tiers) and knowledge of every agent, kept in Postgres with one
// schema and one role per agent (spec sections 11 and 23).
//
// Postgres enforces isolation. An agent's own reads and writes run in a
// transaction that switches to the agent's role and puts its schema on
// search_path (EnterAgentScope), so the generated queries in db/agentdb
// name tables unqualified and cannot reach another agent's schema: an
// attempt is refused by Postgres and reported as ErrPermission. Reads of
// another agent's memory (spec 11.2) run in a read-only transaction on
// choird's own connection with that agent's schema on search_path.
//
// [Store.Query] and [Store.Upsert] serve the tools choir.memory.query and
// choir.memory.upsert: each takes the calling agent's id and the tool's
// JSON input, decoded strictly (QuerySchema and UpsertSchema describe it),
// and returns a result that marshals to the tool's JSON output. Invalid
// input is an *InputError naming the field. The operator's functions
// (history, show, delete, restore, reembed) serve choirctl memory.
//
// Writes never wait for embeddings: a changed document is stored with
// embedding_state pending and its embedding job is enqueued in the same
// transaction (EmbedArgs). Until the vector exists, and for good if the
// provider keeps failing, the document is found by full-text search. The
// memory pipeline's job kinds live here too (schedule.go); its workers,
// which embed, chunk ended sessions and promote tiers, are in
// daemon/memory/pipeline.
package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/db/agentdb"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Embedder is what the store needs of an embedding provider: query
// vectors, the model name stored with vectors, and its status.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Model() string
	Dimensions() int
	Status() admin.EmbeddingStatus
}

// Errors, matched with errors.Is.
var (
	// ErrInvalidInput is wrapped by every *InputError.
	ErrInvalidInput = errors.New("invalid input")
	// ErrPermission reports a write that Postgres refused because it
	// targets another agent's memory, or a read of another agent's memory
	// that agent's memory_readable_by does not allow.
	ErrPermission = errors.New("permission denied")
	// ErrUnknownAgent reports an agent without a memory schema.
	ErrUnknownAgent = errors.New("unknown agent")
	// ErrConflict reports a restore whose key another document has taken,
	// or a write that expected another version (*VersionConflictError).
	ErrConflict = errors.New("conflict")
	// ErrBusy reports a query that ran past Options.StatementTimeout, or
	// waited too long for one of Options.MaxConcurrentQueries.
	ErrBusy = errors.New("memory busy")
)

// VersionConflictError refuses a knowledge write that expected a version
// other than the document's current one: someone else wrote (or deleted)
// it after the writer read it. Nothing was written. It matches
// ErrConflict.
type VersionConflictError struct {
	// Ref names the document: its key or id.
	Ref string
	// Expected is the version the writer read (0: the key was new).
	Expected int
	// Current is the document's version now: 0 when no document has the
	// key or id, else the version that changed it (or, with Deleted, the
	// version that deleted it).
	Current int
	Deleted bool
}

func (e *VersionConflictError) Error() string {
	ref := "knowledge document with " + e.Ref
	switch {
	case e.Deleted:
		return fmt.Sprintf("%s was deleted (version %d) after version %d was read; nothing was written: "+
			"read it again before writing (its history keeps every version)", ref, e.Current, e.Expected)
	case e.Current == 0:
		return fmt.Sprintf("no %s exists, but version %d was expected; nothing was written", ref, e.Expected)
	case e.Expected == 0:
		return fmt.Sprintf("%s already exists (version %d), but a new document was expected; nothing was written: "+
			"read version %d and write on top of it", ref, e.Current, e.Current)
	}
	return fmt.Sprintf("%s is at version %d, not version %d that was read: it changed meanwhile, and nothing was "+
		"written; read version %d and write your change on top of it", ref, e.Current, e.Expected, e.Current)
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *VersionConflictError) Is(target error) bool { return target == ErrConflict }

// InputError is a tool input that cannot be run, with the field at fault.
type InputError struct {
	// Field is the JSON path of the field ("$" for the whole input).
	Field   string
	Message string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Message }

// Is makes errors.Is(err, ErrInvalidInput) hold.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

func inputErr(field, format string, args ...any) error {
	return &InputError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Options configure a Store.
type Options struct {
	Pool *pgxpool.Pool
	// Inserter enqueues embedding jobs in the writing transaction: choird's
	// River client, or an insert-only one in choirctl. Required for writes.
	Inserter Inserter
	// Embedder embeds query texts for semantic search; nil leaves semantic
	// search to full text unless the caller passes a vector.
	Embedder Embedder
	Logger   *slog.Logger
	// QueryEmbedTimeout bounds embedding one query (default 5 s).
	QueryEmbedTimeout time.Duration
	// QueryEmbedCooldown is how long semantic queries skip the embedder
	// after it failed, answering from full text at once (default 30 s).
	QueryEmbedCooldown time.Duration
	// Search tunes hybrid search; zero fields take DefaultSearchTuning's.
	Search SearchTuning
	// StatementTimeout bounds each statement of a query (default
	// DefaultStatementTimeout), so that a pathological search cannot hold a
	// connection of choird's pool.
	StatementTimeout time.Duration
	// MaxConcurrentQueries bounds the connections memory queries hold at
	// once, all agents together, so that one agent's burst of searches
	// cannot take every connection of the pool that River and the other
	// agents share (default half the pool, at least 1). A query waits its
	// turn at most StatementTimeout; a hybrid search takes a second slot
	// for its other side only when one is free.
	MaxConcurrentQueries int
	// ReadersFunc returns the agents that may read target's memory besides
	// target itself (agents.<target>.memory_readable_by in the running
	// configuration). Nil: no agent reads another's.
	ReadersFunc func(target string) []string
}

// DefaultStatementTimeout is a query statement's default bound: a hybrid
// search takes 1-70 ms here (ENVIRONMENT.md), so 5 s is only ever hit by
// something wrong.
const DefaultStatementTimeout = 5 * time.Second

// SearchTuning sizes and weighs hybrid search (see queries/agent/memory.sql).
// A zero field takes DefaultSearchTuning's value, or for the fusion with
// the offline lexical embedder OfflineFusion's.
type SearchTuning struct {
	// Candidates is how many rows each side (vector, full text) brings to
	// the fusion.
	Candidates int
	// PerTerm is how many best matches of each query word the RUM index
	// hands the full-text ranking.
	PerTerm int
	// PostingBudget bounds the matches the words that find matches have
	// in all, rarest word first; commoner words only rank.
	PostingBudget int
	// TextRecent is how many of the newest documents are checked for
	// full-text matches besides those; TextRecentWide how many when a
	// query word was too common to find matches by (the check stops at
	// Candidates matches).
	TextRecent, TextRecentWide int
	// EFSearch is hnsw.ef_search.
	EFSearch int
	// FusionK, VectorWeight and TextWeight make the weighted reciprocal
	// rank fusion: weight / (FusionK + rank) from each side.
	FusionK                  int
	VectorWeight, TextWeight float64
}

// DefaultSearchTuning is the tuning measured by bench/hybrid (sizes, and
// the posting budget: a RUM scan costs about a microsecond a match). Its
// fusion, plain reciprocal rank fusion with k = 60, is for an embedding
// provider's vectors, which nothing here measures: they carry meaning the
// full-text side does not, and each side weighs the same.
var DefaultSearchTuning = SearchTuning{Candidates: 30, PerTerm: 30, PostingBudget: 3000, TextRecent: 100,
	TextRecentWide: 2000,
	EFSearch:       64, FusionK: 60, VectorWeight: 1, TextWeight: 1}

// OfflineFusion is the fusion with the offline lexical embedder, chosen on
// bench/recall's tune half and checked on its held-out half
// (bench/recall/RESULTS.txt): its vectors only weigh the same words as
// full text does, differently, so full text leads and the vectors mostly
// break its ties.
var OfflineFusion = SearchTuning{FusionK: 5, VectorWeight: 1, TextWeight: 4}

// withDefaults returns t with each zero field set to DefaultSearchTuning's,
// the fusion's to OfflineFusion's when lexical (the offline embedder).
func (t SearchTuning) withDefaults(lexical bool) SearchTuning {
	d := DefaultSearchTuning
	if lexical {
		d.FusionK, d.VectorWeight, d.TextWeight = OfflineFusion.FusionK, OfflineFusion.VectorWeight,
			OfflineFusion.TextWeight
	}
	t.Candidates = cmp.Or(t.Candidates, d.Candidates)
	t.PerTerm = cmp.Or(t.PerTerm, d.PerTerm)
	t.PostingBudget = cmp.Or(t.PostingBudget, d.PostingBudget)
	t.TextRecent = cmp.Or(t.TextRecent, d.TextRecent)
	t.TextRecentWide = cmp.Or(t.TextRecentWide, d.TextRecentWide)
	t.EFSearch = cmp.Or(t.EFSearch, d.EFSearch)
	t.FusionK = cmp.Or(t.FusionK, d.FusionK)
	t.VectorWeight = cmp.Or(t.VectorWeight, d.VectorWeight)
	t.TextWeight = cmp.Or(t.TextWeight, d.TextWeight)
	return t
}

// Store is the MemoryStore.
type Store struct {
	pool     *pgxpool.Pool
	inserter Inserter
	embedder Embedder
	logger   *slog.Logger
	tuning   SearchTuning
	readers  func(target string) []string

	queryEmbedTimeout  time.Duration
	queryEmbedCooldown time.Duration
	statementTimeout   time.Duration
	// querySlots holds a token per query running (MaxConcurrentQueries).
	querySlots chan struct{}
	now        func() time.Time

	mu           sync.Mutex
	dims         map[string]int
	embedFailAt  time.Time
	embedFailErr string
}

// New returns a Store.
func New(opts Options) *Store {
	s := &Store{pool: opts.Pool, inserter: opts.Inserter, embedder: opts.Embedder, logger: opts.Logger,
		tuning: opts.Search, queryEmbedTimeout: opts.QueryEmbedTimeout, queryEmbedCooldown: opts.QueryEmbedCooldown,
		now: time.Now, dims: map[string]int{}, readers: opts.ReadersFunc}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.tuning = s.tuning.withDefaults(s.lexical() != nil)
	if s.queryEmbedTimeout <= 0 {
		s.queryEmbedTimeout = 5 * time.Second
	}
	if s.queryEmbedCooldown <= 0 {
		s.queryEmbedCooldown = 30 * time.Second
	}
	s.statementTimeout = cmp.Or(opts.StatementTimeout, DefaultStatementTimeout)
	slots := opts.MaxConcurrentQueries
	if slots <= 0 {
		slots = 1
		if opts.Pool != nil {
			slots = max(1, int(opts.Pool.Config().MaxConns)/2)
		}
	}
	s.querySlots = make(chan struct{}, slots)
	return s
}

// acquireQuery waits for a query slot, at most StatementTimeout; release
// returns it.
func (s *Store) acquireQuery(ctx context.Context) (release func(), err error) {
	select {
	case s.querySlots <- struct{}{}:
		return func() { <-s.querySlots }, nil
	default:
	}
	t := time.NewTimer(s.statementTimeout)
	defer t.Stop()
	select {
	case s.querySlots <- struct{}{}:
		return func() { <-s.querySlots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, fmt.Errorf("%w: %d memory queries already running for %s; retry shortly", ErrBusy, cap(s.querySlots), s.statementTimeout)
	}
}

// trySlot takes a second query slot if one is free now, without waiting:
// a hybrid search runs its two sides at once only then (each side holds
// a connection), so memory queries never hold more connections than
// there are slots, and a search holding one slot never waits for another.
func (s *Store) trySlot() (release func(), ok bool) {
	select {
	case s.querySlots <- struct{}{}:
		return func() { <-s.querySlots }, true
	default:
		return nil, false
	}
}

// statementTimeoutMS is StatementTimeout in Postgres' unit.
func (s *Store) statementTimeoutMS() int32 { return int32(s.statementTimeout.Milliseconds()) }

// dimensions returns the vector size of an agent's schema, which also
// proves the agent has one.
func (s *Store) dimensions(ctx context.Context, agentID string) (int, error) {
	if !config.ValidName(agentID) {
		return 0, fmt.Errorf("%w %q: agent ids match %s", ErrUnknownAgent, agentID, config.NamePattern)
	}
	s.mu.Lock()
	d, ok := s.dims[agentID]
	s.mu.Unlock()
	if ok {
		return d, nil
	}
	row, err := seam.Queries(s.pool).AgentSchemaGet(ctx, agentID)
	if errors.Is(err, choirsql.ErrNotFound) {
		return 0, fmt.Errorf("%w %s: it has no memory schema (agents are provisioned when choird starts "+
			"with them in config.json)", ErrUnknownAgent, agentID)
	}
	if err != nil {
		return 0, fmt.Errorf("look up memory schema of agent %s: %w", agentID, err)
	}
	s.mu.Lock()
	s.dims[agentID] = int(row.Dimensions)
	s.mu.Unlock()
	return int(row.Dimensions), nil
}

func (s *Store) forgetDimensions(agentID string) {
	s.mu.Lock()
	delete(s.dims, agentID)
	s.mu.Unlock()
}

// scope says whose schema a transaction works in and with whose role:
// role is empty for choird's own (cross-agent reads, the operator).
type scope struct {
	schema string
	role   string
}

// inScope runs fn in a transaction confined to sc. A read-only transaction
// is used for reads. after, when set, runs after leaving the agent's scope
// in the same transaction, for inserting jobs.
func (s *Store) inScope(ctx context.Context, sc scope, readOnly bool, fn func(tx pgx.Tx, aq *agentdb.Queries) error,
	after func(tx pgx.Tx) error) error {
	opts := pgx.TxOptions{}
	if readOnly {
		opts.AccessMode = pgx.ReadOnly
	}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		as, err := EnterAgentScope(ctx, tx, sc.schema, sc.role)
		if err != nil {
			return err
		}
		if readOnly {
			if _, err := choirsql.Interpreted(tx).Exec(ctx, "SELECT set_config('statement_timeout', $1::int::text, true)", s.statementTimeoutMS()); err != nil {
				return fmt.Errorf("set statement_timeout: %w", err)
			}
		}
		if err := fn(tx, seam.AgentQueries(tx)); err != nil {
			return err
		}
		if after == nil {
			return nil
		}
		if err := as.Leave(ctx); err != nil {
			return err
		}
		return after(tx)
	})
	return s.translate(err, sc)
}

// translate turns Postgres' privilege errors into ErrPermission, naming who
// tried what.
func (s *Store) translate(err error, sc scope) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "42501": // insufficient_privilege
		who := "choird"
		if sc.role != "" {
			who = "agent " + sc.role
		}
		return fmt.Errorf("%w: %s has no access to the memory of agent %s: %w", ErrPermission, who, sc.schema, err)
	case "57014": // query_canceled: statement_timeout
		return fmt.Errorf("%w: a statement of a memory query ran over %s and was canceled; narrow the query: %w",
			ErrBusy, s.statementTimeout, err)
	case "22023", "42704": // invalid_parameter_value (no such role), undefined_object
		if sc.role != "" {
			return fmt.Errorf("%w %s: %s", ErrUnknownAgent, sc.role, pe.Message)
		}
	}
	return err
}
