package e2e

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestReceivedFileRemovedAfterItsSession sends the agent a file in a DM,
// under each runtime: it is stored in .choirtmp/recv and handed to the
// agent; a cleanup run while the session goes on keeps it, and the first
// one after the session ended with a stop removes it (spec 19.5). The
// test queues the runs itself instead of waiting ten minutes for them.
func TestReceivedFileRemovedAfterItsSession(t *testing.T) {
	t.Parallel()
	for _, rt := range []string{"process", "docker"} {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			receivedFileRemoved(t, rt)
		})
	}
}

func receivedFileRemoved(t *testing.T, runtime string) {
	ctx := context.Background()
	llm := llmtest.NewServer(t,
		llmtest.Text("Got your file.").Expect(func(t testing.TB, r *llmtest.Request) {
			if !strings.Contains(r.Last().Content, ".choirtmp/recv/") {
				t.Errorf("the model got %q, want the received file's path", r.Last().Content)
			}
		}),
		summaryReply,
	)
	endpoint, image := llm.BaseURL(), ""
	if runtime == "docker" {
		cli := runtimetest.RequireDocker(t)
		bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
		image = runtimetest.ImportImage(t, cli, "choir-agent-recv", map[string]runtimetest.File{
			"choir-agent": {Source: bin, Mode: 0o755}}, `ENTRYPOINT ["/choir-agent"]`)
		u, err := url.Parse(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = proxy(t, net.JoinHostPort(dockerGateway(t), "0"), u.Host)
		endpoint = u.String()
	}
	e := newTGEnv(t, llm, func(c *config.Config) {
		m := c.Models["local"]
		m.Endpoint = endpoint
		c.Models["local"] = m
	})
	e.dumpLogsOnFailure(t, "assistant")
	opts := e.options(t)
	if runtime == "docker" {
		opts.Daemon.Runtime, opts.Daemon.AgentBinary, opts.Daemon.AgentImage = "docker", "", image
	}
	d := choirdtest.Start(t, opts)
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: actorAdmin}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	pool := d.Pool()
	liveSession(t, pool, "assistant")
	update := e.bot.SendFile(userAlice, telegramtest.File{Kind: telegramtest.Document, Name: "notes.txt",
		MIME: "text/plain", Data: []byte("the user's notes\n")})
	waitSentTo(t, e.bot, userAlice, "the reply", containsText("Got your file"))
	waitFor(t, "the inbox row acknowledged", func() bool {
		var delivered bool
		pool.QueryRow(ctx, `SELECT delivered_at IS NOT NULL FROM choir_control.inbox WHERE gateway = $1 AND update_id = $2`,
			gatewayTG, update).Scan(&delivered)
		return delivered
	})
	recv := filepath.Join(e.workspace(), ".choirtmp", "recv")
	files, _ := filepath.Glob(filepath.Join(recv, "*notes.txt"))
	if len(files) != 1 {
		t.Fatalf("received files %v, want the one sent", files)
	}
	runRecvClean(t, pool)
	if _, err := os.Stat(files[0]); err != nil {
		t.Fatalf("a cleanup while the session runs removed the received file: %v", err)
	}
	stopAgent(t, d.Daemon, "assistant")
	d.WaitState(t, "assistant", admin.AgentStopped)
	runRecvClean(t, pool)
	if _, err := os.Stat(files[0]); !os.IsNotExist(err) {
		t.Fatalf("the received file is still there after its session ended and a cleanup ran: %v", err)
	}
	if !strings.Contains(e.choirdLog(), "received file removed") {
		t.Error("choird's log has no line about the removed file")
	}
	llm.Done()
}

// runRecvClean queues one run of choird's received-file cleanup, as its
// periodic schedule does, and waits until it has completed.
func runRecvClean(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := inserter.Insert(context.Background(), inbox.RecvCleanArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var state string
	waitFor(t, "the cleanup run", func() bool {
		pool.QueryRow(context.Background(), "SELECT state FROM river_job WHERE id = $1", res.Job.ID).Scan(&state)
		return state == "completed" || state == "discarded" || state == "cancelled"
	})
	if state != "completed" {
		t.Fatalf("the cleanup run ended %s", state)
	}
}
