// Package daemon is choird: the host daemon that owns authority over
// Choir's agents. It holds only the wiring of its parts (the control
// layer, the agent protocol, the admin API, the inbox, the DM commands,
// the gateway, the runtime, River) and Run, the ordered start-up of spec
// 6.2 (config, secrets, Postgres, per-agent schemas, connection pool,
// River, runtime, servers, resumed sessions, bots), serving until its
// context ends, and the shutdown in reverse order.
package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"github.com/choirhq/choir/daemon/memory/pipeline"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/daemon/egress/mailroute"
	"github.com/choirhq/choir/daemon/egress/svc"
	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/daemon/logfile"
	"github.com/choirhq/choir/daemon/mailwatch"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/progress"
	"github.com/choirhq/choir/daemon/propose"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/docker"
	"github.com/choirhq/choir/daemon/runtime/process"
	"github.com/choirhq/choir/daemon/schedule"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/daemon/spend"
	"github.com/choirhq/choir/daemon/usage"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/logjson"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Version is choird's version, set at build time.
var Version = "dev"

// Options configure one run of choird.
type Options struct {
	// Home is the .choir.d directory.
	Home string
	// Stderr receives the log lines of .choir.d/logs/choird.log, in
	// LogFormat: "text" (a line a person reads), "json" (as in the file,
	// always JSON), or "auto"/"" (text when Stderr is a terminal).
	Stderr    io.Writer
	LogFormat string
	// Ready, when set, is called once choird is ready to serve.
	Ready func(*Daemon)
	// Transport is the agent protocol's transport: "uds" (default, on
	// .choir.d/socks/choird.sock) or "http" (on Listen, with TLS).
	Transport string
	// Listen is the TCP address for the http transport.
	Listen string
	// TLSCert and TLSKey are the http transport's certificate; when empty,
	// a self-signed one is generated into .choir.d/tls.
	TLSCert, TLSKey string
	// Runtime runs agents: "docker", "process", or "" for none (choird
	// then serves agents started elsewhere, as tests do).
	Runtime string
	// AgentBinary is choir-agent for the process runtime (default: next
	// to choird's own executable).
	AgentBinary string
	// AgentImage overrides the image agents run under docker (default
	// choir-agent-<id>:latest, as agent build tags it).
	AgentImage string
	// TelegramAPIURL is the Bot API server (default
	// https://api.telegram.org); tests point it at a local fake.
	TelegramAPIURL string
	// ServiceTransport sends the egress gateway's service-route calls
	// (models, search, speech, Notion, git remotes) on; nil is the
	// default HTTPS transport. Tests trust their TLS fakes with it.
	ServiceTransport http.RoundTripper
	// OSImage is the operating-system image agent builds start from
	// (Dockerfile.base's CHOIR_OS_IMAGE); empty keeps the Dockerfile's.
	OSImage string
	// ProgressInterval is the shortest time between two changes of a core
	// job's progress message in its DM (default progress.DefaultInterval).
	ProgressInterval time.Duration
	// ProgressSettleAfter and ProgressSettleInterval time the settling of
	// progress messages left behind by a crash (defaults
	// progress.DefaultSettleAfter and progress.DefaultSettleInterval).
	ProgressSettleAfter, ProgressSettleInterval time.Duration
	// AgentLimits bound what each agent session may send over the agent
	// protocol; a zero field takes rpc's default (100 requests/s per
	// session). Benchmarks that beat faster than any agent lift the rate.
	AgentLimits rpc.Limits
	// Clock is choird's clock for the daily session rollover (nil:
	// time.Now); tests move it past a midnight instead of waiting.
	Clock func() time.Time
	// RolloverInterval is how often the rollover looks for sessions due
	// (default session.DefaultRolloverInterval).
	RolloverInterval time.Duration
}

// Daemon is a running choird. Its control layer's commands (AgentStart,
// AgentStop, ModelSet, StartSession, Push and the rest) are choird's.
type Daemon struct {
	*control.Control

	home    string
	logger  *slog.Logger
	logFile *logfile.Writer
	pool    *pgxpool.Pool
	river   *jobs.Client
	api     *agentapi.API
	runtime runtime.Runtime
	opts    Options
	// egressServices serves the egress gateway's /svc/ routes; nil
	// answers them 404.
	egressServices http.Handler
	memory         *memory.Store
	rpc            *rpc.Server
	startedAt      time.Time
	// gateway runs the Telegram bots; nil when none is configured.
	gateway *gateway.Gateway
	// sendLimiter paces everything sent through the bots.
	sendLimiter *gateway.SendLimiter
	// progress shows core jobs' progress live in their DMs.
	progress *progress.Reporter

	// inbox is the DMs' durable ingress; commands their slash commands.
	inbox    *inbox.Inbox
	commands *dmcmd.Commands
	// resends send again, on request, replies choird could not confirm.
	resends *outbox.Resends
	// schedules are the schedules and reminders.
	schedules *schedule.Service
	// browser runs choir.web.browse's browser worker.
	browser *browserHost
	// proposer checks and applies self-evolution proposals.
	proposer *propose.Proposer
	// approvals are the approvals, with the kinds features registered.
	approvals *approval.Service
	// console is the web console; nil when config.json asks for none.
	console *consoleHost
}

// Approvals are choird's approvals.
func (d *Daemon) Approvals() *approval.Service { return d.approvals }

// Schedules are choird's schedules and reminders.
func (d *Daemon) Schedules() *schedule.Service { return d.schedules }

// Pool is choird's Postgres pool.
func (d *Daemon) Pool() *pgxpool.Pool { return d.pool }

// ErrNotMigrated reports a database whose schema is behind this choird.
var ErrNotMigrated = errors.New("database schema is not migrated")

// Run starts choird and blocks until ctx ends, then shuts down in order.
// Every step is logged as JSON to .choir.d/logs/choird.log, and to stderr
// in opts.LogFormat.
func Run(ctx context.Context, opts Options) (err error) {
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	// The threshold is config.json's, once read (open); until then the
	// default applies.
	logFile, err := logfile.Open(filepath.Join(opts.Home, "logs", "choird.log"),
		filepath.Join(opts.Home, "logs", "archive", "choird"), logfile.Options{
			Threshold: config.DefaultLogArchiveThresholdLines,
			ErrorFunc: func(err error) { fmt.Fprintf(opts.Stderr, "choird: %v\n", err) }})
	if err != nil {
		return err
	}
	defer logFile.Close()
	logger := slog.New(slog.NewMultiHandler(
		logjson.NewHandler(logFile, slog.LevelInfo),
		logjson.NewStreamHandler(opts.Stderr, slog.LevelInfo, opts.LogFormat),
	)).With(slog.String("source", "choird"))
	defer func() {
		if err != nil {
			logger.Error("choird failed", slog.String("error", err.Error()))
		}
	}()

	d := &Daemon{home: opts.Home, logger: logger, logFile: logFile, startedAt: time.Now(), opts: opts}
	logger.InfoContext(ctx, "choird starting", slog.String("version", Version), slog.String("home", opts.Home),
		slog.Int("pid", os.Getpid()))
	return d.run(ctx)
}

// run is choird's life once its log is open: the ordered start-up of
// spec 6.2, serving until ctx ends, and the shutdown in reverse order.
func (d *Daemon) run(ctx context.Context) (err error) {
	defer func() {
		if d.pool != nil {
			d.pool.Close()
		}
	}()
	// Steps 1 to 4: config.json, secrets.json, Postgres, agent schemas.
	if err := d.open(ctx); err != nil {
		return err
	}
	d.checkModels(ctx)
	// Step 5, first half, and step 8's: the job queues and the bots.
	embedder, err := d.newJobs(ctx)
	if err != nil {
		return err
	}
	// The runtime is made before anything is closed for resuming, so that
	// a runtime choird cannot reach leaves every session as it was.
	if d.runtime, err = newRuntime(ctx, d.opts, d.logger); err != nil {
		return err
	}
	if d.runtime != nil {
		defer d.runtime.Close()
		d.SetRuntime(d.runtime)
	}
	// Step 7, first: sessions live before the restart are closed before
	// crash detection can see them, and resumed at step 10 (control's
	// resume.go).
	var resumes []control.PendingResume
	if d.runtime != nil {
		if resumes, err = d.CloseLiveSessions(ctx); err != nil {
			return err
		}
		defer func() {
			if err != nil && len(resumes) > 0 {
				d.AbandonResumes(context.WithoutCancel(ctx), resumes, fmt.Errorf("choird failed to start: %w", err))
			}
		}()
	}
	// Steps 5, second half, and 6: River runs; orphans are removed.
	if err := d.startJobs(ctx, embedder); err != nil {
		return err
	}
	// Step 9: accept agents and choirctl.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	srvs, err := d.startServers(serveCtx, d.opts)
	if err != nil {
		d.river.Stop(context.WithoutCancel(ctx)) //nolint:errcheck
		return err
	}
	if d.runtime != nil {
		go d.watchExits(serveCtx)
	}
	// Step 10: the sessions closed at step 7 resume in successors. Before
	// the bots poll, so that a message that waited while choird was down
	// finds its agent back, instead of being told that it is not running.
	d.ResumeSessions(ctx, resumes)
	resumes = nil
	// Step 8, second half: the bots poll, and the inbox sweep redelivers.
	gatewayDone := d.runGateway(serveCtx)
	polling := d.waitPolling(ctx)
	// The mail watcher wakes agents whose leased account says wake.
	mailDone := make(chan struct{})
	go func() {
		defer close(mailDone)
		mailwatch.New(mailwatch.Options{Pool: d.pool, PushFunc: d.inbox.PushPending, Logger: d.logger,
			ConfigFunc: func() (*config.Config, config.Secrets) { s := d.Snapshot(); return s.Config, s.Secrets }}).Run(serveCtx)
	}()

	cfg := d.Snapshot().Config
	d.logger.InfoContext(ctx, "choird ready", slog.Int64("config_version", d.ConfigVersion()),
		slog.Any("agents", sortedKeys(cfg.Agents)), slog.Int("gateways", len(cfg.Gateways)), slog.Any("gateways_polling", polling),
		slog.String("embedding_provider", cfg.Embedding.Provider), slog.Int("embedding_dimensions", cfg.Embedding.Dimensions))
	if d.opts.Ready != nil {
		d.opts.Ready(d)
	}

	<-ctx.Done()
	d.logger.Info("choird stopping", slog.String("cause", context.Cause(ctx).Error()))
	stopServing()
	srvs.wait()
	d.browser.close()
	d.progress.Close()
	<-gatewayDone
	<-mailDone
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.river.Stop(stopCtx); err != nil {
		d.logger.Warn("river did not stop cleanly", slog.String("error", err.Error()))
	}
	d.reportLeftRunning(stopCtx)
	d.logger.Info("choird stopped")
	return nil
}

// open reads and validates config.json and secrets.json (steps 1 and 2),
// connects to Postgres (step 3), provisions every agent's schema (step 4),
// records the config version, and makes the control layer.
func (d *Daemon) open(ctx context.Context) error {
	cfgPath := filepath.Join(d.home, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return fmt.Errorf("read %s: %w (run choirctl init to create it)", cfgPath, err)
	}
	cfg, secrets, rest, err := config.LoadAtRest(d.home)
	if err != nil {
		return err
	}
	d.logger.InfoContext(ctx, "step 1: config.json read and validated", slog.String("path", cfgPath),
		slog.Int("agents", len(cfg.Agents)), slog.Int("workspaces", len(cfg.Workspaces)),
		slog.Int("models", len(cfg.Models)), slog.Int("gateways", len(cfg.Gateways)), slog.Int("dms", len(cfg.DMs)))
	d.logger.InfoContext(ctx, "step 2: secrets.json read and validated",
		slog.String("path", filepath.Join(d.home, "secrets.json")), slog.Int("secrets", len(secrets)),
		slog.Bool("encrypted", rest.Encrypted), slog.String("age_key", rest.Key))
	if !rest.Encrypted {
		d.logger.WarnContext(ctx, config.PlaintextWarning, slog.String("path", filepath.Join(d.home, "secrets.json")))
	}

	// Step 3: Postgres, with credentials from the configured secret.
	dsn, err := cfg.PostgresDSN(secrets)
	if err != nil {
		return err
	}
	const origin = "config.json postgres.host/postgres.port"
	serverVersion, err := checkMigrated(ctx, dsn, origin)
	if err != nil {
		return err
	}
	// pgvector's types are registered on every connection of the pool, which
	// needs the extension: hence the plain connection for the check above.
	d.pool, err = choirsql.Connect(ctx, dsn, choirsql.ConnectOptions{Origin: origin, Vector: true})
	if err != nil {
		return err
	}
	d.logger.InfoContext(ctx, "step 3: connected to Postgres", slog.String("postgres", cfg.Postgres.Describe()),
		slog.String("database", cfg.Postgres.Database), slog.String("server_version", serverVersion))

	// Step 4: one schema and role per configured agent.
	if err := d.provisionAgents(ctx, cfg); err != nil {
		return err
	}
	sum := sha256.Sum256(raw)
	version, err := seam.Queries(d.pool).ConfigVersionRecord(ctx, sum[:])
	if err != nil {
		return fmt.Errorf("record config version: %w", err)
	}
	d.Control = control.New(control.Options{Home: d.home, Logger: d.logger, Pool: d.pool, Config: cfg, Secrets: secrets,
		ConfigVersion: version, AgentBinary: d.opts.AgentBinary, AgentImage: d.opts.AgentImage, OSImage: d.opts.OSImage,
		AgentSocket: AgentSocketPath(d.home), EgressSocket: EgressSocketPath(d.home)})
	// Approvals first: the features whose requests wait for a person
	// register what follows an outcome with them.
	d.approvals = approval.New(d.pool, d.logger)
	d.proposer = propose.New(propose.Options{Pool: d.pool, Home: d.home, Control: d.Control,
		Logger: d.logger.With(slog.String("component", "propose"))})
	propose.RegisterApprovals(d.approvals.Registry)
	egress.RegisterApprovals(d.approvals.Registry)
	d.logFile.SetThreshold(cfg.LogArchiveThreshold())
	d.OnConfigApplied(func(c *config.Config, _ config.Secrets) { d.logFile.SetThreshold(c.LogArchiveThreshold()) })
	return nil
}

// newJobs makes the embedder, the Telegram bots and the River client
// (step 5's first half); nothing runs yet. The bots are made here, because
// the delivery worker sends through them; they poll once choird serves.
func (d *Daemon) newJobs(ctx context.Context) (*embed.Embedder, error) {
	cfg, secrets := d.Snapshot().Config, d.Snapshot().Secrets
	embedder, err := embed.New(cfg.Embedding, secrets, embed.Options{})
	if err != nil {
		return nil, fmt.Errorf("embedding provider: %w", err)
	}
	embedder.SetUsage(cfg.Embedding.PricePerMTok, usage.EmbeddingRecorder(d.pool, d.logger.With(slog.String("component", "usage"))))
	d.OnSecretsApplied(func(_ context.Context, s config.Secrets) error { return embedder.SetSecrets(s) })
	if st := embedder.Status(); st.Offline {
		d.logger.InfoContext(ctx, "embedding: "+embed.OfflineNote, slog.String("embedding_provider", st.Provider),
			slog.String("embedding_model", st.Model), slog.Int("embedding_dimensions", st.Dimensions))
	} else {
		d.logger.InfoContext(ctx, "embedding: OpenAI-compatible provider", slog.String("embedding_provider", st.Provider),
			slog.String("embedding_model", st.Model), slog.Int("embedding_dimensions", st.Dimensions),
			slog.String("embedding_endpoint", st.Endpoint))
	}
	// Step 8, first half: the Telegram bots are made here, because the
	// delivery worker sends through them; they poll once choird serves.
	if err := d.newGateway(d.opts); err != nil {
		return nil, err
	}
	memoryWorkers := pipeline.Workers{Pool: d.pool, Logger: d.logger, Embedder: embedder,
		MidTermSessions: func() int { return d.Snapshot().Config.MidTermSessionCount() }}
	d.schedules = schedule.New(schedule.Options{Pool: d.pool, Config: func() *config.Config { return d.Snapshot().Config },
		Logger: d.logger.With(slog.String("component", "schedule")), DMAddress: d.DMAddress,
		PushPending: d.inbox.PushPending, Starter: d.Control, Approvals: d.approvals.Registry})
	schedule.RegisterApprovals(d.approvals.Registry)
	// The gateway's service routes add the credentials and meter the
	// spend of model, search, speech and Notion calls (daemon/egress/svc).
	ledger := spend.New(spend.Options{Pool: d.pool, Config: func() *config.Config { return d.Snapshot().Config }})
	services := svc.New(svc.Options{Pool: d.pool, Ledger: ledger, Transport: d.opts.ServiceTransport,
		Config: func() (*config.Config, config.Secrets) { s := d.Snapshot(); return s.Config, s.Secrets },
		Logger: d.logger.With(slog.String("component", "egress_svc"))})
	// The mail route sends and reads the agents' mail with the accounts'
	// passwords, which stay in choird (daemon/egress/mailroute).
	mail := mailroute.New(mailroute.Options{Pool: d.pool,
		Config: func() (*config.Config, config.Secrets) { s := d.Snapshot(); return s.Config, s.Secrets },
		Logger: d.logger.With(slog.String("component", "egress_mail"))})
	d.egressServices = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, mailroute.Prefix) {
			mail.ServeHTTP(w, r)
			return
		}
		services.ServeHTTP(w, r)
	})
	// Each feature registers its own job kinds; River only runs them.
	features := []jobs.Feature{
		&spend.ExpireWorker{Ledger: ledger, Logger: d.logger.With(slog.String("component", "spend"))},
		session.CrashDetection{Pool: d.pool, Logger: d.logger, DMAddress: d.DMAddress, RemoveInstance: d.removeInstance,
			Threshold:    func() time.Duration { return d.Snapshot().Config.CrashDetectionThreshold() },
			SessionEnded: memoryWorkers.SessionEndedTx},
		&inbox.RecvCleanWorker{Pool: d.pool, Workspaces: d.WorkspaceDirs, Logger: d.logger.With(slog.String("component", "recv_clean"))},
		d.approvals,
		d.proposer,
		d.schedules,
		outbox.Delivery{Pool: d.pool, Sender: outboundSender{d}, Limiter: d.sendLimiter, Workspaces: d.WorkspaceDirs,
			Logger: d.logger.With(slog.String("component", "delivery"))},
		memoryWorkers,
		d.progress,
	}
	if d.opts.Runtime != "" {
		// Without a runtime choird starts no agent, so it cannot start
		// a session's successor: sessions then last until stopped.
		features = append(features, session.Rollover{Pool: d.pool, Logger: d.logger.With(slog.String("component", "rollover")),
			Now: d.opts.Clock, ZoneFunc: d.dmZone, Interval: d.opts.RolloverInterval, RolloverFunc: d.AgentRollover,
			RestartFunc: d.AgentRolloverStart})
	}
	d.river, err = jobs.NewClient(jobs.Deps{Pool: d.pool, Logger: d.logger, Features: features})
	if err != nil {
		return nil, err
	}
	d.SetJobs(d.river)
	d.approvals.SetJobs(d.river)
	d.resends.SetJobs(d.river)
	d.schedules.SetJobs(d.river)
	return embedder, nil
}

// startJobs starts River and the memory store (step 5), and removes the
// instances a previous run left behind (step 6).
func (d *Daemon) startJobs(ctx context.Context, embedder *embed.Embedder) error {
	if err := d.river.Start(ctx); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	d.memory = memory.New(memory.Options{Pool: d.pool, Inserter: d.river, Embedder: embedder,
		Logger:      d.logger.With(slog.String("component", "memory")),
		ReadersFunc: func(target string) []string { return d.Snapshot().Config.Agents[target].MemoryReadableBy }})
	d.logger.InfoContext(ctx, "step 5: connection pool and job queues running",
		slog.Int("pool_max_conns", int(d.pool.Config().MaxConns)),
		slog.Duration("crash_detection_threshold", d.Snapshot().Config.CrashDetectionThreshold()))

	// Step 6: instances a previous run left behind are removed.
	if d.runtime != nil {
		if err := d.cleanOrphans(ctx); err != nil {
			d.river.Stop(context.WithoutCancel(ctx)) //nolint:errcheck
			return err
		}
	}
	return nil
}

// checkMigrated connects without pgvector's type hook, checks that the
// schema is at the version this binary knows, and returns the server
// version.
func checkMigrated(ctx context.Context, dsn, origin string) (string, error) {
	pool, err := choirsql.Connect(ctx, dsn, choirsql.ConnectOptions{Origin: origin, MaxConns: 2})
	if err != nil {
		return "", err
	}
	defer pool.Close()
	var serverVersion string
	if err := choirsql.Interpreted(pool).QueryRow(ctx, "SHOW server_version").Scan(&serverVersion); err != nil {
		return "", fmt.Errorf("query postgres version: %w", err)
	}
	m, err := choirsql.NewMigrator(pool, nil)
	if err != nil {
		return "", err
	}
	defer m.Close()
	cur, latest, err := m.Version(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: %v; run: choirctl db migrate", ErrNotMigrated, err)
	}
	if cur < latest {
		return "", fmt.Errorf("%w: at version %d of %d; run: choirctl db migrate", ErrNotMigrated, cur, latest)
	}
	if cur > latest {
		return "", fmt.Errorf("database schema version %d is newer than this choird knows (%d): upgrade choird", cur, latest)
	}
	return serverVersion, nil
}

func (d *Daemon) provisionAgents(ctx context.Context, cfg *config.Config) error {
	q := seam.Queries(d.pool)
	for _, id := range sortedKeys(cfg.Agents) {
		// Memory made with other dimensions is re-embedded through choird
		// (choirctl memory reembed), so choird starts with it: its search
		// falls back to full text and its embedding jobs wait meanwhile.
		if cur, err := q.AgentSchemaGet(ctx, id); err == nil && int(cur.Dimensions) != cfg.Embedding.Dimensions {
			d.logger.WarnContext(ctx, "step 4: agent memory holds vectors of other dimensions than embedding.dimensions; "+
				"search uses full text only until you run: choirctl memory reembed --agent "+id,
				slog.String("agent_id", id), slog.String("schema", cur.SchemaName),
				slog.Int("schema_dimensions", int(cur.Dimensions)), slog.Int("dimensions", cfg.Embedding.Dimensions))
			continue
		}
		schema, err := q.AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{
			AgentID: id, Dimensions: int32(cfg.Embedding.Dimensions)})
		if err != nil {
			return fmt.Errorf("provision schema of agent %s: %w", id, err)
		}
		d.logger.InfoContext(ctx, "step 4: agent schema ready", slog.String("agent_id", id),
			slog.String("schema", schema), slog.Int("dimensions", cfg.Embedding.Dimensions))
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// newRuntime makes the agent runtime opts names.
func newRuntime(ctx context.Context, opts Options, logger *slog.Logger) (runtime.Runtime, error) {
	switch opts.Runtime {
	case "":
		return nil, nil
	case "process":
		bin := opts.AgentBinary
		if bin == "" {
			self, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("find choir-agent: %w", err)
			}
			bin = filepath.Join(filepath.Dir(self), "choir-agent")
		}
		rt, err := process.New(process.Options{Binary: bin, StateDir: filepath.Join(opts.Home, "run", "process"),
			LogDir: filepath.Join(opts.Home, "logs"), Logger: logger.With(slog.String("component", "runtime"))})
		if err != nil {
			return nil, fmt.Errorf("process runtime: %w (build it with make build, or pass --agent-binary)", err)
		}
		return rt, nil
	case "docker":
		// One scope per installation, so two choirds never reap each
		// other's containers.
		rt, err := docker.New(ctx, docker.Options{Scope: docker.ScopeFor(opts.Home), Init: true,
			LogDir: filepath.Join(opts.Home, "logs"), Logger: logger.With(slog.String("component", "runtime")),
			Protected: []string{opts.Home}})
		if err != nil {
			return nil, fmt.Errorf("docker runtime: %w", err)
		}
		return rt, nil
	}
	return nil, fmt.Errorf("unknown runtime %q: want docker or process", opts.Runtime)
}

// dmZone is the time zone of DM dm in the running configuration: UTC when
// it names none, or config.json no longer has the DM.
func (d *Daemon) dmZone(dm string) *time.Location {
	loc, err := time.LoadLocation(d.Snapshot().Config.DMs[dm].Zone())
	if err != nil {
		return time.UTC
	}
	return loc
}
