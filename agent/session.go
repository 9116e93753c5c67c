package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/agent/netout"
	"github.com/choirhq/choir/agent/sandbox"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/email"
	"github.com/choirhq/choir/agent/tool/mcp"
	"github.com/choirhq/choir/agent/tool/offer"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/logjson"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/egress"
)

// session is one session of the agent, in the phases Run drives it
// through: open (connect, INIT_HELLO, secrets, configuration), restore
// (the commit log from choird's replica, the lanes, the working-memory
// snapshot), run (the lanes, the heartbeat and the push stream until a
// stop is asked for), and stop (a safe point, the session summary and a
// final heartbeat, spec 17.2). dispatch hands each push to its handler.
type session struct {
	opts   Options
	logger *slog.Logger
	client *client.Client
	hello  rpc.InitHelloResponse
	tools  *tool.Registry
	// mcp are the agent's running MCP servers (tools.go).
	mcp    *mcp.Set
	skills *skill.Set
	// egress is the way out through choird's gateway; nil without one.
	egress *netout.Dialer
	// toolProxy is the address of the tools' loopback proxy to the
	// gateway; empty without one.
	toolProxy string

	secrets *secretStore
	// decisions are the approval outcomes choird pushed, for the tools
	// that act on an approval themselves (choir.email.send).
	decisions *email.Decisions
	// meter counts the session's spend and enforces the agent's caps.
	meter *meter.Meter
	// dyn is the dynamic configuration, swapped whole: an in-flight call
	// keeps its snapshot.
	dyn           atomic.Pointer[rpc.DynamicConfig]
	configVersion atomic.Int64

	// Set by restore.
	log    *commitlog.Log
	arb    *arbiter.Arbiter
	edge   *lane.Edge
	jobs   *core.Set
	out    *outbound
	status *statusReporter
	hb     *heartbeat

	// Set by start. Everything runs on contexts of its own, not on Run's:
	// when that ends the agent still stops gracefully, and the lane, the
	// arbiter and the heartbeat are ended one after the other, in the
	// order of spec 17.2.
	stopRun, stopLane context.CancelFunc
	wg                sync.WaitGroup
	edgeDone          chan struct{}
	// budgetSpent says the edge lane ended on a used-up session budget;
	// written before edgeDone closes.
	budgetSpent bool
	shutdown    chan stopRequest
}

// openSession verifies the sandbox, connects to choird, says hello,
// fetches the session's secrets and configuration, and loads the tools and
// skills. The caller closes the session.
func openSession(ctx context.Context, opts Options) (*session, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(logjson.NewHandler(os.Stderr, slog.LevelInfo))
	}
	logger = logger.With(slog.String("source", opts.AgentID), slog.String("session_id", opts.SessionID))
	if opts.Sandboxed {
		if err := sandbox.Check(); err != nil {
			return nil, fmt.Errorf("refusing to run outside a hardened container: %w", err)
		}
		logger.Info("sandbox check passed")
	}
	eg, toolProxy, err := startEgress(ctx, opts, logger)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(client.Options{ControlPlane: opts.ControlPlane, Socket: opts.Socket,
		Endpoint: opts.Endpoint, CACert: opts.CACert, SessionID: opts.SessionID, LeaseToken: opts.LeaseToken, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("connect to choird: %w", err)
	}
	s := &session{opts: opts, logger: logger, client: cl, egress: eg, toolProxy: toolProxy, secrets: &secretStore{}, decisions: email.NewDecisions(),
		shutdown: make(chan stopRequest, 1)}
	s.meter = meter.New(meter.Config{AgentID: opts.AgentID, NotifyFunc: s.notifyUsage, BilledFailureFunc: s.logBilledFailure})
	if err := s.open(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return s, nil
}

// open is openSession's part after the connection: INIT_HELLO, the
// secrets, the configuration, the registries and the git identity.
func (s *session) open(ctx context.Context) error {
	opts := s.opts
	img := imageVersion(opts.ChoirDir)
	hello, err := s.client.InitHello(ctx, rpc.InitHelloRequest{AgentID: opts.AgentID, SessionID: opts.SessionID,
		ImageVersion: img.ImageVersion, ToolManifestHash: img.ToolManifestHash, SkillManifestHash: img.SkillManifestHash})
	if err != nil {
		return fmt.Errorf("hello to choird: %w", err)
	}
	s.hello = hello
	s.logger.Info("session opened", slog.String("status", string(hello.Status)), slog.Int64("acked_rev", hello.AckedRev),
		slog.Int("tail_events", len(hello.TailEvents)), slog.Int64("config_version", hello.ConfigVersion))

	s.secrets.swap(map[string]string{})
	// Through the egress gateway the secrets come with the configuration,
	// whose list choird keeps what only it uses out of (the email
	// account's password, issue 34).
	if s.egress == nil {
		if err := s.fetchSecrets(ctx, hello.ResourceBindings.Secrets); err != nil {
			return fmt.Errorf("fetch secrets: %w", err)
		}
	}
	if err := s.fetchConfig(ctx); err != nil {
		return fmt.Errorf("fetch configuration: %w", err)
	}
	// The tools load once the secrets are here: an MCP server over HTTP
	// needs its own.
	if err := s.loadTools(ctx); err != nil {
		return err
	}
	s.configureGitIdentity()
	return nil
}

// close stops the MCP servers and ends the connection to choird.
func (s *session) close() {
	s.mcp.Close()
	s.client.Close()
}

// fetchSecrets fetches the whole set of names and swaps it in at once,
// never patched.
func (s *session) fetchSecrets(ctx context.Context, names []string) error {
	if len(names) == 0 {
		s.secrets.swap(map[string]string{})
		return nil
	}
	got, err := s.client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: names})
	if err != nil {
		return err
	}
	s.secrets.swap(got.Secrets)
	return nil
}

// fetchConfig fetches the dynamic configuration if choird's is newer, and
// the secrets it names if they changed.
func (s *session) fetchConfig(ctx context.Context) error {
	resp, err := s.client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: s.configVersion.Load()})
	if err != nil {
		return err
	}
	if len(resp.Config) > 0 {
		var d rpc.DynamicConfig
		if err := json.Unmarshal(resp.Config, &d); err != nil {
			return fmt.Errorf("decode dynamic config: %w", err)
		}
		if _, ok := d.Models[d.LLM]; d.LLM != "" && !ok {
			s.logger.Warn("the session's chosen model is not configured; keeping the bound one",
				slog.String("llm", d.LLM))
		}
		// A switch to another provider's model (/model, /voice) brings
		// that provider's secret: fetched before the new configuration
		// is swapped in, so that no call goes out with the new model
		// and without its key.
		if d.Secrets != nil && !slices.Equal(d.Secrets, s.secrets.names()) {
			if err := s.fetchSecrets(ctx, d.Secrets); err != nil {
				return fmt.Errorf("fetch the secrets of the session's resources: %w", err)
			}
			s.logger.Info("secrets fetched for the session's resources", slog.Any("names", d.Secrets))
		}
		s.dyn.Store(&d) // swapped whole: an in-flight call keeps its snapshot
		if d.Usage != nil {
			s.meter.SetBaseline(*d.Usage)
		}
		s.meter.SetCaps(d.Budgets)
	}
	s.configVersion.Store(resp.ConfigVersion)
	return nil
}

// secretNames are the secrets the session may hold now. With choird's
// egress gateway the email account's is not among them: choird's mail
// route uses it, and keeps it (agent/email.go).
func (s *session) secretNames() []string {
	names := s.hello.ResourceBindings.Secrets
	d := s.dyn.Load()
	if d != nil && d.Secrets != nil {
		names = d.Secrets
	}
	if s.egress != nil && d != nil {
		if mail := d.EmailAccounts[s.hello.ResourceBindings.Email].Secret; mail != "" {
			names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == mail })
		}
	}
	return names
}

// model returns the settings of the model the edge calls next.
func (s *session) model() llm.ModelSettings {
	return s.viaGateway(modelSettings(s.dyn.Load(), s.hello.ResourceBindings.Models["llm"], s.secrets.get))
}

// viaGateway sends the calls of m to choird's service route for the
// model when the session goes out through the egress gateway: choird adds
// the key and reserves the call's spend against the agent's and the
// host's caps before the provider sees it (daemon/egress/svc).
func (s *session) viaGateway(m llm.ModelSettings) llm.ModelSettings {
	if s.egress == nil {
		return m
	}
	m.Endpoint, m.APIKey, m.Gateway = egress.ServiceURL("llm", m.Name), "", true
	return m
}

// coreModel returns the settings of the flagship model core jobs call:
// the session's core_llm binding, or its LLM when it names none. A /model
// switch is the edge's and leaves it alone.
func (s *session) coreModel() llm.ModelSettings {
	b := s.hello.ResourceBindings.Models
	name := b["core_llm"]
	if _, ok := s.dyn.Load().Models[name]; !ok {
		name = b["llm"]
	}
	m := s.dyn.Load().Models[name]
	key, _ := s.secrets.get(m.Secret)
	return s.viaGateway(llm.ModelSettingsFromConfig(name, m, key))
}

// configureGitIdentity sets up the session's git identity, if it has one:
// its name and email, and the routes through choird's gateway (gitRoutes)
// for the hosts it may push to, in the agent's global git configuration
// (spec 14.4: config, not environment), so that commits from choir.exec
// are attributable and pushes carry the identity's token, which only
// choird holds. A failure is logged, never fatal; an image without git
// skips it.
func (s *session) configureGitIdentity() {
	name := s.hello.ResourceBindings.GitIdentity
	gi, ok := s.dyn.Load().GitIdentities[name]
	if !ok {
		return
	}
	if _, err := exec.LookPath("git"); err != nil {
		s.logger.Warn("git identity not configured: no git in this image", slog.String("error", err.Error()))
		return
	}
	c := gitConfig{name: gi.Name, email: gi.Email, insteadOf: gitRoutes(name, gi, s.toolProxy)}
	if s.toolProxy == "" && gi.Secret != "" {
		s.logger.Warn("no egress gateway: git pushes and fetches get no credentials")
	}
	if err := c.write(os.Getenv("HOME")); err != nil {
		s.logger.Warn("git identity not configured", slog.String("error", err.Error()))
		return
	}
	s.logger.Info("git identity configured", slog.String("git_identity", name), slog.Int("routed_hosts", len(c.insteadOf)))
}

// restore rebuilds the commit log from choird's replica and builds the
// arbiter and the edge lane on it, restoring the lane's working state from
// the snapshot when there is one.
func (s *session) restore() error {
	// A resumed session continues the acknowledged chain; the tail, which
	// choird starts at the lowest window boundary of the snapshot's lanes,
	// is kept in memory so the lanes' windows survive.
	log, app, err := commitlog.NewWithHistory(s.hello.AckedRev, s.hello.AckedHash, s.hello.TailEvents)
	if err != nil {
		return fmt.Errorf("rebuild from choird's replica: %w", err)
	}
	s.log = log
	s.arb = arbiter.New(arbiter.Config{Appender: app, Tools: s.tools, Locks: lock.New(), Logger: s.logger,
		Env: tool.Env{Workspace: s.opts.Workspace, SecretFunc: s.secret}, Secrets: s.secrets.all,
		Host: hostExecutor{client: s.client, log: log}, Approvals: approver{client: s.client},
		// While any core job runs the edge is limited to read-only tools
		// (spec 7.2); the edge is set before the arbiter sees a proposal.
		EdgeRestricted: func() bool { return s.edge.CoresRunning() }, UsageFunc: s.meter.Record,
		// A call that may act runs once choird holds its intent; the
		// heartbeat is made before any lane proposes.
		Durable: func(ctx context.Context, rev int64) error { return s.hb.durable(ctx, rev) },
		Fault:   s.opts.Fault, Untrusted: s.untrustedInput})
	s.out = &outbound{client: s.client, logger: s.logger}
	s.status = &statusReporter{client: s.client, logger: s.logger, kick: make(chan struct{}, 1), sources: s.arb.LaneSources}
	inj := offer.NewInjector(s.tools, offer.InjectorConfig{Mode: offer.Mode(s.dyn.Load().ToolMode), Search: s.toolSearch})
	s.edge = lane.NewEdge(lane.EdgeConfig{Arbiter: s.arb, Log: log, Tools: s.tools, Skills: s.skills, LLM: &llm.Client{Gate: s.meter},
		Injector: inj, FlushFunc: s.out.flushTo,
		Model: s.model, Out: s.out, Logger: s.logger, StatusFunc: s.status.changed,
		Budgets:                    edgeBudgets(s.dyn.Load().Budgets),
		RateLimitDelay:             time.Duration(s.dyn.Load().RateLimitRetryMS) * time.Millisecond,
		CompactionThresholdPercent: func() int { return s.dyn.Load().CompactionThresholdPercent },
		Identity: lane.Identity{Instructions: edgeInstructions, User: readIdentity(s.opts.ChoirDir, "USER.md"),
			Soul: readIdentity(s.opts.ChoirDir, "SOUL.md")},
		Jobs: func(e *lane.Edge) lane.Jobs {
			s.jobs = core.NewSet(e, core.Config{Arbiter: s.arb, Log: log, Tools: s.tools, Injector: inj, LLM: &llm.Client{Gate: s.meter},
				Model: s.coreModel, Soul: readIdentity(s.opts.ChoirDir, "SOUL-CORE.md"), Out: s.out,
				Budgets:                    jobBudgets(s.dyn.Load().Budgets),
				RateLimitDelay:             time.Duration(s.dyn.Load().RateLimitRetryMS) * time.Millisecond,
				CompactionThresholdPercent: func() int { return s.dyn.Load().CompactionThresholdPercent },
				StatusFunc:                 s.status.changed, Logger: s.logger})
			return s.jobs
		}})
	s.status.edge = s.edge
	s.status.changed() // the first report: choird learns the lane is IDLE
	s.restoreSnapshot()
	if u := s.untrustedInput(); u.Effective() == config.UntrustedAllow {
		s.logger.Warn("untrusted_input is allow: calls of lanes that read web pages, mail or other outside text " +
			"run without a person's approval (issue 30); set it to approve to be asked")
	}
	return nil
}

// untrustedInput is the agent's untrusted-input policy now.
func (s *session) untrustedInput() config.UntrustedInput {
	if d := s.dyn.Load(); d != nil {
		return d.UntrustedInput
	}
	return config.UntrustedInput{}
}

// restoreSnapshot restores the edge lane's working state from the snapshot
// choird returned, if any; an unusable one leaves the lane fresh.
func (s *session) restoreSnapshot() {
	snap := s.hello.Snapshot
	var st workingState
	defer func() {
		// What each lane read survives the restart: the snapshot's sets,
		// and the tail after it folded again.
		if err := s.arb.RestoreProvenance(st.LaneSources); err != nil {
			s.logger.Error("lane sources not restored from the log's tail", slog.String("error", err.Error()))
		}
	}()
	if snap == nil {
		return
	}
	err := json.Unmarshal(snap.State, &st)
	if err == nil && s.hello.ResetBudgets {
		// The snapshot is an earlier session's, and this session has a
		// budget of its own: the conversation goes on, the counters
		// start again.
		st.Edge.ToolCallsUsed, st.Edge.TokensUsed = 0, 0
	}
	if err != nil {
		s.logger.Warn("snapshot unreadable; starting the lane fresh", slog.String("error", err.Error()))
	} else if err := s.edge.Restore(st.Edge); err != nil {
		s.logger.Warn("snapshot not restorable; starting the lane fresh", slog.String("error", err.Error()))
	} else {
		s.jobs.Restore(snap.Rev, st.OpenJobs)
		s.logger.Info("working state restored", slog.Int64("snapshot_rev", snap.Rev), slog.Bool("budgets_reset", s.hello.ResetBudgets),
			slog.Int("tail_events", len(s.hello.TailEvents)), slog.Int("open_jobs", len(st.OpenJobs)))
	}
}

// run starts the session's parts and the push stream, and returns the
// first reason to stop: ctx ended, choird asked, the lease was revoked, or
// the edge lane ended.
func (s *session) run(ctx context.Context) stopRequest {
	runCtx := s.start(ctx)
	s.wg.Go(func() { s.receive(runCtx) })
	req := stopRequest{reason: "context ended"}
	select {
	case <-ctx.Done():
	case req = <-s.shutdown:
	case <-s.edgeDone:
		req.reason = "edge lane ended"
		// Read after edgeDone closed, which happens after the write.
		if s.budgetSpent {
			req.reason, req.budgetSpent = "the session's budget is used up", true
		}
	}
	return req
}

// start runs the arbiter, the status reports, the heartbeat and the edge
// lane, each on a context derived from ctx without its cancellation, and
// returns the context the pushes are to be handled on. stop ends them.
func (s *session) start(ctx context.Context) context.Context {
	base := context.WithoutCancel(ctx)
	runCtx, stopRun := context.WithCancel(base)
	laneCtx, stopLane := context.WithCancel(base)
	s.stopRun, s.stopLane = stopRun, stopLane
	s.wg.Go(func() { s.arb.Run(runCtx) })
	s.wg.Go(func() { s.status.run(runCtx) })
	s.hb = s.newHeartbeat()
	s.out.hb = s.hb
	s.wg.Go(func() { s.hb.run(runCtx) })
	// The lane starts once its outbound can flush the log through the
	// heartbeat: a resumed turn sends at once.
	s.edgeDone = make(chan struct{})
	go func() {
		defer close(s.edgeDone)
		s.reconcile(laneCtx)
		if err := s.edge.Run(laneCtx); err != nil {
			s.logger.Warn("edge lane ended", slog.String("error", err.Error()))
			s.budgetSpent = errors.Is(err, lane.ErrBudgetExceeded)
		}
	}()
	return runCtx
}

// newHeartbeat makes the heartbeat that replicates the session's log.
func (s *session) newHeartbeat() *heartbeat {
	hb := &heartbeat{client: s.client, log: s.log, logger: s.logger, configVersion: &s.configVersion, fetchConfig: s.fetchConfig,
		interval:      func() time.Duration { return time.Duration(s.dyn.Load().HeartbeatIntervalMS) * time.Millisecond },
		snapshotEvery: func() int64 { return int64(s.dyn.Load().SnapshotEveryEvents) },
		state: func() json.RawMessage {
			if !s.edge.Settled() {
				return nil
			}
			b, _ := json.Marshal(workingState{Edge: s.edge.Snapshot(), OpenJobs: s.jobs.Snapshots(),
				LaneSources: s.arb.ProvenanceSnapshot()})
			return b
		},
		warn:        s.out.warn,
		orphanAfter: func() time.Duration { return s.dyn.Load().OrphanAfter(defaultOrphanAfter) },
		revoked: func() {
			s.requestStop(stopRequest{reason: "lease revoked by choird", revoked: true})
		},
		orphaned: func(since time.Duration) {
			s.requestStop(stopRequest{reason: fmt.Sprintf("choird out of reach for %s", since.Round(time.Second)),
				orphaned: true, grace: orphanGrace})
		}}
	hb.lastSnapshot = s.hello.AckedRev
	return hb
}

// requestStop asks run to return; only the first request counts.
func (s *session) requestStop(r stopRequest) {
	select {
	case s.shutdown <- r:
	default:
	}
}

// receive hands choird's pushes to dispatch until ctx ends.
func (s *session) receive(ctx context.Context) {
	err := s.client.ReceivePushes(ctx, func(p rpc.Push) { s.dispatch(ctx, p) })
	if err != nil && ctx.Err() == nil {
		s.logger.Warn("push stream ended", slog.String("error", err.Error()))
	}
}

// dispatch handles one push from choird; ctx bounds the fetches a push
// causes.
func (s *session) dispatch(ctx context.Context, p rpc.Push) {
	switch p.Kind {
	case rpc.PushUserMessage:
		s.onUserMessage(p.UserMessage)
	case rpc.PushInjection:
		s.onInjection(p.Injection)
	case rpc.PushApprovalResolved:
		s.onApprovalResolved(p.ApprovalResolved)
	case rpc.PushCancel:
		s.onCancel(p.Cancel)
	case rpc.PushCompact:
		// /compact and choirctl session compact compact every lane: the
		// edge at its next safe point, each running core job beside it.
		s.edge.RequestCompaction()
		jobs := s.jobs.Compact()
		s.logger.Info("compaction requested", slog.String("reason", p.Compact.Reason), slog.Int("core_jobs", len(jobs)))
	case rpc.PushConfigChanged:
		s.onConfigChanged(ctx)
	case rpc.PushShutdown:
		s.requestStop(stopRequest{reason: "shutdown requested by choird: " + p.Shutdown.Reason,
			grace: time.Duration(p.Shutdown.GraceMS) * time.Millisecond, afterTurn: p.Shutdown.AfterTurn})
	}
}

// onUserMessage queues a user message for the edge lane; a redelivered
// copy is dropped.
func (s *session) onUserMessage(m *rpc.UserMessage) {
	var files []string
	for _, a := range m.Attachments {
		files = append(files, filepath.Join(".choirtmp", "recv", a.FilePath))
	}
	origin := m.Origin
	srcs := m.Sources
	switch origin {
	case rpc.OriginDM:
		origin = ""
	case rpc.OriginMail:
		if len(srcs) == 0 {
			srcs = []string{"mail"} // a stranger's words, whoever sent them
		}
	}
	err := s.edge.Deliver(lane.UserMessage{Text: m.Text, Attachments: files,
		MessageID: fmt.Sprint(m.InboxID), InboxID: m.InboxID, Origin: origin, Sources: srcs})
	switch {
	case errors.Is(err, lane.ErrDuplicateInbox):
		s.logger.Info("redelivered user message dropped", slog.Int64("inbox_id", m.InboxID))
	case err != nil:
		s.logger.Error("user message dropped", slog.Int64("inbox_id", m.InboxID), slog.String("error", err.Error()))
	}
}

// onInjection queues an instruction for the edge lane's next safe point; a
// redelivered copy is dropped.
func (s *session) onInjection(in *rpc.Injection) {
	err := s.edge.Inject(lane.Injection{InboxID: in.InboxID, Text: in.Text})
	switch {
	case errors.Is(err, lane.ErrDuplicateInbox):
		s.logger.Info("redelivered injection dropped", slog.Int64("inbox_id", in.InboxID))
	case err != nil:
		s.logger.Error("injection dropped", slog.Int64("inbox_id", in.InboxID), slog.String("error", err.Error()))
	}
}

// onApprovalResolved brings an approval's outcome to the edge lane, which
// takes it once and runs an approved gated call at once.
func (s *session) onApprovalResolved(r *rpc.ApprovalResolved) {
	s.decisions.Resolve(r.ApprovalID, r.Status) // choir.email.send acts on its approvals itself
	s.edge.ResolveApproval(lane.ApprovalResolution{ApprovalID: r.ApprovalID, Status: string(r.Status),
		ResolvedBy: r.ResolvedBy, ResolvedAt: r.ResolvedAt, RequestType: r.RequestType, Payload: r.Payload})
	s.logger.Info("approval resolved", slog.String("approval_id", r.ApprovalID), slog.String("status", string(r.Status)))
}

// onCancel cancels the edge lane's turn, a core job, or both and every
// job; each stops at its next safe point.
func (s *session) onCancel(c *rpc.Cancel) {
	reason := c.Reason
	if reason == "" {
		reason = "cancelled by the user"
	}
	switch c.Scope {
	case rpc.CancelEdge:
		running := s.edge.Cancel(string(c.Scope), c.Reason)
		s.logger.Info("cancel requested", slog.String("scope", string(c.Scope)), slog.Bool("turn_running", running))
	case rpc.CancelAll:
		running := s.edge.Cancel(string(c.Scope), c.Reason)
		jobs := s.jobs.CancelAll(reason)
		s.logger.Info("cancel requested", slog.String("scope", string(c.Scope)), slog.Bool("turn_running", running),
			slog.Any("core_jobs", jobs))
	case rpc.CancelCore:
		running := s.jobs.Cancel(c.JobName, reason)
		s.logger.Info("cancel of a core job requested", slog.String("job_name", c.JobName), slog.Bool("running", running))
	}
}

// onConfigChanged fetches the dynamic configuration and the secrets again.
func (s *session) onConfigChanged(ctx context.Context) {
	if err := s.fetchConfig(ctx); err != nil {
		s.logger.Warn("config refresh failed; keeping the current one", slog.String("error", err.Error()))
	}
	// Secrets refresh the same way (choirctl secret apply): the whole set
	// is fetched and swapped in at once, never patched.
	if names := s.secretNames(); len(names) > 0 {
		if err := s.fetchSecrets(ctx, names); err != nil {
			s.logger.Warn("secret refresh failed; keeping the current ones", slog.String("error", err.Error()))
		} else {
			s.logger.Info("secrets refreshed", slog.Int("secrets", len(names)))
		}
	}
}

// stop ends the session as spec 17.2 orders: the edge lane at a safe
// point, the session summary, then everything else, a final heartbeat and
// TERMINATE_SELF. ctx's values carry over; its end does not cut the stop
// short.
func (s *session) stop(ctx context.Context, req stopRequest) error {
	defer s.stopLane()
	base := context.WithoutCancel(ctx)
	if req.grace <= 0 {
		req.grace = defaultGrace
	}
	deadline := time.Now().Add(req.grace)
	s.logger.Info("stopping", slog.String("reason", req.reason), slog.Duration("grace", req.grace))

	// 1. A safe point: the lane finishes the step in flight and stops
	// before the next one. It gets what the grace leaves after the summary
	// and the final heartbeat; past that it is cut off, which loses only
	// the uncommitted step.
	summaryTimeout := summaryTimeout(s.dyn.Load())
	safeWait := max(req.grace-summaryTimeout-finalReserve, req.grace/3)
	if req.afterTurn {
		// The turn in progress finishes first (the day's rollover);
		// one that takes too long is stopped at a safe point below.
		s.edge.StopAfterTurn(req.reason)
		select {
		case <-s.edgeDone:
		case <-time.After(safeWait / 2):
			s.logger.Warn("the turn in progress did not end in time; stopping it at a safe point",
				slog.Duration("waited", safeWait/2))
		}
	}
	s.edge.Stop(req.reason)
	select {
	case <-s.edgeDone:
	case <-time.After(safeWait):
		s.logger.Warn("edge lane did not reach a safe point in time; cutting it off", slog.Duration("waited", safeWait))
		s.stopLane()
		<-s.edgeDone
	}

	// 2. The session summary, bounded by session_summary_timeout_ms and by
	// the grace; skipped on expiry or error.
	switch {
	case req.revoked:
		s.logger.Info("session summary skipped: the lease is revoked")
	case req.orphaned:
		s.logger.Info("session summary skipped: choird is out of reach")
	default:
		s.summarise(base, min(summaryTimeout, time.Until(deadline)-finalReserve))
	}

	// 3. Everything else stops, then everything committed goes out in a
	// final heartbeat before the session is ended.
	s.stopRun()
	s.wg.Wait()
	if req.orphaned {
		return s.stopOrphaned(base)
	}
	final, cancel := context.WithTimeout(base, finalReserve)
	defer cancel()
	if err := s.hb.flush(final); err != nil {
		s.logger.Error("final heartbeat failed; unacknowledged events are lost", slog.String("error", err.Error()))
	}
	if _, err := s.client.TerminateSelf(final, rpc.TerminateSelfRequest{Reason: req.reason, BudgetSpent: req.budgetSpent}); err != nil {
		return fmt.Errorf("terminate session: %w", err)
	}
	return nil
}

// summarise writes the session summary within d, or skips it.
func (s *session) summarise(ctx context.Context, d time.Duration) {
	if d <= 0 {
		s.logger.Warn("session summary skipped: no time left in the grace period")
		return
	}
	sctx, cancel := context.WithTimeout(ctx, d)
	ev, err := s.edge.SessionSummary(sctx)
	cancel()
	switch {
	case errors.Is(err, lane.ErrNothingToSummarise):
		s.logger.Info("session summary skipped: nothing happened in this session")
	case err != nil:
		s.logger.Warn("session summary skipped", slog.String("error", err.Error()), slog.Duration("timeout", d))
	default:
		s.logger.Info("session summary written", slog.Int64("rev", ev.Rev))
	}
}

// ErrOrphaned is Run's error when the agent stopped because choird stayed
// out of reach longer than its session could be adopted.
var ErrOrphaned = errors.New("choird out of reach for longer than the session could be adopted")

// orphanGrace bounds an orphaned agent's stop: the lane's safe point and
// a last try to reach choird. No session summary is written: nothing
// could replicate it.
const orphanGrace = 10 * time.Second

// orphanFlush bounds the last try to reach choird once orphaned.
const orphanFlush = 2 * time.Second

// UnackedDir is where, under the workspace, an orphaned agent keeps the
// events choird never acknowledged: <workspace>/.choirtmp/unacked/<session>.json.
const UnackedDir = ".choirtmp/unacked"

// stopOrphaned ends a session whose choird is gone: one last beat in case
// it is back, then, for what is still unacknowledged, a file in the
// workspace, which outlives the agent and its container. The session
// that resumes this one starts at the acknowledged revision: the events
// in the file are not in its history, though what they record (a tool's
// side effect, an answer) happened. Nothing reads the file back by
// itself; it is there for a person, and for a tool that would.
func (s *session) stopOrphaned(ctx context.Context) error {
	final, cancel := context.WithTimeout(ctx, orphanFlush)
	err := s.hb.flush(final)
	cancel()
	if err == nil {
		s.logger.Info("choird answered the last heartbeat: everything is acknowledged")
		return ErrOrphaned
	}
	p := s.log.Unacked()
	if p.Empty() {
		s.logger.Info("nothing unacknowledged is lost: choird holds the whole log", slog.Int64("acked_rev", p.BaseRev))
		return ErrOrphaned
	}
	types := map[rpc.EventType]int{}
	for _, e := range p.Events {
		types[e.Type]++
	}
	attrs := []any{slog.Int64("acked_rev", p.BaseRev), slog.Int64("head_rev", p.NewRev),
		slog.Int("events", len(p.Events)), slog.Any("event_types", types)}
	path, werr := s.keepUnacked(p)
	if werr != nil {
		s.logger.Error("unacknowledged events are lost: they could not be kept in the workspace; a resumed session "+
			"starts at acked_rev and does not know what they record", append(attrs, slog.String("error", werr.Error()))...)
		return ErrOrphaned
	}
	s.logger.Error("unacknowledged events are not in choird's replica: kept in the workspace; a resumed session "+
		"starts at acked_rev and does not replay them", append(attrs, slog.String("path", path))...)
	return ErrOrphaned
}

// unackedFile is what keepUnacked writes: the chain from the acknowledged
// revision on, hashes included, so that it can be checked against
// choird's replica.
type unackedFile struct {
	AgentID   string          `json:"agent_id"`
	SessionID string          `json:"session_id"`
	Reason    string          `json:"reason"`
	Patch     commitlog.Patch `json:"patch"`
}

func (s *session) keepUnacked(p commitlog.Patch) (string, error) {
	dir := filepath.Join(s.opts.Workspace, filepath.FromSlash(UnackedDir))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("make %s: %w", dir, err)
	}
	b, err := json.Marshal(unackedFile{AgentID: s.opts.AgentID, SessionID: s.opts.SessionID,
		Reason: "choird out of reach for longer than the session could be adopted", Patch: p})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, s.opts.SessionID+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// reconcile decides the calls a crash left between their intent and their
// result before the lanes resume (arbiter.Reconcile), then tells the user
// of the actions in doubt (tellInDoubt).
func (s *session) reconcile(ctx context.Context) {
	doubts, err := s.arb.Reconcile(ctx)
	if err != nil {
		s.logger.Error("interrupted tool calls not all reconciled", slog.String("error", err.Error()))
	}
	if len(doubts) > 0 {
		s.logger.Warn("tool calls in doubt after a restart", slog.Int("calls", len(doubts)))
	}
	for _, n := range inDoubtNotices(s.log) {
		if err := s.out.Send(ctx, n); err != nil {
			s.logger.Error("the user was not told of the actions in doubt", slog.String("error", err.Error()))
		}
	}
}
