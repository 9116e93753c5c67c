package session_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/sql/seam"
)

func TestStartSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DefaultsAreBoundAndLeasedWithScopedSecrets", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		s, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		row, err := seam.Queries(pool).SessionGetByID(ctx, s.Session.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !rpc.LeaseTokenMatches(s.LeaseToken, row.LeaseTokenHash) {
			t.Error("stored hash does not match the token")
		}
		if s.Bindings.Workspace != "main" || s.Bindings.DM != "console" || s.Bindings.GitIdentity != "dev" {
			t.Errorf("bindings = %+v", s.Bindings)
		}
		if !slices.Equal(s.Bindings.Secrets, []string{"model-key"}) {
			t.Errorf("secrets = %v, want the model's only (the git identity's stays in choird)", s.Bindings.Secrets)
		}
		leases, _ := seam.Queries(pool).LeaseListActive(ctx)
		var got []string
		for _, l := range leases {
			got = append(got, l.ResourceKind+":"+l.ResourceName)
		}
		if want := []string{"browser:assistant", "dm:console", "git_identity:dev", "workspace:main"}; !slices.Equal(got, want) {
			t.Errorf("leases = %v, want %v", got, want)
		}
	})

	t.Run("ConflictNamesTheHolderAndLeavesNothingBehind", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		if _, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process"); err != nil {
			t.Fatal(err)
		}
		// helper defaults to the same workspace; its DM is free.
		_, err := session.CreateSession(ctx, pool, cfg, "helper", admin.StartOverrides{DM: "second"}, 1, "process")
		if !errors.Is(err, session.ErrLeaseConflict) || !strings.Contains(err.Error(), "leased to agent assistant") {
			t.Fatalf("err = %v", err)
		}
		var sessions int
		pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.sessions WHERE agent_id = 'helper'").Scan(&sessions)
		if sessions != 0 {
			t.Errorf("a rejected start left %d session rows", sessions)
		}
		if _, err := session.CreateSession(ctx, pool, cfg, "helper", admin.StartOverrides{DM: "second", Workspace: "other"}, 1, "process"); err != nil {
			t.Fatalf("start with free resources: %v", err)
		}
	})

	t.Run("SecondStartOfARunningAgentIsRejected", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		first, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		_, err = session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{Workspace: "other", DM: "second"}, 1, "process")
		if !errors.Is(err, session.ErrLeaseConflict) || !strings.Contains(err.Error(), first.Session.ID.String()) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("UnknownOverridesAreAllNamed", func(t *testing.T) {
		t.Parallel()
		cfg := choirdtest.TwoAgentsConfig(t)
		_, err := session.ResolveBindings(cfg, "assistant", admin.StartOverrides{Workspace: "nope", LLM: "gpt-9"})
		if !errors.Is(err, session.ErrUnknownResource) || !strings.Contains(err.Error(), "--workspace=nope") ||
			!strings.Contains(err.Error(), "--llm=gpt-9") {
			t.Fatalf("err = %v", err)
		}
		if _, err := session.ResolveBindings(cfg, "ghost", admin.StartOverrides{}); !errors.Is(err, session.ErrUnknownResource) {
			t.Fatalf("unknown agent: %v", err)
		}
	})

	t.Run("EndReleasesLeasesAndTheNextSessionContinuesTheChain", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		first, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		evs := choirdtest.ChainEvents(t, 1, 3, rpc.Genesis)
		if _, err := agentapi.Replicate(ctx, pool, first.Session.ID, choirdtest.Patch(evs, 0, rpc.Genesis)); err != nil {
			t.Fatal(err)
		}
		if ok, err := session.EndSession(ctx, pool, nil, first.Session.ID, "ended", "stopped by test"); err != nil || !ok {
			t.Fatalf("end: %v %v", ok, err)
		}
		if ok, _ := session.EndSession(ctx, pool, nil, first.Session.ID, "ended", "again"); ok {
			t.Error("ending an ended session reported success")
		}
		if _, err := agentapi.NewSessionAuth(pool).Authenticate(ctx, first.Session.ID.String(), first.LeaseToken); !errors.Is(err, wire.ErrUnauthenticated) {
			t.Errorf("token of an ended session still authenticates: %v", err)
		}
		second, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatalf("restart: %v", err)
		}
		if second.Session.BaseRev != 3 || *second.Session.ResumedFrom != first.Session.ID {
			t.Fatalf("second session base %d from %v", second.Session.BaseRev, second.Session.ResumedFrom)
		}
		more := choirdtest.ChainEvents(t, 4, 5, evs[2].Hash)
		if resp, err := agentapi.Replicate(ctx, pool, second.Session.ID, choirdtest.Patch(more, 3, evs[2].Hash)); err != nil || resp.AckRev != 5 {
			t.Fatalf("continue chain: %+v %v", resp, err)
		}
	})

	t.Run("AuthenticateAcceptsOnlyTheRightTokenOfALiveSession", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		s, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		auth := agentapi.NewSessionAuth(pool)
		got, err := auth.Authenticate(ctx, s.Session.ID.String(), s.LeaseToken)
		if err != nil || got.AgentID != "assistant" {
			t.Fatalf("right token: %+v %v", got, err)
		}
		other, _ := rpc.NewLeaseToken()
		for name, c := range map[string][2]string{
			"WrongToken":    {s.Session.ID.String(), other},
			"EmptyToken":    {s.Session.ID.String(), ""},
			"BadSessionID":  {"not-a-uuid", s.LeaseToken},
			"NoSuchSession": {"00000000-0000-0000-0000-000000000001", s.LeaseToken},
		} {
			if _, err := auth.Authenticate(ctx, c[0], c[1]); !errors.Is(err, wire.ErrUnauthenticated) {
				t.Errorf("%s: err = %v", name, err)
			}
		}
	})
}

func TestReplayStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	id := choirdtest.NewSession(t, pool, "alpha")
	store := agentapi.ReplayStore{Pool: pool}
	key := rpc.ReplayKey{SessionID: id.String(), RequestID: "req-1"}
	if _, ok, err := store.Load(ctx, key); ok || err != nil {
		t.Fatalf("empty load: %v %v", ok, err)
	}
	first := rpc.ReplayRecord{Verb: "REQUEST_APPROVAL", Digest: [32]byte{1}, Response: []byte(`{"ack_rev":3}`)}
	if err := store.Save(ctx, key, first); err != nil {
		t.Fatal(err)
	}
	if err := store.Save(ctx, key, rpc.ReplayRecord{Verb: "REQUEST_APPROVAL", Digest: [32]byte{2}, ErrCode: "conflict"}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := store.Load(ctx, key)
	if err != nil || !ok || got.Digest != first.Digest || string(got.Response) != `{"ack_rev":3}` {
		t.Fatalf("load = %+v %v %v; want the first record", got, ok, err)
	}
	if err := store.Forget(ctx, id.String()); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := store.Load(ctx, key); ok {
		t.Error("record survived Forget")
	}
}
