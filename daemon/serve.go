package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
)

// Transport settings of the agent protocol (spec 12.2).
const (
	TransportUDS  = "uds"
	TransportHTTP = "http"
)

// AgentSocketPath is the agent protocol's Unix socket under home.
func AgentSocketPath(home string) string { return filepath.Join(home, "socks", "choird.sock") }

// servers runs the agent protocol and the admin API until ctx ends.
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

// startServers listens on the agent protocol's transport and on the admin
// socket, and serves both in the background. A socket held by a running
// choird is an error naming its process.
func (d *Daemon) startServers(ctx context.Context, opts Options) (_ *servers, err error) {
	dsn, err := d.cfg.PostgresDSN(d.secrets)
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
	d.api = &agentAPI{pool: d.pool, heartbeatPool: hbPool, logger: d.logger, cfg: d.cfg, secrets: d.secrets, jobs: d.river,
		hostTools: memoryTools(d.memory)}
	srv, err := rpc.NewServer(rpc.ServerOptions{Handler: d.api, Authenticator: newSessionAuth(d.pool),
		Replay: replayStore{d.pool}, Logger: d.logger.With(slog.String("component", "rpc"))})
	if err != nil {
		return nil, fmt.Errorf("create agent protocol server: %w", err)
	}
	d.rpc = srv
	d.api.hostTools[SendFileTool] = d.api.sendFile
	d.api.closeSession = func(ctx context.Context, id string) { srv.CloseSession(ctx, id) } //nolint:errcheck
	d.api.typing = d.typing
	d.api.helloDone = func(ctx context.Context, agentID string, id uuid.UUID) {
		d.redeliverInbox(ctx, agentID, id, time.Now())
		d.pushOutcomes(ctx, agentID, id)
	}

	var agentLn net.Listener
	switch opts.Transport {
	case "", TransportUDS:
		if agentLn, err = rpc.ListenUnix(ctx, AgentSocketPath(d.home)); err != nil {
			return nil, fmt.Errorf("agent protocol socket: %w", err)
		}
		d.logger.InfoContext(ctx, "agent protocol listening", slog.String("transport", TransportUDS),
			slog.String("socket", AgentSocketPath(d.home)))
	case TransportHTTP:
		files := rpc.TLSFiles{CertFile: opts.TLSCert, KeyFile: opts.TLSKey}
		if files.CertFile == "" {
			host, _, _ := net.SplitHostPort(opts.Listen)
			var created bool
			files, created, err = rpc.EnsureSelfSignedCert(filepath.Join(d.home, "tls"), []string{host, "localhost", "127.0.0.1"})
			if err != nil {
				return nil, fmt.Errorf("self-signed certificate: %w", err)
			}
			d.logger.InfoContext(ctx, "using a self-signed certificate", slog.String("cert", files.CertFile), slog.Bool("created", created))
		}
		tlsCfg, err := rpc.ServerTLSConfig(files)
		if err != nil {
			return nil, err
		}
		if agentLn, err = rpc.ListenTCP(ctx, opts.Listen, tlsCfg); err != nil {
			return nil, err
		}
		d.logger.InfoContext(ctx, "agent protocol listening", slog.String("transport", TransportHTTP),
			slog.String("address", agentLn.Addr().String()), slog.String("cert", files.CertFile))
	default:
		return nil, fmt.Errorf("unknown transport %q: want %s or %s", opts.Transport, TransportUDS, TransportHTTP)
	}

	adminLn, err := admin.Listen(ctx, admin.SocketPath(d.home))
	if err != nil {
		agentLn.Close()
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	mux := admin.NewMux(d.logger.With(slog.String("component", "admin")))
	admin.Handle(mux, "GET", admin.PathStatus, func(ctx context.Context, _ admin.Empty) (admin.StatusResponse, error) {
		return d.status(ctx), nil
	})
	d.mountControl(mux)
	d.logger.InfoContext(ctx, "admin API listening", slog.String("socket", admin.SocketPath(d.home)))

	s := &servers{errs: make(chan error, 2), heartbeatPool: hbPool}
	s.wg.Go(func() { s.errs <- srv.Serve(ctx, agentLn) })
	s.wg.Go(func() {
		s.errs <- admin.Serve(ctx, adminLn, mux, admin.ServeOptions{Logger: d.logger.With(slog.String("component", "admin"))})
	})
	return s, nil
}

// wait blocks until both servers have stopped.
func (s *servers) wait() {
	s.wg.Wait()
	close(s.errs)
	s.heartbeatPool.Close()
}

// status answers choirctl status: choird itself, Postgres, and each
// configured agent's state from its latest session.
func (d *Daemon) status(ctx context.Context) admin.StatusResponse {
	cfg, _ := d.config()
	cfgVersion := d.runningConfigVersion()
	resp := admin.StatusResponse{
		Choird: admin.DaemonStatus{Version: Version, PID: os.Getpid(), StartedAt: d.startedAt,
			UptimeMS: time.Since(d.startedAt).Milliseconds()},
		ConfigVersion: cfgVersion,
		Agents:        []admin.AgentStatus{},
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var version string
	if err := d.pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		resp.Postgres = admin.PostgresStatus{Error: fmt.Sprintf("%s: %v", cfg.Postgres.Describe(), err)}
	} else {
		resp.Postgres = admin.PostgresStatus{Reachable: true, ServerVersion: version}
	}
	if resp.Postgres.Reachable && d.memory != nil {
		if ms, err := d.memory.Status(ctx); err == nil {
			m := &admin.MemoryStatus{Pending: ms.Pending, Failed: ms.Failed, LastError: ms.LastError}
			if e := ms.Embedding; e != nil {
				m.Provider, m.Model, m.Dimensions, m.Offline, m.Note = e.Provider, e.Model, e.Dimensions, e.Offline, e.Note
				m.ConsecutiveFailures = e.ConsecutiveFailures
				if m.LastError == "" {
					m.LastError = e.LastError
				}
			}
			resp.Memory = m
		}
	}
	for _, id := range sortedKeys(cfg.Agents) {
		a := admin.AgentStatus{AgentID: id, State: admin.AgentStopped}
		if resp.Postgres.Reachable {
			a = d.agentStatus(ctx, id)
		}
		resp.Agents = append(resp.Agents, a)
	}
	return resp
}

// memoryTools serves choir.memory.query and choir.memory.upsert (spec 11.7)
// from the memory store: reads of any agent's memory, writes to the caller's
// own only, which Postgres enforces through the caller's role.
func memoryTools(store *memory.Store) map[string]HostTool {
	wrap := func(fn func(ctx context.Context, agentID string, in json.RawMessage) (any, error)) HostTool {
		return func(ctx context.Context, agentID string, in json.RawMessage) (json.RawMessage, error) {
			out, err := fn(ctx, agentID, in)
			switch {
			case errors.Is(err, memory.ErrInvalidInput), errors.Is(err, memory.ErrUnknownAgent),
				errors.Is(err, memory.ErrNotFound), errors.Is(err, memory.ErrConflict):
				return nil, codedErr{rpc.ErrBadRequest, err}
			case errors.Is(err, memory.ErrPermission):
				return nil, codedErr{rpc.ErrPermissionDenied, err}
			case errors.Is(err, memory.ErrBusy):
				return nil, codedErr{rpc.ErrUnavailable, err}
			}
			if err != nil {
				return nil, err
			}
			return json.Marshal(out)
		}
	}
	return map[string]HostTool{
		"choir.memory.query": wrap(func(ctx context.Context, agentID string, in json.RawMessage) (any, error) {
			return store.Query(ctx, agentID, in)
		}),
		"choir.memory.upsert": wrap(func(ctx context.Context, agentID string, in json.RawMessage) (any, error) {
			return store.Upsert(ctx, agentID, in)
		}),
	}
}
