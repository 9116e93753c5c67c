package core

import (
	"context"
	"fmt"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc"
)

// This file ties a core job to its working memory (agent/workmem), as
// agent/lane/memory.go does the edge: one Memory per job over the job's
// lane, measured once per step (prompt.go), compacted by itself past the
// threshold or on request, with the user told of every compaction. Nothing
// leaves a job's prompt silently: an event of its lane is in its window
// until a compaction has folded it into its summary.

// newsCompaction is the news kind of a job's compaction notice.
const newsCompaction = "core_compaction"

// newMemory makes the job's working memory. Its window starts at the
// job's core_started: a job that took an earlier job's name does not
// inherit that job's window or summary, which New may have adopted from
// the log.
func (c *Job) newMemory() *workmem.Memory {
	s := c.set
	m := workmem.New(workmem.Config{Lane: c.lane,
		Role: fmt.Sprintf("the core job %s, which carries out one task with tools for the agent's edge lane", c.start.JobName),
		Log:  s.cfg.Log, Commit: s.cfg.Arbiter, LLM: s.cfg.LLM, Model: s.cfg.Model,
		ThresholdPercent: s.cfg.CompactionThresholdPercent, Logger: s.cfg.Logger,
		RenderFunc: func(ev rpc.Event) []llm.Message { return renderCoreEvent(ev, s.cfg.Tools) },
		UsageFunc:  c.spendCompaction, NoticeFunc: c.compacted})
	m.Restore(workmem.ReferenceSummary{}, c.startRev)
	return m
}

// spendCompaction counts a compaction call's tokens against the job's
// and the session's budgets; it is no step.
func (c *Job) spendCompaction(u llm.Usage) {
	n := u.PromptTokens + u.CompletionTokens
	c.mu.Lock()
	c.used.Tokens += n
	c.mu.Unlock()
	c.set.edge.SpendTokens(n)
	c.set.notify()
}

// compacted tells the user, through the edge, that the job's window was
// compacted; the message's ID derives from the committed delta.
func (c *Job) compacted(_ context.Context, n workmem.Notice) {
	what := "messages"
	if n.Folded == 1 {
		what = "message"
	}
	c.set.tell(coreNews{kind: newsCompaction, job: c.start.JobName, ev: n.Event,
		text: fmt.Sprintf("Core job %q: compacted %d earlier %s into its reference summary (rev %d–%d).",
			c.start.JobName, n.Folded, what, n.FromRev, n.ThroughRev)})
}

// compact folds the job's whole window into its summary, beside the job
// (it goes on meanwhile and lays out its next prompt with the summary once
// the compaction is swapped in).
func (c *Job) compact() *workmem.Compaction {
	rev, _ := c.set.cfg.Log.Head()
	tools := c.tools()
	return c.mem.Compact(c.ctx, workmem.EstimateTokens(c.promptHead()...)+workmem.EstimateTools(tools), rev)
}

// Compact compacts the working memory of every running job, as /compact
// and choirctl session compact ask for every lane of the session, and
// returns the compactions started (or queued behind one in flight). A job
// with nothing in its window has nothing to compact, which its
// compaction's Wait reports.
func (s *Set) Compact() map[string]*workmem.Compaction {
	out := map[string]*workmem.Compaction{}
	for _, n := range s.names() {
		if c := s.job(n); c != nil {
			out[n] = c.compact()
		}
	}
	return out
}
