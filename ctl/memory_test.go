package ctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/rpc/admin"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDatabase(t)
	pool := dbtest.Connect(t, url)
	// choird's embedding queue starts paused, so the documents written
	// here stay pending, as when nothing works the jobs.
	if _, err := pool.Exec(ctx, `INSERT INTO river_queue (name, created_at, metadata, paused_at, updated_at)
		VALUES ('embed', now(), '{}', now(), now())`); err != nil {
		t.Fatal(err)
	}
	home := ctl.StartChoirdOn(t, url)
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(memory.Options{Pool: pool, Inserter: inserter})
	for _, in := range []string{
		`{"op":"insert","key":"user.theme","text":"The user prefers dark mode"}`,
		`{"op":"insert","key":"ops.backups","text":"Database backups run nightly"}`,
		`{"op":"update","key":"user.theme","text":"The user prefers light mode"}`,
	} {
		if _, err := store.Upsert(ctx, "assistant", json.RawMessage(in)); err != nil {
			t.Fatal(err)
		}
	}
	mem := func(args ...string) result {
		return run(t, append([]string{"--home", home, "memory"}, args...)...)
	}

	t.Run("SearchPrintsScoresAndKeys", func(t *testing.T) {
		r := mem("search", "assistant", "light mode", "--store", "knowledge")
		if r.code != 0 || !strings.Contains(r.stdout, "user.theme") || !strings.Contains(r.stdout, "1 results (hybrid search)") {
			t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = mem("search", "assistant", "backups", "--store", "knowledge", "--mode", "text", "--json")
		var res admin.MemoryQueryResult
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Count != 1 || *res.Documents[0].Key != "ops.backups" {
			t.Errorf("json: %v %+v %s", err, res, r.stderr)
		}
	})

	t.Run("ShowAndHistory", func(t *testing.T) {
		r := mem("show", "assistant", "user.theme")
		if r.code != 0 || !strings.Contains(r.stdout, "version:    2") || !strings.Contains(r.stdout, "light mode") {
			t.Errorf("show: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = mem("history", "assistant", "user.theme", "--json")
		var vs []admin.MemoryKnowledgeVersion
		if err := json.Unmarshal([]byte(r.stdout), &vs); err != nil || len(vs) != 2 || vs[1].Text != "The user prefers dark mode" {
			t.Errorf("history: %v %+v", err, vs)
		}
	})

	t.Run("DeleteThenRestore", func(t *testing.T) {
		r := mem("delete", "assistant", "user.theme")
		if r.code != 0 || !strings.Contains(r.stdout, "undo with: choirctl memory restore assistant") {
			t.Fatalf("delete: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = mem("history", "assistant", "user.theme", "--json")
		var vs []admin.MemoryKnowledgeVersion
		json.Unmarshal([]byte(r.stdout), &vs)
		if len(vs) != 3 || vs[0].Op != "delete" || vs[0].Actor != "operator" {
			t.Fatalf("history after delete: %+v", vs)
		}
		r = mem("restore", "assistant", vs[0].DocumentID.String(), "1")
		if r.code != 0 || !strings.Contains(r.stdout, "as version 4") {
			t.Errorf("restore: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if r = mem("show", "assistant", "user.theme"); !strings.Contains(r.stdout, "dark mode") {
			t.Errorf("after restore: %s", r.stdout)
		}
	})

	t.Run("StatusAndReembed", func(t *testing.T) {
		r := mem("status")
		if r.code != 0 || !strings.Contains(r.stdout, "offline lexical embedder") ||
			!strings.Contains(r.stdout, "documents waiting for vectors: 2") {
			t.Errorf("status: %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		r = mem("reembed", "--json")
		var rs []admin.MemoryReembedResult
		if err := json.Unmarshal([]byte(r.stdout), &rs); err != nil || len(rs) != 1 || rs[0].Knowledge != 2 || rs[0].Jobs != 1 {
			t.Errorf("reembed: %v %+v %s", err, rs, r.stderr)
		}
		var jobs int
		pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'memory_embed'").Scan(&jobs)
		if jobs != 5 {
			t.Errorf("%d embedding jobs, want 3 from writes, 1 from restore and 1 from reembed", jobs)
		}
	})

	t.Run("SessionsOfAnAgentWithoutAny", func(t *testing.T) {
		r := mem("sessions", "assistant", "--json")
		if r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
			t.Errorf("sessions: %d %q %s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("BadInputExitsWithUsageCode", func(t *testing.T) {
		for _, args := range [][]string{
			{"search", "nobody", "x"},
			{"search", "assistant", "x", "--store", "files"},
			{"restore", "assistant", "not-a-uuid", "1"},
			{"delete", "assistant", "x", "--session"},
			{"status", "--database-url", "postgres://elsewhere/choir"},
		} {
			if r := mem(args...); r.code != 2 {
				t.Errorf("%v: exit %d, want 2: %s", args, r.code, r.stderr)
			}
		}
		r := mem("show", "assistant", "no.such.key")
		if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("%q", "no.such.key")) {
			t.Errorf("show missing: %d %s", r.code, r.stderr)
		}
	})
}

// TestMemoryReembedAfterADimensionChange is the migration of a change of
// embedding dimensions: choird starts with memory of the old size (search
// falls back to full text meanwhile) and choirctl memory reembed, through
// it, retypes the vectors to the size choird runs with.
func TestMemoryReembedAfterADimensionChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewDatabase(t)
	pool := dbtest.Connect(t, url)
	// The agent's memory was made by an embedder of 16 dimensions;
	// config.json now says 384.
	if _, err := pool.Exec(ctx, `SELECT choir_control.provision_agent('assistant', 16)`); err != nil {
		t.Fatal(err)
	}
	home := ctl.StartChoirdOn(t, url)
	r := run(t, "--home", home, "memory", "reembed", "--agent", "assistant", "--json")
	var rs []admin.MemoryReembedResult
	if err := json.Unmarshal([]byte(r.stdout), &rs); err != nil || len(rs) != 1 ||
		rs[0].FromDimensions != 16 || rs[0].Dimensions != 384 {
		t.Fatalf("reembed: exit %d %v %+v %s", r.code, err, rs, r.stderr)
	}
	var dims int
	if err := pool.QueryRow(ctx, `SELECT dimensions FROM choir_control.agent_schemas WHERE agent_id = 'assistant'`).Scan(&dims); err != nil || dims != 384 {
		t.Fatalf("schema dimensions after reembed: %d %v, want 384", dims, err)
	}
}
