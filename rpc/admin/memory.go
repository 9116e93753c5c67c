package admin

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// The request and result types of choirctl memory, served by choird's
// memory store with its admin role: it reads and changes any agent's
// memory, and its writes are recorded as the operator's in knowledge
// history. These are the memory store's own result types: daemon/memory
// and daemon/embed name them (type aliases), so they have one definition.

// MemorySearchRequest is the body of POST PathMemorySearch: a
// choir.memory.query of the agent's memory, as the operator.
type MemorySearchRequest struct {
	Store     string   `json:"store"`
	Mode      string   `json:"mode"`
	Query     string   `json:"query"`
	Limit     int      `json:"limit"`
	SessionID string   `json:"session_id,omitempty"`
	Tiers     []string `json:"tiers,omitempty"`
}

// MemoryQueryResult is the output of choir.memory.query: Chunks for the
// session store, Documents for knowledge.
type MemoryQueryResult struct {
	Store       string `json:"store"`
	Mode        string `json:"mode"`
	TargetAgent string `json:"target_agent"`
	// Search says what ran for semantic and text modes: hybrid (vectors and
	// full text fused), vector, or text.
	Search string `json:"search,omitempty"`
	// Degraded says why a semantic query ran on full text alone.
	Degraded string `json:"degraded,omitempty"`
	// Note says what became of the query: cut to the length limit, or
	// without searchable words (an empty result, not an error).
	Note      string               `json:"note,omitempty"`
	Chunks    []MemoryChunkHit     `json:"chunks,omitempty"`
	Documents []MemoryKnowledgeHit `json:"documents,omitempty"`
	Count     int                  `json:"count"`
}

// MemoryChunkHit is a chunk of session memory, with what it takes to cite
// it: the session, the chunk index and the tier.
type MemoryChunkHit struct {
	SessionID  uuid.UUID       `json:"session_id"`
	ChunkIndex int             `json:"chunk_index"`
	Tier       string          `json:"tier"`
	Score      float64         `json:"score"`
	VectorRank int             `json:"vector_rank,omitempty"`
	TextRank   int             `json:"text_rank,omitempty"`
	Text       string          `json:"text"`
	Metadata   json.RawMessage `json:"metadata"`
	StartedAt  time.Time       `json:"started_at"`
	EndedAt    time.Time       `json:"ended_at"`
	DocumentID uuid.UUID       `json:"document_id"`
	// EventHash and EventRev name the event a hash query matched.
	EventHash string `json:"event_hash,omitempty"`
	EventRev  int64  `json:"event_rev,omitempty"`
	// Embedding is the chunk's embedding_state: pending, embedded, failed
	// (found by full text only) or none (long_term_detail).
	Embedding string `json:"embedding"`
}

// MemoryKnowledgeHit is a knowledge document, or for hash queries one
// version of it.
type MemoryKnowledgeHit struct {
	ID          uuid.UUID       `json:"id"`
	Key         *string         `json:"key,omitempty"`
	Version     int             `json:"version"`
	Score       float64         `json:"score"`
	VectorRank  int             `json:"vector_rank,omitempty"`
	TextRank    int             `json:"text_rank,omitempty"`
	Text        string          `json:"text"`
	Metadata    json.RawMessage `json:"metadata"`
	ContentHash string          `json:"content_hash"`
	UpdatedAt   time.Time       `json:"updated_at"`
	Embedding   string          `json:"embedding,omitempty"`
	// Op, Actor and Current describe a version found by hash: what made it,
	// who, and whether it is the document's current text (false for
	// earlier versions and deleted documents).
	Op      string `json:"op,omitempty"`
	Actor   string `json:"actor,omitempty"`
	Current *bool  `json:"current,omitempty"`
}

// MemoryRef is the body of POST PathMemoryShow, PathMemoryHistory and
// PathMemoryDelete: a knowledge document's key or id, or for show a
// chunk's or a session's id.
type MemoryRef struct {
	Ref string `json:"ref"`
}

// MemoryItem is the answer of POST PathMemoryShow: the knowledge document
// the reference names (by key or id), else the memory chunk or the
// session (with every chunk, all tiers) of that id. One field is set.
type MemoryItem struct {
	Knowledge *MemoryKnowledge `json:"knowledge,omitempty"`
	Chunk     *MemoryChunk     `json:"chunk,omitempty"`
	Session   *MemorySession   `json:"session,omitempty"`
}

// MemoryKnowledge is a knowledge document.
type MemoryKnowledge struct {
	ID             uuid.UUID       `json:"id"`
	Key            *string         `json:"key,omitempty"`
	Version        int             `json:"version"`
	Text           string          `json:"text"`
	Metadata       json.RawMessage `json:"metadata"`
	ContentHash    string          `json:"content_hash"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	Embedding      string          `json:"embedding"`
	EmbeddingError string          `json:"embedding_error,omitempty"`
}

// MemoryChunk is one chunk of session memory with its embedding details.
type MemoryChunk struct {
	MemoryChunkHit
	CreatedAt      time.Time `json:"created_at"`
	EmbeddingModel string    `json:"embedding_model,omitempty"`
	EmbeddingError string    `json:"embedding_error,omitempty"`
}

// MemorySession is a session in an agent's memory.
type MemorySession struct {
	SessionID     uuid.UUID  `json:"session_id"`
	Tier          string     `json:"tier"`
	StartedAt     time.Time  `json:"started_at"`
	EndedAt       time.Time  `json:"ended_at"`
	Status        string     `json:"status"`
	EventCount    int        `json:"event_count"`
	ChunkCount    int        `json:"chunk_count"`
	SummaryChunks int        `json:"summary_chunks"`
	ChunkedAt     time.Time  `json:"chunked_at"`
	PromotedAt    *time.Time `json:"promoted_at,omitempty"`
	// Chunks are filled when one session is shown.
	Chunks []MemoryChunkHit `json:"chunks,omitempty"`
}

// MemoryKnowledgeVersion is one version of a knowledge document.
type MemoryKnowledgeVersion struct {
	DocumentID  uuid.UUID       `json:"document_id"`
	Version     int             `json:"version"`
	Op          string          `json:"op"`
	Key         *string         `json:"key,omitempty"`
	Text        string          `json:"text"`
	Metadata    json.RawMessage `json:"metadata"`
	ContentHash string          `json:"content_hash"`
	Actor       string          `json:"actor"`
	CreatedAt   time.Time       `json:"created_at"`
	// Current is true for the version that is the document's text now.
	Current bool `json:"current"`
}

// MemoryWriteResult is what a delete or restore of a knowledge document
// did.
type MemoryWriteResult struct {
	Op string `json:"op"`
	// Action is what happened: inserted, updated, unchanged, deleted or
	// restored.
	Action  string    `json:"action"`
	ID      uuid.UUID `json:"id"`
	Key     *string   `json:"key,omitempty"`
	Version int       `json:"version"`
	// Embedding is pending when a new vector is on its way (the document is
	// found by full text meanwhile), else unchanged or none.
	Embedding string `json:"embedding"`
}

// MemoryPutRequest is the body of POST PathMemoryPut: the text of the
// knowledge document with Key, written as the operator.
type MemoryPutRequest struct {
	Key  string `json:"key"`
	Text string `json:"text"`
	// ExpectVersion, when set, is the version the operator read (0: the
	// key was not in use): choird writes only if the document is still at
	// that version, and otherwise refuses with code conflict and writes
	// nothing. Unset, the write is last-writer-wins.
	ExpectVersion *int `json:"expect_version,omitempty"`
}

// MemoryRestoreRequest is the body of POST PathMemoryRestore.
type MemoryRestoreRequest struct {
	Version int `json:"version"`
}

// MemorySessionDeleted is the answer of POST PathMemorySessionDelete.
type MemorySessionDeleted struct {
	ChunksDeleted int64     `json:"chunks_deleted"`
	SessionID     uuid.UUID `json:"session_id"`
}

// MemoryReembedRequest is the body of POST PathMemoryReembed.
type MemoryReembedRequest struct {
	// AgentID limits the re-embedding to one agent (default: all).
	AgentID string `json:"agent_id,omitempty"`
	// All re-embeds every document, not only pending, failed and stale
	// ones.
	All bool `json:"all,omitempty"`
}

// MemoryReembedResult is what a re-embed enqueued for one agent.
type MemoryReembedResult struct {
	AgentID string `json:"agent_id"`
	// Resized is true when the agent's vectors changed size: every stored
	// vector was dropped and the columns retyped.
	Resized        bool `json:"resized"`
	FromDimensions int  `json:"from_dimensions"`
	Dimensions     int  `json:"dimensions"`
	Chunks         int  `json:"chunks"`
	Knowledge      int  `json:"knowledge"`
	Jobs           int  `json:"jobs"`
}

// MemoryReport is the embedder and, per agent, the documents waiting for
// vectors and the last embedding failure (choirctl memory status).
type MemoryReport struct {
	// Embedding is the embedder's own status: provider, model, whether it
	// is the offline embedder, calls and the last failure since choird
	// started. Nil when the store has no embedder.
	Embedding *EmbeddingStatus `json:"embedding,omitempty"`
	// Pending counts documents waiting for a vector, Failed those whose
	// embedding failed for good (found by full text only until
	// choirctl memory reembed), Stale vectors made by another model.
	Pending int `json:"pending"`
	Failed  int `json:"failed"`
	Stale   int `json:"stale"`
	// LastError is the latest embedding failure recorded on a document.
	LastError   string              `json:"last_error,omitempty"`
	LastErrorAt *time.Time          `json:"last_error_at,omitempty"`
	Agents      []MemoryAgentReport `json:"agents"`
}

// MemoryAgentReport is one agent's share of a MemoryReport.
type MemoryAgentReport struct {
	AgentID          string `json:"agent_id"`
	Dimensions       int    `json:"dimensions"`
	MemoryPending    int    `json:"memory_pending"`
	MemoryFailed     int    `json:"memory_failed"`
	KnowledgePending int    `json:"knowledge_pending"`
	KnowledgeFailed  int    `json:"knowledge_failed"`
	Stale            int    `json:"stale"`
	// MemoryDrift and KnowledgeDrift are, with the offline embedder, how
	// far each store's IDF weights have moved since its vectors were last
	// all re-embedded: the mean |idf now - idf then| in nats (choird
	// re-embeds the store past pipeline.DriftThreshold).
	MemoryDrift    float64    `json:"memory_drift,omitempty"`
	KnowledgeDrift float64    `json:"knowledge_drift,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	LastErrorAt    *time.Time `json:"last_error_at,omitempty"`
}

// EmbeddingStatus is the embedder's state: which provider and model, and
// its calls and failures since choird started.
type EmbeddingStatus struct {
	Provider   string `json:"provider"`
	Model      string `json:"model"`
	Dimensions int    `json:"dimensions"`
	// Offline is true for the built-in lexical embedder.
	Offline bool `json:"offline"`
	// Note says in words what kind of embedder this is.
	Note          string    `json:"note"`
	Endpoint      string    `json:"endpoint,omitempty"`
	Calls         int64     `json:"calls"`
	Texts         int64     `json:"texts"`
	Failures      int64     `json:"failures"`
	LastSuccessAt time.Time `json:"last_success_at,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorAt   time.Time `json:"last_error_at,omitzero"`
	// ConsecutiveFailures counts failed calls since the last success.
	ConsecutiveFailures int64 `json:"consecutive_failures"`
}
