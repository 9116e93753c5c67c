package ctl

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/choirhq/choir/rpc/admin"
)

// The live progress of an agent's core jobs in choirctl chat, as the DM's
// progress message shows it (admin.ProgressLines): a line for each change
// of a job, at most one per interval per job. A change that comes sooner is
// held and printed, as the job's latest state, once the interval allows; a
// job's final state is printed at once. The jobs are the lane states choird
// keeps (choirctl session cores), polled.

// defaultProgressInterval matches choird's interval between two edits of a
// job's progress message.
const defaultProgressInterval = 3 * time.Second

// syncWriter serialises the lines of the chat's replies and progress.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// coreWatch prints the progress of one agent's core jobs.
type coreWatch struct {
	w        io.Writer
	agentID  string
	interval time.Duration
	now      func() time.Time

	// primed is set by the first observation: jobs that had finished by
	// then belong to an earlier conversation and are not printed.
	primed  bool
	session string
	jobs    map[string]*watchedJob
}

// watchedJob is what was printed of a job, and when.
type watchedJob struct {
	printed string
	at      time.Time
}

func newCoreWatch(w io.Writer, agentID string, interval time.Duration) *coreWatch {
	return &coreWatch{w: w, agentID: agentID, interval: interval, now: time.Now, jobs: map[string]*watchedJob{}}
}

// observe takes the jobs' latest states and prints the changes that are
// due; with flush, every change, due or not.
func (cw *coreWatch) observe(res admin.SessionCoresResult, flush bool) {
	now := cw.now()
	if res.SessionID != cw.session {
		cw.session, cw.jobs = res.SessionID, map[string]*watchedJob{}
	}
	for _, c := range res.Cores {
		line := admin.ProgressLine(c.Name, c.LaneStatus)
		j := cw.jobs[c.Name]
		if j == nil {
			j = &watchedJob{}
			cw.jobs[c.Name] = j
			if !cw.primed && !c.Active {
				j.printed = line
				continue
			}
		}
		if line == j.printed {
			continue
		}
		if !flush && !admin.CoreDone(c.State) && !j.at.IsZero() && now.Sub(j.at) < cw.interval {
			continue // held: a later look prints the job's latest state
		}
		fmt.Fprintf(cw.w, "%s [progress] %s\n", cw.agentID, line)
		j.printed, j.at = line, now
	}
	cw.primed = true
}

// coreWatcher polls an agent's core jobs in the background.
type coreWatcher struct {
	cw     *coreWatch
	c      *admin.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// startCoreWatch takes the first look at the agent's core jobs at once,
// before the chat sends anything, then keeps watching until stop.
func startCoreWatch(ctx context.Context, c *admin.Client, w io.Writer, agentID string, interval time.Duration) *coreWatcher {
	cw := newCoreWatch(w, agentID, interval)
	ctx, cancel := context.WithCancel(ctx)
	wt := &coreWatcher{cw: cw, c: c, cancel: cancel, done: make(chan struct{})}
	wt.poll(ctx, false)
	// Polled three times an interval, so that a held change is printed
	// soon after the interval allows it.
	every := min(max(interval/3, 50*time.Millisecond), time.Second)
	go func() {
		defer close(wt.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				wt.poll(ctx, false)
			}
		}
	}()
	return wt
}

// poll looks at the jobs once. An agent that has never run has none, and
// a failed look is skipped: the chat goes on, and the next one may work.
func (wt *coreWatcher) poll(ctx context.Context, flush bool) {
	res, err := wt.c.SessionCores(ctx, wt.cw.agentID)
	if err != nil {
		return
	}
	wt.cw.observe(res, flush)
}

// stop ends the watch, printing the latest state of every job with a
// change still held.
func (wt *coreWatcher) stop(ctx context.Context) {
	wt.cancel()
	<-wt.done
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	wt.poll(ctx, true)
}
