package ctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestSessionListAndCompletion lists a live session with its events, and
// completes agent, session and approval ids from the same choird.
func TestSessionListAndCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := choirdtest.Start(t, choirdtest.Options{DatabaseURL: dbtest.NewDatabase(t)})
	sid, _ := c.StartSession(t, "assistant")
	pool := c.OwnPool(t)
	// Two events, chained from the session's base hash (zeros).
	prev := make([]byte, 32)
	for rev := 1; rev <= 2; rev++ {
		h := sha256.Sum256(append(prev, byte(rev)))
		if _, err := pool.Exec(ctx, `INSERT INTO choir_control.session_events (session_id, rev, event_type, lane, hash_prev, hash)
			VALUES ($1, $2, 'user_msg', 'edge', $3, $4)`, sid, rev, prev, h[:]); err != nil {
			t.Fatal(err)
		}
		prev = h[:]
	}
	var approvalID string
	if err := pool.QueryRow(ctx, `INSERT INTO choir_control.pending_approvals (session_id, agent_id, request_id, request_type, expires_at)
		VALUES ($1, 'assistant', 'r1', 'host_exec', now() + interval '1 hour') RETURNING approval_id`, sid).Scan(&approvalID); err != nil {
		t.Fatal(err)
	}

	t.Run("ListShowsTheSessionWithItsEvents", func(t *testing.T) {
		code, out, errs := runSessionCommands(c.Home, "session", "list", "--json")
		var ss []admin.SessionInfo
		if code != ExitOK || json.Unmarshal([]byte(out), &ss) != nil || len(ss) != 1 {
			t.Fatalf("exit %d: %s%s", code, out, errs)
		}
		if s := ss[0]; s.SessionID != sid || s.AgentID != "assistant" || s.Status != "active" || s.Events != 2 || s.EndedAt != nil {
			t.Errorf("session %+v, want %s of assistant, active, 2 events", s, sid)
		}
		code, out, _ = runSessionCommands(c.Home, "session", "list", "--agent", "assistant")
		if code != ExitOK || !strings.Contains(out, "EVENTS") || !strings.Contains(out, sid) {
			t.Errorf("table: exit %d: %s", code, out)
		}
	})
	t.Run("ListFiltersByStatus", func(t *testing.T) {
		code, out, errs := runSessionCommands(c.Home, "session", "list", "--status", "ended", "--json")
		if code != ExitOK || strings.TrimSpace(out) != "[]" {
			t.Errorf("exit %d: %q %s", code, out, errs)
		}
	})
	t.Run("ListRefusesBadFilters", func(t *testing.T) {
		code, _, errs := runSessionCommands(c.Home, "session", "list", "--status", "done")
		if code != ExitUsage || !strings.Contains(errs, `unknown session status "done"`) || !strings.Contains(errs, "crashed") {
			t.Errorf("bad status: exit %d: %s", code, errs)
		}
		code, _, errs = runSessionCommands(c.Home, "session", "list", "--agent", "ghost")
		if code == ExitOK || !strings.Contains(errs, `agent "ghost" is not in config.json`) {
			t.Errorf("unknown agent: exit %d: %s", code, errs)
		}
	})

	complete := func(t *testing.T, home string, args ...string) (string, string) {
		t.Helper()
		code, out, errs := runSessionCommands(home, append([]string{cobra.ShellCompRequestCmd}, args...)...)
		if code != ExitOK {
			t.Fatalf("__complete %v: exit %d: %s", args, code, errs)
		}
		return out, errs
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"AgentIDs", []string{"agent", "start", ""}, "assistant"},
		{"AgentFlag", []string{"session", "list", "--agent", ""}, "assistant"},
		{"SessionIDsOfTheAgent", []string{"memory", "show", "assistant", ""}, sid},
		{"ApprovalIDs", []string{"approval", "approve", ""}, approvalID},
	} {
		t.Run("Completes"+tc.name, func(t *testing.T) {
			out, _ := complete(t, c.Home, tc.args...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if !strings.Contains(out, tc.want+"\n") || lines[len(lines)-1] != ":4" {
				t.Errorf("__complete %v = %q, want %s and :4 (no file completion)", tc.args, out, tc.want)
			}
		})
	}
	t.Run("CompletesNothingQuietlyWithoutChoird", func(t *testing.T) {
		out, errs := complete(t, t.TempDir(), "agent", "start", "")
		if strings.TrimSpace(out) != ":4" || strings.Contains(errs, "choird") || strings.Contains(errs, "Error") {
			t.Errorf("stdout %q, stderr %q: want no completion and no error", out, errs)
		}
	})
}

func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, out, errs := runSessionCommands(t.TempDir(), "completion", sh)
		if code != ExitOK || !strings.Contains(out, "choirctl") || !strings.Contains(out, "__complete") {
			t.Errorf("completion %s: exit %d: %.200s %s", sh, code, out, errs)
		}
	}
}

// TestListingsTakeJSON walks the command tree: every listing or status
// command has --json, and the root's help documents the exit codes.
func TestListingsTakeJSON(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	root := newRootCommand(&globals{stdout: &out, stderr: &out})
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		switch cmd.Name() {
		case "list", "status", "sessions", "history", "show", "diff", "events", "cores", "get", "search":
			if cmd.Flags().Lookup("json") == nil && cmd.InheritedFlags().Lookup("json") == nil {
				t.Errorf("%s has no --json", cmd.CommandPath())
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if code := Run(context.Background(), []string{"--help"}, &out, &out); code != ExitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"Exit codes:", "0  ok", "1  error", "2  bad input"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}
