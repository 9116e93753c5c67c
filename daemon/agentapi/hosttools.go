package agentapi

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
)

// codedErr carries a control error with the rpc sentinel that picks its
// code, without adding the sentinel's text to the message.
type codedErr struct{ code, err error }

func (e codedErr) Error() string   { return e.err.Error() }
func (e codedErr) Unwrap() []error { return []error{e.code, e.err} }

// MemoryTools serves choir.memory.query and choir.memory.upsert (spec 11.7)
// from the memory store: reads of the caller's memory, and of another
// agent's whose memory_readable_by names the caller; writes to the
// caller's own only, which Postgres enforces through the caller's role.
func MemoryTools(store *memory.Store) map[string]HostTool {
	wrap := func(fn func(ctx context.Context, agentID string, in json.RawMessage) (any, error)) HostTool {
		return func(ctx context.Context, agentID string, in json.RawMessage) (json.RawMessage, error) {
			out, err := fn(ctx, agentID, in)
			switch {
			case errors.Is(err, memory.ErrInvalidInput), errors.Is(err, memory.ErrUnknownAgent),
				errors.Is(err, choirsql.ErrNotFound), errors.Is(err, memory.ErrConflict):
				return nil, codedErr{wire.ErrBadRequest, err}
			case errors.Is(err, memory.ErrPermission):
				return nil, codedErr{wire.ErrPermissionDenied, err}
			case errors.Is(err, memory.ErrBusy):
				return nil, codedErr{wire.ErrUnavailable, err}
			}
			if err != nil {
				return nil, err
			}
			return json.Marshal(out)
		}
	}
	return map[string]HostTool{
		"choir.memory.query": wrap(func(ctx context.Context, agentID string, in json.RawMessage) (any, error) {
			return store.Query(ctx, agentID, in)
		}),
		"choir.memory.upsert": wrap(func(ctx context.Context, agentID string, in json.RawMessage) (any, error) {
			return store.Upsert(ctx, agentID, in)
		}),
	}
}
