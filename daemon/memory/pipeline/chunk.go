package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/db/agentdb"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Chunking limits. A chunk closes when its text reaches ChunkTargetBytes
// (never between a tool call and its result) or holds ChunkMaxEvents
// events; one event contributes at most EventMaxBytes of text.
const (
	ChunkTargetBytes = 2000
	ChunkMaxEvents   = 40
	EventMaxBytes    = 1200
)

// Chunk is one logical block of a session: text for search, the events it
// covers, and metadata for citing it.
type Chunk struct {
	Index     int
	Text      string
	Metadata  json.RawMessage
	StartedAt time.Time
	EndedAt   time.Time
	// Events are the revisions and chain hashes the chunk covers, including
	// events that contribute no text (see ChunkEvents).
	Revs   []int64
	Hashes [][]byte
}

// chunkMeta is a chunk's metadata: where it came from and what it holds.
type chunkMeta struct {
	Lane       string   `json:"lane"`
	FirstRev   int64    `json:"first_rev"`
	LastRev    int64    `json:"last_rev"`
	EventCount int      `json:"event_count"`
	Tools      []string `json:"tools,omitempty"`
	Skill      string   `json:"skill,omitempty"`
	Phase      string   `json:"phase,omitempty"`
	Boundary   string   `json:"boundary"`
}

// silentEvents are covered by a chunk (their hashes resolve to it) but add
// no text: LLM call bookkeeping, tool calls the arbiter has not committed
// yet (the committed call follows), and the session summary, which becomes
// long-term summary chunks instead.
var silentEvents = map[string]bool{
	"llm_call_committed":  true,
	"tool_call_requested": true,
	"session_summary":     true,
}

// ChunkEvents groups a session's events, in revision order, into chunks.
//
// Each lane (edge, system, each named core job) is chunked on its own, so a
// chunk reads as one coherent thread. A lane's chunk closes and a new one
// opens:
//   - at a user message or an injected instruction (a new turn),
//   - at a core job start or a skill transition (a new phase),
//   - when the chunk has reached ChunkTargetBytes of text or ChunkMaxEvents
//     events, except before a tool result, which stays with its call.
//
// Chunks are numbered in the order of their first event.
func ChunkEvents(events []db.ChoirControlSessionEvent) []Chunk {
	type open struct {
		chunk    Chunk
		meta     chunkMeta
		text     strings.Builder
		boundary string
	}
	var done []*open
	lanes := map[string]*open{}
	skills := map[string][2]string{} // lane -> skill, phase
	closeLane := func(lane string) {
		if o := lanes[lane]; o != nil {
			done = append(done, o)
			delete(lanes, lane)
		}
	}
	for _, e := range events {
		text := ""
		if !silentEvents[e.EventType] {
			text = RenderEvent(e.EventType, e.Payload)
		}
		o := lanes[e.Lane]
		boundary := ""
		switch e.EventType {
		case "user_msg", "injected_instruction":
			boundary = "turn"
		case "core_started", "skill_transition_committed":
			boundary = "phase"
		}
		if o != nil && boundary != "" && o.text.Len() > 0 {
			closeLane(e.Lane)
			o = nil
		}
		if o != nil && e.EventType != "tool_result_committed" && text != "" &&
			(o.text.Len() >= ChunkTargetBytes || o.meta.EventCount >= ChunkMaxEvents) {
			closeLane(e.Lane)
			o = nil
			boundary = "size"
		}
		if o == nil {
			if boundary == "" {
				boundary = "start"
			}
			o = &open{boundary: boundary}
			o.meta.Lane = e.Lane
			o.meta.FirstRev = e.Rev
			o.chunk.StartedAt = e.CreatedAt
			lanes[e.Lane] = o
		}
		if e.EventType == "skill_transition_committed" {
			skill, phase := skillOf(e.Payload)
			skills[e.Lane] = [2]string{skill, phase}
		}
		if sp, ok := skills[e.Lane]; ok {
			o.meta.Skill, o.meta.Phase = sp[0], sp[1]
		}
		if tool := toolOf(e.EventType, e.Payload); tool != "" && !slices.Contains(o.meta.Tools, tool) {
			o.meta.Tools = append(o.meta.Tools, tool)
		}
		if text != "" {
			if o.text.Len() > 0 {
				o.text.WriteByte('\n')
			}
			o.text.WriteString(text)
		}
		o.meta.LastRev = e.Rev
		o.meta.EventCount++
		o.chunk.EndedAt = e.CreatedAt
		o.chunk.Revs = append(o.chunk.Revs, e.Rev)
		o.chunk.Hashes = append(o.chunk.Hashes, e.Hash)
	}
	for _, o := range lanes {
		done = append(done, o)
	}
	sort.Slice(done, func(i, j int) bool { return done[i].meta.FirstRev < done[j].meta.FirstRev })
	out := make([]Chunk, 0, len(done))
	for _, o := range done {
		c := o.chunk
		c.Index = len(out)
		c.Text = o.text.String()
		if c.Text == "" {
			// Only silent events: keep them findable by hash.
			c.Text = fmt.Sprintf("(%d bookkeeping events in lane %s)", o.meta.EventCount, o.meta.Lane)
		}
		o.meta.Boundary = o.boundary
		c.Metadata, _ = json.Marshal(o.meta)
		out = append(out, c)
	}
	return out
}

// RenderEvent is the text an event contributes to its chunk: a role or
// action prefix and the payload's human-readable parts.
func RenderEvent(eventType string, payload json.RawMessage) string {
	var p map[string]any
	if err := json.Unmarshal(payload, &p); err != nil || p == nil {
		p = map[string]any{}
	}
	get := func(keys ...string) string {
		for _, k := range keys {
			switch v := p[k].(type) {
			case string:
				if v != "" {
					return v
				}
			case nil:
			default:
				b, _ := json.Marshal(v)
				return string(b)
			}
		}
		return ""
	}
	var s string
	switch eventType {
	case "user_msg":
		s = "user: " + get("text", "message", "content")
	case "model_output":
		s = "assistant: " + get("text", "content", "message", "output")
	case "tool_call_committed":
		s = "tool call " + get("tool", "name") + " " + get("input", "arguments", "args")
	case "tool_result_committed":
		s = "tool result " + get("tool", "name")
		if st := get("status"); st != "" {
			s += " [" + st + "]"
		}
		s += ": " + get("summary", "output", "result", "error", "text")
	case "memory_write_committed":
		s = "memory write: " + get("summary", "text", "key")
	case "skill_transition_committed":
		skill, phase := skillOf(payload)
		s = "skill " + skill + " -> " + phase
		if r := get("reason"); r != "" {
			s += ": " + r
		}
	case "core_started":
		s = "core job " + get("name", "job") + " started: " + get("brief", "task", "text", "summary")
	case "core_stopped":
		s = "core job " + get("name", "job") + " stopped: " + get("reason", "status", "summary", "text")
	case "injected_instruction":
		s = "instruction: " + get("text", "instruction", "message")
	case "cancelled":
		s = "cancelled: " + get("reason", "text")
	default:
		s = eventType + ": " + compactJSON(payload)
	}
	s = strings.TrimSpace(s)
	if len(s) > EventMaxBytes {
		n := EventMaxBytes
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "…"
	}
	return s
}

func compactJSON(b json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

func skillOf(payload json.RawMessage) (skill, phase string) {
	var p struct {
		Skill string `json:"skill"`
		To    string `json:"to"`
		State string `json:"state"`
	}
	_ = json.Unmarshal(payload, &p)
	phase = p.To
	if phase == "" {
		phase = p.State
	}
	return p.Skill, phase
}

func toolOf(eventType string, payload json.RawMessage) string {
	if eventType != "tool_call_committed" && eventType != "tool_result_committed" {
		return ""
	}
	var p struct {
		Tool string `json:"tool"`
		Name string `json:"name"`
	}
	_ = json.Unmarshal(payload, &p)
	if p.Tool != "" {
		return p.Tool
	}
	return p.Name
}

// ChunkSessionWorker writes an ended session's events to its agent's
// mid-term memory as chunks, and enqueues their embedding and a promotion
// run, all in one transaction with the job's completion. A session already
// in memory_sessions is skipped, so running the job twice changes nothing.
type ChunkSessionWorker struct {
	river.WorkerDefaults[memory.ChunkSessionArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
}

// Timeout bounds one run: reading a long session's events and copying its
// chunks takes seconds, not minutes.
func (w *ChunkSessionWorker) Timeout(*river.Job[memory.ChunkSessionArgs]) time.Duration {
	return memoryJobTimeout
}

// eventPage is how many events chunking reads per query.
const eventPage = 1000

// Work implements river.Worker.
func (w *ChunkSessionWorker) Work(ctx context.Context, job *river.Job[memory.ChunkSessionArgs]) error {
	id := job.Args.SessionID
	var agentID string
	var chunks []Chunk
	var skipped bool
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		s, err := q.MemorySessionForChunking(ctx, id)
		if errors.Is(err, choirsql.ErrNotFound) {
			return river.JobCancel(fmt.Errorf("session %s does not exist", id))
		}
		if err != nil {
			return fmt.Errorf("read session %s: %w", id, err)
		}
		agentID = s.AgentID
		if s.EndedAt == nil {
			// The session's events may still grow; River retries later.
			return fmt.Errorf("session %s is still %s: only ended sessions are chunked", id, s.Status)
		}
		var events []db.ChoirControlSessionEvent
		for after := int64(0); ; {
			page, err := q.EventsListAfter(ctx, db.EventsListAfterParams{SessionID: id, AfterRev: after, MaxRows: eventPage})
			if err != nil {
				return fmt.Errorf("read events of session %s: %w", id, err)
			}
			events = append(events, page...)
			if len(page) < eventPage {
				break
			}
			after = page[len(page)-1].Rev
		}
		chunks = ChunkEvents(events)

		scope, err := memory.EnterAgentScope(ctx, tx, agentID, agentID)
		if err != nil {
			return err
		}
		aq := seam.AgentQueries(tx)
		_, err = aq.MemorySessionRecord(ctx, agentdb.MemorySessionRecordParams{SessionID: id, StartedAt: s.StartedAt,
			EndedAt: *s.EndedAt, Status: s.Status, EventCount: int32(len(events)), ChunkCount: int32(len(chunks))})
		if errors.Is(err, choirsql.ErrNotFound) {
			skipped = true
			if err := scope.Leave(ctx); err != nil {
				return err
			}
			return completeTx(ctx, tx, job)
		}
		if err != nil {
			return fmt.Errorf("record session %s in memory of agent %s: %w", id, agentID, err)
		}
		ids, err := insertChunks(ctx, aq, id, "mid_term", "pending", chunks)
		if err != nil {
			return fmt.Errorf("write chunks of session %s: %w", id, err)
		}
		if err := scope.Leave(ctx); err != nil {
			return err
		}
		client := river.ClientFromContext[pgx.Tx](ctx)
		params := append(memory.EmbedJobs(agentID, memory.EmbedStoreMemory, ids), river.InsertManyParams{Args: memory.PromoteArgs{AgentID: agentID}})
		if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
			return fmt.Errorf("enqueue embedding and promotion for session %s: %w", id, err)
		}
		return completeTx(ctx, tx, job)
	})
	if err != nil {
		return err
	}
	if skipped {
		w.Logger.InfoContext(ctx, "session already in memory; chunking skipped", slog.String("agent_id", agentID),
			slog.String("session_id", id.String()))
		return nil
	}
	w.Logger.InfoContext(ctx, "session chunked into mid-term memory", slog.String("agent_id", agentID),
		slog.String("session_id", id.String()), slog.Int("chunks", len(chunks)))
	return nil
}

// insertChunks copies chunks (with their event references) into the
// current agent schema and returns their new ids.
func insertChunks(ctx context.Context, aq *agentdb.Queries, sessionID uuid.UUID, tier, state string, chunks []Chunk) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(chunks))
	docs := make([]agentdb.MemoryChunksInsertParams, len(chunks))
	var refs []agentdb.MemoryEventRefsInsertParams
	for i, c := range chunks {
		ids[i] = uuid.New()
		docs[i] = agentdb.MemoryChunksInsertParams{ID: ids[i], SessionID: sessionID, Tier: tier, ChunkIndex: int32(c.Index),
			Text: c.Text, Metadata: c.Metadata, StartedAt: c.StartedAt, EndedAt: c.EndedAt, EmbeddingState: state}
		for j, h := range c.Hashes {
			refs = append(refs, agentdb.MemoryEventRefsInsertParams{Hash: h, SessionID: sessionID, Rev: c.Revs[j],
				DocumentID: ids[i]})
		}
	}
	if len(docs) > 0 {
		if _, err := aq.MemoryChunksInsert(ctx, docs); err != nil {
			return nil, err
		}
	}
	if len(refs) > 0 {
		if _, err := aq.MemoryEventRefsInsert(ctx, refs); err != nil {
			return nil, fmt.Errorf("event references: %w", err)
		}
	}
	return ids, nil
}
