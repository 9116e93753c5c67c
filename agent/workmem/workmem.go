// Package workmem is a lane's working memory (spec 11.3): the window of
// the lane's committed events that its prompt carries, and the reference
// summary of every event folded out of it. Nothing leaves a prompt
// silently: an event of the lane is in the window until a compaction has
// folded it into the summary, and the summary changes only by a memory
// delta that the compaction model returns, validated against a schema and
// committed to the log before it is swapped in.
//
// Compaction starts by itself when the summary and the window together
// pass the threshold: a share of the model's context window (80% unless
// configured) minus what is never compacted (the system prompt, the
// identity files, the tools, the current message and the turn in flight,
// a core's CoreJobStart). It folds the oldest events until what remains
// is under half the threshold, runs in its own goroutine while the lane
// goes on, and is swapped in atomically. A failed or rejected compaction
// changes nothing; the next check starts another. At most one runs per
// lane. The edge and every core job each have their own Memory over the
// one log.
package workmem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
)

// Committer commits an event to the session's log; the arbiter is one.
type Committer interface {
	Commit(ctx context.Context, typ rpc.EventType, lane string, payload any) (rpc.Event, error)
}

// Config is what a lane's working memory works with.
type Config struct {
	// Lane is the lane whose events the window holds and in whose name
	// compactions are committed: "edge" or "core:<job>".
	Lane string
	// Role says whose summary it is, for the compaction model ("the edge
	// lane, which talks with the user").
	Role   string
	Log    *commitlog.Log
	Commit Committer
	LLM    *llm.Client
	// Model is the lane's model: compaction calls it, and its
	// ContextWindow sizes the budget.
	Model func() llm.ModelSettings
	// ThresholdPercent is compaction_threshold_percent; nil or 0 means
	// config.DefaultCompactionThresholdPercent.
	ThresholdPercent func() int
	// RenderFunc renders one of the lane's committed events as the
	// conversation its prompt carries, nothing for an event the prompt
	// does not show. It must depend on the event alone.
	RenderFunc func(rpc.Event) []llm.Message
	// NoticeFunc tells the user that a compaction was applied, every
	// time: an automatic compaction leaves the window at half the
	// threshold, so two of them are at least half a threshold of new
	// conversation apart (some 50,000 tokens on a 128k model), which rate
	// limits them well enough. Nil: no one is told.
	NoticeFunc func(ctx context.Context, n Notice)
	// UsageFunc counts a compaction call's tokens against the lane's
	// budgets. Nil: not counted.
	UsageFunc func(llm.Usage)
	Logger    *slog.Logger
}

// Notice is what the user is told of an applied compaction. Event is the
// committed delta: a message ID derived from its hash is never sent twice.
type Notice struct {
	Event rpc.Event
	Text  string
	Result
}

// Triggers of a compaction.
const (
	TriggerAutomatic = "automatic"
	TriggerManual    = "manual"
)

// Result is an applied compaction.
type Result struct {
	Trigger string
	// Folded counts the events folded, FromRev..ThroughRev their range.
	Folded              int
	FromRev, ThroughRev int64
	// Event is the committed memory_write_committed event.
	Event   rpc.Event
	Summary ReferenceSummary
}

// Errors of a compaction besides the model's and [ErrRejectedDelta].
var (
	ErrNothingToCompact = errors.New("nothing to compact: the event window is empty")
	ErrClosed           = errors.New("working memory closed")
)

// entry is one event of the window as the prompt carries it.
type entry struct {
	rev   int64
	hash  rpc.Hash
	msgs  []llm.Message
	bytes int64
}

// Memory is one lane's working memory. Its methods are safe for
// concurrent use.
type Memory struct {
	cfg Config

	mu  sync.Mutex
	sum ReferenceSummary
	// from is the first revision the window holds; win the lane's events
	// from there through scanned that render to something.
	from    int64
	win     []entry
	scanned int64
	// gen counts swaps of the summary: a lane that laid out a prompt
	// lays it out again when gen moved.
	gen     uint64
	running *Compaction
	pending *Compaction
	closed  bool
	wg      sync.WaitGroup
}

// New makes a lane's working memory. A resumed session's log may hold
// compactions committed after its snapshot: the latest of this lane is
// adopted, and [Memory.Restore] keeps whichever is newer. The window takes
// in the lane's events the log holds now, before the log may drop
// acknowledged ones from memory: a resumed session's tail is all
// acknowledged, and the first heartbeat would otherwise trim away the
// window it carries.
func New(cfg Config) *Memory {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RenderFunc == nil {
		cfg.RenderFunc = func(rpc.Event) []llm.Message { return nil }
	}
	m := &Memory{cfg: cfg}
	head, _ := cfg.Log.Head()
	evs, err := cfg.Log.Range(cfg.Log.Oldest(), head)
	if err != nil {
		return m
	}
	for _, ev := range evs {
		if sum, from, ok := committedSummary(ev, cfg.Lane); ok {
			m.sum, m.from = sum, from
		}
	}
	m.sync()
	return m
}

// committedSummary reads a compaction of lane from a committed event:
// a reference_summary_delta, or the plain reference_summary of older
// sessions.
func committedSummary(ev rpc.Event, lane string) (ReferenceSummary, int64, bool) {
	if ev.Type != rpc.EventMemoryWriteCommitted || ev.Lane != lane {
		return ReferenceSummary{}, 0, false
	}
	var p struct {
		Kind       string           `json:"kind"`
		Summary    ReferenceSummary `json:"summary"`
		WindowFrom int64            `json:"window_from"`
		ThroughRev int64            `json:"compacted_through_rev"`
	}
	if json.Unmarshal(ev.Payload, &p) != nil {
		return ReferenceSummary{}, 0, false
	}
	switch p.Kind {
	case kindDelta:
		return p.Summary, p.WindowFrom, true
	case "reference_summary":
		return p.Summary, p.ThroughRev + 1, true
	}
	return ReferenceSummary{}, 0, false
}

const kindDelta = "reference_summary_delta"

// Restore adopts a snapshot's summary and window boundary, unless the log
// showed a later compaction. Call it before the lane runs.
func (m *Memory) Restore(sum ReferenceSummary, windowFrom int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if windowFrom < m.from || (windowFrom == m.from && !m.sum.IsZero()) {
		return
	}
	m.sum, m.from = sum, windowFrom
	// The boundary only moves forward: the window keeps what it took in
	// from there.
	i := 0
	for i < len(m.win) && m.win[i].rev < windowFrom {
		i++
	}
	m.win = m.win[i:]
	m.gen++
	if oldest := m.cfg.Log.Oldest(); windowFrom > 0 && windowFrom < oldest {
		m.cfg.Logger.Warn("the window's first events are not in the restored log: they are neither in the window nor in the summary",
			slog.String("lane", m.cfg.Lane), slog.Int64("window_from", windowFrom), slog.Int64("log_from", oldest))
	}
}

// State is the summary and the first revision the window holds.
func (m *Memory) State() (ReferenceSummary, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sum, m.from
}

// Generation counts the compactions swapped in.
func (m *Memory) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// Layout returns the prompt's first part: head (what is never compacted
// and goes first), the summary, and the window through revision through.
// gen is the generation it shows.
func (m *Memory) Layout(head []llm.Message, through int64) (msgs []llm.Message, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	msgs = append([]llm.Message{}, head...)
	if r := m.sum.Render(); r != "" {
		msgs = append(msgs, llm.SystemMessage(r))
	}
	for _, e := range m.win {
		if e.rev > through {
			break
		}
		msgs = append(msgs, e.msgs...)
	}
	return msgs, m.gen
}

// Window returns the window's messages through revision through, without
// the summary.
func (m *Memory) Window(through int64) []llm.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sync()
	var msgs []llm.Message
	for _, e := range m.win {
		if e.rev > through {
			break
		}
		msgs = append(msgs, e.msgs...)
	}
	return msgs
}

// sync brings the window up to the head of the log. mu is held.
func (m *Memory) sync() {
	head, _ := m.cfg.Log.Head()
	start := max(m.scanned+1, m.from, m.cfg.Log.Oldest(), 1)
	if start > head {
		return
	}
	if m.scanned > 0 && start > m.scanned+1 {
		m.cfg.Logger.Error("events of the window left the log before the window saw them",
			slog.String("lane", m.cfg.Lane), slog.Int64("from", m.scanned+1), slog.Int64("to", start-1))
	}
	evs, err := m.cfg.Log.Range(start, head)
	if err != nil {
		return
	}
	for _, ev := range evs {
		if ev.Lane != m.cfg.Lane {
			continue
		}
		msgs := m.cfg.RenderFunc(ev)
		if len(msgs) == 0 {
			continue
		}
		var n int64
		for _, msg := range msgs {
			n += messageBytes(msg)
		}
		m.win = append(m.win, entry{rev: ev.Rev, hash: ev.Hash, msgs: msgs, bytes: n})
	}
	m.scanned = head
}

// limits returns the model's context window and the budget: the share of
// it the prompt may fill before compaction starts.
func (m *Memory) limits() (window, budget int64) {
	window = m.cfg.Model().ContextWindow
	if window <= 0 {
		window = config.DefaultContextWindow
	}
	pct := config.DefaultCompactionThresholdPercent
	if m.cfg.ThresholdPercent != nil {
		if p := m.cfg.ThresholdPercent(); p > 0 {
			pct = p
		}
	}
	return window, window * int64(pct) / 100
}

// Check measures the prompt after a model response or a tool result, and
// starts a compaction when the summary and the window through revision
// through (the last one that may be folded) pass the threshold: the
// budget minus fixed, the estimated tokens of what is never compacted.
// When the whole prompt would not fit the model's context window and a
// compaction is in flight, Check waits for it (or for ctx) and reports
// true: the caller lays out its prompt again. Otherwise the lane goes on
// while the compaction runs. ctx bounds the compaction it starts.
func (m *Memory) Check(ctx context.Context, fixed, through int64) (waited bool) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false
	}
	m.sync()
	window, budget := m.limits()
	cur := m.compactableLocked(through)
	if m.running == nil && m.pending == nil && cur > budget-fixed {
		c := newCompaction(ctx, TriggerAutomatic, fixed, through)
		if c.plan = m.planLocked(c); len(c.plan.entries) > 0 {
			m.startLocked(c)
		} else {
			c.cancel()
		}
	}
	running := m.running
	m.mu.Unlock()
	if running == nil || fixed+cur <= window {
		return false
	}
	m.cfg.Logger.InfoContext(ctx, "the prompt would not fit the context window: waiting for the compaction in flight",
		slog.String("lane", m.cfg.Lane), slog.Int64("tokens", fixed+cur), slog.Int64("context_window", window))
	select {
	case <-running.done:
	case <-ctx.Done():
	}
	return true
}

// compactableLocked is the estimated tokens of the summary and of the
// window through revision through. mu is held.
func (m *Memory) compactableLocked(through int64) int64 {
	var b int64
	for _, e := range m.win {
		if e.rev > through {
			break
		}
		b += e.bytes
	}
	return EstimateText(m.sum.Render()) + tokensOf(b)
}

// Compact folds the whole window through revision through into the
// summary (/compact, choirctl session compact, choir.memory.compact), on
// the same path as an automatic compaction: it runs after the one in
// flight, if any, and one request waiting covers the next. Wait on the
// result, or let it run.
func (m *Memory) Compact(ctx context.Context, fixed, through int64) *Compaction {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		c := newCompaction(ctx, TriggerManual, fixed, through)
		c.finish(Result{}, ErrClosed)
		return c
	}
	if m.pending != nil {
		m.pending.through = max(m.pending.through, through)
		return m.pending
	}
	c := newCompaction(ctx, TriggerManual, fixed, through)
	if m.running != nil {
		m.pending = c
		return c
	}
	m.sync()
	if c.plan = m.planLocked(c); len(c.plan.entries) == 0 {
		c.finish(Result{}, ErrNothingToCompact)
		return c
	}
	m.startLocked(c)
	return c
}

// Close abandons the compaction in flight and the one waiting (nothing of
// them is applied) and waits for its goroutine. Later checks do nothing.
func (m *Memory) Close() {
	m.mu.Lock()
	m.closed = true
	if m.running != nil {
		m.running.cancel()
	}
	if p := m.pending; p != nil {
		m.pending = nil
		p.finish(Result{}, ErrClosed)
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// Compaction is one compaction, started or waiting.
type Compaction struct {
	trigger string
	fixed   int64
	through int64
	plan    plan
	ctx     context.Context
	cancel  context.CancelFunc

	done chan struct{}
	res  Result
	err  error
}

func newCompaction(ctx context.Context, trigger string, fixed, through int64) *Compaction {
	cctx, cancel := context.WithCancel(ctx)
	return &Compaction{trigger: trigger, fixed: fixed, through: through, ctx: cctx, cancel: cancel, done: make(chan struct{})}
}

func (c *Compaction) finish(res Result, err error) {
	c.res, c.err = res, err
	c.cancel()
	close(c.done)
}

// Wait returns the compaction's result once it is applied, or why it was
// not: the model's error, [ErrRejectedDelta], [ErrNothingToCompact] or
// [ErrClosed].
func (c *Compaction) Wait(ctx context.Context) (Result, error) {
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// plan is what a compaction folds, decided when it starts.
type plan struct {
	entries   []entry
	prev      ReferenceSummary
	capTokens int64
}

// minSummaryCap is the least the summary may take, in tokens, however
// small the threshold.
const minSummaryCap = 256

// planLocked chooses the events c folds: the oldest of the window, until
// the summary and what remains are under half the threshold (an
// automatic compaction) or all through c.through (a manual one), and no
// more than the compaction request can carry within the budget. The
// summary may take a quarter of the threshold. mu is held.
func (m *Memory) planLocked(c *Compaction) plan {
	_, budget := m.limits()
	threshold := max(budget-c.fixed, 0)
	sumTokens := EstimateText(m.sum.Render())
	p := plan{prev: m.sum, capTokens: max(threshold/4, minSummaryCap)}
	room := max(budget-EstimateText(instructions)-sumTokens-p.capTokens, minSummaryCap) * 4
	var winBytes int64
	for _, e := range m.win {
		if e.rev <= c.through {
			winBytes += e.bytes
		}
	}
	var folded int64
	for _, e := range m.win {
		if e.rev > c.through || (len(p.entries) > 0 && folded+e.bytes > room) {
			break
		}
		if c.trigger == TriggerAutomatic && sumTokens+tokensOf(winBytes-folded) <= threshold/2 {
			break
		}
		p.entries = append(p.entries, e)
		folded += e.bytes
	}
	return p
}

// startLocked runs c in its own goroutine. mu is held.
func (m *Memory) startLocked(c *Compaction) {
	m.running = c
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		res, err := m.fold(c)
		m.mu.Lock()
		m.running = nil
		if p := m.pending; p != nil && !m.closed {
			m.pending = nil
			m.sync()
			if p.plan = m.planLocked(p); len(p.plan.entries) > 0 {
				m.startLocked(p)
			} else {
				p.finish(Result{}, ErrNothingToCompact)
			}
		}
		m.mu.Unlock()
		// Told and logged once the next check may start another: a slow
		// outbound holds no compaction back.
		switch {
		case err == nil && m.cfg.NoticeFunc != nil:
			m.cfg.NoticeFunc(c.ctx, Notice{Event: res.Event, Result: res, Text: noticeText(res)})
		case err != nil && c.ctx.Err() == nil:
			m.cfg.Logger.WarnContext(c.ctx, "compaction not applied; the window is kept and the next check retries",
				slog.String("lane", m.cfg.Lane), slog.String("trigger", c.trigger), slog.String("error", err.Error()))
		}
		c.finish(res, err)
	}()
}

// noticeText is what the user is told of res.
func noticeText(res Result) string {
	what := "messages"
	if res.Folded == 1 {
		what = "message"
	}
	return fmt.Sprintf("Compacted %d earlier %s into my reference summary (rev %d–%d).", res.Folded, what, res.FromRev, res.ThroughRev)
}

// deltaEvent is the payload of the memory_write_committed event that
// records an applied compaction: the delta, the revisions it folded, and
// the summary and window boundary that result, from which a restart
// restores them.
type deltaEvent struct {
	Kind       string           `json:"kind"`
	Trigger    string           `json:"trigger"`
	FromRev    int64            `json:"from_rev"`
	ThroughRev int64            `json:"through_rev"`
	Folded     int              `json:"folded_events"`
	Delta      Delta            `json:"delta"`
	Summary    ReferenceSummary `json:"summary"`
	WindowFrom int64            `json:"window_from"`
}

// fold makes the compaction call, validates and applies its delta,
// commits it, swaps the result in and tells the user.
func (m *Memory) fold(c *Compaction) (Result, error) {
	ctx, p := c.ctx, c.plan
	model := m.cfg.Model()
	resp, err := m.cfg.LLM.Complete(ctx, llm.Request{Model: model, Messages: m.request(p), Lane: m.cfg.Lane})
	if err != nil {
		return Result{}, fmt.Errorf("compaction call: %w", err)
	}
	if m.cfg.UsageFunc != nil {
		m.cfg.UsageFunc(resp.Usage)
	}
	if _, err := m.cfg.Commit.Commit(ctx, rpc.EventLLMCallCommitted, m.cfg.Lane, commitlog.LLMCall{Model: model.Name,
		Lane: m.cfg.Lane, PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens,
		LatencyMS: resp.Latency.Milliseconds(), Purpose: commitlog.PurposeCompaction,
		CachedTokens: resp.Usage.CachedTokens, CostUSD: resp.Usage.CostUSD, CostSource: resp.Usage.CostSource, SpendKey: resp.SpendKey}); err != nil {
		return Result{}, fmt.Errorf("commit compaction call: %w", err)
	}
	delta, err := ParseDelta(resp.Content)
	if err != nil {
		return Result{}, err
	}
	next, err := p.prev.Apply(delta, p.capTokens)
	if err != nil {
		return Result{}, err
	}
	first, last := p.entries[0].rev, p.entries[len(p.entries)-1].rev
	ev, err := m.cfg.Commit.Commit(ctx, rpc.EventMemoryWriteCommitted, m.cfg.Lane, deltaEvent{Kind: kindDelta,
		Trigger: c.trigger, FromRev: first, ThroughRev: last, Folded: len(p.entries), Delta: delta, Summary: next,
		WindowFrom: last + 1})
	if err != nil {
		return Result{}, fmt.Errorf("commit the memory delta: %w", err)
	}
	m.mu.Lock()
	m.sum, m.from = next, last+1
	i := 0
	for i < len(m.win) && m.win[i].rev <= last {
		i++
	}
	m.win = m.win[i:]
	m.gen++
	m.mu.Unlock()
	res := Result{Trigger: c.trigger, Folded: len(p.entries), FromRev: first, ThroughRev: last, Event: ev, Summary: next}
	m.cfg.Logger.InfoContext(ctx, "window compacted", slog.String("lane", m.cfg.Lane), slog.String("trigger", c.trigger),
		slog.Int("folded_events", res.Folded), slog.Int64("from_rev", first), slog.Int64("through_rev", last))
	return res, nil
}

// instructions open every compaction request; %s is the lane's role and
// %d the summary's cap in characters.
const instructions = `You keep the reference summary of %s: a structured record of everything that has left its context window. The events below are leaving it now. Fold what matters of them into the summary by answering with one memory delta, a JSON object and nothing else:

{"memory_delta": {"mode": "append", "summary_update": "<lines to add to the summary>", "add_fact": [{"key": "<short name>", "value": "<the fact>", "source_event": "<ev id>"}], "remove_fact": [{"key": "<a fact no longer true>"}], "add_references": ["<ev id or session id>"], "remove_references": ["<id>"]}}

Only mode is required. Mode append adds summary_update to the summary text; mode overwrite replaces the summary text with it (facts and references stay unless removed): use it to condense. Keep as facts whatever may be asked about later: names, numbers, codes, dates, decisions, preferences, commitments, results of tools, open questions. A fact with the key of an existing one replaces it. The whole summary, facts included, must stay under about %d characters.`

// request is the compaction call's prompt: the instructions, the summary
// as it is, and the events to fold, each labelled with its revision and
// ev id, tool calls and tool results included.
func (m *Memory) request(p plan) []llm.Message {
	prev := "(empty)"
	if !p.prev.IsZero() {
		b, _ := json.Marshal(p.prev)
		prev = string(b)
	}
	sys := fmt.Sprintf(instructions, m.cfg.Role, p.capTokens*4) + "\n\nThe reference summary now:\n" + prev
	var t strings.Builder
	fmt.Fprintf(&t, "Events to fold (revisions %d to %d):\n", p.entries[0].rev, p.entries[len(p.entries)-1].rev)
	for _, e := range p.entries {
		for _, msg := range e.msgs {
			content := msg.Content
			if msg.ToolCallID != "" {
				content = "(result of call " + msg.ToolCallID + ") " + content
			}
			if content != "" || len(msg.ToolCalls) == 0 {
				fmt.Fprintf(&t, "[rev %d, ev %s] %s: %s\n", e.rev, e.hash.String()[:12], msg.Role, content)
			}
			// A step's tool calls are what it did: folded with the rest.
			for _, c := range msg.ToolCalls {
				fmt.Fprintf(&t, "[rev %d, ev %s] %s: calls %s (call %s) with %s\n", e.rev, e.hash.String()[:12], msg.Role,
					c.Name, c.ID, c.Arguments)
			}
		}
	}
	t.WriteString("\nAnswer with the memory delta now: one JSON object, nothing else.")
	return []llm.Message{llm.SystemMessage(sys), llm.UserMessage(t.String())}
}
