package memory

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/choirhq/choir/rpc/admin"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/db/agentdb"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/strictjson"
)

// Operations of choir.memory.upsert.
const (
	OpInsert = "insert"
	OpUpdate = "update"
	OpDelete = "delete"
	// OpRestore is the operator's undo (choirctl memory restore); agents
	// cannot use it.
	OpRestore = "restore"
)

// Knowledge limits.
const (
	MaxKnowledgeBytes = 16 << 10
	MaxMetadataBytes  = 8 << 10
	MaxKeyBytes       = 200
)

// UpsertInput is the input of choir.memory.upsert; UpsertSchema is its
// JSON Schema.
//
//	insert  text (required), key, metadata: a new document; with a key that
//	        exists, that document is updated instead (the key deduplicates)
//	update  key or id, and text and/or metadata (omitted ones are kept)
//	delete  key or id; the document's versions are kept, so it can be
//	        restored by the operator
//
// ExpectVersion makes any of them conditional (optimistic concurrency):
// the write applies only if the document is at that version now (0: no
// document has the key yet), else it is refused with a
// *VersionConflictError and nothing is written. Without it a write is
// last-writer-wins, and one that changes nothing stays "unchanged", so
// repeating an upsert is harmless.
type UpsertInput struct {
	// Store is optional and must be "knowledge": session memory is written
	// by choird, not by tools.
	Store    string          `json:"store,omitempty"`
	Op       string          `json:"op"`
	Key      *string         `json:"key,omitempty"`
	ID       *string         `json:"id,omitempty"`
	Text     *string         `json:"text,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// ExpectVersion, when given, is the version the writer read: the
	// write is refused if the document has changed since.
	ExpectVersion *int `json:"expect_version,omitempty"`
	// TargetAgent is optional and, when given, must be the caller: writes
	// to another agent's memory are refused (by Postgres).
	TargetAgent string `json:"target_agent,omitempty"`
}

// UpsertSchema is the JSON Schema of choir.memory.upsert's input.
const UpsertSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["op"],
  "properties": {
    "store": {"const": "knowledge"},
    "op": {"enum": ["insert", "update", "delete"], "description": "insert: a new fact (a key that exists updates it instead); update: change text and/or metadata of the document with this key or id; delete: remove it (its history is kept)"},
    "key": {"type": "string", "minLength": 1, "maxLength": 200, "description": "optional dedup key, e.g. user.preference.theme"},
    "id": {"type": "string", "format": "uuid"},
    "text": {"type": "string", "minLength": 1, "maxLength": 16384},
    "metadata": {"type": "object", "description": "tags, source, category"},
    "expect_version": {"type": "integer", "minimum": 0, "description": "optional: the version you read; the write is refused if the document changed since (0: the key must be new)"},
    "target_agent": {"type": "string", "description": "only your own knowledge can be written"}
  }
}`

// Upsert runs choir.memory.upsert for the calling agent, under its role,
// in its own schema (or, when target_agent names another agent, in that
// agent's schema, where Postgres refuses it: ErrPermission).
func (s *Store) Upsert(ctx context.Context, callerAgentID string, input json.RawMessage) (*admin.MemoryWriteResult, error) {
	if _, err := s.dimensions(ctx, callerAgentID); err != nil {
		return nil, err
	}
	var in UpsertInput
	if err := strictjson.Decode(input, &in, strictjson.Limits{MaxBytes: 256 << 10}); err != nil {
		return nil, decodeErr(err)
	}
	if in.Store != "" && in.Store != StoreKnowledge {
		return nil, inputErr("$.store", "choir.memory.upsert writes the knowledge store only; session memory is "+
			"written by choird when a session ends")
	}
	w, err := validateUpsert(in)
	if err != nil {
		return nil, err
	}
	target := in.TargetAgent
	if target == "" {
		target = callerAgentID
	}
	if target != callerAgentID {
		// Only Postgres decides: the write runs under the caller's role in
		// the target's schema, and the role has no privilege there.
		if _, err := s.dimensions(ctx, target); err != nil {
			return nil, err
		}
	}
	return s.writeKnowledge(ctx, scope{schema: target, role: callerAgentID}, w, "agent:"+callerAgentID)
}

// knowledgeWrite is a validated write.
type knowledgeWrite struct {
	op       string
	key      *string
	id       *uuid.UUID
	text     *string
	metadata json.RawMessage
	version  int // restore only
	// expect is the version the writer read (0: no document yet); nil
	// writes whatever the version.
	expect *int
}

func validateUpsert(in UpsertInput) (*knowledgeWrite, error) {
	w := &knowledgeWrite{op: in.Op, key: in.Key, text: in.Text, expect: in.ExpectVersion}
	switch in.Op {
	case OpInsert, OpUpdate, OpDelete:
	case "":
		return nil, inputErr("$.op", "required: insert, update or delete")
	default:
		return nil, inputErr("$.op", "unknown op %q: want insert, update or delete", in.Op)
	}
	if in.ID != nil {
		id, err := uuid.Parse(*in.ID)
		if err != nil {
			return nil, inputErr("$.id", "not a document id (a UUID)")
		}
		w.id = &id
	}
	if in.Key != nil {
		if *in.Key == "" || strings.TrimSpace(*in.Key) != *in.Key || len(*in.Key) > MaxKeyBytes {
			return nil, inputErr("$.key", "must be 1 to %d bytes without leading or trailing spaces", MaxKeyBytes)
		}
	}
	if in.Text != nil {
		if strings.TrimSpace(*in.Text) == "" {
			return nil, inputErr("$.text", "is empty")
		}
		if len(*in.Text) > MaxKnowledgeBytes || !utf8.ValidString(*in.Text) {
			return nil, inputErr("$.text", "must be valid UTF-8 of at most %d bytes", MaxKnowledgeBytes)
		}
	}
	if in.Metadata != nil {
		var m map[string]any
		if json.Unmarshal(in.Metadata, &m) != nil || m == nil {
			return nil, inputErr("$.metadata", "must be a JSON object")
		}
		if len(in.Metadata) > MaxMetadataBytes {
			return nil, inputErr("$.metadata", "is %d bytes, over the limit of %d", len(in.Metadata), MaxMetadataBytes)
		}
		w.metadata = in.Metadata
	}
	if in.ExpectVersion != nil {
		if *in.ExpectVersion < 0 {
			return nil, inputErr("$.expect_version", "must be a version (1 or more), or 0 for a key not yet used")
		}
		if in.Key == nil && in.ID == nil {
			return nil, inputErr("$.expect_version", "needs the key (or id) of the document whose version it is")
		}
	}
	switch in.Op {
	case OpInsert:
		if in.ID != nil {
			return nil, inputErr("$.id", "not used by insert: the store assigns ids (use update to change a document)")
		}
		if in.Text == nil {
			return nil, inputErr("$.text", "required: insert needs the text to remember")
		}
	case OpUpdate, OpDelete:
		if (in.ID == nil) == (in.Key == nil) {
			return nil, inputErr("$.key", "%s needs exactly one of key or id", in.Op)
		}
		if in.Op == OpUpdate && in.Text == nil && in.Metadata == nil {
			return nil, inputErr("$.text", "update needs text, metadata or both")
		}
		if in.Op == OpDelete && (in.Text != nil || in.Metadata != nil) {
			return nil, inputErr("$.text", "delete takes only key or id")
		}
	}
	return w, nil
}

// writeKnowledge applies w in sc and enqueues the embedding of what
// changed, in one transaction.
func (s *Store) writeKnowledge(ctx context.Context, sc scope, w *knowledgeWrite, actor string) (*admin.MemoryWriteResult, error) {
	if s.inserter == nil {
		return nil, errors.New("memory store has no job inserter: writes need one")
	}
	var res *admin.MemoryWriteResult
	err := s.inScope(ctx, sc, false, func(tx pgx.Tx, aq *agentdb.Queries) error {
		var err error
		res, err = applyKnowledge(ctx, aq, w, actor)
		return err
	}, func(tx pgx.Tx) error {
		if res.Embedding != "pending" {
			return nil
		}
		return InsertEmbedTx(ctx, s.inserter, tx, sc.schema, EmbedStoreKnowledge, []uuid.UUID{res.ID})
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// knowledgeDoc is a document as the queries return it (all but tsv).
type knowledgeDoc agentdb.KnowledgeGetByIDRow

func lockDoc(ctx context.Context, aq *agentdb.Queries, id *uuid.UUID, key *string) (*knowledgeDoc, error) {
	var doc knowledgeDoc
	var err error
	if id != nil {
		var r agentdb.KnowledgeLockByIDRow
		r, err = aq.KnowledgeLockByID(ctx, *id)
		doc = knowledgeDoc(r)
	} else {
		var r agentdb.KnowledgeLockByKeyRow
		r, err = aq.KnowledgeLockByKey(ctx, key)
		doc = knowledgeDoc(r)
	}
	if errors.Is(err, choirsql.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read knowledge document: %w", err)
	}
	return &doc, nil
}

func describeRef(id *uuid.UUID, key *string) string {
	if id != nil {
		return "id " + id.String()
	}
	return fmt.Sprintf("key %q", *key)
}

// applyKnowledge applies w with the transaction's queries aq, recording
// each new version as made by actor.
func applyKnowledge(ctx context.Context, aq *agentdb.Queries, w *knowledgeWrite, actor string) (*admin.MemoryWriteResult, error) {
	k := &knowledgeTx{aq: aq, actor: actor, res: &admin.MemoryWriteResult{Op: w.op}}
	switch w.op {
	case OpInsert, OpUpdate:
		return k.upsert(ctx, w)
	case OpDelete:
		return k.delete(ctx, w)
	case OpRestore:
		return k.restore(ctx, w)
	}
	return nil, fmt.Errorf("unknown knowledge operation %q", w.op)
}

// knowledgeTx is one knowledge write in progress: the transaction's
// queries, the actor its versions record, and the result it builds.
type knowledgeTx struct {
	aq    *agentdb.Queries
	actor string
	res   *admin.MemoryWriteResult
}

// appendVersion records d as version d.Version of its document, made by op.
func (k *knowledgeTx) appendVersion(ctx context.Context, d knowledgeDoc, op string) error {
	err := k.aq.KnowledgeVersionAppend(ctx, agentdb.KnowledgeVersionAppendParams{DocumentID: d.ID, Version: d.Version,
		Op: op, Key: d.Key, Text: d.Text, Metadata: d.Metadata, Actor: k.actor})
	if err != nil {
		return fmt.Errorf("record version %d of knowledge document %s: %w", d.Version, d.ID, err)
	}
	return nil
}

// update gives the locked document cur a new text, metadata and version,
// drops its vector, and records the version.
func (k *knowledgeTx) update(ctx context.Context, cur *knowledgeDoc, text string, meta json.RawMessage, version int32,
	op string) error {
	r, err := k.aq.KnowledgeUpdate(ctx, agentdb.KnowledgeUpdateParams{ID: cur.ID, Text: text, Metadata: meta,
		Version: version})
	if err != nil {
		return fmt.Errorf("update knowledge document %s: %w", cur.ID, err)
	}
	if err := k.aq.KnowledgeEmbeddingDrop(ctx, cur.ID); err != nil {
		return fmt.Errorf("drop vector of knowledge document %s: %w", cur.ID, err)
	}
	d := knowledgeDoc(r)
	k.res.ID, k.res.Key, k.res.Version, k.res.Embedding = d.ID, d.Key, int(d.Version), "pending"
	return k.appendVersion(ctx, d, op)
}

// insert inserts a document and records its version. It reports false,
// and inserts nothing, when another document took the key meanwhile.
func (k *knowledgeTx) insert(ctx context.Context, id *uuid.UUID, key *string, text string, meta json.RawMessage,
	version int32, op string) (bool, error) {
	r, err := k.aq.KnowledgeInsert(ctx, agentdb.KnowledgeInsertParams{ID: id, Key: key, Text: text, Metadata: meta,
		Version: version})
	if errors.Is(err, choirsql.ErrNotFound) {
		return false, nil // the key was taken meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("insert knowledge document: %w", err)
	}
	d := knowledgeDoc(r)
	k.res.ID, k.res.Key, k.res.Version, k.res.Embedding = d.ID, d.Key, int(d.Version), "pending"
	return true, k.appendVersion(ctx, d, op)
}

// upsert applies an insert or an update: an insert whose key is taken
// updates the document that has it, and one that loses a race for a free
// key tries once more as an update.
func (k *knowledgeTx) upsert(ctx context.Context, w *knowledgeWrite) (*admin.MemoryWriteResult, error) {
	res := k.res
	if w.key != nil && w.id == nil {
		if err := k.aq.KnowledgeKeyLock(ctx, *w.key); err != nil {
			return nil, fmt.Errorf("lock knowledge key %q: %w", *w.key, err)
		}
	}
	for attempt := 0; ; attempt++ {
		var cur *knowledgeDoc
		var err error
		if w.id != nil || w.key != nil {
			if cur, err = lockDoc(ctx, k.aq, w.id, w.key); err != nil {
				return nil, err
			}
		}
		if err := k.checkExpected(ctx, w, cur); err != nil {
			return nil, err
		}
		if cur == nil {
			if w.op == OpUpdate {
				return nil, fmt.Errorf("%w: no knowledge document with %s", choirsql.ErrNotFound, describeRef(w.id, w.key))
			}
			meta := w.metadata
			if meta == nil {
				meta = json.RawMessage(`{}`)
			}
			ok, err := k.insert(ctx, nil, w.key, *w.text, meta, 1, OpInsert)
			if err != nil {
				return nil, err
			}
			if ok {
				res.Action = "inserted"
				return res, nil
			}
			if attempt > 0 {
				return nil, fmt.Errorf("insert knowledge document with key %q: the key keeps being taken", *w.key)
			}
			continue // another writer took the key: update that document
		}
		text, meta := cur.Text, cur.Metadata
		if w.text != nil {
			text = *w.text
		}
		if w.metadata != nil {
			meta = w.metadata
		}
		if text == cur.Text && jsonEqual(meta, cur.Metadata) {
			res.ID, res.Key, res.Version, res.Action, res.Embedding = cur.ID, cur.Key, int(cur.Version), "unchanged", "unchanged"
			return res, nil
		}
		if err := k.update(ctx, cur, text, meta, cur.Version+1, OpUpdate); err != nil {
			return nil, err
		}
		res.Action = "updated"
		return res, nil
	}
}

// checkExpected refuses w when it expects a version of the document
// other than cur's, the document as locked now (nil: none has the key or
// id). The lock makes the check and the write one: a concurrent writer
// expecting the same version waits for this transaction, then finds the
// version this one wrote.
func (k *knowledgeTx) checkExpected(ctx context.Context, w *knowledgeWrite, cur *knowledgeDoc) error {
	if w.expect == nil {
		return nil
	}
	if cur == nil && *w.expect == 0 || cur != nil && int(cur.Version) == *w.expect {
		return nil
	}
	e := &VersionConflictError{Ref: describeRef(w.id, w.key), Expected: *w.expect}
	if cur != nil {
		e.Current = int(cur.Version)
		return e
	}
	// Gone: name the version that deleted it, when there is one.
	var last *agentdb.KnowledgeVersion
	if w.id != nil {
		v, err := k.aq.KnowledgeVersionLatest(ctx, *w.id)
		if err == nil {
			last = &v
		} else if !errors.Is(err, choirsql.ErrNotFound) {
			return fmt.Errorf("read history of knowledge document %s: %w", w.id, err)
		}
	} else {
		vs, err := k.aq.KnowledgeVersionListByKey(ctx, w.key)
		if err != nil {
			return fmt.Errorf("read history of knowledge key %q: %w", *w.key, err)
		}
		if len(vs) > 0 {
			v := agentdb.KnowledgeVersion{DocumentID: vs[0].DocumentID, Version: vs[0].Version, Op: vs[0].Op}
			last = &v
		}
	}
	if last != nil && last.Op == OpDelete {
		e.Current, e.Deleted = int(last.Version), true
	}
	return e
}

// delete deletes the document w names and records its deletion as a
// version.
func (k *knowledgeTx) delete(ctx context.Context, w *knowledgeWrite) (*admin.MemoryWriteResult, error) {
	cur, err := lockDoc(ctx, k.aq, w.id, w.key)
	if err != nil {
		return nil, err
	}
	if err := k.checkExpected(ctx, w, cur); err != nil {
		return nil, err
	}
	if cur == nil {
		return nil, fmt.Errorf("%w: no knowledge document with %s", choirsql.ErrNotFound, describeRef(w.id, w.key))
	}
	if _, err := k.aq.KnowledgeDelete(ctx, cur.ID); err != nil {
		return nil, fmt.Errorf("delete knowledge document %s: %w", cur.ID, err)
	}
	d := *cur
	d.Version++
	if err := k.appendVersion(ctx, d, OpDelete); err != nil {
		return nil, err
	}
	res := k.res
	res.ID, res.Key, res.Version, res.Action, res.Embedding = d.ID, d.Key, int(d.Version), "deleted", "none"
	return res, nil
}

// restore makes version w.version of document w.id its current text again,
// as a new version: an update of the document, or its insert again if it
// was deleted.
func (k *knowledgeTx) restore(ctx context.Context, w *knowledgeWrite) (*admin.MemoryWriteResult, error) {
	v, err := k.aq.KnowledgeVersionGet(ctx, agentdb.KnowledgeVersionGetParams{DocumentID: *w.id, Version: int32(w.version)})
	if errors.Is(err, choirsql.ErrNotFound) {
		return nil, fmt.Errorf("%w: knowledge document %s has no version %d", choirsql.ErrNotFound, w.id, w.version)
	}
	if err != nil {
		return nil, fmt.Errorf("read version %d of knowledge document %s: %w", w.version, w.id, err)
	}
	latest, err := k.aq.KnowledgeVersionLatest(ctx, *w.id)
	if err != nil {
		return nil, fmt.Errorf("read history of knowledge document %s: %w", w.id, err)
	}
	if v.Op == OpDelete {
		return nil, fmt.Errorf("%w: version %d of knowledge document %s records its deletion; restore the version before it",
			ErrInvalidInput, w.version, w.id)
	}
	cur, err := lockDoc(ctx, k.aq, w.id, nil)
	if err != nil {
		return nil, err
	}
	if cur != nil {
		if err := k.update(ctx, cur, v.Text, v.Metadata, latest.Version+1, OpRestore); err != nil {
			return nil, err
		}
	} else {
		ok, err := k.insert(ctx, w.id, v.Key, v.Text, v.Metadata, latest.Version+1, OpRestore)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: key %q now belongs to another document; delete or rename that one first",
				ErrConflict, *v.Key)
		}
	}
	k.res.Action = "restored"
	return k.res, nil
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// History returns the versions of an agent's knowledge document, newest
// first: by id, or by key (every document that has had the key, deleted
// ones included).
func (s *Store) History(ctx context.Context, agentID, idOrKey string) ([]admin.MemoryKnowledgeVersion, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return nil, err
	}
	var out []admin.MemoryKnowledgeVersion
	err := s.inScope(ctx, scope{schema: agentID}, true, func(tx pgx.Tx, aq *agentdb.Queries) error {
		var rows []agentdb.KnowledgeVersionListRow
		if id, err := uuid.Parse(idOrKey); err == nil {
			rows, err = aq.KnowledgeVersionList(ctx, id)
			if err != nil {
				return fmt.Errorf("read history: %w", err)
			}
		} else {
			byKey, err := aq.KnowledgeVersionListByKey(ctx, &idOrKey)
			if err != nil {
				return fmt.Errorf("read history: %w", err)
			}
			for _, r := range byKey {
				rows = append(rows, agentdb.KnowledgeVersionListRow(r))
			}
		}
		for _, r := range rows {
			out = append(out, admin.MemoryKnowledgeVersion{DocumentID: r.DocumentID, Version: int(r.Version), Op: r.Op, Key: r.Key,
				Text: r.Text, Metadata: r.Metadata, ContentHash: hex.EncodeToString(r.ContentHash), Actor: r.Actor,
				CreatedAt: r.CreatedAt, Current: r.CurrentVersion != nil && *r.CurrentVersion == r.Version})
		}
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: agent %s has no knowledge document with id or key %q", choirsql.ErrNotFound, agentID, idOrKey)
	}
	return out, nil
}

// KnowledgeGet returns an agent's knowledge document by id or key.
func (s *Store) KnowledgeGet(ctx context.Context, agentID, idOrKey string) (*admin.MemoryKnowledge, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return nil, err
	}
	var out *admin.MemoryKnowledge
	err := s.inScope(ctx, scope{schema: agentID}, true, func(tx pgx.Tx, aq *agentdb.Queries) error {
		var d knowledgeDoc
		var err error
		if id, perr := uuid.Parse(idOrKey); perr == nil {
			d0, e := aq.KnowledgeGetByID(ctx, id)
			d, err = knowledgeDoc(d0), e
		} else {
			d0, e := aq.KnowledgeGetByKey(ctx, &idOrKey)
			d, err = knowledgeDoc(d0), e
		}
		if errors.Is(err, choirsql.ErrNotFound) {
			return fmt.Errorf("%w: agent %s has no knowledge document with id or key %q", choirsql.ErrNotFound, agentID, idOrKey)
		}
		if err != nil {
			return fmt.Errorf("read knowledge document: %w", err)
		}
		out = &admin.MemoryKnowledge{ID: d.ID, Key: d.Key, Version: int(d.Version), Text: d.Text, Metadata: d.Metadata,
			ContentHash: hex.EncodeToString(d.ContentHash), CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
			Embedding: d.EmbeddingState, EmbeddingError: d.EmbeddingError}
		return nil
	}, nil)
	return out, err
}

// KnowledgeDelete deletes an agent's knowledge document as the operator;
// its history stays, so KnowledgeRestore can undo it.
func (s *Store) KnowledgeDelete(ctx context.Context, agentID, idOrKey string) (*admin.MemoryWriteResult, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return nil, err
	}
	w := &knowledgeWrite{op: OpDelete}
	if id, err := uuid.Parse(idOrKey); err == nil {
		w.id = &id
	} else {
		w.key = &idOrKey
	}
	return s.writeKnowledge(ctx, scope{schema: agentID}, w, "operator")
}

// KnowledgeRestore makes version of a document current again, as its next
// version; a deleted document comes back with its id and key.
func (s *Store) KnowledgeRestore(ctx context.Context, agentID string, documentID uuid.UUID, version int) (*admin.MemoryWriteResult, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return nil, err
	}
	return s.writeKnowledge(ctx, scope{schema: agentID},
		&knowledgeWrite{op: OpRestore, id: &documentID, version: version}, "operator")
}

// KnowledgePut writes text as the knowledge document with key, as the
// operator: a new document, or the next version of the one that has the
// key, or nothing when the text is what it already says. Its versions are
// the agent's own kind (insert, update) with actor operator. With expect
// (the version the operator read; 0 for a new key) it writes only if the
// document is still at that version, else it returns a
// *VersionConflictError and writes nothing.
func (s *Store) KnowledgePut(ctx context.Context, agentID, key, text string, expect *int) (*admin.MemoryWriteResult, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return nil, err
	}
	w, err := validateUpsert(UpsertInput{Op: OpInsert, Key: &key, Text: &text, ExpectVersion: expect})
	if err != nil {
		return nil, err
	}
	return s.writeKnowledge(ctx, scope{schema: agentID}, w, "operator")
}
