package inbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// TestRecvClean runs choird's River client with its periodic cleanup of
// .choirtmp/recv (spec 19.5) over a workspace holding received files in
// every state, and one whose recv directory the agent replaced with a
// symbolic link to a host directory: what the agents are done with goes,
// the rest stays, and nothing outside a workspace is touched.
func TestRecvClean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	q := seam.Queries(pool)
	if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: "a", Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	session := func(status string) uuid.UUID {
		h := make([]byte, 32)
		rand.Read(h)
		s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: "a", LeaseTokenHash: h,
			BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE choir_control.sessions SET status = $2,
			ended_at = CASE WHEN $2 IN ('ended', 'crashed') THEN now() END WHERE session_id = $1`, s.SessionID, status); err != nil {
			t.Fatal(err)
		}
		return s.SessionID
	}
	ended, crashed := session("ended"), session("crashed")
	// A session the day's rollover ended: its successor resumes it.
	rolled := session("ended")
	if _, err := pool.Exec(ctx, `UPDATE choir_control.sessions SET successor_due = true WHERE session_id = $1`, rolled); err != nil {
		t.Fatal(err)
	}
	live := session("active")

	ws := t.TempDir()
	recv := filepath.Join(ws, gateway.RecvDir)
	outside := t.TempDir() // a host directory no workspace holds
	if err := os.MkdirAll(recv, 0o755); err != nil {
		t.Fatal(err)
	}
	longAgo := time.Now().Add(-2 * inbox.RecvRetention)
	file := func(dir, name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	update := int64(0)
	// message files name as received (as the gateway stores it), delivered
	// to session (uuid.Nil: not yet) ackAge ago.
	message := func(name string, session uuid.UUID, ackAge time.Duration) {
		update++
		atts, _ := json.Marshal([]gateway.Attachment{{Kind: "document", Path: gateway.RecvDir + "/" + name, Size: 1}})
		var sid any
		var delivered any
		if session != uuid.Nil {
			sid, delivered = session, time.Now().Add(-ackAge)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO choir_control.inbox (gateway, update_id, dm, agent_id, chat_id, user_id,
			kind, attachments, session_id, delivered_at) VALUES ('tg', $1, 'alice', 'a', '1', '1', 'message', $2, $3, $4)`,
			update, atts, sid, delivered); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	gone := map[string]string{
		"ended": file(recv, "ended.pdf", now),          // acknowledged, its session ended
		"old":   file(recv, "live-old.pdf", now),       // acknowledged by a live session two retentions ago
		"stray": file(recv, ".part-abc", longAgo),      // named by no message, old
		"link":  filepath.Join(recv, "link-ended.txt"), // a link in place of an ended session's file
	}
	kept := map[string]string{
		"crashed": file(recv, "crashed.pdf", longAgo),    // its session may be resumed
		"rolled":  file(recv, "rolled.pdf", longAgo),     // its session rolled over: resumed
		"live":    file(recv, "live.pdf", longAgo),       // a live session acknowledged it a minute ago
		"pending": file(recv, "pending.pdf", longAgo),    // not acknowledged yet
		"fresh":   file(recv, "fresh.txt", now),          // named by no message, recent
		"target":  file(outside, "link-target", longAgo), // what the link points at
	}
	if err := os.Symlink(kept["target"], gone["link"]); err != nil {
		t.Fatal(err)
	}
	message("ended.pdf", ended, time.Minute)
	message("live-old.pdf", live, 2*inbox.RecvRetention)
	message("link-ended.txt", ended, time.Minute)
	message("crashed.pdf", crashed, 2*inbox.RecvRetention/3)
	message("rolled.pdf", rolled, time.Minute)
	message("live.pdf", live, time.Minute)
	message("pending.pdf", uuid.Nil, 0)

	// A compromised agent replaced its recv directory with a link to a
	// host directory holding an old file no message names.
	hostile := t.TempDir()
	if err := os.MkdirAll(filepath.Join(hostile, ".choirtmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(hostile, gateway.RecvDir)); err != nil {
		t.Fatal(err)
	}
	kept["host"] = file(outside, "host-secret.json", longAgo)

	logs := &logbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	client, err := jobs.NewClient(jobs.Deps{Pool: pool, Logger: logger, Features: []jobs.Feature{
		&inbox.RecvCleanWorker{Pool: pool, Logger: logger,
			Workspaces: func() map[string]string { return map[string]string{"main": ws, "hostile": hostile} }}}})
	if err != nil {
		t.Fatal(err)
	}
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer client.Stop(ctx)
	// The periodic cleanup runs at start; the deadline only guards a hang.
	timeout := time.After(time.Minute)
	for done := false; !done; {
		select {
		case ev := <-events:
			if ev.Job.Kind != (inbox.RecvCleanArgs{}).Kind() {
				continue
			}
			done = true
			if ev.Kind != river.EventKindJobCompleted {
				t.Errorf("the cleanup failed: %v\n%s", ev.Job.Errors, logs)
			}
		case <-timeout:
			t.Fatalf("no received-file cleanup ran within a minute:\n%s", logs)
		}
	}
	for what, p := range gone {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s file %s was kept (%v)", what, p, err)
		}
	}
	for what, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s file %s was removed: %v", what, p, err)
		}
	}
	for _, want := range []string{"received file removed", "ended.pdf", "its conversation is over", "no message names it",
		"received files not cleaned: refused", "workspace=hostile"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
	if bytes.Contains([]byte(logs.String()), []byte("host-secret.json")) {
		t.Errorf("the cleanup looked outside a workspace:\n%s", logs)
	}
}
