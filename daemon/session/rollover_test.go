package session_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// The words of the rollover test's model.
const (
	rolloverSummary   = "The user is Ada; she is planting tulips."
	rolloverCallUsage = 1000 // prompt tokens of every call, plus 10 completion tokens
)

// rolloverModel answers each message "re: <text>" and the session summary
// with rolloverSummary, every call billed rolloverCallUsage+10 tokens; a
// message "hold" waits for release. It records the last user message of
// every request.
type rolloverModel struct {
	srv     *llmtest.Server
	release chan struct{}
	held    atomic.Bool
}

func newRolloverModel(t *testing.T) *rolloverModel {
	m := &rolloverModel{srv: llmtest.NewServer(t), release: make(chan struct{})}
	m.srv.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		last := r.Last().Content
		if last == "Write the session summary now." {
			return llmtest.Text(rolloverSummary).WithUsage(rolloverCallUsage, 10)
		}
		if last == "hold" {
			m.held.Store(true)
			select {
			case <-m.release:
			case <-ctx.Done():
			}
		}
		return llmtest.Text("re: "+last).WithUsage(rolloverCallUsage, 10)
	})
	return m
}

// requestsFor are the model requests whose last message is text.
func (m *rolloverModel) requestsFor(text string) []*llmtest.Request {
	var out []*llmtest.Request
	for _, r := range m.srv.Requests() {
		if r.Last().Content == text {
			out = append(out, r)
		}
	}
	return out
}

// TestSessionRollsOverAtMidnight runs a real agent under the process
// runtime through its DM's midnight, with choird's clock moved there
// rather than waited for. The rollover waits for the turn in progress to
// finish, then happens once: the old session ends through the graceful
// stop (its summary written and filed), the new one resumes the chain
// with fresh session budgets (choird's and the agent's), the model sees
// the summary and the earlier conversation, and every message is
// answered exactly once.
func TestSessionRollsOverAtMidnight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	model := newRolloverModel(t)
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{ModelEndpoint: model.srv.BaseURL(),
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent"),
			Clock: clock, RolloverInterval: 100 * time.Millisecond},
		Edit: func(cfg *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(cfg, s)
			// Snapshots every few events: the budgets a successor
			// must not inherit are in them.
			cfg.SnapshotEveryEvents = 2
			dm := cfg.DMs[cfg.Agents["assistant"].Defaults.DM]
			dm.TimeZone = "Pacific/Auckland"
			cfg.DMs[cfg.Agents["assistant"].Defaults.DM] = dm
		}})
	defer d.StopAgents(t)
	pool := d.OwnPool(t)
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	first := d.WaitState(t, "assistant", admin.AgentActive).SessionID
	send := func(id int64, text string) {
		t.Helper()
		if _, err := d.Inbox().ChatSend(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant",
			admin.ChatSendRequest{MessageID: id, Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	replied := func(text string) int {
		var n int
		pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE agent_id = 'assistant' AND text = $1`,
			"re: "+text).Scan(&n)
		return n
	}
	waitReply := func(text string) {
		t.Helper()
		choirdtest.WaitFor(t, "the reply to "+text, d.Logs, func() bool { return replied(text) > 0 })
	}

	send(1, "my name is Ada")
	waitReply("my name is Ada")
	auckland, _ := time.LoadLocation("Pacific/Auckland")
	due := waitArmed(t, pool, first)
	if want := session.NextMidnight(time.Now(), auckland); !due.Equal(want) {
		t.Errorf("the session rolls over at %s, want the DM's next midnight %s", due, want)
	}
	if st := d.LatestStatus(ctx, "assistant"); st.RollsOverAt == nil || !st.RollsOverAt.Equal(due) {
		t.Errorf("status shows the rollover at %v, want %s", st.RollsOverAt, due)
	}

	t.Log("a turn in progress at midnight holds the rollover back until it ends")
	send(2, "hold")
	choirdtest.WaitFor(t, "the held model call", d.Logs, model.held.Load)
	offset.Store(int64(time.Until(due) + time.Second))
	movedAt := time.Now()
	waitRolloverRuns(t, pool, movedAt, 3)
	if st := d.LatestStatus(ctx, "assistant"); st.SessionID != first || st.State != admin.AgentActive {
		t.Fatalf("the session rolled over in the middle of a turn: %+v", st)
	}
	close(model.release)
	waitReply("hold")

	t.Log("once idle, the session rolls over, once")
	var second string
	choirdtest.WaitFor(t, "the successor session", d.Logs, func() bool {
		st := d.LatestStatus(ctx, "assistant")
		second = st.SessionID
		return st.State == admin.AgentActive && second != first
	})
	var status, reason string
	var summaries int
	var owed bool
	pool.QueryRow(ctx, `SELECT status, end_reason, successor_due, (SELECT count(*) FROM choir_control.session_events e
		WHERE e.session_id = s.session_id AND e.event_type = 'session_summary')
		FROM choir_control.sessions s WHERE session_id = $1`, first).Scan(&status, &reason, &owed, &summaries)
	if status != "ended" || !strings.Contains(reason, control.RolloverEndReason) || summaries != 1 || !owed {
		t.Errorf("the old session is %s (%q) with %d summaries, successor owed %v; want ended by the rollover with one, owing",
			status, reason, summaries, owed)
	}
	var resumed bool
	var budgetFrom *string
	var budgetBase int64
	pool.QueryRow(ctx, `SELECT resumed_from::text = $2, budget_from::text, budget_base_tokens
		FROM choir_control.sessions WHERE session_id = $1`, second, first).Scan(&resumed, &budgetFrom, &budgetBase)
	if !resumed || budgetFrom != nil || budgetBase != 0 {
		t.Errorf("successor: resumes the old session %v, budget from %v with base %d; want a resume with a fresh budget",
			resumed, budgetFrom, budgetBase)
	}
	var chunked int
	pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'memory_chunk_session' AND args->>'session_id' = $1`,
		first).Scan(&chunked)
	if chunked != 1 {
		t.Errorf("%d chunking jobs for the rolled-over session, want 1", chunked)
	}

	t.Log("the successor carries the summary and the conversation, and counts its budget from zero")
	send(3, "what is my name?")
	waitReply("what is my name?")
	reqs := model.requestsFor("what is my name?")
	if len(reqs) != 1 {
		t.Fatalf("%d model calls for the third message, want 1", len(reqs))
	}
	var sawSummary, sawEarlier bool
	for _, m := range reqs[0].Messages {
		sawSummary = sawSummary || (m.Role == "system" && m.Content == lane.PreviousSessionPrefix+rolloverSummary)
		sawEarlier = sawEarlier || (m.Role == "user" && m.Content == "my name is Ada")
	}
	if !sawSummary || !sawEarlier {
		t.Errorf("the successor's prompt carries the summary %v and the earlier conversation %v; want both", sawSummary, sawEarlier)
	}
	total := config.Budgets{}.WithDefaults().TotalSessionTokens
	choirdtest.WaitFor(t, "the successor's edge to report one call's spend", d.Logs, func() bool {
		return edgeTokensLeft(t, pool, second) == total-(rolloverCallUsage+10)
	})
	// The old session had spent two calls when it went idle: a successor
	// that inherited its counters would report less than the one call.
	if old := edgeTokensLeft(t, pool, first); old > total-2*(rolloverCallUsage+10) {
		t.Errorf("the old session's edge had %d tokens left, want at most %d", old, total-2*(rolloverCallUsage+10))
	}

	// More runs of the rollover, past the midnight, change nothing: the
	// successor is due at the next one.
	waitRolloverRuns(t, pool, time.Now(), 3)
	var sessions int
	pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.sessions WHERE agent_id = 'assistant'`).Scan(&sessions)
	if sessions != 2 {
		t.Errorf("%d sessions, want 2: the session rolls over once", sessions)
	}
	if n := len(model.requestsFor("what is my name?")); n != 1 {
		t.Errorf("%d model calls for the third message, want 1", n)
	}
	next := waitArmed(t, pool, second)
	if !next.Equal(session.NextMidnight(clock(), auckland)) {
		t.Errorf("the successor rolls over at %s, want the midnight after", next)
	}

	t.Log("a message sent as the next midnight passes is answered once, by one session or the other")
	offset.Store(int64(time.Until(next) + time.Second))
	send(4, "good night")
	choirdtest.WaitFor(t, "the third session", d.Logs, func() bool {
		st := d.LatestStatus(ctx, "assistant")
		return st.State == admin.AgentActive && st.SessionID != first && st.SessionID != second
	})
	waitReply("good night")
	for _, text := range []string{"my name is Ada", "hold", "what is my name?", "good night"} {
		if n := replied(text); n != 1 {
			t.Errorf("%q answered %d times, want once", text, n)
		}
		if n := len(model.requestsFor(text)); n != 1 {
			t.Errorf("%q reached the model %d times, want once", text, n)
		}
	}
	var undelivered int
	pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.inbox WHERE agent_id = 'assistant' AND delivered_at IS NULL`).Scan(&undelivered)
	if undelivered != 0 {
		t.Errorf("%d messages never delivered", undelivered)
	}
}

// waitArmed waits until the rollover armed session id, and returns when it
// is due.
func waitArmed(t *testing.T, pool *pgxpool.Pool, id string) time.Time {
	t.Helper()
	var at *time.Time
	choirdtest.WaitFor(t, "the rollover armed", nil, func() bool {
		pool.QueryRow(context.Background(), `SELECT rollover_at FROM choir_control.sessions WHERE session_id = $1`, id).Scan(&at)
		return at != nil
	})
	return *at
}

// waitRolloverRuns waits until n runs of the rollover job have completed
// since since.
func waitRolloverRuns(t *testing.T, pool *pgxpool.Pool, since time.Time, n int) {
	t.Helper()
	// Longer than choirdtest.WaitFor's 30 s: under the whole suite on two
	// cores, River's queue of 100 ms runs has been seen to fall that far
	// behind. A condition, not a sleep: it returns at the nth run.
	var runs int
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'session_rollover' AND state = 'completed' AND attempted_at > $1`, since).Scan(&runs)
		if runs >= n {
			return
		}
		if time.Now().After(deadline) {
			var states string
			pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(state::text || ':' || n::text, ', '), 'none')
				FROM (SELECT state, count(*) AS n FROM river_job WHERE kind = 'session_rollover' GROUP BY state) s`).Scan(&states)
			t.Fatalf("%d of %d runs of the rollover in 2 minutes (rollover jobs by state: %s)", runs, n, states)
		}
	}
}

// edgeTokensLeft is the edge lane's token budget left, as it last reported
// it to choird.
func edgeTokensLeft(t *testing.T, pool *pgxpool.Pool, id string) int64 {
	t.Helper()
	var left int64
	pool.QueryRow(context.Background(), `SELECT coalesce((lane_status->'edge'->'budget_remaining'->>'tokens')::bigint, -1)
		FROM choir_control.sessions WHERE session_id = $1`, id).Scan(&left)
	return left
}

// TestBudgetSpentAgentStartsAgainAtMidnight runs a real agent whose lane
// uses up max_tool_calls_per_session: its session ends, marked as spent,
// and the agent stays stopped until its DM's midnight (choird's clock
// moved there), when the rollover starts it again, once, resuming its
// chain with a fresh budget.
func TestBudgetSpentAgentStartsAgainAtMidnight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	model := llmtest.NewServer(t)
	var calls atomic.Int64
	model.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		switch r.Last().Content {
		case "Write the session summary now.":
			return llmtest.Text(rolloverSummary)
		case "hello again":
			return llmtest.Text("re: hello again")
		}
		n := calls.Add(1)
		return llmtest.ToolCalls(llmtest.Call{ID: "w" + strconv.FormatInt(n, 10), Name: "choir.fs.write",
			Arguments: `{"path":"note.txt","content":"x"}`})
	})
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{ModelEndpoint: model.BaseURL(),
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent"),
			Clock: clock, RolloverInterval: 100 * time.Millisecond},
		Edit: func(cfg *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(cfg, s)
			cfg.SnapshotEveryEvents = 2
			a := cfg.Agents["assistant"]
			a.Budgets.MaxToolCallsPerSession = 1
			cfg.Agents["assistant"] = a
		}})
	defer d.StopAgents(t)
	pool := d.OwnPool(t)
	sc := control.Scope{Admin: true, Actor: "test"}
	if _, err := d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	first := d.WaitState(t, "assistant", admin.AgentActive).SessionID
	if _, err := d.Inbox().ChatSend(ctx, sc, "assistant", admin.ChatSendRequest{MessageID: 1, Text: "write twice"}); err != nil {
		t.Fatal(err)
	}
	d.WaitState(t, "assistant", admin.AgentStopped)
	var spent bool
	var endedAt time.Time
	pool.QueryRow(ctx, `SELECT successor_due, ended_at FROM choir_control.sessions WHERE session_id = $1`, first).Scan(&spent, &endedAt)
	if !spent {
		t.Fatal("the session that used up its tool calls owes no successor")
	}
	var notice string
	pool.QueryRow(ctx, `SELECT text FROM choir_control.outbox WHERE session_id = $1 AND text LIKE '%tool-call budget%'`, first).Scan(&notice)
	if !strings.Contains(notice, "midnight") {
		t.Errorf("the user was told %q, want when the budget comes back", notice)
	}
	// Before midnight nothing starts it.
	waitRolloverRuns(t, pool, time.Now(), 3)
	if st := d.LatestStatus(ctx, "assistant"); st.State != admin.AgentStopped {
		t.Fatalf("the agent started again before midnight: %+v", st)
	}

	offset.Store(int64(time.Until(session.NextMidnight(endedAt, time.UTC)) + time.Second))
	var second string
	choirdtest.WaitFor(t, "the agent started again", d.Logs, func() bool {
		st := d.LatestStatus(ctx, "assistant")
		second = st.SessionID
		return st.State == admin.AgentActive && second != first
	})
	var resumed bool
	var budgetFrom *string
	pool.QueryRow(ctx, `SELECT resumed_from::text = $2, budget_from::text FROM choir_control.sessions WHERE session_id = $1`,
		second, first).Scan(&resumed, &budgetFrom)
	if !resumed || budgetFrom != nil {
		t.Errorf("the new session resumes the old %v with budget from %v; want a resume with a fresh budget", resumed, budgetFrom)
	}
	if _, err := d.Inbox().ChatSend(ctx, sc, "assistant", admin.ChatSendRequest{MessageID: 2, Text: "hello again"}); err != nil {
		t.Fatal(err)
	}
	choirdtest.WaitFor(t, "the answer of the new session", d.Logs, func() bool {
		var n int
		pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE session_id = $1 AND text = 're: hello again'`, second).Scan(&n)
		return n == 1
	})
	choirdtest.WaitFor(t, "the new session's full tool-call budget", d.Logs, func() bool {
		var left int64
		pool.QueryRow(ctx, `SELECT coalesce((lane_status->'edge'->'budget_remaining'->>'tool_calls')::bigint, -1)
			FROM choir_control.sessions WHERE session_id = $1`, second).Scan(&left)
		return left == 1
	})
	waitRolloverRuns(t, pool, time.Now(), 3)
	var sessions int
	pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.sessions WHERE agent_id = 'assistant'`).Scan(&sessions)
	if sessions != 2 {
		t.Errorf("%d sessions, want 2: the agent starts again once", sessions)
	}
}
