package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/adminapi"
	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/docker"
	"github.com/choirhq/choir/daemon/toolsearch"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
)

// Transport settings of the agent protocol (spec 12.2).
const (
	TransportUDS  = "uds"
	TransportHTTP = "http"
)

// AgentSocketPath is the agent protocol's Unix socket under home.
func AgentSocketPath(home string) string { return filepath.Join(home, "socks", "choird.sock") }

// servers runs the agent protocol, the egress gateway, the admin API and
// the web console until ctx ends.
type servers struct {
	wg   sync.WaitGroup
	errs chan error
	// heartbeatPool is closed once the servers have stopped.
	heartbeatPool *pgxpool.Pool
}

// heartbeatPoolConns sizes the pool kept for heartbeats alone: a heartbeat
// is one autocommitted statement of about a millisecond, so a few
// connections carry hundreds of agents, and nothing else (memory searches,
// River's workers, a flood of other calls) can take them.
const heartbeatPoolConns = 4

// startServers listens on the agent protocol's transport, for the egress
// gateway, on the admin socket and, when config.json asks, for the web
// console, and serves them in the background. A socket held by a running choird is an error naming
// its process.
func (d *Daemon) startServers(ctx context.Context, opts Options) (_ *servers, err error) {
	snap := d.Snapshot()
	dsn, err := snap.Config.PostgresDSN(snap.Secrets)
	if err != nil {
		return nil, err
	}
	hbPool, err := choirsql.Connect(ctx, dsn, choirsql.ConnectOptions{Origin: "config.json postgres.host/postgres.port",
		MaxConns: heartbeatPoolConns})
	if err != nil {
		return nil, fmt.Errorf("heartbeat pool: %w", err)
	}
	defer func() {
		if err != nil {
			hbPool.Close()
		}
	}()
	d.browser = newBrowserHost(ctx, d)
	d.api = agentapi.New(agentapi.Options{Pool: d.pool, HeartbeatPool: hbPool, Logger: d.logger, Config: d.Snapshot,
		Jobs: d.river, HostTools: hostTools(d), Typing: d.inbox.Typing(), Progress: d.progress, Proposals: d.proposer,
		Approvals: d.approvals.Registry,
		// Every agent choird starts gets the egress gateway (control.AgentStart).
		UsageBaseline: d.newUsage().Baseline,
		CloseSession:  func(ctx context.Context, id string) { d.closeSession(ctx, id) }, //nolint:errcheck
		HelloDone: func(ctx context.Context, agentID string, id uuid.UUID) {
			d.inbox.RedeliverInbox(ctx, agentID, id, time.Now())
			d.approvals.PushOutcomes(ctx, agentID, id)
		}})
	auth := agentapi.NewSessionAuth(d.pool)
	srv, err := rpc.NewServer(rpc.ServerOptions{Handler: d.api.Handler(), Authenticator: auth,
		Replay: agentapi.ReplayStore{Pool: d.pool}, Limits: opts.AgentLimits, Logger: d.logger.With(slog.String("component", "rpc"))})
	if err != nil {
		return nil, fmt.Errorf("create agent protocol server: %w", err)
	}
	d.rpc = srv
	d.SetRPC(sessionCloser{Server: srv, d: d})
	d.approvals.SetRPC(srv)

	agentLn, err := d.listenAgents(ctx, opts)
	if err != nil {
		return nil, err
	}
	gw, egressLn, err := d.listenEgress(ctx, auth)
	if err != nil {
		agentLn.Close()
		return nil, err
	}

	adminLn, err := admin.Listen(ctx, admin.SocketPath(d.home))
	if err != nil {
		agentLn.Close()
		egressLn.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	// The console is a window onto choird, not part of its work: one that
	// cannot listen (its port taken, its certificate unreadable) is logged
	// and told to choirctl console, and choird serves on without it.
	var logins *login.Store
	consoleProblem := "config.json has no console block"
	if d.console, err = d.listenConsole(ctx); err != nil {
		d.logger.ErrorContext(ctx, "console not served", slog.String("error", err.Error()))
		consoleProblem = err.Error()
	} else if d.console != nil {
		logins = d.console.logins
	}
	mux := admin.NewMux(d.logger.With(slog.String("component", "admin")))
	adminapi.Mount(mux, adminapi.Options{Control: d.Control, Approvals: d.approvals, Chat: d.inbox, Pool: d.pool, Memory: d.memory,
		Version: Version, StartedAt: d.startedAt, Schedules: d.schedules, Usage: d.newUsage(), ConsoleLogins: logins,
		ConsoleProblem: consoleProblem})
	d.logger.InfoContext(ctx, "admin API listening", slog.String("socket", admin.SocketPath(d.home)))

	// One error for each server: the agent protocol, the egress gateway, the
	// admin API and the console.
	s := &servers{errs: make(chan error, 4), heartbeatPool: hbPool}
	s.wg.Go(func() { s.errs <- srv.Serve(ctx, agentLn) })
	s.wg.Go(func() { s.errs <- gw.Serve(ctx, egressLn) })
	s.wg.Go(func() {
		s.errs <- admin.Serve(ctx, adminLn, mux, admin.ServeOptions{Logger: d.logger.With(slog.String("component", "admin"))})
	})
	if c := d.console; c != nil {
		s.wg.Go(func() { s.errs <- c.pages.Serve(ctx, c.ln) })
	}
	return s, nil
}

// listenAgents listens on the agent protocol's transport: the Unix socket,
// or TCP with TLS for HTTP+SSE, which the agents the runtime starts are
// then told to use, with the certificate to trust.
func (d *Daemon) listenAgents(ctx context.Context, opts Options) (net.Listener, error) {
	switch opts.Transport {
	case "", TransportUDS:
		ln, err := rpc.ListenUnix(ctx, AgentSocketPath(d.home))
		if err != nil {
			return nil, fmt.Errorf("agent protocol socket: %w", err)
		}
		d.logger.InfoContext(ctx, "agent protocol listening", slog.String("transport", TransportUDS),
			slog.String("socket", AgentSocketPath(d.home)))
		return ln, nil
	case TransportHTTP:
	default:
		return nil, fmt.Errorf("unknown transport %q: want %s or %s", opts.Transport, TransportUDS, TransportHTTP)
	}
	if d.runtime != nil && d.runtime.Name() == docker.Name {
		// Refused before anything listens: agents in containers could
		// never connect.
		if err := docker.CheckControlAddr(opts.Listen); err != nil {
			return nil, fmt.Errorf("--transport=http with the docker runtime: %w", err)
		}
	}
	files := rpc.TLSFiles{CertFile: opts.TLSCert, KeyFile: opts.TLSKey}
	if files.CertFile == "" {
		host, _, _ := net.SplitHostPort(opts.Listen)
		// The certificate covers the name containers reach the host by.
		var created bool
		var err error
		files, created, err = rpc.EnsureSelfSignedCert(filepath.Join(d.home, "tls"),
			[]string{host, "localhost", "127.0.0.1", runtime.ContainerHostName})
		if err != nil {
			return nil, fmt.Errorf("self-signed certificate: %w", err)
		}
		d.logger.InfoContext(ctx, "using a self-signed certificate", slog.String("cert", files.CertFile), slog.Bool("created", created))
	}
	tlsCfg, err := rpc.ServerTLSConfig(files)
	if err != nil {
		return nil, err
	}
	caCert, err := filepath.Abs(files.CertFile)
	if err != nil {
		return nil, fmt.Errorf("certificate path: %w", err)
	}
	ln, err := rpc.ListenTCP(ctx, opts.Listen, tlsCfg)
	if err != nil {
		return nil, err
	}
	// The address as bound: a port 0 in --listen is known only now.
	d.SetAgentHTTP(ln.Addr().String(), caCert)
	d.logger.InfoContext(ctx, "agent protocol listening", slog.String("transport", TransportHTTP),
		slog.String("address", ln.Addr().String()), slog.String("cert", caCert))
	return ln, nil
}

// hostTools are the tools choird runs for agents: memory, schedules and
// tool search, the browser (choir.send.file is agentapi's own).
func hostTools(d *Daemon) map[string]agentapi.HostTool {
	tools := agentapi.MemoryTools(d.memory)
	maps.Copy(tools, agentapi.ScheduleTools(d.schedules))
	idx := toolsearch.New(d.pool, d.memory, d.logger.With(slog.String("component", "toolsearch")))
	for name, fn := range idx.HostTools(func(err error) error {
		if errors.Is(err, toolsearch.ErrInvalidInput) {
			return fmt.Errorf("%w: %w", wire.ErrBadRequest, err)
		}
		return err
	}) {
		tools[name] = fn
	}
	maps.Copy(tools, agentapi.BrowseTool(d.browser.worker, func(ctx context.Context) (string, error) {
		return d.api.HostCallWorkspace(ctx)
	}))
	return tools
}

// wait blocks until every server has stopped.
func (s *servers) wait() {
	s.wg.Wait()
	close(s.errs)
	s.heartbeatPool.Close()
}
