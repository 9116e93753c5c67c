package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// killPoint is where in a turn a fault trial kills.
type killPoint string

const (
	// aroundPush: 0-4 ms after the Bot API hands choird the update, so
	// the kill lands before, during or just after the inbox row and the
	// push to the agent.
	aroundPush killPoint = "AroundPush"
	// afterPush: as soon as choird has pushed the message to the agent
	// (it then shows the typing indicator, and marks the row pushed,
	// unless the agent has already taken it).
	afterPush killPoint = "AfterPush"
	// midModel: while the agent's model call for the message is held
	// open by the model server.
	midModel killPoint = "MidModel"
	// afterSend: as soon as the reply's outbox row is committed
	// (SEND_OUTBOUND returned), before or while it is delivered.
	afterSend killPoint = "AfterSend"
	// midDelivery: after the Bot API has taken the reply, before choird
	// reads the answer to its sendMessage.
	midDelivery killPoint = "MidDelivery"
)

// victim is what a trial kills.
type victim int

const (
	killChoird victim = iota
	killAgent
	killBoth
)

func (v victim) String() string { return [...]string{"choird", "agent", "both"}[v] }

// faultTrials is the number of trials per kill point: 20 unless
// CHOIR_FAULT_TRIALS says otherwise (more for a soak run).
func faultTrials(t *testing.T) int {
	if s := os.Getenv("CHOIR_FAULT_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("CHOIR_FAULT_TRIALS=%q: want a positive number", s)
		}
		return n
	}
	return 20
}

// TestReplyOncePerMessageUnderKills is the promise of DESIGN.md's first
// journey tested the way a power cut would: for each kill point, trials
// kill choird, the agent, or both (in turn) at that point of a turn,
// bring back what died, and go on. At the end every message the user sent
// has exactly one reply at the fake Bot API: none lost, none sent twice.
//
// The heartbeat interval is a second, so that a turn's events are
// replicated by the flush before the reply, not by a routine beat that
// happens to come first: with the old order (reply queued at once,
// events replicated up to a beat later) the AfterSend kills of the agent
// answer the redelivered message a second time.
func TestReplyOncePerMessageUnderKills(t *testing.T) {
	t.Parallel()
	trials := faultTrials(t)
	for _, p := range []killPoint{aroundPush, afterPush, midModel, afterSend, midDelivery} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			f := newFaultEnv(t)
			for i := range trials {
				f.trial(t, p, victim(i%3), i)
			}
			f.checkExactlyOnce(t)
		})
	}
}

// faultEnv is choird as a process, the agent under the process runtime,
// the fake Bot API and a model that answers each message "re: <message>".
type faultEnv struct {
	*tgEnv
	pool *pgxpool.Pool

	mu     sync.Mutex
	choird *choirdtest.Process
	armed  *faultGate // the trial in progress, nil between trials
	texts  []string   // every message sent, in order
	// cutOff are the messages whose reply choird recorded as possibly
	// sent: it died inside the send gate, before the request left.
	cutOff map[string]bool
}

// faultGate is one trial's trigger: hit is closed when the kill point is
// reached; release lets a held model call go on.
type faultGate struct {
	text    string
	point   killPoint
	victim  victim
	hitOnce sync.Once
	hit     chan struct{}
	release chan struct{}
	// killed says the hook already killed (midDelivery).
	killed atomic.Bool
	// session is the agent's session when the trial began: the one the
	// kill ends.
	session string
}

func (g *faultGate) fire() { g.hitOnce.Do(func() { close(g.hit) }) }

func newFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	model := llmtest.NewServer(t)
	e := newTGEnv(t, model, func(c *config.Config) {
		c.HeartbeatIntervalMS = 1000
		c.CrashDetectionThresholdMS = 3000
	})
	f := &faultEnv{tgEnv: e, cutOff: map[string]bool{}}
	e.dumpLogsOnFailure(t, "assistant")
	model.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		text := lastUserMessage(r)
		if text == "" {
			return llmtest.Text("The session went as planned.") // the session summary
		}
		if g := f.gate(); g != nil && g.point == midModel && g.text == text {
			g.fire()
			select {
			case <-g.release:
			case <-ctx.Done():
			}
		}
		return llmtest.Text("re: " + text)
	})
	e.bot.AfterCall("getUpdates", func(telegramtest.Call) {
		g := f.gate()
		// The gate is armed before the message is sent, and a trial has
		// one message in flight: a pending update is the trial's.
		if g == nil || g.point != aroundPush || len(e.bot.Pending()) == 0 {
			return
		}
		go func() {
			time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
			g.fire()
		}()
	})
	e.bot.AfterCall("sendChatAction", func(telegramtest.Call) {
		if g := f.gate(); g != nil && g.point == afterPush {
			g.fire()
		}
	})
	e.bot.AfterCall("sendMessage", func(c telegramtest.Call) {
		g := f.gate()
		if g == nil || g.point != midDelivery || c.Params["text"] != "re: "+g.text || g.killed.Swap(true) {
			return
		}
		// Telegram has the message; choird has not heard so yet.
		f.kill(t, g.victim)
		g.fire()
	})
	f.choird = e.startChoirdProcess(t)
	e.startAgentAdmin(t, "assistant")
	f.pool = e.pool(t)
	liveSession(t, f.pool, "assistant")
	return f
}

func (f *faultEnv) gate() *faultGate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.armed
}

// lastUserMessage is the text of the last trial message in the request,
// or "" for a request that answers none (a session summary).
func lastUserMessage(r *llmtest.Request) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		m := r.Messages[i]
		if m.Role == "user" && strings.HasPrefix(m.Content, "msg ") {
			return m.Content
		}
	}
	return ""
}

// trial sends one message, kills v at p, brings back what died, and waits
// for the reply.
func (f *faultEnv) trial(t *testing.T, p killPoint, v victim, i int) {
	t.Helper()
	text := fmt.Sprintf("msg %s %d", p, i)
	g := &faultGate{text: text, point: p, victim: v, hit: make(chan struct{}), release: make(chan struct{})}
	if err := f.pool.QueryRow(context.Background(), `SELECT session_id::text FROM choir_control.sessions
		WHERE agent_id = 'assistant' AND status = 'active' AND hello_at IS NOT NULL`).Scan(&g.session); err != nil {
		t.Fatalf("trial %d: no live session: %v", i, err)
	}
	f.mu.Lock()
	f.armed = g
	f.texts = append(f.texts, text)
	f.mu.Unlock()
	f.bot.SendText(userAlice, text)

	watch, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	switch p {
	case afterPush:
		go f.pollUntil(watch, g, `SELECT EXISTS (SELECT 1 FROM choir_control.inbox WHERE text = $1
			AND (pushed_at IS NOT NULL OR delivered_at IS NOT NULL))`, text)
	case afterSend:
		go f.pollUntil(watch, g, `SELECT EXISTS (SELECT 1 FROM choir_control.outbox WHERE text = $1)`, "re: "+text)
	}
	select {
	case <-g.hit:
	case <-time.After(90 * time.Second):
		t.Fatalf("trial %d (%s, kill %s): the kill point was never reached; alice got %q", i, p, v, sentTexts(f.bot, userAlice))
	}
	stopWatch()
	if !g.killed.Load() {
		f.kill(t, v)
	}
	f.mu.Lock()
	f.armed = nil
	f.mu.Unlock()
	close(g.release)
	f.revive(t, v, g.session)

	reply := "re: " + text
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := f.bot.Wait(ctx, func() bool {
		return countExactly(f.bot, userAlice, reply) > 0 || f.cutOffInGate(reply)
	}); err != nil {
		t.Fatalf("trial %d (%s, kill %s): %q was never answered; alice got %q", i, p, v, text, sentTexts(f.bot, userAlice))
	}
	if countExactly(f.bot, userAlice, reply) == 0 {
		// The one loss the design accepts (jobs/deliver.go): choird died
		// after marking the part as being sent and before the request's
		// last byte left. The part may have reached the user, so it is
		// recorded as sent, never sent twice; the Bot API got nothing.
		// The user is told it may not have arrived, and offered it again
		// (TestFaultChoirdKilledInSendGate in daemon).
		t.Logf("trial %d (%s, kill %s): choird died inside the send gate; %q is recorded as possibly sent, not sent twice",
			i, p, v, reply)
		f.mu.Lock()
		f.cutOff[text] = true
		f.mu.Unlock()
	}
}

// cutOffInGate reports whether reply's outbox row was recorded as sent
// without a Telegram message id: a send interrupted inside the send gate.
func (f *faultEnv) cutOffInGate(reply string) bool {
	var cut bool
	f.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM choir_control.outbox
		WHERE text = $1 AND status = 'sent' AND 0 = ANY (sent_ids))`, reply).Scan(&cut)
	return cut
}

// pollUntil fires g once query (one bool column, one text parameter)
// holds.
func (f *faultEnv) pollUntil(ctx context.Context, g *faultGate, query, arg string) {
	for ctx.Err() == nil {
		var ok bool
		if err := f.pool.QueryRow(ctx, query, arg).Scan(&ok); err == nil && ok {
			g.fire()
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// kill SIGKILLs the victim: choird, the agent's process group, or both
// (the agent first, then choird, with nothing in between).
func (f *faultEnv) kill(t *testing.T, v victim) {
	if v == killAgent || v == killBoth {
		killAgents(t, f.Dir)
	}
	if v == killChoird || v == killBoth {
		f.mu.Lock()
		p := f.choird
		f.mu.Unlock()
		if err := p.Signal(syscall.SIGKILL); err != nil {
			t.Errorf("kill choird: %v", err)
		}
	}
}

// revive brings back what died: a new choird, and the agent in a new
// session, resumed by choird itself after its restart, or started again
// as an operator would once choird has ended the killed one (it sees the
// process exit, or crash detection fires), which frees the DM's lease.
func (f *faultEnv) revive(t *testing.T, v victim, killed string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	if v == killChoird || v == killBoth {
		p := f.startChoirdProcess(t)
		f.mu.Lock()
		f.choird = p
		f.mu.Unlock()
	}
	deadline := start.Add(90 * time.Second)
	for {
		var back, oldLive, anyLive bool
		f.pool.QueryRow(ctx, `SELECT
			    count(*) FILTER (WHERE session_id::text <> $1 AND status = 'active' AND hello_at IS NOT NULL) > 0,
			    count(*) FILTER (WHERE session_id::text = $1 AND status IN ('starting', 'active', 'stopping')) > 0,
			    count(*) FILTER (WHERE status IN ('starting', 'active', 'stopping')) > 0
			  FROM choir_control.sessions WHERE agent_id = 'assistant'`, killed).Scan(&back, &oldLive, &anyLive)
		if back {
			return
		}
		// After its own death nothing brings the agent back; after a
		// restart of choird, a choird that did not within a few seconds
		// will not.
		if !oldLive && !anyLive && (v == killAgent || time.Since(start) > 5*time.Second) {
			t.Logf("%s killed: starting the agent again by hand", v)
			f.startAgentAdmin(t, "assistant")
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not come back after %s was killed", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkExactlyOnce waits long enough for a duplicate to show (several
// heartbeats, inbox sweeps and delivery retries), then counts the replies
// to each message at the Bot API, and the inbox rows.
func (f *faultEnv) checkExactlyOnce(t *testing.T) {
	t.Helper()
	time.Sleep(5 * time.Second)
	f.mu.Lock()
	texts := slices.Clone(f.texts)
	f.mu.Unlock()
	bad := 0
	for _, text := range texts {
		n := countExactly(f.bot, userAlice, "re: "+text)
		f.mu.Lock()
		cut := f.cutOff[text]
		f.mu.Unlock()
		if n > 1 || n == 0 && !cut {
			bad++
			t.Errorf("%q was answered %d times, want exactly once", text, n)
		}
	}
	var rows, delivered int
	f.pool.QueryRow(context.Background(), `SELECT count(*), count(delivered_at) FROM choir_control.inbox
		WHERE kind = 'message' AND text LIKE 'msg %'`).Scan(&rows, &delivered)
	if rows != len(texts) || delivered != len(texts) {
		t.Errorf("inbox: %d rows, %d delivered, want %d of each", rows, delivered, len(texts))
	}
	if bad > 0 {
		t.Logf("alice got %q", sentTexts(f.bot, userAlice))
	}
	f.stopAgentAdmin(t, "assistant")
}

// countExactly counts the messages to chat whose text is text.
func countExactly(b *telegramtest.Bot, chat int64, text string) int {
	n := 0
	for _, m := range b.SentTo(chat) {
		if m.Text == text {
			n++
		}
	}
	return n
}
