package adminapi

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/choirhq/choir/daemon/modelcheck"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
)

// status answers choirctl status: choird itself, Postgres, and each
// configured agent's state from its latest session.
func (d *API) status(ctx context.Context) (resp admin.StatusResponse) {
	snap := d.Snapshot()
	cfg, cfgVersion := snap.Config, snap.Version
	resp = admin.StatusResponse{
		Choird: admin.DaemonStatus{Version: d.version, PID: os.Getpid(), StartedAt: d.startedAt,
			UptimeMS: time.Since(d.startedAt).Milliseconds()},
		ConfigVersion: cfgVersion,
		Agents:        []admin.AgentStatus{},
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	// The models are asked while the database is.
	models := make(chan []admin.ModelStatus, 1)
	go func() { models <- modelcheck.Probe(ctx, http.DefaultClient, cfg, snap.Secrets) }()
	defer func() {
		resp.Models = <-models
		resp.NoModel = modelcheck.NoneReachable(resp.Models)
	}()
	var version string
	if err := choirsql.Interpreted(d.pool).QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
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
	for _, id := range slices.Sorted(maps.Keys(cfg.Agents)) {
		a := admin.AgentStatus{AgentID: id, State: admin.AgentStopped}
		if resp.Postgres.Reachable {
			a = d.LatestStatus(ctx, id)
		}
		resp.Agents = append(resp.Agents, a)
	}
	return resp
}
