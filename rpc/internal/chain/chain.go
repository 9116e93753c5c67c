// Package chain is how an event of an agent's log is hashed into its
// session's chain: the length-prefixed encoding of its fields after the
// previous hash, and the canonical JSON of its payload, so that the hash
// does not depend on who serialised the payload (Go, or Postgres jsonb on
// the way back from the replica). A payload already canonical, as the agent
// writes them, is taken as it is (fastpath.Canonicalize); any other is
// decoded and re-encoded by the reference, canonicalJSON, which the fuzz
// test holds the fast path to. Package rpc's Event and CanonicalJSON call
// it.
package chain

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/choirhq/choir/rpc/internal/fastpath"
)

// Hash returns SHA-256 over prev and an event's canonical bytes: the
// revision, type, lane, creation time (UTC, microseconds, as Postgres keeps
// it) and the canonical JSON of the payload ({} when empty), each
// length-prefixed so that no two distinct events share an encoding.
func Hash(prev [32]byte, rev int64, typ, lane string, createdAt time.Time, rawPayload []byte) ([32]byte, error) {
	payload := []byte("{}")
	if len(rawPayload) > 0 {
		// choird verifies every event of every heartbeat: a payload that
		// is canonical already, as the agent writes them, is hashed as it
		// is, without decoding and re-encoding it.
		var ok bool
		if payload, ok = fastpath.Canonicalize(rawPayload); !ok {
			var err error
			if payload, err = canonicalJSON(rawPayload); err != nil {
				return [32]byte{}, fmt.Errorf("event rev %d: %w", rev, err)
			}
		}
	}
	bp := hashBufs.Get().(*[]byte)
	b := append((*bp)[:0], prev[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(rev))
	b = appendField(b, typ)
	b = appendField(b, lane)
	// The time's length prefix is written once its text is.
	at := len(b)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = createdAt.UTC().Truncate(time.Microsecond).AppendFormat(b, time.RFC3339Nano)
	binary.BigEndian.PutUint64(b[at:], uint64(len(b)-at-8))
	b = appendField(b, payload)
	out := sha256.Sum256(b)
	if cap(b) <= 64<<10 { // Do not pin a huge payload's buffer.
		*bp = b
		hashBufs.Put(bp)
	}
	return out, nil
}

// hashBufs recycles the buffers events are hashed from.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func appendField[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// Canonical re-encodes a JSON document with object keys sorted, no
// insignificant whitespace and numbers kept as written ({} when empty),
// never returning raw itself.
func Canonical(raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return []byte("{}"), nil
	}
	if out, ok := fastpath.Canonicalize(raw); ok {
		if len(out) > 0 && &out[0] == &raw[0] {
			out = bytes.Clone(out) // never hand out the caller's buffer
		}
		return out, nil
	}
	return canonicalJSON(raw)
}

// canonicalJSON is Canonical by decoding and re-encoding, the
// reference that fastpath.Canonicalize must agree with.
func canonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
