package memory

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/choirhq/choir/rpc/admin"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory/textquery"
	"github.com/choirhq/choir/db/agentdb"
	"github.com/choirhq/choir/sql/seam"
	"github.com/choirhq/choir/strictjson"
)

// Stores of choir.memory.query.
const (
	StoreWorking   = "working"
	StoreSession   = "session"
	StoreKnowledge = "knowledge"
)

// Modes of choir.memory.query.
const (
	ModeSemantic      = "semantic"
	ModeText          = "text"
	ModeHash          = "hash"
	ModeRange         = "range"
	ModeSessionDetail = "session_detail"
)

// Tiers of session memory.
const (
	TierMidTerm         = "mid_term"
	TierLongTermSummary = "long_term_summary"
	TierLongTermDetail  = "long_term_detail"
)

// Result limits.
const (
	DefaultLimit = 10
	MaxLimit     = 50
	// MaxListLimit bounds range and session_detail listings.
	MaxListLimit = 100
	// MinHashPrefix is the shortest hash prefix accepted, in hex digits.
	MinHashPrefix = 8
	// MaxQueryBytes bounds the query text: a longer one is cut to this
	// many bytes, and the result's note says so.
	MaxQueryBytes = 4096
)

// QueryInput is the input of choir.memory.query; QuerySchema is its JSON
// Schema. Which fields a mode takes:
//
//	semantic        query and/or vector; session store: session_id, tiers
//	text            query; session store: session_id, tiers
//	hash            hash (hex, at least 8 digits): an event's chain hash for
//	                the session store, a content hash (current or earlier
//	                version) for knowledge
//	range           from and/or to (RFC 3339); session store: session_id,
//	                tiers; knowledge: key_prefix; offset
//	session_detail  session store only: session_id, optional query, tiers,
//	                offset (without query)
//
// All modes take target_agent (default: the caller) and limit.
type QueryInput struct {
	Store       string    `json:"store"`
	Mode        string    `json:"mode,omitempty"`
	Query       *string   `json:"query,omitempty"`
	Vector      []float32 `json:"vector,omitempty"`
	Hash        *string   `json:"hash,omitempty"`
	SessionID   *string   `json:"session_id,omitempty"`
	Tiers       []string  `json:"tiers,omitempty"`
	From        *string   `json:"from,omitempty"`
	To          *string   `json:"to,omitempty"`
	KeyPrefix   *string   `json:"key_prefix,omitempty"`
	TargetAgent string    `json:"target_agent,omitempty"`
	Limit       *int      `json:"limit,omitempty"`
	Offset      *int      `json:"offset,omitempty"`
}

// QuerySchema is the JSON Schema of choir.memory.query's input. The store
// "working" is answered inside the agent; choird refuses it.
const QuerySchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["store"],
  "properties": {
    "store": {"enum": ["working", "session", "knowledge"], "description": "session: your mid-term sessions and long-term session summaries; knowledge: your knowledge base; working: the current session's log"},
    "mode": {"enum": ["semantic", "text", "hash", "range", "session_detail"], "default": "semantic", "description": "semantic: meaning and words (hybrid); text: words (web-search syntax: \"a phrase\", or, -word); hash: by event or content hash; range: by time; session_detail: one session's full event chunks"},
    "query": {"type": "string", "description": "words, \"a phrase\" (required), -word (excluded); a question's other words are ORed, best matches first; cut to 4096 bytes"},
    "vector": {"type": "array", "items": {"type": "number"}, "description": "a query embedding instead of, or besides, query"},
    "hash": {"type": "string", "pattern": "^[0-9a-fA-F]{8,64}$"},
    "session_id": {"type": "string", "format": "uuid"},
    "tiers": {"type": "array", "items": {"enum": ["mid_term", "long_term_summary", "long_term_detail"]}, "uniqueItems": true},
    "from": {"type": "string", "format": "date-time"},
    "to": {"type": "string", "format": "date-time"},
    "key_prefix": {"type": "string"},
    "target_agent": {"type": "string", "description": "whose memory to read; default yours"},
    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
    "offset": {"type": "integer", "minimum": 0}
  }
}`

// query is a validated QueryInput.
type query struct {
	store, mode, target string
	text                string
	vector              []float32
	hashFrom, hashTo    []byte
	sessionID           *uuid.UUID
	tiers               []string
	from, to            time.Time
	keyPrefix           string
	limit, offset       int
	// note is what the result says about the query.
	note string
}

// decodeQuery decodes and validates input. A given vector's size is
// checked later, against the target agent's schema.
func decodeQuery(input []byte, caller string) (*query, error) {
	var in QueryInput
	if err := strictjson.Decode(input, &in, strictjson.Limits{MaxBytes: 1 << 20}); err != nil {
		return nil, decodeErr(err)
	}
	q := &query{store: in.Store, mode: in.Mode, target: in.TargetAgent}
	if q.target == "" {
		q.target = caller
	}
	if q.mode == "" {
		q.mode = ModeSemantic
	}
	// In this order: the first problem found is the one reported.
	for _, read := range []func(*QueryInput) error{q.checkFields, q.readSearch, q.readFilters, q.readPage} {
		if err := read(&in); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// checkFields checks the store and the mode, and that in gives only
// fields the mode and the store use.
func (q *query) checkFields(in *QueryInput) error {
	switch q.store {
	case StoreSession, StoreKnowledge:
	case StoreWorking:
		return inputErr("$.store", "the working store is answered inside the agent, not by choird")
	case "":
		return inputErr("$.store", "required: session or knowledge")
	default:
		return inputErr("$.store", "unknown store %q: want session or knowledge (or working, inside the agent)", q.store)
	}
	allowed := map[string][]string{
		ModeSemantic:      {"query", "vector", "session_id", "tiers"},
		ModeText:          {"query", "session_id", "tiers"},
		ModeHash:          {"hash"},
		ModeRange:         {"from", "to", "session_id", "tiers", "key_prefix", "offset"},
		ModeSessionDetail: {"session_id", "query", "tiers", "offset"},
	}
	fields, ok := allowed[q.mode]
	if !ok {
		return inputErr("$.mode", "unknown mode %q: want semantic, text, hash, range or session_detail", q.mode)
	}
	if q.mode == ModeSessionDetail && q.store != StoreSession {
		return inputErr("$.mode", "session_detail is a mode of the session store only")
	}
	given := map[string]bool{"query": in.Query != nil, "vector": in.Vector != nil, "hash": in.Hash != nil,
		"session_id": in.SessionID != nil, "tiers": in.Tiers != nil, "from": in.From != nil, "to": in.To != nil,
		"key_prefix": in.KeyPrefix != nil, "offset": in.Offset != nil}
	for _, f := range []string{"query", "vector", "hash", "session_id", "tiers", "from", "to", "key_prefix", "offset"} {
		if !given[f] {
			continue
		}
		if !slices.Contains(fields, f) {
			return inputErr("$."+f, "not used by mode %s", q.mode)
		}
		if q.store == StoreKnowledge && (f == "session_id" || f == "tiers") {
			return inputErr("$."+f, "applies to the session store only")
		}
		if q.store == StoreSession && f == "key_prefix" {
			return inputErr("$."+f, "applies to the knowledge store only")
		}
	}
	return nil
}

// readSearch reads what the query looks for (its text, vector or hash)
// and checks that the mode has what it needs.
func (q *query) readSearch(in *QueryInput) error {
	if in.Query != nil {
		q.text = strings.TrimSpace(*in.Query)
		if q.text == "" {
			return inputErr("$.query", "is empty: give words to search for")
		}
		if t, cut := textquery.Truncate(q.text, MaxQueryBytes); cut {
			q.note = fmt.Sprintf("query of %d bytes truncated to its first %d bytes", len(q.text), len(t))
			q.text = t
		}
	}
	q.vector = in.Vector
	if in.Vector != nil && len(in.Vector) == 0 {
		return inputErr("$.vector", "is empty")
	}
	switch q.mode {
	case ModeSemantic:
		if in.Query == nil && in.Vector == nil {
			return inputErr("$.query", "required: semantic search needs a query (or a vector)")
		}
	case ModeText:
		if in.Query == nil {
			return inputErr("$.query", "required: text search needs a query")
		}
	case ModeHash:
		if in.Hash == nil {
			return inputErr("$.hash", "required: a hex hash or prefix of at least %d digits", MinHashPrefix)
		}
		from, to, err := hashRange(*in.Hash)
		if err != nil {
			return err
		}
		q.hashFrom, q.hashTo = from, to
	case ModeRange:
		if in.From == nil && in.To == nil {
			return inputErr("$.from", "required: range needs from, to or both (RFC 3339 times)")
		}
	case ModeSessionDetail:
		if in.SessionID == nil {
			return inputErr("$.session_id", "required: session_detail drills into one session")
		}
		if in.Query != nil && in.Offset != nil {
			return inputErr("$.offset", "not used with a query: matches come best first")
		}
	}
	return nil
}

// readFilters reads what narrows the search: the session, the time range,
// the key prefix and the tiers, defaulting each.
func (q *query) readFilters(in *QueryInput) error {
	if in.SessionID != nil {
		id, err := uuid.Parse(*in.SessionID)
		if err != nil {
			return inputErr("$.session_id", "not a session id (a UUID)")
		}
		q.sessionID = &id
	}
	q.from = time.Unix(0, 0).UTC()
	q.to = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, t := range []struct {
		field string
		in    *string
		out   *time.Time
	}{{"from", in.From, &q.from}, {"to", in.To, &q.to}} {
		if t.in == nil {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, *t.in)
		if err != nil {
			return inputErr("$."+t.field, "not an RFC 3339 time such as 2026-11-21T09:00:00Z")
		}
		*t.out = v
	}
	if !q.from.Before(q.to) {
		return inputErr("$.to", "must be after from")
	}
	if in.KeyPrefix != nil {
		q.keyPrefix = *in.KeyPrefix
	}
	q.tiers = []string{TierMidTerm, TierLongTermSummary}
	if q.mode == ModeSessionDetail {
		q.tiers = []string{TierMidTerm, TierLongTermDetail}
	}
	if in.Tiers != nil {
		if len(in.Tiers) == 0 {
			return inputErr("$.tiers", "is empty: name at least one tier, or leave it out")
		}
		for i, t := range in.Tiers {
			if t != TierMidTerm && t != TierLongTermSummary && t != TierLongTermDetail {
				return inputErr(strictjson.PathIndex("$.tiers", i),
					"unknown tier %q: want mid_term, long_term_summary or long_term_detail", t)
			}
		}
		q.tiers = in.Tiers
	}
	return nil
}

// readPage reads the limit, whose bound depends on the mode, and the
// offset.
func (q *query) readPage(in *QueryInput) error {
	maxLimit := MaxLimit
	if q.mode == ModeRange || q.mode == ModeSessionDetail {
		maxLimit = MaxListLimit
	}
	q.limit = DefaultLimit
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > maxLimit {
			return inputErr("$.limit", "must be between 1 and %d for mode %s", maxLimit, q.mode)
		}
		q.limit = *in.Limit
	}
	if in.Offset != nil {
		if *in.Offset < 0 || *in.Offset > 100000 {
			return inputErr("$.offset", "must be between 0 and 100000")
		}
		q.offset = *in.Offset
	}
	return nil
}

func decodeErr(err error) error {
	var se *strictjson.Error
	if !errors.As(err, &se) || len(se.Problems) == 0 {
		return inputErr("$", "%v", err)
	}
	msg := se.Problems[0].Message
	for _, p := range se.Problems[1:] {
		msg += "; " + p.String()
	}
	return &InputError{Field: se.Problems[0].Path, Message: msg}
}

// hashRange turns a hex hash or prefix into the byte range [from, to) of
// the hashes it matches; to is nil when no upper bound is needed.
func hashRange(h string) (from, to []byte, err error) {
	h = strings.ToLower(strings.TrimSpace(h))
	if len(h) < MinHashPrefix || len(h) > 64 {
		return nil, nil, inputErr("$.hash", "want %d to 64 hex digits, got %d characters", MinHashPrefix, len(h))
	}
	if _, err := hex.DecodeString(h + strings.Repeat("0", len(h)%2)); err != nil {
		return nil, nil, inputErr("$.hash", "not hexadecimal")
	}
	lo := h + strings.Repeat("0", len(h)%2)
	from, _ = hex.DecodeString(lo)
	// The upper bound is the prefix plus one in its last digit, carried.
	digits := []byte(h)
	i := len(digits) - 1
	for ; i >= 0; i-- {
		if digits[i] != 'f' {
			break
		}
		digits[i] = '0'
	}
	if i < 0 {
		return from, nil, nil
	}
	digits[i] = "0123456789abcdef"[strings.IndexByte("0123456789abcdef", digits[i])+1]
	up := string(digits[:i+1])
	up += strings.Repeat("0", len(up)%2)
	to, _ = hex.DecodeString(up)
	return from, to, nil
}

// Query runs choir.memory.query for the calling agent. Reads of the
// caller's own memory run under its role; reads of another agent's need
// that agent's memory_readable_by to name the caller (mayRead), and run on
// choird's connection, read-only.
func (s *Store) Query(ctx context.Context, callerAgentID string, input json.RawMessage) (*admin.MemoryQueryResult, error) {
	if _, err := s.dimensions(ctx, callerAgentID); err != nil {
		return nil, err
	}
	q, err := decodeQuery(input, callerAgentID)
	if err != nil {
		return nil, err
	}
	// Embedding the query is billed to the caller's caps.
	ctx = embed.ForAgent(ctx, callerAgentID, "query")
	sc := scope{schema: q.target}
	if q.target == callerAgentID {
		sc.role = callerAgentID
	} else {
		if _, err := s.dimensions(ctx, q.target); err != nil {
			return nil, err
		}
		if err := s.mayRead(ctx, callerAgentID, q.target); err != nil {
			return nil, err
		}
	}
	return s.run(ctx, q, sc)
}

// mayRead checks that target's memory_readable_by names reader: an agent
// reads another's memory only with that agent's consent in config.json.
func (s *Store) mayRead(ctx context.Context, reader, target string) error {
	var readers []string
	if s.readers != nil {
		readers = s.readers(target)
	}
	if slices.Contains(readers, reader) {
		return nil
	}
	key := "agents." + target + ".memory_readable_by"
	s.logger.WarnContext(ctx, "memory read refused: another agent's memory", slog.String("agent_id", reader),
		slog.String("target_agent", target), slog.String("key", key), slog.Any("readers", readers))
	return fmt.Errorf("%w: agent %s may not read the memory of agent %s: its %s does not name %s "+
		"(an admin adds %q to that list in config.json and runs choirctl config apply to allow it)",
		ErrPermission, reader, target, key, reader, reader)
}

// QueryAsOperator runs a query for choirctl: any agent's memory, named by
// target_agent (required), read with choird's own role.
func (s *Store) QueryAsOperator(ctx context.Context, input json.RawMessage) (*admin.MemoryQueryResult, error) {
	q, err := decodeQuery(input, "")
	if err != nil {
		return nil, err
	}
	if q.target == "" {
		return nil, inputErr("$.target_agent", "required: name the agent whose memory to search")
	}
	return s.run(ctx, q, scope{schema: q.target})
}

func (s *Store) run(ctx context.Context, q *query, sc scope) (*admin.MemoryQueryResult, error) {
	dims, err := s.dimensions(ctx, q.target)
	if err != nil {
		return nil, err
	}
	if q.vector != nil && len(q.vector) != dims {
		return nil, inputErr("$.vector", "has %d dimensions; the memory of agent %s holds vectors of %d",
			len(q.vector), q.target, dims)
	}
	res := &admin.MemoryQueryResult{Store: q.store, Mode: q.mode, TargetAgent: q.target, Note: q.note}
	var vec *pgvector.Vector
	if q.mode == ModeSemantic {
		vec, res.Degraded = s.queryVector(ctx, q, dims)
		switch {
		case vec != nil && q.text != "":
			res.Search = "hybrid"
		case vec != nil:
			res.Search = "vector"
		default:
			res.Search = "text"
		}
	}
	if q.mode == ModeText {
		res.Search = "text"
	}
	// The slot covers the database work only, not the query's embedding.
	release, err := s.acquireQuery(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if q.mode == ModeSemantic || q.mode == ModeText {
		err = s.search(ctx, sc, q, vec, res)
	} else {
		err = s.inScope(ctx, sc, true, func(tx pgx.Tx, aq *agentdb.Queries) error {
			if q.text != "" {
				n, err := seam.Queries(tx).MemoryTextQueryNodes(ctx, q.text)
				if err != nil {
					return fmt.Errorf("parse query: %w", err)
				}
				if n == 0 {
					return errNoWords
				}
			}
			if q.store == StoreSession {
				return s.querySession(ctx, aq, q, nil, res)
			}
			return s.queryKnowledge(ctx, aq, q, nil, res)
		}, nil)
	}
	if errors.Is(err, errNoWords) && q.mode != ModeHash && q.mode != ModeRange {
		res.Note = joinNote(res.Note, noWordsNote)
		res.Chunks, res.Documents, err = nil, nil, nil
	}
	if err != nil {
		return nil, err
	}
	res.Count = len(res.Chunks) + len(res.Documents)
	return res, nil
}

var errNoWords = inputErr("$.query", "has no searchable words (English stop words and punctuation are ignored)")

// noWordsNote is the note of a result whose query had no searchable words.
const noWordsNote = "the query has no searchable words (English stop words and punctuation are ignored): " +
	"full-text search found nothing"

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// wordStats sorts the query's words for the full-text side (textquery.Rank),
// given how many of the store's documents hold each (docs, in the order of
// lexemes, then the store's document count; see MemorySearchScope).
func (s *Store) wordStats(lexemes []string, docs []int64) textquery.Terms {
	if len(docs) != len(lexemes)+1 {
		return textquery.Rank(nil, 0, 0)
	}
	stats := make([]textquery.Stat, len(lexemes))
	for i, l := range lexemes {
		stats[i] = textquery.Stat{Lexeme: l, Docs: docs[i]}
	}
	return textquery.Rank(stats, docs[len(lexemes)], s.tuning.PostingBudget)
}

// queryVector returns the vector of a semantic query: the one given, or
// the query text embedded. When the embedder is missing, failing, or makes
// vectors of another size, it returns nil and says why: the search then
// runs on full text alone.
func (s *Store) queryVector(ctx context.Context, q *query, dims int) (*pgvector.Vector, string) {
	if q.vector != nil {
		v := pgvector.NewVector(q.vector)
		return &v, ""
	}
	if s.embedder == nil {
		return nil, "no embedding provider configured: full-text search only"
	}
	if d := s.embedder.Dimensions(); d != dims {
		return nil, fmt.Sprintf("the embedder makes vectors of %d dimensions, agent %s's memory holds %d "+
			"(run choirctl memory reembed): full-text search only", d, q.target, dims)
	}
	s.mu.Lock()
	failAt, failErr := s.embedFailAt, s.embedFailErr
	s.mu.Unlock()
	if !failAt.IsZero() && s.now().Sub(failAt) < s.queryEmbedCooldown {
		return nil, fmt.Sprintf("embedding provider failing since %s (%s): full-text search only",
			failAt.UTC().Format(time.RFC3339), failErr)
	}
	ctx, cancel := context.WithTimeout(ctx, s.queryEmbedTimeout)
	defer cancel()
	vec, err := s.embedQuery(ctx, q.target, q.store, q.text)
	if err != nil {
		s.mu.Lock()
		s.embedFailAt, s.embedFailErr = s.now(), err.Error()
		s.mu.Unlock()
		s.logger.WarnContext(ctx, "query embedding failed: answering from full text", slog.String("error", err.Error()))
		return nil, fmt.Sprintf("embedding provider unavailable (%v): full-text search only", err)
	}
	s.mu.Lock()
	s.embedFailAt, s.embedFailErr = time.Time{}, ""
	s.mu.Unlock()
	v := pgvector.NewVector(vec)
	return &v, ""
}

func (s *Store) querySession(ctx context.Context, aq *agentdb.Queries, q *query, vec *pgvector.Vector, res *admin.MemoryQueryResult) error {
	switch q.mode {
	case ModeHash:
		rows, err := aq.MemoryChunksByEventHash(ctx, agentdb.MemoryChunksByEventHashParams{HashFrom: q.hashFrom,
			HashTo: q.hashTo, MaxResults: int32(q.limit)})
		if err != nil {
			return fmt.Errorf("look up event hash: %w", err)
		}
		for _, r := range rows {
			res.Chunks = append(res.Chunks, admin.MemoryChunkHit{SessionID: r.SessionID, ChunkIndex: int(r.ChunkIndex), Tier: r.Tier,
				Text: r.Text, Metadata: r.Metadata, StartedAt: r.StartedAt, EndedAt: r.EndedAt, DocumentID: r.ID,
				EventHash: hex.EncodeToString(r.Hash), EventRev: r.Rev, Embedding: r.EmbeddingState})
		}
	case ModeRange:
		rows, err := aq.MemoryChunksInRange(ctx, agentdb.MemoryChunksInRangeParams{FromTime: q.from, ToTime: q.to,
			Tiers: q.tiers, SessionID: q.sessionID, MaxResults: int32(q.limit), Skip: int32(q.offset)})
		if err != nil {
			return fmt.Errorf("list session memory: %w", err)
		}
		for _, r := range rows {
			res.Chunks = append(res.Chunks, chunkHit(agentdb.MemorySessionChunksRow(r)))
		}
	case ModeSessionDetail:
		if q.text != "" {
			rows, err := aq.MemorySessionChunksSearch(ctx, agentdb.MemorySessionChunksSearchParams{SessionID: *q.sessionID,
				Tiers: q.tiers, QueryText: q.text, MaxResults: int32(q.limit)})
			if err != nil {
				return fmt.Errorf("search session %s: %w", q.sessionID, err)
			}
			for _, r := range rows {
				h := chunkHit(agentdb.MemorySessionChunksRow{ID: r.ID, SessionID: r.SessionID, Tier: r.Tier,
					ChunkIndex: r.ChunkIndex, Text: r.Text, Metadata: r.Metadata, StartedAt: r.StartedAt, EndedAt: r.EndedAt,
					CreatedAt: r.CreatedAt, EmbeddingState: r.EmbeddingState})
				h.Score = r.Score
				res.Chunks = append(res.Chunks, h)
			}
			return nil
		}
		rows, err := aq.MemorySessionChunks(ctx, agentdb.MemorySessionChunksParams{SessionID: *q.sessionID,
			Tiers: q.tiers, MaxResults: int32(q.limit), Skip: int32(q.offset)})
		if err != nil {
			return fmt.Errorf("list session %s: %w", q.sessionID, err)
		}
		for _, r := range rows {
			res.Chunks = append(res.Chunks, chunkHit(r))
		}
	}
	return nil
}

func chunkHit(r agentdb.MemorySessionChunksRow) admin.MemoryChunkHit {
	return admin.MemoryChunkHit{SessionID: r.SessionID, ChunkIndex: int(r.ChunkIndex), Tier: r.Tier, Text: r.Text,
		Metadata: r.Metadata, StartedAt: r.StartedAt, EndedAt: r.EndedAt, DocumentID: r.ID, Embedding: r.EmbeddingState}
}

func (s *Store) queryKnowledge(ctx context.Context, aq *agentdb.Queries, q *query, vec *pgvector.Vector, res *admin.MemoryQueryResult) error {
	switch q.mode {
	case ModeHash:
		rows, err := aq.KnowledgeVersionsByHash(ctx, agentdb.KnowledgeVersionsByHashParams{HashFrom: q.hashFrom,
			HashTo: q.hashTo, MaxResults: int32(q.limit)})
		if err != nil {
			return fmt.Errorf("look up content hash: %w", err)
		}
		for _, r := range rows {
			current := r.CurrentVersion != nil && *r.CurrentVersion == r.Version
			res.Documents = append(res.Documents, admin.MemoryKnowledgeHit{ID: r.DocumentID, Key: r.Key, Version: int(r.Version),
				Text: r.Text, Metadata: r.Metadata, ContentHash: hex.EncodeToString(r.ContentHash), UpdatedAt: r.CreatedAt,
				Op: r.Op, Actor: r.Actor, Current: &current})
		}
	case ModeRange:
		rows, err := aq.KnowledgeInRange(ctx, agentdb.KnowledgeInRangeParams{FromTime: q.from, ToTime: q.to,
			KeyPrefix: q.keyPrefix, MaxResults: int32(q.limit), Skip: int32(q.offset)})
		if err != nil {
			return fmt.Errorf("list knowledge: %w", err)
		}
		for _, r := range rows {
			res.Documents = append(res.Documents, admin.MemoryKnowledgeHit{ID: r.ID, Key: r.Key, Version: int(r.Version), Text: r.Text,
				Metadata: r.Metadata, ContentHash: hex.EncodeToString(r.ContentHash), UpdatedAt: r.UpdatedAt,
				Embedding: r.EmbeddingState})
		}
	}
	return nil
}
