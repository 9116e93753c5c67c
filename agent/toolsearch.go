package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/choirhq/choir/rpc"
)

// Host tools of choird's semantic tool search (daemon/toolsearch). They
// are never offered to a model: the discovery tools call them.
const (
	hostToolSearch = "choir.tools.semantic_search"
	hostToolIndex  = "choir.tools.index"
)

// searchSeq numbers the host calls of tool search, which are no model's
// calls: each gets an ID of its own.
var searchSeq atomic.Int64

func searchCallID() string {
	return fmt.Sprintf("toolsearch-%d-%d", time.Now().UnixNano(), searchSeq.Add(1))
}

// errIndexMissing is choird's answer to a search whose manifest hash it
// has no index for.
const errIndexMissing = "index_missing"

// toolSearch is the semantic half of choir.tools.search: it asks choird
// for the tools nearest to query in the index of this image's manifest,
// sending the corpus first when choird has none for its hash.
func (s *session) toolSearch(ctx context.Context, query string, limit int) ([]string, error) {
	corpus, hash := s.tools.Corpus()
	in, _ := json.Marshal(map[string]any{"query": query, "limit": limit, "manifest_hash": hash})
	names, missing, err := s.semanticSearch(ctx, in)
	if err != nil || !missing {
		return names, err
	}
	idx, _ := json.Marshal(map[string]any{"manifest_hash": hash, "tools": corpus})
	resp, err := s.client.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: hostToolIndex, CallID: searchCallID(), Input: idx})
	if err != nil {
		return nil, fmt.Errorf("index tools: %w", err)
	}
	if resp.Status != rpc.ToolSuccess {
		return nil, fmt.Errorf("index tools: %s", resp.Output)
	}
	names, missing, err = s.semanticSearch(ctx, in)
	if missing {
		return nil, errors.New("tool search: index still missing after indexing")
	}
	return names, err
}

// semanticSearch asks choird once; missing reports that it has no index
// for the hash.
func (s *session) semanticSearch(ctx context.Context, in json.RawMessage) (names []string, missing bool, err error) {
	resp, err := s.client.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: hostToolSearch, CallID: searchCallID(), Input: in})
	if err != nil {
		return nil, false, fmt.Errorf("tool search: %w", err)
	}
	var out struct {
		Tools []string `json:"tools"`
		Error string   `json:"error"`
	}
	if err := json.Unmarshal(resp.Output, &out); err != nil {
		return nil, false, fmt.Errorf("tool search: answer %s: %w", resp.Output, err)
	}
	if out.Error == errIndexMissing {
		return nil, true, nil
	}
	if resp.Status != rpc.ToolSuccess {
		return nil, false, fmt.Errorf("tool search: %s", resp.Output)
	}
	return out.Tools, false, nil
}
