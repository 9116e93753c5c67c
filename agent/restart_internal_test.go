package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/web"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc"
)

var (
	restartFactRE   = regexp.MustCompile(`FACT (\w+)=(\w+)`)
	restartFoldedRE = regexp.MustCompile(`(?m)^\[rev (\d+), ev ([0-9a-f]+)\] \w+: .*$`)
)

// restartModel answers the edge: "FACT? key" with the value its prompt
// shows for key (a fact of its summary, or a FACT in its window), anything
// else with a short note; and the compaction calls with a delta that keeps
// every FACT of the events folded.
func restartModel(_ context.Context, r *llmtest.Request) llmtest.Step {
	if len(r.Tools) == 0 && strings.Contains(r.System(), "You keep the reference summary") {
		var facts []workmem.Fact
		for _, line := range restartFoldedRE.FindAllStringSubmatch(r.Last().Content, -1) {
			for _, f := range restartFactRE.FindAllStringSubmatch(line[0], -1) {
				facts = append(facts, workmem.Fact{Key: f[1], Value: f[2], SourceEvent: line[2]})
			}
		}
		d := map[string]any{"mode": "overwrite", "summary_update": "Small talk."}
		if len(facts) > 0 {
			d["add_fact"] = facts
		}
		b, _ := json.Marshal(map[string]any{"memory_delta": d})
		return llmtest.Text(string(b))
	}
	key, ok := strings.CutPrefix(r.Last().Content, "FACT? ")
	if !ok {
		return llmtest.Text("Noted.")
	}
	for _, m := range r.Messages[:len(r.Messages)-1] {
		for _, line := range strings.Split(m.Content, "\n") {
			if v, ok := strings.CutPrefix(line, "- "+key+": "); ok {
				return llmtest.Text(strings.Fields(v)[0])
			}
		}
		for _, f := range restartFactRE.FindAllStringSubmatch(m.Content, -1) {
			if f[1] == key {
				return llmtest.Text(f[2])
			}
		}
	}
	return llmtest.Text("I do not know " + key)
}

// openAgent opens, restores and starts a session of the assistant, as the
// agent does, and returns it with the context its pushes are handled on.
func openAgent(t *testing.T, d *choirdtest.Choird, logs *logbuf.Buffer) (*session, context.Context) {
	t.Helper()
	id, token := d.StartSession(t, "assistant")
	s, err := openSession(context.Background(), Options{Socket: d.Socket(), AgentID: "assistant", SessionID: id,
		LeaseToken: token, Workspace: d.Workspace("main"), ChoirDir: t.TempDir(), Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.restore(); err != nil {
		s.close()
		t.Fatal(err)
	}
	return s, s.start(context.Background())
}

// ask delivers a message to the session's edge and returns its answer.
func ask(t *testing.T, s *session, ctx context.Context, inbox int64, text string, logs *logbuf.Buffer) string {
	t.Helper()
	s.dispatch(ctx, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: inbox, Gateway: "console",
		ChatID: "operator", UserID: "operator", Text: text, ReceivedAt: time.Now()}})
	var answer string
	choirdtest.WaitFor(t, "the answer to "+text, logs, func() bool {
		head, _ := s.log.Head()
		evs, _ := s.log.Range(s.log.Oldest(), head)
		asked := false
		for _, ev := range evs {
			var p struct {
				Text    string `json:"text"`
				InboxID int64  `json:"inbox_id"`
			}
			json.Unmarshal(ev.Payload, &p)
			switch {
			case ev.Type == rpc.EventUserMsg && p.InboxID == inbox:
				asked = true
			case asked && ev.Lane == "edge" && ev.Type == rpc.EventModelOutput:
				answer = p.Text
				return true
			}
		}
		return false
	})
	return answer
}

// TestSessionResumeKeepsTheWindow crashes an agent whose edge compacted
// its window, after a fact was told past the window's boundary and before
// the last snapshot, and resumes the session: choird's tail reaches back to
// the boundary, so that fact is in the resumed edge's window (it is in
// neither the snapshot nor the summary), and the fact folded before it is
// in the summary. Every event is in the window or in the summary.
func TestSessionResumeKeepsTheWindow(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.SetResponder(restartModel)
	// A small window: the edge's tool schemas and some 2,800 tokens of
	// room, whatever tools are built in.
	reg, err := builtin.Build(builtin.Config{Tools: web.Tools(web.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	var specs []llm.ToolSpec
	for _, v := range reg.LLMViews(tool.Filter{Lane: tool.LaneEdge}) {
		specs = append(specs, llm.ToolSpec{Name: v.Name, Description: v.Description, Parameters: v.Parameters})
	}
	window := workmem.EstimateTools(specs) + 2800
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true,
		Edit: func(cfg *config.Config, _ config.Secrets) {
			m := cfg.Models["local"]
			m.ContextWindow = window
			cfg.Models["local"] = m
			cfg.SnapshotEveryEvents = 4
			// The window is sized on the full schemas: keep them.
			for id, a := range cfg.Agents {
				a.ToolMode = "direct"
				cfg.Agents[id] = a
			}
		}})
	logs := &logbuf.Buffer{}
	s1, ctx1 := openAgent(t, d, logs)
	inbox := int64(0)
	say := func(s *session, ctx context.Context, text string) string {
		inbox++
		return ask(t, s, ctx, inbox, text, logs)
	}
	say(s1, ctx1, "FACT door_code=4417 remember the door code")
	for i := 0; compactions(s1) == 0; i++ {
		if i == 100 {
			t.Fatal("no compaction in 100 turns")
		}
		say(s1, ctx1, fmt.Sprintf("turn %d: the weather is mild, the tea is warm, and nothing much happens here today", i))
	}
	say(s1, ctx1, "FACT cat=Miso that is my cat's name")
	catRev, _ := s1.log.Head()
	// A turn or two more, until choird holds a snapshot past the cat's
	// fact; its boundary is before the fact, which no compaction folded.
	pool := d.OwnPool(t)
	var snapRev, boundary int64
	latest := func() bool {
		var state []byte
		pool.QueryRow(context.Background(), `SELECT rev, snapshot FROM choir_control.session_snapshots
			WHERE session_id = $1 ORDER BY rev DESC LIMIT 1`, s1.opts.SessionID).Scan(&snapRev, &state)
		var st workingState
		json.Unmarshal(state, &st)
		boundary = st.Edge.WindowFrom
		return snapRev > catRev
	}
	for i := 0; !latest(); i++ {
		if i == 10 {
			t.Fatalf("no snapshot past rev %d after 10 turns", catRev)
		}
		say(s1, ctx1, fmt.Sprintf("later %d: and so the day goes on", i))
		for range 20 {
			if latest() {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("the cat's fact at rev %d, the snapshot at %d with its boundary at %d", catRev-2, snapRev, boundary)
	if boundary == 0 || boundary > catRev-2 {
		t.Fatalf("the snapshot's boundary %d is not before the cat's fact at %d", boundary, catRev-2)
	}
	// Everything is replicated; then the agent crashes: it stops without
	// a word to choird, which ends the session when its heartbeats stop.
	head, _ := s1.log.Head()
	choirdtest.WaitFor(t, "everything replicated", logs, func() bool { acked, _ := s1.log.Acked(); return acked == head })
	s1.stopLane()
	<-s1.edgeDone
	s1.stopRun()
	s1.wg.Wait()
	s1.close()
	choirdtest.WaitFor(t, "choird to see the crash", logs, func() bool {
		var live bool
		pool.QueryRow(context.Background(), `SELECT status IN ('starting', 'active', 'stopping')
			FROM choir_control.sessions WHERE session_id = $1`, s1.opts.SessionID).Scan(&live)
		return !live
	})

	s2, ctx2 := openAgent(t, d, logs)
	t.Cleanup(func() {
		s2.stop(context.Background(), stopRequest{reason: "test over", grace: time.Millisecond})
		s2.close()
	})
	if tail := s2.hello.TailEvents; s2.hello.Snapshot == nil || s2.hello.Snapshot.Rev < snapRev || len(tail) == 0 ||
		tail[0].Rev > boundary {
		t.Errorf("resumed with a tail of %d events, not from the boundary %d", len(tail), boundary)
	}
	if snap := s2.edge.Snapshot(); snap.WindowFrom < boundary || snap.WindowFrom < s2.log.Oldest() {
		t.Errorf("the resumed window starts at %d, the log at %d, the snapshot's boundary is %d", snap.WindowFrom,
			s2.log.Oldest(), boundary)
	}
	if got := say(s2, ctx2, "FACT? cat"); got != "Miso" {
		t.Errorf("the fact told between the boundary and the snapshot: %q", got)
	}
	if got := say(s2, ctx2, "FACT? door_code"); got != "4417" {
		t.Errorf("the fact folded into the summary: %q", got)
	}
}

// compactions counts the edge's committed compactions.
func compactions(s *session) int {
	head, _ := s.log.Head()
	evs, _ := s.log.Range(s.log.Oldest(), head)
	n := 0
	for _, ev := range evs {
		if ev.Type == rpc.EventMemoryWriteCommitted && ev.Lane == "edge" {
			n++
		}
	}
	return n
}
