package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	choirsql "github.com/choirhq/choir/sql"
)

// choirctl memory talks to Postgres directly (the database from
// --database-url, CHOIR_DATABASE_URL or config.json), with choird's admin
// role: it reads and changes any agent's memory. Writes are recorded as
// the operator's in knowledge history; embedding jobs it enqueues are run
// by choird.

func newMemoryCommand(g *globals) *cobra.Command {
	var dbURL string
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Inspect and manage agents' session memory and knowledge",
		Long: `Inspect and manage agents' session memory and knowledge in Postgres.

  search    hybrid (or full-text) search of an agent's session memory or knowledge
  show      a knowledge document (by key or id), a chunk or a session (by id)
  sessions  the sessions in an agent's memory and their tier
  history   every version of a knowledge document, deleted ones included
  delete    delete a knowledge document (its history is kept) or a session's memory
  restore   make an earlier version of a knowledge document current again
  reembed   re-embed memory after a change of embedding model or dimensions
  status    the embedder and the documents waiting for vectors

The database comes from --database-url, else CHOIR_DATABASE_URL, else
config.json's "postgres" block and its secret.`,
	}
	cmd.PersistentFlags().StringVar(&dbURL, "database-url", "", "Postgres URL (env CHOIR_DATABASE_URL); overrides config.json")
	cmd.AddCommand(newMemorySearchCommand(g, &dbURL), newMemoryShowCommand(g, &dbURL),
		newMemorySessionsCommand(g, &dbURL), newMemoryHistoryCommand(g, &dbURL), newMemoryDeleteCommand(g, &dbURL),
		newMemoryRestoreCommand(g, &dbURL), newMemoryReembedCommand(g, &dbURL), newMemoryStatusCommand(g, &dbURL))
	return cmd
}

// memoryEnv is an open connection to the memory store.
type memoryEnv struct {
	pool  *pgxpool.Pool
	store *memory.Store
}

func (e *memoryEnv) Close() { e.pool.Close() }

// openMemory connects to Postgres and builds a store. The embedder comes
// from config.json when it loads; without it semantic search runs on full
// text (and says so), and needEmbedder makes its absence an error.
func openMemory(ctx context.Context, g *globals, dbURL string, needEmbedder bool) (*memoryEnv, error) {
	dsn, origin, err := databaseDSN(g, dbURL)
	if err != nil {
		return nil, err
	}
	var embedder *embed.Embedder
	cfg, secrets, cfgErr := config.Load(g.home)
	if cfgErr == nil {
		embedder, cfgErr = embed.New(cfg.Embedding, secrets, embed.Options{})
	}
	if cfgErr != nil && needEmbedder {
		return nil, usageErr(fmt.Errorf("the embedding model comes from config.json: %w", cfgErr))
	}
	pool, err := choirsql.Connect(ctx, dsn, choirsql.ConnectOptions{Origin: origin, Vector: true, MaxConns: 4})
	if err != nil {
		return nil, err
	}
	// An insert-only River client: choird's workers run what it enqueues.
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("create job client: %w", err)
	}
	opts := memory.Options{Pool: pool, Inserter: inserter}
	if embedder != nil {
		opts.Embedder = embedder
	}
	return &memoryEnv{pool: pool, store: memory.New(opts)}, nil
}

// memoryErr makes bad input and unknown names exit with the usage code.
func memoryErr(err error) error {
	if errors.Is(err, memory.ErrInvalidInput) || errors.Is(err, memory.ErrUnknownAgent) {
		return usageErr(err)
	}
	return err
}

type memorySearchOptions struct {
	agent, query, store, mode, session string
	tiers                              []string
	limit                              int
	json                               bool
}

func newMemorySearchCommand(g *globals, dbURL *string) *cobra.Command {
	var opts memorySearchOptions
	cmd := &cobra.Command{
		Use:   "search <agent> <query>",
		Short: "Search an agent's session memory or knowledge",
		Long: `Search an agent's session memory (mid-term chunks and long-term summaries by
default) or knowledge, as the agent's choir.memory.query does: --mode semantic
fuses vector and full-text matches (full text only when no embedder is
configured), --mode text is full-text search in web-search syntax ("a phrase",
or, -word).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent, opts.query = args[0], args[1]
			return runMemorySearch(cmd.Context(), g, *dbURL, opts)
		},
	}
	cmd.Flags().StringVar(&opts.store, "store", "session", "session or knowledge")
	cmd.Flags().StringVar(&opts.mode, "mode", "semantic", "semantic or text")
	cmd.Flags().StringVar(&opts.session, "session", "", "only this session's chunks")
	cmd.Flags().StringSliceVar(&opts.tiers, "tier", nil, "session tiers to search (mid_term, long_term_summary, long_term_detail)")
	cmd.Flags().IntVar(&opts.limit, "limit", memory.DefaultLimit, "most results")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print results as JSON")
	return cmd
}

func runMemorySearch(ctx context.Context, g *globals, dbURL string, opts memorySearchOptions) error {
	in := map[string]any{"store": opts.store, "mode": opts.mode, "query": opts.query, "target_agent": opts.agent,
		"limit": opts.limit}
	if opts.session != "" {
		in["session_id"] = opts.session
	}
	if len(opts.tiers) > 0 {
		in["tiers"] = opts.tiers
	}
	input, _ := json.Marshal(in)
	env, err := openMemory(ctx, g, dbURL, false)
	if err != nil {
		return err
	}
	defer env.Close()
	res, err := env.store.QueryAsOperator(ctx, input)
	if err != nil {
		return memoryErr(err)
	}
	if opts.json {
		return writeJSON(g.stdout, res)
	}
	if res.Degraded != "" {
		fmt.Fprintf(g.stderr, "note: %s\n", res.Degraded)
	}
	printQueryResult(g.stdout, res)
	return nil
}

func printQueryResult(w io.Writer, res *memory.QueryResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if res.Store == memory.StoreKnowledge {
		fmt.Fprintln(tw, "SCORE\tKEY\tVERSION\tUPDATED\tTEXT")
		for _, d := range res.Documents {
			key := "-"
			if d.Key != nil {
				key = *d.Key
			}
			fmt.Fprintf(tw, "%.4f\t%s\t%d\t%s\t%s\n", d.Score, key, d.Version, d.UpdatedAt.UTC().Format(time.RFC3339),
				oneLine(d.Text, 80))
		}
	} else {
		fmt.Fprintln(tw, "SCORE\tSESSION\tCHUNK\tTIER\tTEXT")
		for _, c := range res.Chunks {
			fmt.Fprintf(tw, "%.4f\t%s\t%d\t%s\t%s\n", c.Score, c.SessionID, c.ChunkIndex, c.Tier, oneLine(c.Text, 80))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%d results (%s search)\n", res.Count, cmp(res.Search, res.Mode))
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// oneLine flattens text to one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

type memoryShowOptions struct {
	agent, ref string
	json       bool
}

func newMemoryShowCommand(g *globals, dbURL *string) *cobra.Command {
	var opts memoryShowOptions
	cmd := &cobra.Command{
		Use:   "show <agent> <key|id>",
		Short: "Show a knowledge document, a memory chunk or a session with its chunks",
		Long: `Show one item of an agent's memory: a knowledge document by key or id, a
session-memory chunk by its document id, or a session (with every chunk, all
tiers) by its session id.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent, opts.ref = args[0], args[1]
			return runMemoryShow(cmd.Context(), g, *dbURL, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runMemoryShow(ctx context.Context, g *globals, dbURL string, opts memoryShowOptions) error {
	env, err := openMemory(ctx, g, dbURL, false)
	if err != nil {
		return err
	}
	defer env.Close()
	k, err := env.store.KnowledgeGet(ctx, opts.agent, opts.ref)
	if err == nil {
		if opts.json {
			return writeJSON(g.stdout, map[string]any{"knowledge": k})
		}
		key := "-"
		if k.Key != nil {
			key = *k.Key
		}
		fmt.Fprintf(g.stdout, "knowledge document %s\nkey:        %s\nversion:    %d\nupdated:    %s\n"+
			"embedding:  %s%s\nhash:       %s\nmetadata:   %s\n\n%s\n", k.ID, key, k.Version,
			k.UpdatedAt.UTC().Format(time.RFC3339), k.Embedding, suffix(k.EmbeddingError), k.ContentHash, k.Metadata, k.Text)
		return nil
	}
	if !errors.Is(err, memory.ErrNotFound) {
		return memoryErr(err)
	}
	id, perr := uuid.Parse(opts.ref)
	if perr != nil {
		return err
	}
	c, err := env.store.ChunkGet(ctx, opts.agent, id)
	if err == nil {
		if opts.json {
			return writeJSON(g.stdout, map[string]any{"chunk": c})
		}
		fmt.Fprintf(g.stdout, "chunk %d of session %s (document %s)\ntier:       %s\nevents:     %s to %s\n"+
			"embedding:  %s%s%s\nmetadata:   %s\n\n%s\n", c.ChunkIndex, c.SessionID, c.DocumentID, c.Tier,
			c.StartedAt.UTC().Format(time.RFC3339), c.EndedAt.UTC().Format(time.RFC3339), c.Embedding,
			map[bool]string{true: " (" + c.EmbeddingModel + ")", false: ""}[c.EmbeddingModel != ""], suffix(c.EmbeddingError),
			c.Metadata, c.Text)
		return nil
	}
	if !errors.Is(err, memory.ErrNotFound) {
		return err
	}
	s, err := env.store.SessionGet(ctx, opts.agent, id)
	if errors.Is(err, memory.ErrNotFound) {
		return fmt.Errorf("%w: agent %s has no knowledge document, chunk or session %s", memory.ErrNotFound, opts.agent, id)
	}
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(g.stdout, map[string]any{"session": s})
	}
	fmt.Fprintf(g.stdout, "session %s: %s, %s, %d events in %d chunks, %d summary chunks\n", s.SessionID, s.Tier, s.Status,
		s.EventCount, s.ChunkCount, s.SummaryChunks)
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tCHUNK\tEMBEDDING\tTEXT")
	for _, c := range s.Chunks {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.Tier, c.ChunkIndex, c.Embedding, oneLine(c.Text, 90))
	}
	return tw.Flush()
}

func suffix(embeddingError string) string {
	if embeddingError == "" {
		return ""
	}
	return ": " + embeddingError
}

type memorySessionsOptions struct {
	agent string
	limit int
	json  bool
}

func newMemorySessionsCommand(g *globals, dbURL *string) *cobra.Command {
	var opts memorySessionsOptions
	cmd := &cobra.Command{
		Use:   "sessions <agent>",
		Short: "List the sessions in an agent's memory, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent = args[0]
			return runMemorySessions(cmd.Context(), g, *dbURL, opts)
		},
	}
	cmd.Flags().IntVar(&opts.limit, "limit", 50, "most sessions")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runMemorySessions(ctx context.Context, g *globals, dbURL string, opts memorySessionsOptions) error {
	env, err := openMemory(ctx, g, dbURL, false)
	if err != nil {
		return err
	}
	defer env.Close()
	ss, err := env.store.Sessions(ctx, opts.agent, opts.limit)
	if err != nil {
		return memoryErr(err)
	}
	if opts.json {
		if ss == nil {
			ss = []memory.Session{}
		}
		return writeJSON(g.stdout, ss)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tTIER\tENDED\tEVENTS\tCHUNKS\tSUMMARY CHUNKS")
	for _, s := range ss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", s.SessionID, s.Tier, s.EndedAt.UTC().Format(time.RFC3339), s.EventCount,
			s.ChunkCount, s.SummaryChunks)
	}
	return tw.Flush()
}

type memoryHistoryOptions struct {
	agent, ref string
	json       bool
}

func newMemoryHistoryCommand(g *globals, dbURL *string) *cobra.Command {
	var opts memoryHistoryOptions
	cmd := &cobra.Command{
		Use:   "history <agent> <key|id>",
		Short: "List every version of a knowledge document, newest first",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent, opts.ref = args[0], args[1]
			return runMemoryHistory(cmd.Context(), g, *dbURL, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runMemoryHistory(ctx context.Context, g *globals, dbURL string, opts memoryHistoryOptions) error {
	env, err := openMemory(ctx, g, dbURL, false)
	if err != nil {
		return err
	}
	defer env.Close()
	vs, err := env.store.History(ctx, opts.agent, opts.ref)
	if err != nil {
		return memoryErr(err)
	}
	if opts.json {
		return writeJSON(g.stdout, vs)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOCUMENT\tVERSION\tOP\tBY\tAT\tCURRENT\tTEXT")
	for _, v := range vs {
		cur := ""
		if v.Current {
			cur = "*"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", v.DocumentID, v.Version, v.Op, v.Actor,
			v.CreatedAt.UTC().Format(time.RFC3339), cur, oneLine(v.Text, 60))
	}
	return tw.Flush()
}

type memoryDeleteOptions struct {
	agent, ref string
	session    bool
	json       bool
}

func newMemoryDeleteCommand(g *globals, dbURL *string) *cobra.Command {
	var opts memoryDeleteOptions
	cmd := &cobra.Command{
		Use:   "delete <agent> <key|id>",
		Short: "Delete a knowledge document (its history is kept), or with --session a session's memory",
		Long: `Delete a knowledge document by key or id; its versions are kept, so
choirctl memory restore can undo it. With --session, the argument is a session
id and the session's chunks (all tiers), vectors and event references are
deleted from the agent's memory; its events stay in choir_control.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent, opts.ref = args[0], args[1]
			return runMemoryDelete(cmd.Context(), g, *dbURL, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.session, "session", false, "delete a session's memory instead of a knowledge document")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	return cmd
}

func runMemoryDelete(ctx context.Context, g *globals, dbURL string, opts memoryDeleteOptions) error {
	var sessionID uuid.UUID
	if opts.session {
		var err error
		if sessionID, err = uuid.Parse(opts.ref); err != nil {
			return usageErr(fmt.Errorf("--session needs a session id (a UUID), got %q", opts.ref))
		}
	}
	env, err := openMemory(ctx, g, dbURL, false)
	if err != nil {
		return err
	}
	defer env.Close()
	if opts.session {
		n, err := env.store.SessionDelete(ctx, opts.agent, sessionID)
		if err != nil {
			return memoryErr(err)
		}
		if opts.json {
			return writeJSON(g.stdout, map[string]any{"session_id": sessionID, "chunks_deleted": n})
		}
		fmt.Fprintf(g.stdout, "deleted session %s from the memory of %s: %d chunks\n", sessionID, opts.agent, n)
		return nil
	}
	r, err := env.store.KnowledgeDelete(ctx, opts.agent, opts.ref)
	if err != nil {
		return memoryErr(err)
	}
	if opts.json {
		return writeJSON(g.stdout, r)
	}
	fmt.Fprintf(g.stdout, "deleted knowledge document %s (version %d recorded; undo with: choirctl memory restore %s %s %d)\n",
		r.ID, r.Version, opts.agent, r.ID, r.Version-1)
	return nil
}

type memoryRestoreOptions struct {
	agent   string
	id      uuid.UUID
	version int
	json    bool
}

func newMemoryRestoreCommand(g *globals, dbURL *string) *cobra.Command {
	var opts memoryRestoreOptions
	cmd := &cobra.Command{
		Use:   "restore <agent> <document-id> <version>",
		Short: "Make an earlier version of a knowledge document current (undeleting it if needed)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent = args[0]
			var err error
			if opts.id, err = uuid.Parse(args[1]); err != nil {
				return usageErr(fmt.Errorf("document id %q is not a UUID (see choirctl memory history)", args[1]))
			}
			if opts.version, err = strconv.Atoi(args[2]); err != nil || opts.version < 1 {
				return usageErr(fmt.Errorf("version %q is not a positive number", args[2]))
			}
			return runMemoryRestore(cmd.Context(), g, *dbURL, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	return cmd
}

func runMemoryRestore(ctx context.Context, g *globals, dbURL string, opts memoryRestoreOptions) error {
	env, err := openMemory(ctx, g, dbURL, false)
	if err != nil {
		return err
	}
	defer env.Close()
	r, err := env.store.KnowledgeRestore(ctx, opts.agent, opts.id, opts.version)
	if err != nil {
		return memoryErr(err)
	}
	if opts.json {
		return writeJSON(g.stdout, r)
	}
	fmt.Fprintf(g.stdout, "restored version %d of %s as version %d\n", opts.version, r.ID, r.Version)
	return nil
}

type memoryReembedOptions struct {
	agent string
	all   bool
	json  bool
}

func newMemoryReembedCommand(g *globals, dbURL *string) *cobra.Command {
	var opts memoryReembedOptions
	cmd := &cobra.Command{
		Use:   "reembed",
		Short: "Re-embed memory with the embedding model and dimensions of config.json",
		Long: `Re-embed agents' memory with config.json's embedding model and dimensions:
the migration for a change of embedding model, no code change needed.

When embedding.dimensions differs from an agent's stored vectors, every vector
is dropped and the columns retyped to the new size; otherwise the documents
embedded by another model, and those pending or failed, are re-embedded
(--all: every document). Embedding jobs are enqueued for choird, which runs
them: after a change of dimensions choird refuses to start until this has run,
so run it, then start choird. Until its vector arrives a document is found by
full-text search.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMemoryReembed(cmd.Context(), g, *dbURL, opts) },
	}
	cmd.Flags().StringVar(&opts.agent, "agent", "", "only this agent (default: all)")
	cmd.Flags().BoolVar(&opts.all, "all", false, "re-embed every document, not only stale, pending and failed ones")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	return cmd
}

func runMemoryReembed(ctx context.Context, g *globals, dbURL string, opts memoryReembedOptions) error {
	env, err := openMemory(ctx, g, dbURL, true)
	if err != nil {
		return err
	}
	defer env.Close()
	rs, err := env.store.Reembed(ctx, memory.ReembedOptions{AgentID: opts.agent, All: opts.all})
	if err != nil {
		return memoryErr(err)
	}
	if opts.json {
		if rs == nil {
			rs = []memory.ReembedResult{}
		}
		return writeJSON(g.stdout, rs)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tDIMENSIONS\tCHUNKS\tKNOWLEDGE\tJOBS")
	for _, r := range rs {
		dims := strconv.Itoa(r.Dimensions)
		if r.Resized {
			dims = fmt.Sprintf("%d -> %d (vectors dropped)", r.FromDimensions, r.Dimensions)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", r.AgentID, dims, r.Chunks, r.Knowledge, r.Jobs)
	}
	return tw.Flush()
}

type memoryStatusOptions struct {
	json bool
}

func newMemoryStatusCommand(g *globals, dbURL *string) *cobra.Command {
	var opts memoryStatusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the embedder and, per agent, documents waiting for vectors and the last embedding failure",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runMemoryStatus(cmd.Context(), g, *dbURL, opts) },
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runMemoryStatus(ctx context.Context, g *globals, dbURL string, opts memoryStatusOptions) error {
	env, err := openMemory(ctx, g, dbURL, false)
	if err != nil {
		return err
	}
	defer env.Close()
	st, err := env.store.Status(ctx)
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(g.stdout, st)
	}
	if e := st.Embedding; e != nil {
		fmt.Fprintf(g.stdout, "embedding: %s, model %s, %d dimensions: %s\n", e.Provider, e.Model, e.Dimensions, e.Note)
	} else {
		fmt.Fprintln(g.stdout, "embedding: unknown (config.json not loaded)")
	}
	fmt.Fprintf(g.stdout, "documents waiting for vectors: %d, failed: %d, vectors of another model: %d\n",
		st.Pending, st.Failed, st.Stale)
	if st.LastErrorAt != nil {
		fmt.Fprintf(g.stdout, "last embedding failure: %s: %s\n", st.LastErrorAt.UTC().Format(time.RFC3339), st.LastError)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tDIMENSIONS\tCHUNKS PENDING\tCHUNKS FAILED\tKNOWLEDGE PENDING\tKNOWLEDGE FAILED\tSTALE")
	for _, a := range st.Agents {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", a.AgentID, a.Dimensions, a.MemoryPending, a.MemoryFailed,
			a.KnowledgePending, a.KnowledgeFailed, a.Stale)
	}
	return tw.Flush()
}
