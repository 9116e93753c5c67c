// Package memory is choirctl memory: the operator's commands over agents'
// session memory and knowledge, served by choird through the admin API
// (search, show, sessions, history, put, edit, delete, restore, reembed,
// status).
package memory

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
	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// choirctl memory talks to choird, whose memory store serves it with
// choird's admin role: it reads and changes any agent's memory. Writes are
// recorded as the operator's in knowledge history; the embedding jobs they
// enqueue are run by choird.

// Env is what the commands need of choirctl: the admin API's client (the
// caller closes it), the output streams, and how to mark an error as bad
// input (exit code 2).
type Env struct {
	Client   func() *admin.Client
	Stdout   io.Writer
	Stderr   io.Writer
	UsageErr func(error) error
}

// Command is choirctl memory with its subcommands.
func Command(env Env) *cobra.Command {
	var dbURL string
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Inspect and manage agents' session memory and knowledge",
		Long: `Inspect and manage agents' session memory and knowledge, through choird.

  search    hybrid (or full-text) search of an agent's session memory or knowledge
  show      a knowledge document (by key or id), a chunk or a session (by id)
  sessions  the sessions in an agent's memory and their tier
  history   every version of a knowledge document, deleted ones included
  put       write a knowledge document by key (from a file or stdin), as the operator
  edit      edit a knowledge document in $EDITOR, as the operator
  delete    delete a knowledge document (its history is kept) or a session's memory
  restore   make an earlier version of a knowledge document current again
  reembed   re-embed memory after a change of embedding model or dimensions
  status    the embedder and the documents waiting for vectors

choird serves these commands from its own database, so it must be running.`,
	}
	// Before choird served them, these commands opened the database
	// themselves: say so to whoever still names one.
	cmd.PersistentFlags().StringVar(&dbURL, "database-url", "", "")
	cmd.PersistentFlags().MarkHidden("database-url") //nolint:errcheck
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if dbURL != "" {
			return env.UsageErr(errors.New("choirctl memory goes through choird, which uses its own database: drop --database-url"))
		}
		return nil
	}
	cmd.AddCommand(newMemorySearchCommand(env), newMemoryShowCommand(env),
		newMemorySessionsCommand(env), newMemoryHistoryCommand(env), newMemoryPutCommand(env), newMemoryEditCommand(env),
		newMemoryDeleteCommand(env),
		newMemoryRestoreCommand(env), newMemoryReembedCommand(env), newMemoryStatusCommand(env))
	return cmd
}

// err makes bad input and unknown names exit with the usage code.
func (env Env) err(err error) error {
	if admin.IsBadRequest(err) {
		return env.UsageErr(err)
	}
	return err
}

type memorySearchOptions struct {
	agent, query, store, mode, session string
	tiers                              []string
	limit                              int
	json                               bool
}

func newMemorySearchCommand(env Env) *cobra.Command {
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
			return runMemorySearch(cmd.Context(), env, opts)
		},
	}
	cmd.Flags().StringVar(&opts.store, "store", "session", "session or knowledge")
	cmd.Flags().StringVar(&opts.mode, "mode", "semantic", "semantic or text")
	cmd.Flags().StringVar(&opts.session, "session", "", "only this session's chunks")
	cmd.Flags().StringSliceVar(&opts.tiers, "tier", nil, "session tiers to search (mid_term, long_term_summary, long_term_detail)")
	cmd.Flags().IntVar(&opts.limit, "limit", 10, "most results")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print results as JSON")
	return cmd
}

func runMemorySearch(ctx context.Context, env Env, opts memorySearchOptions) error {
	c := env.Client()
	defer c.Close()
	res, err := c.MemorySearch(ctx, opts.agent, admin.MemorySearchRequest{Store: opts.store, Mode: opts.mode,
		Query: opts.query, Limit: opts.limit, SessionID: opts.session, Tiers: opts.tiers})
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		return writeJSON(env.Stdout, res)
	}
	if res.Note != "" {
		fmt.Fprintf(env.Stderr, "note: %s\n", res.Note)
	}
	if res.Degraded != "" {
		fmt.Fprintf(env.Stderr, "note: %s\n", res.Degraded)
	}
	printQueryResult(env.Stdout, res)
	return nil
}

func printQueryResult(w io.Writer, res admin.MemoryQueryResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if res.Store == "knowledge" {
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

func newMemoryShowCommand(env Env) *cobra.Command {
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
			return runMemoryShow(cmd.Context(), env, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runMemoryShow(ctx context.Context, env Env, opts memoryShowOptions) error {
	c := env.Client()
	defer c.Close()
	item, err := c.MemoryShow(ctx, opts.agent, opts.ref)
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		return writeJSON(env.Stdout, item)
	}
	if k := item.Knowledge; k != nil {
		key := "-"
		if k.Key != nil {
			key = *k.Key
		}
		fmt.Fprintf(env.Stdout, "knowledge document %s\nkey:        %s\nversion:    %d\nupdated:    %s\n"+
			"embedding:  %s%s\nhash:       %s\nmetadata:   %s\n\n%s\n", k.ID, key, k.Version,
			k.UpdatedAt.UTC().Format(time.RFC3339), k.Embedding, suffix(k.EmbeddingError), k.ContentHash, k.Metadata, k.Text)
		return nil
	}
	if ch := item.Chunk; ch != nil {
		fmt.Fprintf(env.Stdout, "chunk %d of session %s (document %s)\ntier:       %s\nevents:     %s to %s\n"+
			"embedding:  %s%s%s\nmetadata:   %s\n\n%s\n", ch.ChunkIndex, ch.SessionID, ch.DocumentID, ch.Tier,
			ch.StartedAt.UTC().Format(time.RFC3339), ch.EndedAt.UTC().Format(time.RFC3339), ch.Embedding,
			map[bool]string{true: " (" + ch.EmbeddingModel + ")", false: ""}[ch.EmbeddingModel != ""], suffix(ch.EmbeddingError),
			ch.Metadata, ch.Text)
		return nil
	}
	s := item.Session
	if s == nil {
		return fmt.Errorf("choird showed nothing of %s in the memory of agent %s", opts.ref, opts.agent)
	}
	fmt.Fprintf(env.Stdout, "session %s: %s, %s, %d events in %d chunks, %d summary chunks\n", s.SessionID, s.Tier, s.Status,
		s.EventCount, s.ChunkCount, s.SummaryChunks)
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tCHUNK\tEMBEDDING\tTEXT")
	for _, ch := range s.Chunks {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", ch.Tier, ch.ChunkIndex, ch.Embedding, oneLine(ch.Text, 90))
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

func newMemorySessionsCommand(env Env) *cobra.Command {
	var opts memorySessionsOptions
	cmd := &cobra.Command{
		Use:   "sessions <agent>",
		Short: "List the sessions in an agent's memory, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent = args[0]
			return runMemorySessions(cmd.Context(), env, opts)
		},
	}
	cmd.Flags().IntVar(&opts.limit, "limit", 50, "most sessions")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runMemorySessions(ctx context.Context, env Env, opts memorySessionsOptions) error {
	c := env.Client()
	defer c.Close()
	ss, err := c.MemorySessions(ctx, opts.agent, opts.limit)
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		if ss == nil {
			ss = []admin.MemorySession{}
		}
		return writeJSON(env.Stdout, ss)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
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

func newMemoryHistoryCommand(env Env) *cobra.Command {
	var opts memoryHistoryOptions
	cmd := &cobra.Command{
		Use:   "history <agent> <key|id>",
		Short: "List every version of a knowledge document, newest first",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent, opts.ref = args[0], args[1]
			return runMemoryHistory(cmd.Context(), env, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runMemoryHistory(ctx context.Context, env Env, opts memoryHistoryOptions) error {
	c := env.Client()
	defer c.Close()
	vs, err := c.MemoryHistory(ctx, opts.agent, opts.ref)
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		return writeJSON(env.Stdout, vs)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
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

func newMemoryDeleteCommand(env Env) *cobra.Command {
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
			return runMemoryDelete(cmd.Context(), env, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.session, "session", false, "delete a session's memory instead of a knowledge document")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	return cmd
}

func runMemoryDelete(ctx context.Context, env Env, opts memoryDeleteOptions) error {
	var sessionID uuid.UUID
	if opts.session {
		var err error
		if sessionID, err = uuid.Parse(opts.ref); err != nil {
			return env.UsageErr(fmt.Errorf("--session needs a session id (a UUID), got %q", opts.ref))
		}
	}
	c := env.Client()
	defer c.Close()
	if opts.session {
		r, err := c.MemorySessionDelete(ctx, opts.agent, sessionID)
		if err != nil {
			return env.err(err)
		}
		if opts.json {
			return writeJSON(env.Stdout, r)
		}
		fmt.Fprintf(env.Stdout, "deleted session %s from the memory of %s: %d chunks\n", r.SessionID, opts.agent, r.ChunksDeleted)
		return nil
	}
	r, err := c.MemoryDelete(ctx, opts.agent, opts.ref)
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		return writeJSON(env.Stdout, r)
	}
	fmt.Fprintf(env.Stdout, "deleted knowledge document %s (version %d recorded; undo with: choirctl memory restore %s %s %d)\n",
		r.ID, r.Version, opts.agent, r.ID, r.Version-1)
	return nil
}

type memoryRestoreOptions struct {
	agent   string
	id      uuid.UUID
	version int
	json    bool
}

func newMemoryRestoreCommand(env Env) *cobra.Command {
	var opts memoryRestoreOptions
	cmd := &cobra.Command{
		Use:   "restore <agent> <document-id> <version>",
		Short: "Make an earlier version of a knowledge document current (undeleting it if needed)",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.agent = args[0]
			var err error
			if opts.id, err = uuid.Parse(args[1]); err != nil {
				return env.UsageErr(fmt.Errorf("document id %q is not a UUID (see choirctl memory history)", args[1]))
			}
			if opts.version, err = strconv.Atoi(args[2]); err != nil || opts.version < 1 {
				return env.UsageErr(fmt.Errorf("version %q is not a positive number", args[2]))
			}
			return runMemoryRestore(cmd.Context(), env, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	return cmd
}

func runMemoryRestore(ctx context.Context, env Env, opts memoryRestoreOptions) error {
	c := env.Client()
	defer c.Close()
	r, err := c.MemoryRestore(ctx, opts.agent, opts.id, opts.version)
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		return writeJSON(env.Stdout, r)
	}
	fmt.Fprintf(env.Stdout, "restored version %d of %s as version %d\n", opts.version, r.ID, r.Version)
	return nil
}

type memoryReembedOptions struct {
	agent string
	all   bool
	json  bool
}

func newMemoryReembedCommand(env Env) *cobra.Command {
	var opts memoryReembedOptions
	cmd := &cobra.Command{
		Use:   "reembed",
		Short: "Re-embed memory with the embedding model and dimensions choird runs with",
		Long: `Re-embed agents' memory with the embedding model and dimensions choird runs
with (config.json's embedding block when choird started): the migration for a
change of embedding model, no code change needed.

When those dimensions differ from an agent's stored vectors, every vector is
dropped and the columns retyped to the new size; otherwise the documents
embedded by another model, and those pending or failed, are re-embedded
(--all: every document). choird enqueues the embedding jobs and runs them.
Until its vector arrives a document is found by full-text search.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMemoryReembed(cmd.Context(), env, opts) },
	}
	cmd.Flags().StringVar(&opts.agent, "agent", "", "only this agent (default: all)")
	cmd.Flags().BoolVar(&opts.all, "all", false, "re-embed every document, not only stale, pending and failed ones")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	return cmd
}

func runMemoryReembed(ctx context.Context, env Env, opts memoryReembedOptions) error {
	c := env.Client()
	defer c.Close()
	rs, err := c.MemoryReembed(ctx, admin.MemoryReembedRequest{AgentID: opts.agent, All: opts.all})
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		if rs == nil {
			rs = []admin.MemoryReembedResult{}
		}
		return writeJSON(env.Stdout, rs)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
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

func newMemoryStatusCommand(env Env) *cobra.Command {
	var opts memoryStatusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the embedder and, per agent, documents waiting for vectors and the last embedding failure",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runMemoryStatus(cmd.Context(), env, opts) },
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

func runMemoryStatus(ctx context.Context, env Env, opts memoryStatusOptions) error {
	c := env.Client()
	defer c.Close()
	st, err := c.MemoryStatus(ctx)
	if err != nil {
		return env.err(err)
	}
	if opts.json {
		return writeJSON(env.Stdout, st)
	}
	if e := st.Embedding; e != nil {
		fmt.Fprintf(env.Stdout, "embedding: %s, model %s, %d dimensions: %s\n", e.Provider, e.Model, e.Dimensions, e.Note)
	} else {
		fmt.Fprintln(env.Stdout, "embedding: unknown (choird reported no embedder)")
	}
	fmt.Fprintf(env.Stdout, "documents waiting for vectors: %d, failed: %d, vectors of another model: %d\n",
		st.Pending, st.Failed, st.Stale)
	if st.LastErrorAt != nil {
		fmt.Fprintf(env.Stdout, "last embedding failure: %s: %s\n", st.LastErrorAt.UTC().Format(time.RFC3339), st.LastError)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tDIMENSIONS\tCHUNKS PENDING\tCHUNKS FAILED\tKNOWLEDGE PENDING\tKNOWLEDGE FAILED\tSTALE")
	for _, a := range st.Agents {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", a.AgentID, a.Dimensions, a.MemoryPending, a.MemoryFailed,
			a.KnowledgePending, a.KnowledgeFailed, a.Stale)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if e := st.Embedding; e != nil && e.Offline {
		for _, a := range st.Agents {
			fmt.Fprintf(env.Stdout, "%s: IDF drift since the last re-embed: memory %.3f, knowledge %.3f nats\n",
				a.AgentID, a.MemoryDrift, a.KnowledgeDrift)
		}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
