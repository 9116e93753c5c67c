package ctl

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

func core(name, state string, steps int64, progress string, active bool) admin.CoreJob {
	return admin.CoreJob{Name: name, Active: active,
		LaneStatus: admin.LaneStatus{Lane: "core:" + name, State: state, Steps: steps, Progress: progress}}
}

func TestCoreWatchPrintsEachJobAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	now := time.Unix(1_000_000, 0)
	cw := newCoreWatch(&out, "assistant", 3*time.Second)
	cw.now = func() time.Time { return now }
	look := func(flush bool, cores ...admin.CoreJob) []string {
		out.Reset()
		cw.observe(admin.SessionCoresResult{AgentID: "assistant", SessionID: "s1", Live: true, Cores: cores}, flush)
		return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	}
	steps := []struct {
		name    string
		advance time.Duration
		flush   bool
		cores   []admin.CoreJob
		want    []string
	}{
		{"AJobFinishedBeforeTheChatIsNotShownARunningOneIs", 0, false,
			[]admin.CoreJob{core("old", "CORE_COMPLETED", 4, "", false), core("build", "CORE_REASONING", 1, "parsing", true)},
			[]string{"assistant [progress] Core job build: reasoning, 1 step | Last: parsing"}},
		{"AChangeWithinTheIntervalIsHeld", time.Second, false,
			[]admin.CoreJob{core("old", "CORE_COMPLETED", 4, "", false), core("build", "CORE_REASONING", 2, "linking", true)},
			[]string{""}},
		{"ANewJobIsShownAtOnce", time.Second, false,
			[]admin.CoreJob{core("build", "CORE_REASONING", 3, "testing", true), core("fetch", "CORE_CREATED", 0, "", true)},
			[]string{"assistant [progress] Core job fetch: created"}},
		{"OnceTheIntervalPassedTheLatestIsShown", 1500 * time.Millisecond, false,
			[]admin.CoreJob{core("build", "CORE_REASONING", 4, "packaging", true), core("fetch", "CORE_CREATED", 0, "", true)},
			[]string{"assistant [progress] Core job build: reasoning, 4 steps | Last: packaging"}},
		{"TheFinalStateIsShownAtOnce", 100 * time.Millisecond, false,
			[]admin.CoreJob{core("build", "CORE_COMPLETED", 5, "done", false), core("fetch", "CORE_REASONING", 1, "a\nb", true)},
			[]string{"assistant [progress] Core job build: completed after 5 steps | Last: done"}},
		{"FlushShowsWhatIsHeld", 100 * time.Millisecond, true,
			[]admin.CoreJob{core("build", "CORE_COMPLETED", 5, "done", false), core("fetch", "CORE_REASONING", 1, "a\nb", true)},
			[]string{"assistant [progress] Core job fetch: reasoning, 1 step | Last: a b"}},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		if got := look(s.flush, s.cores...); strings.Join(got, "\n") != strings.Join(s.want, "\n") {
			t.Errorf("%s: printed %q, want %q", s.name, got, s.want)
		}
	}
	// A new session's jobs are new jobs, even finished ones.
	out.Reset()
	cw.observe(admin.SessionCoresResult{SessionID: "s2", Cores: []admin.CoreJob{core("old", "CORE_TERMINATED", 1, "", false)}}, false)
	if got := out.String(); got != "assistant [progress] Core job old: terminated after 1 step\n" {
		t.Errorf("new session: printed %q", got)
	}
}

// chatAgent is the agent of a live session, played by the test: it answers
// the first message pushed to it (the inbox may push it again, since this
// agent commits no event saying it got it) with answer.
type chatAgent struct {
	cl   *client.Client
	home string
	// pushes are the cancel and compact pushes the agent got.
	pushes chan rpc.Push
}

func startChatAgent(t *testing.T, answer func(ctx context.Context, a *chatAgent, text string)) *chatAgent {
	t.Helper()
	c := choirdtest.Start(t, choirdtest.Options{})
	id, token := c.StartSession(t, "assistant")
	cl, err := client.New(client.Options{Socket: c.Socket(), SessionID: id, LeaseToken: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := cl.InitHello(ctx, rpc.InitHelloRequest{AgentID: "assistant", SessionID: id, ImageVersion: "img-1",
		ToolManifestHash: "t1", SkillManifestHash: "s1"}); err != nil {
		t.Fatalf("INIT_HELLO: %v", err)
	}
	a := &chatAgent{cl: cl, home: c.Home, pushes: make(chan rpc.Push, 16)}
	var wg sync.WaitGroup
	var once sync.Once
	wg.Go(func() {
		cl.ReceivePushes(ctx, func(p rpc.Push) { //nolint:errcheck // ends with ctx
			switch {
			case p.Kind == rpc.PushUserMessage && p.UserMessage != nil:
				once.Do(func() { wg.Go(func() { answer(ctx, a, p.UserMessage.Text) }) })
			case p.Kind == rpc.PushCancel || p.Kind == rpc.PushCompact:
				a.pushes <- p
			}
		})
	})
	t.Cleanup(func() { cancel(); wg.Wait(); cl.Close() })
	return a
}

// push waits for the next cancel or compact push.
func (a *chatAgent) push(t *testing.T) rpc.Push {
	t.Helper()
	select {
	case p := <-a.pushes:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no push reached the agent")
		return rpc.Push{}
	}
}

func (a *chatAgent) report(ctx context.Context, job, state string, steps int64, progress string) error {
	left := 50 - steps
	_, err := a.cl.ReportStatus(ctx, rpc.ReportStatusRequest{Lane: "core:" + job, State: state, Steps: steps,
		Progress: progress, BudgetRemaining: wire.Budget{Steps: &left}})
	return err
}

// TestChatShowsCoreProgress runs choirctl chat -m against a real choird
// whose agent runs a core job of 40 steps before it answers.
func TestChatShowsCoreProgress(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	var burstNS atomic.Int64
	a := startChatAgent(t, func(ctx context.Context, a *chatAgent, text string) {
		start := time.Now()
		for i := range int64(40) {
			if err := a.report(ctx, "research", "CORE_REASONING", i, fmt.Sprintf("read source %d", i)); err != nil {
				t.Errorf("REPORT_STATUS: %v", err)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := a.report(ctx, "research", "CORE_COMPLETED", 40, "found the answer"); err != nil {
			t.Errorf("REPORT_STATUS: %v", err)
		}
		burstNS.Store(int64(time.Since(start)))
		if _, err := a.cl.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: "answer-1", Kind: rpc.OutboundText,
			Text: "the answer to " + text}); err != nil {
			t.Errorf("SEND_OUTBOUND: %v", err)
		}
	})
	code, out, errs := runSessionCommands(a.home, "chat", "assistant", "-m", "the question", "--quiet", "300ms",
		"--progress-interval", interval.String())
	if code != ExitOK {
		t.Fatalf("exit %d: %s%s", code, out, errs)
	}
	burst := time.Duration(burstNS.Load())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var progress []string
	for _, l := range lines {
		if strings.HasPrefix(l, "assistant [progress] Core job research: ") {
			progress = append(progress, l)
		}
	}
	if len(progress) == 0 || progress[len(progress)-1] !=
		"assistant [progress] Core job research: completed after 40 steps | Last: found the answer | Budget left: 10 steps" {
		t.Fatalf("progress lines = %q", progress)
	}
	if !strings.Contains(out, "assistant: the answer to the question\n") {
		t.Errorf("no answer in %q", out)
	}
	// 41 reports, at most one line per interval, give or take the
	// polling at either end, and the final one.
	if limit := int(burst/interval) + 3; len(progress) > limit {
		t.Errorf("%d progress lines for %s of reports, over %d at one per %s:\n%s", len(progress), burst, limit, interval,
			strings.Join(progress, "\n"))
	}
	t.Logf("41 reports in %s: %d lines", burst, len(progress))
}
