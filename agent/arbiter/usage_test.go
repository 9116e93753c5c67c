package arbiter_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/usage"
)

// TestToolUsageCommittedAndCounted runs a test tool that reports usage
// (TTS characters, a search query, and one invalid record): the valid
// records are committed with its result and handed to UsageFunc, the
// invalid one is left out, and the model's view of the result shows none.
func TestToolUsageCommittedAndCounted(t *testing.T) {
	t.Parallel()
	speak := newFuncTool("test.speak", nil, func(context.Context) (tool.Result, error) {
		r := tool.SuccessResult("spoken", map[string]string{"file": "a.ogg"})
		r.Usage = []usage.Record{
			{Kind: usage.KindTTS, Service: "eleven", Units: 1200, Unit: usage.UnitCharacters, CostUSD: 0.036, CostSource: usage.CostPrices},
			{Kind: usage.KindSearch, Service: "brave", Units: 1, Unit: usage.UnitQueries},
			{Kind: "mystery", Service: "x", Units: -1, Unit: "bytes"},
		}
		return r, nil
	})
	reg, err := builtin.Build(builtin.Config{Tools: []tool.Tool{speak}})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var counted []usage.Record
	var lanes []string
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Locks: lock.New(), Env: tool.Env{Workspace: t.TempDir()},
		UsageFunc: func(lane string, recs []usage.Record) {
			mu.Lock()
			defer mu.Unlock()
			lanes, counted = append(lanes, lane), append(counted, recs...)
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { arb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	out, err := arb.Propose(context.Background(), arbiter.Proposal{Owner: lock.Edge, CallID: "c1", Tool: "test.speak", Input: json.RawMessage(`{}`)})
	if err != nil || out.Result.Status != tool.StatusSuccess {
		t.Fatalf("propose: %v %+v", err, out)
	}
	if out.Result.Usage != nil || strings.Contains(string(out.Result.JSON()), "usage") {
		t.Errorf("the model sees usage: %s", out.Result.JSON())
	}
	mu.Lock()
	if len(counted) != 2 || counted[0].Service != "eleven" || counted[1].Service != "brave" || lanes[0] != "edge" {
		t.Errorf("counted %+v on %v, want the two valid records on edge", counted, lanes)
	}
	mu.Unlock()
	head, _ := log.Head()
	evs, err := log.Range(1, head)
	if err != nil {
		t.Fatal(err)
	}
	var res commitlog.ToolResult
	for _, e := range evs {
		if e.Type == rpc.EventToolResultCommitted {
			if res, err = commitlog.Decode[commitlog.ToolResult](e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(res.Usage) != 2 || res.Usage[0].CostUSD != 0.036 || strings.Contains(string(res.Output), "usage") {
		t.Errorf("committed result: usage %+v, output %s", res.Usage, res.Output)
	}
}
