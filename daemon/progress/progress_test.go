package progress_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// The Telegram side of the progress tests: one bot, and the agent's DM on
// it.
const (
	progressToken = "4343:progress-token"
	progressUser  = int64(4301)
	// progressInterval is the shortest time between two changes of a
	// job's message, short for the tests' sake.
	progressInterval = 300 * time.Millisecond
)

// progressBundle is a choird whose agent "assistant" talks on a Telegram DM
// of the fake Bot API, with a live session played by the test.
type progressBundle struct {
	c   *choirdtest.Choird
	tg  *telegramtest.Server
	bot *telegramtest.Bot
	cl  *client.Client
	// sessionID and token are the live session's.
	sessionID, token string
}

func progressOptions(tg *telegramtest.Server) choirdtest.Options {
	return choirdtest.Options{
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			cfg.Gateways["tg"] = config.Gateway{Type: config.GatewayTelegram, Secret: "tg-token"}
			secrets["tg-token"] = progressToken
			cfg.DMs["alice"] = config.DM{Gateway: "tg", UserID: strconv.FormatInt(progressUser, 10)}
			a := cfg.Agents["assistant"]
			a.Defaults.DM = "alice"
			cfg.Agents["assistant"] = a
			// The session must outlive the tests' pauses and choird's
			// restart without heartbeats.
			cfg.CrashDetectionThresholdMS = 300_000
		},
		Daemon: daemon.Options{TelegramAPIURL: tg.URL(), ProgressInterval: progressInterval},
	}
}

func setupProgress(t *testing.T) *progressBundle {
	t.Helper()
	tg := telegramtest.NewServer(t)
	b := &progressBundle{tg: tg, bot: tg.AddBot(progressToken, "choir_progress_bot")}
	b.c = choirdtest.Start(t, progressOptions(tg))
	b.startSession(t)
	return b
}

// startSession opens a live session of assistant and says hello in it.
func (b *progressBundle) startSession(t *testing.T) {
	t.Helper()
	b.sessionID, b.token = b.c.StartSession(t, "assistant")
	cl, err := client.New(client.Options{Socket: b.c.Socket(), SessionID: b.sessionID, LeaseToken: b.token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := cl.InitHello(t.Context(), rpc.InitHelloRequest{AgentID: "assistant", SessionID: b.sessionID,
		ImageVersion: "img-1", ToolManifestHash: "t1", SkillManifestHash: "s1"}); err != nil {
		t.Fatalf("INIT_HELLO: %v", err)
	}
	b.cl = cl
}

func (b *progressBundle) report(t *testing.T, job, state string, steps int64, progress string) {
	t.Helper()
	left, calls := 100-steps, int64(200)
	if _, err := b.cl.ReportStatus(t.Context(), rpc.ReportStatusRequest{Lane: "core:" + job, State: state, Steps: steps,
		Progress: progress, BudgetRemaining: wire.Budget{Steps: &left, ToolCalls: &calls}}); err != nil {
		t.Fatalf("REPORT_STATUS %s %s: %v", job, state, err)
	}
}

// jobMessages returns the messages sent for job's progress, in order.
func (b *progressBundle) jobMessages(job string) []telegramtest.Message {
	var out []telegramtest.Message
	for _, m := range b.bot.SentTo(progressUser) {
		if strings.HasPrefix(m.Text, "Core job "+job+":") {
			out = append(out, m)
		}
	}
	return out
}

// waitText waits until job's only progress message reads want (a part
// of it), and returns the message.
func (b *progressBundle) waitText(t *testing.T, job, want string) telegramtest.Message {
	t.Helper()
	var msg telegramtest.Message
	choirdtest.WaitFor(t, fmt.Sprintf("core job %s's message to show %q", job, want), b.c.Logs, func() bool {
		ms := b.jobMessages(job)
		if len(ms) == 0 {
			return false
		}
		msg = ms[len(ms)-1]
		text, _ := b.bot.MessageText(progressUser, msg.MessageID)
		return strings.Contains(text, want)
	})
	return msg
}

// changesOf returns when the message was sent and when it was edited.
func (b *progressBundle) changesOf(msg telegramtest.Message) []time.Time {
	at := []time.Time{msg.At}
	for _, e := range b.bot.TextEdits() {
		if e.MessageID == msg.MessageID {
			at = append(at, e.At)
		}
	}
	return at
}

func TestCoreProgressInTheDM(t *testing.T) {
	t.Parallel()
	b := setupProgress(t)

	t.Run("OneMessageEditedInPlaceUnderABurst", func(t *testing.T) {
		start := time.Now()
		for i := range int64(100) {
			b.report(t, "build", "CORE_REASONING", i, fmt.Sprintf("compiled package %d", i))
		}
		b.report(t, "build", "CORE_COMPLETED", 100, "all 100 packages built")
		msg := b.waitText(t, "build", "completed after 100 steps")
		elapsed := time.Since(start)
		if ms := b.jobMessages("build"); len(ms) != 1 {
			t.Fatalf("%d messages for one job, want one edited in place", len(ms))
		}
		text, _ := b.bot.MessageText(progressUser, msg.MessageID)
		want := "Core job build: completed after 100 steps\nLast: all 100 packages built\nBudget left: 0 steps, 200 tool calls"
		if text != want {
			t.Errorf("final text = %q, want %q", text, want)
		}
		changes := b.changesOf(msg)
		// One change per interval at most, and the final one: 101
		// reports must not become 101 edits.
		if limit := int(elapsed/progressInterval) + 2; len(changes) > limit {
			t.Errorf("%d changes in %s, over %d at one per %s", len(changes), elapsed, limit, progressInterval)
		}
		for i := 1; i < len(changes); i++ {
			if gap := changes[i].Sub(changes[i-1]); gap < progressInterval {
				t.Errorf("changes %d and %d only %s apart, under %s", i-1, i, gap, progressInterval)
			}
		}
		t.Logf("101 reports in %s: 1 message, %d edits", elapsed, len(changes)-1)
	})

	t.Run("TwoJobsTwoMessages", func(t *testing.T) {
		for i := range int64(5) {
			b.report(t, "fetch", "CORE_WAITING_TOOL", i, "fetching page "+strconv.FormatInt(i, 10))
			b.report(t, "sum", "CORE_REASONING", i, "summing part "+strconv.FormatInt(i, 10))
		}
		b.report(t, "fetch", "CORE_TERMINATED", 5, "cancelled by the user")
		b.report(t, "sum", "CORE_COMPLETED", 5, "sum is 42")
		fetch := b.waitText(t, "fetch", "terminated after 5 steps\nLast: cancelled by the user")
		sum := b.waitText(t, "sum", "completed after 5 steps\nLast: sum is 42")
		if len(b.jobMessages("fetch")) != 1 || len(b.jobMessages("sum")) != 1 || fetch.MessageID == sum.MessageID {
			t.Errorf("messages: fetch %d, sum %d; want one each", len(b.jobMessages("fetch")), len(b.jobMessages("sum")))
		}
	})

	t.Run("ANewJobOfAFinishedNameGetsItsOwnMessage", func(t *testing.T) {
		b.report(t, "build", "CORE_CREATED", 0, "")
		b.waitText(t, "build", "Core job build: created")
		if ms := b.jobMessages("build"); len(ms) != 2 {
			t.Fatalf("%d messages for build, want the finished one and the new one", len(ms))
		}
		old, _ := b.bot.MessageText(progressUser, b.jobMessages("build")[0].MessageID)
		if !strings.Contains(old, "completed after 100 steps") {
			t.Errorf("the finished job's message changed: %q", old)
		}
	})

	t.Run("TooManyRequestsAreWaitedOut", func(t *testing.T) {
		b.report(t, "pack", "CORE_REASONING", 1, "packing")
		msg := b.waitText(t, "pack", "packing")
		// The gateway honours the first 429 and tries once more; the
		// second is the reporter's to wait out.
		b.bot.TooManyRequests("editMessageText", 2, 1)
		b.report(t, "pack", "CORE_COMPLETED", 2, "packed")
		b.waitText(t, "pack", "completed after 2 steps")
		var limited int
		for _, c := range b.bot.Calls("editMessageText") {
			if c.Status == 429 && c.Params["message_id"] == strconv.FormatInt(msg.MessageID, 10) {
				limited++
			}
		}
		if limited != 2 || len(b.jobMessages("pack")) != 1 {
			t.Errorf("%d edits answered 429, %d messages; want 2 and the one", limited, len(b.jobMessages("pack")))
		}
	})

	t.Run("ADeletedMessageIsSentAgainOnce", func(t *testing.T) {
		b.report(t, "lint", "CORE_REASONING", 1, "first pass")
		first := b.waitText(t, "lint", "first pass")
		b.bot.DeleteMessage(progressUser, first.MessageID)
		b.report(t, "lint", "CORE_REASONING", 2, "second pass")
		b.waitText(t, "lint", "second pass")
		b.report(t, "lint", "CORE_REASONING", 3, "third pass")
		b.waitText(t, "lint", "third pass")
		if ms := b.jobMessages("lint"); len(ms) != 2 {
			t.Errorf("%d messages for lint, want the deleted one and one more", len(ms))
		}
	})
}

// A restarted choird edits the message it sent before the restart, and a
// session resumed in a successor takes over the message of a job that had
// not finished.
func TestCoreProgressAcrossRestarts(t *testing.T) {
	t.Parallel()
	b := setupProgress(t)
	b.report(t, "deploy", "CORE_REASONING", 1, "planning")
	b.waitText(t, "deploy", "planning")

	if err := b.c.Stop(); err != nil {
		t.Fatal(err)
	}
	o := progressOptions(b.tg)
	o.Home, o.DatabaseURL = b.c.Home, b.c.DatabaseURL
	b.c = choirdtest.Start(t, o)
	// The agent outlives choird, as a container does, and reports on.
	b.report(t, "deploy", "CORE_WAITING_TOOL", 2, "uploading")
	b.waitText(t, "deploy", "uploading")
	if ms := b.jobMessages("deploy"); len(ms) != 1 {
		t.Fatalf("%d messages after choird restarted, want the first one edited", len(ms))
	}

	// The session ends mid-job; its successor recovers the job.
	if _, err := b.cl.TerminateSelf(t.Context(), rpc.TerminateSelfRequest{Reason: "test: crash mid-job"}); err != nil {
		t.Fatal(err)
	}
	b.startSession(t)
	b.report(t, "deploy", "CORE_COMPLETED", 3, "deployed")
	b.waitText(t, "deploy", "completed after 3 steps")
	if ms := b.jobMessages("deploy"); len(ms) != 1 {
		t.Errorf("%d messages after the session resumed, want the first one edited", len(ms))
	}
	if n := len(b.bot.Calls("sendMessage")); n != 1 {
		t.Errorf("%d sendMessage calls in all, want 1", n)
	}
}
