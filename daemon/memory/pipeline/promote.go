package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/db/agentdb"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// promoteBatch is the most sessions one promotion run moves; a run that
// hits it enqueues the next.
const promoteBatch = 20

// PromoteWorker keeps an agent's newest MidTermSessions sessions mid-term
// and moves older ones to long-term memory, each in one transaction with
// the job's completion: the session's summary becomes long_term_summary
// chunks (which go on to embedding), its event chunks become
// long_term_detail and lose their vectors. A session is promoted once
// (memory_sessions.tier guards it), so running the job twice changes
// nothing.
type PromoteWorker struct {
	river.WorkerDefaults[memory.PromoteArgs]
	Pool            *pgxpool.Pool
	Logger          *slog.Logger
	MidTermSessions func() int
}

// Timeout bounds one run.
func (w *PromoteWorker) Timeout(*river.Job[memory.PromoteArgs]) time.Duration {
	return memoryJobTimeout
}

// Work implements river.Worker.
func (w *PromoteWorker) Work(ctx context.Context, job *river.Job[memory.PromoteArgs]) error {
	agentID := job.Args.AgentID
	keep := w.MidTermSessions()
	type promoted struct {
		session  uuid.UUID
		summary  int
		detailed int64
	}
	var done []promoted
	more := false
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		if err := q.MemoryPromoteLock(ctx, agentID); err != nil {
			return fmt.Errorf("lock promotion of agent %s: %w", agentID, err)
		}
		scope, err := memory.EnterAgentScope(ctx, tx, agentID, agentID)
		if err != nil {
			return err
		}
		aq := seam.AgentQueries(tx)
		candidates, err := aq.MemorySessionsBeyondMidTerm(ctx, agentdb.MemorySessionsBeyondMidTermParams{
			Keep: int32(keep), MaxResults: promoteBatch + 1})
		if err != nil {
			return fmt.Errorf("list sessions beyond mid-term: %w", err)
		}
		if len(candidates) > promoteBatch {
			candidates, more = candidates[:promoteBatch], true
		}
		if err := scope.Leave(ctx); err != nil {
			return err
		}
		if len(candidates) == 0 {
			return completeTx(ctx, tx, job)
		}
		ids := make([]uuid.UUID, len(candidates))
		for i, c := range candidates {
			ids[i] = c.SessionID
		}
		summaries := map[uuid.UUID]json.RawMessage{}
		rows, err := q.MemorySessionSummaries(ctx, ids)
		if err != nil {
			return fmt.Errorf("read session summaries: %w", err)
		}
		for _, r := range rows {
			summaries[r.SessionID] = r.Summary
		}

		if scope, err = memory.EnterAgentScope(ctx, tx, agentID, agentID); err != nil {
			return err
		}
		var summaryIDs []uuid.UUID
		for _, c := range candidates {
			chunks := SummaryChunks(summaries[c.SessionID], c.StartedAt, c.EndedAt)
			_, err := aq.MemorySessionPromote(ctx, agentdb.MemorySessionPromoteParams{SessionID: c.SessionID,
				SummaryChunks: int32(len(chunks))})
			if errors.Is(err, choirsql.ErrNotFound) {
				continue // promoted meanwhile
			}
			if err != nil {
				return fmt.Errorf("promote session %s: %w", c.SessionID, err)
			}
			if _, err := aq.MemoryEmbeddingsDropForSession(ctx, c.SessionID); err != nil {
				return fmt.Errorf("drop vectors of session %s: %w", c.SessionID, err)
			}
			n, err := aq.MemoryChunksDemote(ctx, c.SessionID)
			if err != nil {
				return fmt.Errorf("demote chunks of session %s: %w", c.SessionID, err)
			}
			sids, err := insertChunks(ctx, aq, c.SessionID, "long_term_summary", "pending", chunks)
			if err != nil {
				return fmt.Errorf("write summary chunks of session %s: %w", c.SessionID, err)
			}
			summaryIDs = append(summaryIDs, sids...)
			done = append(done, promoted{c.SessionID, len(chunks), n})
		}
		if err := scope.Leave(ctx); err != nil {
			return err
		}
		params := memory.EmbedJobs(agentID, memory.EmbedStoreMemory, summaryIDs)
		if more {
			params = append(params, river.InsertManyParams{Args: memory.PromoteArgs{AgentID: agentID}})
		}
		if len(params) > 0 {
			if _, err := river.ClientFromContext[pgx.Tx](ctx).InsertManyTx(ctx, tx, params); err != nil {
				return fmt.Errorf("enqueue embedding of summaries: %w", err)
			}
		}
		return completeTx(ctx, tx, job)
	})
	if err != nil {
		return err
	}
	for _, p := range done {
		w.Logger.InfoContext(ctx, "session promoted to long-term memory", slog.String("agent_id", agentID),
			slog.String("session_id", p.session.String()), slog.Int("summary_chunks", p.summary),
			slog.Int64("detail_chunks", p.detailed), slog.Int("mid_term_sessions_kept", keep))
	}
	return nil
}

// SummaryChunks partitions a session summary into long_term_summary
// chunks. The agent's summary is structured output whose exact shape is
// the agent's business, so this reads it generically:
//   - an object's "summary" (or "text") string, with its other scalar
//     fields, makes the first chunk;
//   - each element of each array field (topics, decisions, facts, skills,
//     ...) is a partition of its own, labelled with the field name, and
//     partitions are packed into chunks of up to ChunkTargetBytes;
//   - a plain string is split into paragraphs packed the same way.
//
// A session without a summary (NULL, or an empty one) has no summary
// chunks; its detail chunks remain reachable through session_detail.
func SummaryChunks(summary json.RawMessage, startedAt, endedAt time.Time) []Chunk {
	var v any
	if len(summary) == 0 || json.Unmarshal(summary, &v) != nil || v == nil {
		return nil
	}
	type part struct{ label, text string }
	var parts []part
	switch s := v.(type) {
	case string:
		for _, p := range strings.Split(s, "\n\n") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, part{"summary", p})
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(s))
		for k := range s {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var head []string
		for _, k := range []string{"summary", "text"} {
			if str, ok := s[k].(string); ok && strings.TrimSpace(str) != "" {
				head = append(head, "Session summary: "+strings.TrimSpace(str))
			}
		}
		for _, k := range keys {
			if k == "summary" || k == "text" {
				continue
			}
			switch x := s[k].(type) {
			case []any:
				for _, el := range x {
					if t := flatten(el); t != "" {
						parts = append(parts, part{k, k + ": " + t})
					}
				}
			case map[string]any:
				if t := flatten(x); t != "" {
					parts = append(parts, part{k, k + ": " + t})
				}
			default:
				if t := flatten(x); t != "" {
					head = append(head, k+": "+t)
				}
			}
		}
		if len(head) > 0 {
			parts = append([]part{{"summary", strings.Join(head, "\n")}}, parts...)
		}
	default:
		if t := flatten(v); t != "" {
			parts = append(parts, part{"summary", t})
		}
	}
	var out []Chunk
	var text strings.Builder
	var labels []string
	flush := func() {
		if text.Len() == 0 {
			return
		}
		meta, _ := json.Marshal(map[string]any{"kind": "session_summary", "parts": labels})
		out = append(out, Chunk{Index: len(out), Text: text.String(), Metadata: meta, StartedAt: startedAt, EndedAt: endedAt})
		text.Reset()
		labels = nil
	}
	for _, p := range parts {
		t := p.text
		if len(t) > ChunkTargetBytes*2 {
			t = t[:ChunkTargetBytes*2]
		}
		if text.Len() > 0 && text.Len()+len(t) > ChunkTargetBytes {
			flush()
		}
		if text.Len() > 0 {
			text.WriteByte('\n')
		}
		text.WriteString(t)
		if !slices.Contains(labels, p.label) {
			labels = append(labels, p.label)
		}
	}
	flush()
	return out
}

// flatten renders a JSON value as one line of text: strings as they are,
// objects as "key: value; ..." in key order.
func flatten(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return strings.TrimSpace(x)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			if t := flatten(x[k]); t != "" {
				parts = append(parts, k+": "+t)
			}
		}
		return strings.Join(parts, "; ")
	case []any:
		var parts []string
		for _, el := range x {
			if t := flatten(el); t != "" {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, ", ")
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}
