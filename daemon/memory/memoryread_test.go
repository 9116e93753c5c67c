package memory_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
)

// TestMemoryOfAnotherAgentNeedsItsConsent plays a compromised agent that
// reads another agent's memory with choir.memory.query's target_agent:
// refused by default, with a tool error and a log line that name the key
// that would allow it (agents.helper.memory_readable_by), and answered
// once that key names the reader. Its own memory it always reads.
func TestMemoryOfAnotherAgentNeedsItsConsent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	query := func(t *testing.T, cl interface {
		ExecuteHostTool(context.Context, rpc.ExecuteHostToolRequest) (rpc.ExecuteHostToolResponse, error)
	}, id, target string) rpc.ExecuteHostToolResponse {
		t.Helper()
		in, _ := json.Marshal(map[string]any{"store": "knowledge", "mode": "text", "query": "sky", "target_agent": target})
		resp, err := cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.query", CallID: id, Input: in})
		if err != nil {
			t.Fatalf("choir.memory.query of %s: %v", target, err)
		}
		return resp
	}

	t.Run("RefusedByDefault", func(t *testing.T) {
		t.Parallel()
		d := choirdtest.StartTwoAgents(t, choirdtest.Options{})
		_, cl, _ := d.HelloSession(t, "assistant")
		for i, store := range []string{"knowledge", "session"} {
			in, _ := json.Marshal(map[string]any{"store": store, "mode": "text", "query": "sky", "target_agent": "helper"})
			resp, err := cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.query",
				CallID: "q" + store, Input: in})
			if err != nil {
				t.Fatal(err)
			}
			out := string(resp.Output)
			if resp.Status != rpc.ToolError || !strings.Contains(out, "agents.helper.memory_readable_by") ||
				!strings.Contains(out, "assistant") {
				t.Fatalf("read %d (%s store) of helper's memory by assistant = %s %s; want an error naming agents.helper.memory_readable_by",
					i, store, resp.Status, out)
			}
		}
		if logs := d.Logs.String(); !strings.Contains(logs, "memory read refused") || !strings.Contains(logs, "agents.helper.memory_readable_by") {
			t.Errorf("no log line names the refused read:\n%s", d.Logs.String())
		}
		if resp := query(t, cl, "own", "assistant"); resp.Status != rpc.ToolSuccess {
			t.Errorf("own memory: %s %s", resp.Status, resp.Output)
		}
	})

	t.Run("AllowedWhenListed", func(t *testing.T) {
		t.Parallel()
		d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
			h := cfg.Agents["helper"]
			h.MemoryReadableBy = []string{"assistant"}
			cfg.Agents["helper"] = h
		}})
		_, cl, _ := d.HelloSession(t, "assistant")
		if resp := query(t, cl, "q1", "helper"); resp.Status != rpc.ToolSuccess {
			t.Fatalf("read of helper's memory, listed in memory_readable_by: %s %s", resp.Status, resp.Output)
		}
	})
}
