// Package agent is choir-agent: the runtime inside an agent's container. Run
// verifies the sandbox, says hello to choird, fetches the session's secrets
// and configuration, builds the tool and skill registries, and runs the
// arbiter, the edge lane, the heartbeat that replicates the commit log, and
// the push stream that brings user messages in.
package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// Version is the agent binary's version, set at build time.
var Version = "dev"

// Options configure one run of the agent; cmd/choir-agent fills them from
// flags and the environment choird sets.
type Options struct {
	// ControlPlane, Socket, Endpoint and CACert choose the transport
	// (spec 12.2).
	ControlPlane, Socket, Endpoint, CACert string
	// EgressSocket is choird's egress gateway (rpc/egress): every
	// connection out goes through it. Empty: the agent dials directly.
	EgressSocket                   string
	AgentID, SessionID, LeaseToken string
	// Workspace is the leased workspace (/workspace in the container).
	Workspace string
	// ChoirDir holds the image's tools, skills and identity (/choir).
	ChoirDir string
	// Sandboxed makes the agent verify its container before anything else
	// (set by the docker runtime).
	Sandboxed bool
	// Fault, when set, is told the fault points of every call with side
	// effects (arbiter.Config.Fault): only a binary built for the
	// kill-anywhere suite sets it.
	Fault  func(point, toolName, callID string)
	Logger *slog.Logger
}

// defaultSummaryTimeout bounds the session summary when the configuration
// does not (spec 17.2).
const defaultSummaryTimeout = 30 * time.Second

// summaryTimeout bounds the session summary.
func summaryTimeout(d *rpc.DynamicConfig) time.Duration {
	if d.SessionSummaryTimeout > 0 {
		return time.Duration(d.SessionSummaryTimeout) * time.Millisecond
	}
	return defaultSummaryTimeout
}

// modelSettings returns the settings of the model the edge calls next.
func modelSettings(d *rpc.DynamicConfig, bound string, secret func(string) (string, bool)) llm.ModelSettings {
	name := modelName(d, bound)
	m := d.Models[name]
	key, _ := secret(m.Secret)
	return llm.ModelSettingsFromConfig(name, m, key)
}

// modelName is the model the edge calls next: the session's choice when it
// names a configured model, else the one bound at start.
func modelName(d *rpc.DynamicConfig, bound string) string {
	if _, ok := d.Models[d.LLM]; ok && d.LLM != "" {
		return d.LLM
	}
	return bound
}

// workingState is the agent's working-memory snapshot (spec 13.4), taken
// every snapshot_every_events events and sent with a heartbeat. OpenJobs
// are the running core jobs: their briefings and budgets spent, which a
// resumed session keeps counting from, and their working memory. choird
// reads edge.event_window_boundary and open_jobs[].event_window_boundary,
// and nothing else of it, to start the tail where the windows start.
type workingState struct {
	Edge     lane.EdgeSnapshot `json:"edge"`
	OpenJobs []core.Snapshot   `json:"open_jobs"`
	// LaneSources are the untrusted sources each lane's context holds
	// (issue 30): a resumed session holds them still.
	LaneSources map[string][]string `json:"lane_sources,omitempty"`
}

// edgeBudgets are the edge's budgets from the agent's configuration.
func edgeBudgets(b config.Budgets) lane.Budgets {
	return lane.Budgets{MaxToolCallsPerSession: b.MaxToolCallsPerSession, TotalSessionTokens: b.TotalSessionTokens,
		MaxStepsPerMessage: b.MaxStepsPerMessage}
}

// jobBudgets are the core jobs' budgets from the agent's configuration;
// the session's are the edge's too, and shared.
func jobBudgets(b config.Budgets) core.Budgets {
	return core.Budgets{MaxCoreJobs: b.MaxCoreJobs, TotalSessionTokens: b.TotalSessionTokens,
		MaxToolCallsPerSession: b.MaxToolCallsPerSession, PerJobMaxSteps: b.PerJobMaxSteps,
		PerJobMaxToolCalls: b.PerJobMaxToolCalls, PerJobWallTime: time.Duration(b.PerJobWallTimeMS) * time.Millisecond,
		MaxInjectionsPerJob: b.MaxInjectionsPerJob}
}

// secretStore holds the session's secrets in memory only, swapped whole on
// refresh (spec 14.3).
type secretStore struct {
	m atomic.Pointer[map[string]string]
}

func (s *secretStore) get(name string) (string, bool) {
	m := s.m.Load()
	if m == nil {
		return "", false
	}
	v, ok := (*m)[name]
	return v, ok
}

func (s *secretStore) swap(m map[string]string) { s.m.Store(&m) }

// all returns the current secrets, for scrubbing tool output; the map is
// never changed after a swap.
func (s *secretStore) all() map[string]string {
	if m := s.m.Load(); m != nil {
		return *m
	}
	return nil
}

// names lists the secrets held, sorted.
func (s *secretStore) names() []string {
	m := s.m.Load()
	if m == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(*m))
}

// Run is the agent's whole life: it returns when ctx ends or choird shuts it
// down, after a final heartbeat and TERMINATE_SELF.
func Run(ctx context.Context, opts Options) error {
	s, err := openSession(ctx, opts)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.restore(); err != nil {
		return err
	}
	return s.stop(ctx, s.run(ctx))
}

// stopRequest is why and how fast the agent stops.
type stopRequest struct {
	reason string
	// grace is how long choird waits before stopping the agent by force
	// (defaultGrace when zero).
	grace time.Duration
	// revoked says the lease is gone: nothing can be replicated any more.
	revoked bool
	// orphaned says choird stayed out of reach longer than the session
	// could be adopted: the agent stops without it (stopOrphaned).
	orphaned bool
	// afterTurn lets the turn in progress finish before the lane stops
	// (rpc.Shutdown.AfterTurn: the day's rollover).
	afterTurn bool
	// budgetSpent says the session ends because its budget is used up
	// (rpc.TerminateSelfRequest.BudgetSpent).
	budgetSpent bool
}

// defaultGrace is the stop's time budget when ctx ends (a signal) rather
// than choird asking.
const defaultGrace = 45 * time.Second

// finalReserve is kept for the final heartbeat and TERMINATE_SELF.
const finalReserve = 10 * time.Second

const edgeInstructions = `You are the edge lane of a personal agent: the one who talks with the user.
Answer directly when you can. Use tools for anything that touches files, commands or memory.
Never invent tool results; if a tool fails, say so plainly.`

// imageInfo is what the agent reports of its image in INIT_HELLO: from
// /choir/version.json when the image was built by choird's pipeline.
type imageInfo struct {
	ImageVersion      string `json:"image_version"`
	ToolManifestHash  string `json:"tool_manifest_hash"`
	SkillManifestHash string `json:"skill_manifest_hash"`
}

func imageVersion(choirDir string) imageInfo {
	info := imageInfo{ImageVersion: Version, ToolManifestHash: "builtin", SkillManifestHash: "builtin"}
	if b, err := os.ReadFile(filepath.Join(choirDir, "version.json")); err == nil {
		var v imageInfo
		if json.Unmarshal(b, &v) == nil && v.ImageVersion != "" {
			info = v
		}
	}
	return info
}

func readIdentity(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return string(b)
}

// hostExecutor runs host tools on choird, except the working store of
// choir.memory.query, which the agent's own log answers.
type hostExecutor struct {
	client *client.Client
	log    *commitlog.Log
}

func (h hostExecutor) ExecuteHostTool(ctx context.Context, name, callID string, input json.RawMessage) (tool.Result, error) {
	if name == tool.NameMemoryQuery {
		var q struct {
			Store string `json:"store"`
		}
		if json.Unmarshal(input, &q) == nil && q.Store == "working" {
			return answerWorking(h.log, input)
		}
	}
	resp, err := h.client.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: name, CallID: callID, Input: input,
		IdempotencyKey: tool.CallKey(ctx), Sources: tool.LaneSources(ctx)})
	if err != nil {
		return tool.Result{}, err
	}
	status := tool.StatusSuccess
	if resp.Status != rpc.ToolSuccess {
		status = tool.StatusError
	}
	return tool.Result{Status: status, Summary: name + " " + string(resp.Status), Output: resp.Output}, nil
}

// outbound hands the lane's messages to choird under the IDs the lane
// derives from its committed events: choird's outbox is unique on (agent,
// message_id), so a message sent again after a retry or a restart is
// queued once.
//
// A message goes out only once choird has acknowledged the event that
// produced it (flush, then send; choird refuses it otherwise). Until then
// a crash of either side leaves no trace of the answer outside the agent:
// the resumed session finishes the turn and answers once. After it, the
// resumed session finds the answer in its tail and sends it again under
// the same ID.
type outbound struct {
	client *client.Client
	hb     *heartbeat // set before the lanes run
	logger *slog.Logger
}

// Send flushes the log through m.Rev, then queues m, retrying both while
// choird is unreachable or restarting, until ctx ends. A revoked lease or
// a refused message ends the attempt: the session is over, or the message
// can never be queued.
func (o *outbound) Send(ctx context.Context, m lane.OutboundMessage) error {
	backoff := time.Duration(0)
	for attempt := 1; ; attempt++ {
		err := o.hb.flushTo(ctx, m.Rev)
		if err == nil {
			_, err = o.client.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: m.ID, Kind: rpc.OutboundText,
				Text: m.Text, EventRev: m.Rev})
			if err == nil {
				return nil
			}
		}
		if ctx.Err() != nil || !outboundRetryable(err) {
			return err
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 2*time.Second)
		if attempt == 1 || attempt%20 == 0 {
			o.logger.Warn("outbound message not yet queued; retrying", slog.String("message_id", m.ID),
				slog.Int("attempt", attempt), slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
	}
}

// flushTo returns once choird has acknowledged the log through rev,
// retrying while choird is unreachable or restarting, until ctx ends. The
// edge lane awaits it before an approved call runs (lane.EdgeConfig
// FlushFunc).
func (o *outbound) flushTo(ctx context.Context, rev int64) error {
	backoff := time.Duration(0)
	for attempt := 1; ; attempt++ {
		err := o.hb.flushTo(ctx, rev)
		if err == nil || ctx.Err() != nil || !outboundRetryable(err) {
			return err
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 2*time.Second)
		if attempt == 1 || attempt%20 == 0 {
			o.logger.Warn("log not yet acknowledged; retrying", slog.Int64("rev", rev), slog.Int("attempt", attempt),
				slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
	}
}

// outboundRetryable reports whether a failed flush or SEND_OUTBOUND may
// succeed later: choird unreachable, restarting or busy, or the log not
// yet acknowledged.
func outboundRetryable(err error) bool {
	for _, permanent := range []error{wire.ErrUnauthenticated, wire.ErrPermissionDenied, wire.ErrBadRequest,
		wire.ErrNotFound, wire.ErrPayloadTooLarge, wire.ErrUnknownVerb} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	return true
}

// warn tells the user that choird cannot be reached, once, without waiting
// for the log: it is called by the heartbeat loop, which must not block,
// and the warning is no answer a resumed session could repeat.
func (o *outbound) warn(ctx context.Context, id, text string) {
	if _, err := o.client.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: id, Kind: rpc.OutboundText, Text: text}); err != nil {
		o.logger.Warn("warning not sent", slog.String("error", err.Error()))
	}
}

// approver files the arbiter's approval requests with choird. The request
// ID is the envelope's: choird keeps one approval per (session,
// request_id), so a retried request finds the first approval.
type approver struct{ client *client.Client }

func (a approver) RequestApproval(ctx context.Context, requestID string, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	return a.client.RequestApproval(client.WithRequestID(ctx, requestID), req)
}

// statusReporter sends every lane's status to choird (REPORT_STATUS): the
// edge's and each core job's, on every change, coalesced: at most one round
// per statusGap, always the latest status, only the lanes that changed, and
// a report that failed is sent again.
type statusReporter struct {
	client *client.Client
	edge   *lane.Edge
	// sources returns a lane's untrusted sources (the arbiter's).
	sources func(lane string) []string
	logger  *slog.Logger
	kick    chan struct{}
}

// statusGap spaces status reports: at most five rounds a second.
const statusGap = 200 * time.Millisecond

// changed is the lanes' StatusFunc: it never blocks.
func (r *statusReporter) changed() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *statusReporter) run(ctx context.Context) {
	last := map[string][]byte{} // by lane, what choird was last told
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		seen := map[string]bool{}
		for _, st := range r.edge.Statuses() {
			seen[st.Lane] = true
			if r.sources != nil {
				st.Sources = r.sources(st.Lane)
			}
			// The time left changes every instant; it goes out with the
			// changes that matter, not as one by itself.
			key := st
			key.BudgetRemaining.TimeMS = nil
			b, _ := json.Marshal(key)
			if bytes.Equal(b, last[st.Lane]) {
				continue
			}
			if _, err := r.client.ReportStatus(ctx, st); err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				if failures == 1 || failures%50 == 0 {
					r.logger.Warn("status report failed; retrying", slog.String("lane", st.Lane),
						slog.String("error", err.Error()), slog.Int("failures", failures))
				}
				// Try again after the gap, with whatever is latest then.
				r.changed()
				continue
			}
			last[st.Lane], failures = b, 0
		}
		for l := range last {
			if !seen[l] {
				delete(last, l)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(statusGap):
		}
	}
}

// heartbeat replicates the commit log to choird (spec 13.1).
type heartbeat struct {
	client        *client.Client
	log           *commitlog.Log
	logger        *slog.Logger
	configVersion *atomic.Int64
	fetchConfig   func(context.Context) error
	interval      func() time.Duration
	snapshotEvery func() int64
	state         func() json.RawMessage
	// orphanAfter is how long choird may stay out of reach before the
	// session can no longer be adopted (rpc.DynamicConfig.OrphanAfter).
	orphanAfter func() time.Duration
	// warn tells the user something under a message ID; revoked and
	// orphaned stop the agent.
	warn     func(ctx context.Context, id, text string)
	revoked  func()
	orphaned func(since time.Duration)

	// contact is when choird last answered a beat (UnixNano), with an
	// acknowledgement or an error of its own: set by every beat, the
	// loop's and those of flushTo.
	contact atomic.Int64
	// mu serialises beats: the loop's and those of flushTo.
	mu           sync.Mutex
	lastSnapshot int64
	warned       bool
}

// unackedWarn is how many unacknowledged events make the agent warn the
// user that its work is not yet safe on the host.
const unackedWarn = 500

// Retries of a failed heartbeat back off exponentially from backoffMin to
// backoffMax: capped well under the crash threshold (10 s by default), so
// that once choird or Postgres is back the session is heard from before
// crash detection gives up on it.
const (
	backoffMin = 200 * time.Millisecond
	backoffMax = 2 * time.Second
)

// defaultOrphanAfter bounds the time without choird when choird did not
// say its threshold (an older choird): long enough for any threshold one
// would configure, short enough that no agent runs on for long.
const defaultOrphanAfter = 2 * time.Minute

func (h *heartbeat) beat(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.log.UnackedLimit(1000)
	req := rpc.HeartbeatRequest{BaseRev: p.BaseRev, NewRev: p.NewRev, Patches: p.Events,
		HashPrev: p.HashPrev, HashNew: p.HashNew, ConfigVersion: h.configVersion.Load(), Timestamp: time.Now()}
	if every := h.snapshotEvery(); every > 0 && p.NewRev > 0 && p.NewRev-h.lastSnapshot >= every {
		// The snapshot is taken now, at the patch's last revision: counters
		// may include a call committed since, which only errs on the side
		// of a smaller remaining budget. A lane in the middle of a turn
		// gives no state (nil): the snapshot waits for a later beat.
		if st := h.state(); st != nil {
			req.Snapshot = &rpc.Snapshot{Rev: p.NewRev, Hash: p.HashNew, State: st}
		}
	}
	resp, err := h.client.Heartbeat(ctx, req)
	if answered(err) {
		h.contact.Store(time.Now().UnixNano())
	}
	if err != nil {
		return err
	}
	if req.Snapshot != nil {
		h.lastSnapshot = req.Snapshot.Rev
	}
	if err := h.log.Ack(resp.AckRev); err != nil {
		return fmt.Errorf("ack %d: %w", resp.AckRev, err)
	}
	if resp.ConfigVersionLatest != h.configVersion.Load() {
		if err := h.fetchConfig(ctx); err != nil {
			h.logger.Warn("config refresh failed; keeping the current one", slog.String("error", err.Error()))
		}
	}
	return nil
}

// answered reports whether err (from a call to choird) means that choird
// answered: no error, or an error of its own. Anything else (no socket, a
// refused or broken connection, a timeout) is choird out of reach.
func answered(err error) bool {
	var e *wire.Error
	return err == nil || errors.As(err, &e)
}

// sinceContact is how long ago choird last answered a beat.
func (h *heartbeat) sinceContact() time.Duration {
	return time.Since(time.Unix(0, h.contact.Load()))
}

// run beats every interval, backing off while choird is unreachable;
// unacknowledged events stay in the log and go out with the next
// successful beat. A revoked lease (the session was crashed or stopped
// behind the agent's back) fences the agent: it stops. So does choird
// out of reach for longer than orphanAfter: the session can no longer be
// adopted, and an agent without choird must not run on by itself.
func (h *heartbeat) run(ctx context.Context) {
	h.contact.Store(time.Now().UnixNano()) // choird answered the hello just now
	var backoff time.Duration
	var down outage
	// The first beat goes out at once: choird learns the agent is up, and
	// the interval only spaces the ones after it.
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := h.beat(ctx)
		switch {
		case err == nil:
			down.over(h.logger)
			backoff, wait = 0, h.interval()
			h.warned = false
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, wire.ErrUnauthenticated):
			h.logger.Error("lease revoked: this session is over; stopping", slog.String("error", err.Error()))
			h.revoked()
			return
		}
		bound := h.orphanAfter()
		down.failed(h.logger, err, bound)
		left := bound - h.sinceContact()
		if left <= 0 {
			h.logger.Error("choird out of reach for longer than this session could still be adopted; stopping",
				slog.Duration("unreachable_for", h.sinceContact().Round(time.Millisecond)), slog.Duration("bound", bound),
				slog.Int("failed_tries", down.tries), slog.String("error", err.Error()))
			h.orphaned(h.sinceContact())
			return
		}
		backoff = min(max(2*backoff, backoffMin), backoffMax)
		wait = min(backoff, left)
		h.warnUnacked(ctx)
	}
}

// warnUnacked tells the user once that unacknowledged events pile up.
func (h *heartbeat) warnUnacked(ctx context.Context) {
	head, _ := h.log.Head()
	if acked, _ := h.log.Acked(); head-acked > unackedWarn && !h.warned {
		h.warned = true
		h.logger.Warn("unacknowledged events are piling up", slog.Int64("unacked", head-acked))
		_, hash := h.log.Head()
		h.warn(ctx, lane.MessageID("unacked", hash), fmt.Sprintf("Warning: I cannot reach choird; %d of my latest steps are not yet saved on the host "+
			"and would be lost if I crashed now.", head-acked))
	}
}

// outage logs the heartbeat's failures once per change of state (out of
// reach, or answering with errors), not once per try, and the recovery
// once.
type outage struct {
	state string // "" while beats succeed
	since time.Time
	tries int
}

func (o *outage) failed(logger *slog.Logger, err error, bound time.Duration) {
	o.tries++
	state := "choird unreachable; retrying with backoff"
	if answered(err) {
		state = "choird refuses heartbeats; retrying with backoff"
	}
	if o.state == "" {
		o.since = time.Now()
	}
	if state == o.state {
		return
	}
	o.state = state
	logger.Warn(state, slog.String("error", err.Error()), slog.Duration("backoff_max", backoffMax),
		slog.Duration("stop_after", bound))
}

func (o *outage) over(logger *slog.Logger) {
	if o.state == "" {
		return
	}
	logger.Info("heartbeat acknowledged again", slog.Duration("after", time.Since(o.since).Round(time.Millisecond)),
		slog.Int("failed_tries", o.tries))
	*o = outage{}
}

// durable waits until the log is acknowledged through rev, retrying while
// choird is unreachable, restarting or busy, until ctx ends or choird
// refuses for good (a revoked lease). A tool's intent waits here before
// the tool may act.
func (h *heartbeat) durable(ctx context.Context, rev int64) error {
	backoff := time.Duration(0)
	for attempt := 1; ; attempt++ {
		err := h.flushTo(ctx, rev)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !outboundRetryable(err) {
			return err
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
		if attempt == 1 || attempt%20 == 0 {
			h.logger.Warn("a tool call waits for choird to acknowledge its intent", slog.Int64("rev", rev),
				slog.Int("attempt", attempt), slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
	}
}

// flush sends heartbeats until everything committed is acknowledged.
func (h *heartbeat) flush(ctx context.Context) error {
	if err := h.beat(ctx); err != nil {
		return err
	}
	head, _ := h.log.Head()
	return h.flushTo(ctx, head)
}

// flushTo sends heartbeats until the log is acknowledged through rev; at
// once if it already is.
func (h *heartbeat) flushTo(ctx context.Context, rev int64) error {
	for {
		if acked, _ := h.log.Acked(); acked >= rev {
			return nil
		}
		if err := h.beat(ctx); err != nil {
			return err
		}
	}
}
