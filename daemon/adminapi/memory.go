package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/choirhq/choir/daemon/control"
	"strconv"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
)

// choirctl memory: choird's memory store serves it with choird's admin
// role, so it reads and changes any agent's memory; writes are recorded
// as the operator's in knowledge history, and the embedding jobs they
// enqueue are run by choird. The store's results are rpc/admin's Memory*
// types themselves.

// memoryErr codes the memory store's errors: bad input and unknown agents
// are the caller's to fix (choirctl exits with its usage code). A database
// error goes by databaseErr; any other error is internal.
func memoryErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, memory.ErrInvalidInput), errors.Is(err, memory.ErrUnknownAgent):
		return codedErr{wire.ErrBadRequest, err}
	case errors.Is(err, choirsql.ErrNotFound):
		return codedErr{wire.ErrNotFound, err}
	case errors.Is(err, memory.ErrConflict):
		return codedErr{wire.ErrConflict, err}
	case errors.Is(err, memory.ErrPermission), errors.Is(err, control.ErrForbidden):
		return codedErr{wire.ErrPermissionDenied, err}
	case errors.Is(err, memory.ErrBusy):
		return codedErr{wire.ErrUnavailable, err}
	}
	err, _ = databaseErr(err)
	return err
}

// memoryHandle mounts a memory command for the admin scope only.
func memoryHandle[In, Out any](d *API, mux *admin.Mux, method, pattern, what string,
	fn func(ctx context.Context, agentID string, in In) (Out, error)) {
	admin.Handle(mux, method, pattern, func(ctx context.Context, in In) (Out, error) {
		if err := adminScope(ctx).AdminOnly(what); err != nil {
			var zero Out
			return zero, memoryErr(err)
		}
		out, err := fn(ctx, admin.PathValue(ctx, "id"), in)
		return out, memoryErr(err)
	})
}

// pathUUID parses the path wildcard name as a UUID.
func pathUUID(ctx context.Context, name, what string) (uuid.UUID, error) {
	id, err := uuid.Parse(admin.PathValue(ctx, name))
	if err != nil {
		return uuid.UUID{}, wire.Errorf(wire.CodeBadRequest, "%s %q is not a UUID", what, admin.PathValue(ctx, name))
	}
	return id, nil
}

func (d *API) mountMemory(mux *admin.Mux) {
	memoryHandle(d, mux, "POST", admin.PathMemorySearch, "memory search",
		func(ctx context.Context, agentID string, in admin.MemorySearchRequest) (*admin.MemoryQueryResult, error) {
			q := map[string]any{"store": in.Store, "mode": in.Mode, "query": in.Query, "target_agent": agentID,
				"limit": in.Limit}
			if in.SessionID != "" {
				q["session_id"] = in.SessionID
			}
			if len(in.Tiers) > 0 {
				q["tiers"] = in.Tiers
			}
			input, err := json.Marshal(q)
			if err != nil {
				return nil, err
			}
			return d.memory.QueryAsOperator(ctx, input)
		})
	memoryHandle(d, mux, "POST", admin.PathMemoryShow, "memory show",
		func(ctx context.Context, agentID string, in admin.MemoryRef) (admin.MemoryItem, error) {
			return d.memoryShow(ctx, agentID, in.Ref)
		})
	memoryHandle(d, mux, "POST", admin.PathMemoryPut, "memory put",
		func(ctx context.Context, agentID string, in admin.MemoryPutRequest) (*admin.MemoryWriteResult, error) {
			return d.memory.KnowledgePut(ctx, agentID, in.Key, in.Text, in.ExpectVersion)
		})
	memoryHandle(d, mux, "GET", admin.PathMemorySessions, "memory sessions",
		func(ctx context.Context, agentID string, _ admin.Empty) ([]admin.MemorySession, error) {
			limit, err := strconv.Atoi(admin.PathValue(ctx, "limit"))
			if err != nil {
				return nil, wire.Errorf(wire.CodeBadRequest, "the number of sessions must be a number, not %q",
					admin.PathValue(ctx, "limit"))
			}
			ss, err := d.memory.Sessions(ctx, agentID, limit)
			if ss == nil && err == nil {
				ss = []admin.MemorySession{}
			}
			return ss, err
		})
	memoryHandle(d, mux, "POST", admin.PathMemoryHistory, "memory history",
		func(ctx context.Context, agentID string, in admin.MemoryRef) ([]admin.MemoryKnowledgeVersion, error) {
			return d.memory.History(ctx, agentID, in.Ref)
		})
	memoryHandle(d, mux, "POST", admin.PathMemoryDelete, "memory delete",
		func(ctx context.Context, agentID string, in admin.MemoryRef) (*admin.MemoryWriteResult, error) {
			return d.memory.KnowledgeDelete(ctx, agentID, in.Ref)
		})
	memoryHandle(d, mux, "POST", admin.PathMemoryRestore, "memory restore",
		func(ctx context.Context, agentID string, in admin.MemoryRestoreRequest) (*admin.MemoryWriteResult, error) {
			id, err := pathUUID(ctx, "doc", "document id")
			if err != nil {
				return nil, err
			}
			return d.memory.KnowledgeRestore(ctx, agentID, id, in.Version)
		})
	memoryHandle(d, mux, "POST", admin.PathMemorySessionDelete, "memory delete",
		func(ctx context.Context, agentID string, _ admin.Empty) (admin.MemorySessionDeleted, error) {
			id, err := pathUUID(ctx, "session", "session id")
			if err != nil {
				return admin.MemorySessionDeleted{}, err
			}
			n, err := d.memory.SessionDelete(ctx, agentID, id)
			return admin.MemorySessionDeleted{ChunksDeleted: n, SessionID: id}, err
		})
	memoryHandle(d, mux, "POST", admin.PathMemoryReembed, "memory reembed",
		func(ctx context.Context, _ string, in admin.MemoryReembedRequest) ([]admin.MemoryReembedResult, error) {
			rs, err := d.memory.Reembed(ctx, memory.ReembedOptions{AgentID: in.AgentID, All: in.All})
			if rs == nil && err == nil {
				rs = []admin.MemoryReembedResult{}
			}
			return rs, err
		})
	memoryHandle(d, mux, "GET", admin.PathMemoryStatus, "memory status",
		func(ctx context.Context, _ string, _ admin.Empty) (*admin.MemoryReport, error) {
			return d.memory.Status(ctx)
		})
}

// memoryShow finds what ref names in an agent's memory: a knowledge
// document by key or id, else a chunk or a session by id.
func (d *API) memoryShow(ctx context.Context, agentID, ref string) (admin.MemoryItem, error) {
	k, err := d.memory.KnowledgeGet(ctx, agentID, ref)
	if err == nil {
		return admin.MemoryItem{Knowledge: k}, nil
	}
	if !errors.Is(err, choirsql.ErrNotFound) {
		return admin.MemoryItem{}, err
	}
	id, perr := uuid.Parse(ref)
	if perr != nil {
		return admin.MemoryItem{}, err
	}
	c, err := d.memory.ChunkGet(ctx, agentID, id)
	if err == nil {
		return admin.MemoryItem{Chunk: c}, nil
	}
	if !errors.Is(err, choirsql.ErrNotFound) {
		return admin.MemoryItem{}, err
	}
	s, err := d.memory.SessionGet(ctx, agentID, id)
	if errors.Is(err, choirsql.ErrNotFound) {
		return admin.MemoryItem{}, fmt.Errorf("%w: agent %s has no knowledge document, chunk or session %s", choirsql.ErrNotFound, agentID, id)
	}
	if err != nil {
		return admin.MemoryItem{}, err
	}
	return admin.MemoryItem{Session: s}, nil
}
