package propose

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// States of a proposal (choir_control.proposals.state).
const (
	StatePending    = "pending"
	StateApplying   = "applying"
	StateApplied    = "applied"
	StateNotApplied = "not_applied"
)

// outcome is what a step did: the next step ("" when the proposal is
// done), what to record, and what the chat is told.
type outcome struct {
	next, state, reason string
	merge, image        string
	version, deployment string
	text                string
}

// stepFailed is a step that cannot succeed by running again: a merge
// conflict, a failed build, a refused config. The proposal is then
// approved, not applied.
type stepFailed struct {
	step string
	err  error
}

func (e *stepFailed) Error() string { return e.step + ": " + e.err.Error() }

func failed(step string, err error) error { return &stepFailed{step: step, err: err} }

// Apply runs one step of an approved proposal (its ApplyWorker).
// The step's outcome, the chat's message and the next step are committed
// with the job's completion; a restart before that commit runs the step
// again, and every step finds what an earlier run of it did.
func (p *Proposer) Apply(ctx context.Context, job *river.Job[ApplyArgs]) error {
	id := job.Args.ApprovalID
	// A step may outlive River's rescue of stuck jobs (an image build
	// takes minutes): a second run of the same proposal waits for the
	// first. One choird runs the jobs, so the guard is in memory, and
	// holds no database connection while a build runs.
	if _, busy := p.running.LoadOrStore(id, struct{}{}); busy {
		return river.JobSnooze(15 * time.Second)
	}
	defer p.running.Delete(id)

	q := seam.Queries(p.o.Pool)
	row, err := q.ApprovalGet(ctx, id)
	if err != nil {
		return fmt.Errorf("load approval %s: %w", id, err)
	}
	a := approval.Of(row)
	if job.Args.Step == StepCleanup {
		// Whatever the decision: the proposal is done with.
		return p.cleanup(ctx, a)
	}
	if a.Status != "approved" {
		// Nothing is ever applied without an approval.
		p.o.Logger.WarnContext(ctx, "proposal step for an approval that is not approved; nothing applied",
			slog.String("approval_id", id.String()), slog.String("status", a.Status))
		return nil
	}
	prop, err := q.ProposalGet(ctx, id)
	if err != nil {
		return fmt.Errorf("load proposal %s: %w", id, err)
	}
	if prop.State == StateApplied || prop.State == StateNotApplied {
		return nil
	}
	out, err := p.step(ctx, a, prop, job.Args.Step)
	var sf *stepFailed
	switch {
	case errors.As(err, &sf):
		effect := "The running agent is unchanged."
		if sf.step == "update" {
			effect = "The image is built, but the agent could not be updated to it; choirctl agent status shows where it stands."
		}
		out = outcome{state: StateNotApplied, reason: sf.Error(),
			text: fmt.Sprintf("Proposal %s (%s): %s failed; approved, not applied. %s\n%s",
				shortID(a), a.AgentID, sf.step, effect, tail(sf.err.Error()))}
	case err != nil:
		return err // transient: River retries the step
	}
	p.o.Logger.InfoContext(ctx, "proposal step done", slog.String("approval_id", id.String()),
		slog.String("agent_id", a.AgentID), slog.String("step", job.Args.Step), slog.String("state", out.state))
	return pgx.BeginFunc(ctx, p.o.Pool, func(tx pgx.Tx) error {
		return p.finishTx(ctx, tx, job, a, out)
	})
}

// finishTx records a step's outcome, tells the chat, queues the next step
// and completes the job, in one transaction.
func (p *Proposer) finishTx(ctx context.Context, tx pgx.Tx, job *river.Job[ApplyArgs], a approval.Approval, out outcome) error {
	q := seam.Queries(tx)
	if err := q.ProposalStep(ctx, db.ProposalStepParams{ApprovalID: a.ID, State: out.state, Step: job.Args.Step,
		Reason: out.reason, MergeCommit: out.merge, Image: out.image, ImageVersion: out.version, Deployment: out.deployment}); err != nil {
		return err
	}
	ins := river.ClientFromContext[pgx.Tx](ctx)
	to := approval.Address{Gateway: outbox.ConsoleGateway, DM: outbox.ConsoleDM, ChatID: outbox.ConsoleChat}
	if req, err := q.OutboxGetByMessageID(ctx, db.OutboxGetByMessageIDParams{AgentID: a.AgentID,
		MessageID: approval.RequestMessageID(a.ID)}); err == nil {
		to = approval.Address{Gateway: req.Gateway, DM: req.Dm, ChatID: req.ChatID}
	} else if !errors.Is(err, choirsql.ErrNotFound) {
		return err
	}
	if _, err := outbox.EnqueueTx(ctx, tx, ins, outbox.Params{AgentID: a.AgentID, SessionID: &a.SessionID,
		MessageID: "approval:" + a.ID.String() + ":step:" + job.Args.Step, Gateway: to.Gateway, DM: to.DM,
		ChatID: to.ChatID, Kind: message.Text, Text: out.text}); err != nil {
		return err
	}
	next := out.next
	if next == "" && a.Type == proposal.TypeRepo {
		next = StepCleanup // applied or not: its workspace clone goes
	}
	if next != "" {
		if _, err := ins.InsertTx(ctx, tx, ApplyArgs{ApprovalID: a.ID, Step: next}, nil); err != nil {
			return err
		}
	}
	_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
	return err
}

// step runs one step.
func (p *Proposer) step(ctx context.Context, a approval.Approval, prop db.ChoirControlProposal, step string) (outcome, error) {
	by := "proposal:" + a.ID.String()
	if a.ResolvedBy != "" {
		by += " approved by " + a.ResolvedBy
	}
	sc := control.Scope{Admin: true, Actor: by}
	switch step {
	case "merge":
		return p.merge(ctx, a, prop)
	case "build":
		// Exactly the merge choird made, whatever the ref holds now.
		res, err := p.o.Control.AgentBuildCommit(ctx, sc, a.AgentID, prop.MergeCommit)
		if err != nil {
			return outcome{}, failed("build", fmt.Errorf("%w; %s", err, p.revert(ctx, a, prop)))
		}
		return outcome{next: "update", state: StateApplying, image: res.Image, version: res.Version.ImageVersion,
			text: fmt.Sprintf("Proposal %s (%s): built, image %s.", shortID(a), a.AgentID, res.Image)}, nil
	case "update":
		res, err := p.o.Control.AgentUpdateCommit(ctx, sc, a.AgentID, prop.MergeCommit)
		if err != nil {
			return outcome{}, failed("update", err)
		}
		text := fmt.Sprintf("Proposal %s (%s): deployed; the agent restarted on image %s.", shortID(a), a.AgentID, res.Image)
		if res.Outcome != "redeployed" {
			text = fmt.Sprintf("Proposal %s (%s): applied; the agent is not running, so it takes effect at its next start (image %s).",
				shortID(a), a.AgentID, res.Image)
		}
		return outcome{state: StateApplied, image: res.Image, deployment: res.Outcome, text: text}, nil
	case "config":
		return p.applyConfig(ctx, sc, a, prop)
	}
	return outcome{}, failed(step, fmt.Errorf("unknown step %q", step))
}

// merge commits the proposal on a branch of a fresh clone with the
// agent's git identity, merges it into the configured ref and pushes.
func (p *Proposer) merge(ctx context.Context, a approval.Approval, prop db.ChoirControlProposal) (outcome, error) {
	cfg := p.o.Control.Snapshot().Config
	dir := filepath.Join(p.o.Home, "proposals", a.ID.String())
	c, repo, err := p.openClone(ctx, cfg, a.AgentID, dir)
	if err != nil {
		return outcome{}, failed("merge", err)
	}
	done := func(commit string) outcome {
		return outcome{next: "build", state: StateApplying, merge: commit,
			text: fmt.Sprintf("Proposal %s (%s): merged into %s as %.12s. Building the image.", shortID(a), a.AgentID, repo.Ref, commit)}
	}
	defer os.RemoveAll(dir)
	if commit := c.mergedAlready(ctx, repo.Ref, a.ID.String()); commit != "" && p.made(ctx, a.AgentID, commit) {
		return done(commit), nil // a run before a restart pushed it
	}
	var head string
	switch prop.Kind {
	case "tool", "skill":
		files, err := proposalFiles(a)
		if err != nil {
			return outcome{}, failed("merge", err)
		}
		branch := "proposal/approval-" + a.ID.String()
		if _, err := c.git(ctx, "checkout", "--quiet", "-B", branch); err != nil {
			return outcome{}, err
		}
		if err := c.writeFiles(files); err != nil {
			return outcome{}, failed("merge", err)
		}
		if _, err := c.git(ctx, "add", "-A"); err != nil {
			return outcome{}, err
		}
		var why struct {
			Rationale string `json:"rationale"`
		}
		jsonObject(a.Payload, &why)
		if _, err := c.git(ctx, "commit", "--quiet", "--allow-empty", "-m", proposal.Summary(a.Type, a.Payload)+
			"\n\n"+why.Rationale+"\n\nChoir-Proposal: "+a.ID.String()); err != nil {
			return outcome{}, err
		}
		if _, err := c.git(ctx, "checkout", "--quiet", repo.Ref); err != nil {
			return outcome{}, err
		}
		head = branch
	case "repo":
		var r proposal.Repo
		jsonObject(a.Payload, &r)
		if head, err = c.approvedHead(ctx, r.Branch, prop.HeadCommit); err != nil {
			p.o.Logger.WarnContext(ctx, "repo change not merged: the branch is not what was approved",
				slog.String("approval_id", a.ID.String()), slog.String("agent_id", a.AgentID),
				slog.String("branch", r.Branch), slog.String("approved", prop.HeadCommit), slog.String("error", err.Error()))
			return outcome{}, failed("merge", err)
		}
	}
	msg := fmt.Sprintf("Merge proposal %s of %s: %s\n\nApproved-By: %s\nChoir-Approval: %s",
		shortID(a), a.AgentID, proposal.Summary(a.Type, a.Payload), a.ResolvedBy, a.ID)
	if _, err := c.git(ctx, "merge", "--no-ff", "--no-edit", "-m", msg, head); err != nil {
		c.git(ctx, "merge", "--abort") //nolint:errcheck
		return outcome{}, failed("merge", fmt.Errorf("merge conflict with %s: %w", repo.Ref, err))
	}
	if err := p.recordHead(ctx, c, a, "merge"); err != nil {
		return outcome{}, err
	}
	if _, err := c.git(ctx, "push", "--quiet", "origin", "HEAD:refs/heads/"+repo.Ref); err != nil {
		if isPushRace(err) {
			return outcome{}, err // the branch moved: retry on a fresh clone
		}
		return outcome{}, failed("merge", fmt.Errorf("push to %s: %w", repo.URL, err))
	}
	commit, err := c.git(ctx, "rev-parse", "HEAD")
	if err != nil {
		return outcome{}, err
	}
	return done(commit), nil
}

// revert takes a merged proposal whose image did not build back out of
// the repository, so that the next build is not broken by it; it says what
// it did.
func (p *Proposer) revert(ctx context.Context, a approval.Approval, prop db.ChoirControlProposal) string {
	if prop.MergeCommit == "" {
		return "nothing was merged"
	}
	dir := filepath.Join(p.o.Home, "proposals", a.ID.String()+".revert")
	defer os.RemoveAll(dir)
	c, repo, err := p.openClone(ctx, p.o.Control.Snapshot().Config, a.AgentID, dir)
	if err == nil {
		if done, _ := c.git(ctx, "log", "--format=%H", "-n", "1", "--fixed-strings", "--grep", "This reverts commit "+prop.MergeCommit, repo.Ref); done != "" {
			return "the merge was reverted in " + repo.Ref
		}
		if _, err = c.git(ctx, "revert", "--no-edit", "-m", "1", prop.MergeCommit); err == nil {
			err = p.recordHead(ctx, c, a, "revert")
		}
		if err == nil {
			_, err = c.git(ctx, "push", "--quiet", "origin", "HEAD:refs/heads/"+repo.Ref)
		}
	}
	if err != nil {
		return fmt.Sprintf("the merge %.12s stays in the repository (revert failed: %v)", prop.MergeCommit, err)
	}
	return fmt.Sprintf("the merge %.12s was reverted in %s", prop.MergeCommit, repo.Ref)
}

// made reports whether choird recorded commit as its own on the agent's
// ref: a commit that merely carries choird's trailer may be the agent's.
func (p *Proposer) made(ctx context.Context, agentID, commit string) bool {
	shas, err := seam.Queries(p.o.Pool).RepoCommitsByAgent(ctx, agentID)
	return err == nil && slices.Contains(shas, commit)
}

// recordHead records the clone's HEAD as a commit choird made on the
// agent's ref, before it is pushed: a build never takes it for the
// agent's own.
func (p *Proposer) recordHead(ctx context.Context, c *clone, a approval.Approval, what string) error {
	head, err := c.git(ctx, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	return seam.Queries(p.o.Pool).RepoCommitRecord(ctx, db.RepoCommitRecordParams{AgentID: a.AgentID,
		CommitSha: head, ApprovalID: a.ID, What: what})
}

// proposalFiles are the files an approved tool or skill proposal writes,
// validated once more as they will be built.
func proposalFiles(a approval.Approval) ([]proposal.File, error) {
	switch a.Type {
	case proposal.TypeTool:
		t, err := proposal.ParseTool(a.Payload, nil)
		if err != nil {
			return nil, err
		}
		return t.Files(), nil
	case proposal.TypeSkill:
		s, spec, err := proposal.ParseSkill(a.Payload)
		if err == nil {
			err = proposal.CheckSkill(s, spec, nil, nil)
		}
		if err != nil {
			return nil, err
		}
		return proposal.SkillFiles(spec), nil
	}
	return nil, fmt.Errorf("%s writes no files", a.Type)
}

func shortID(a approval.Approval) string { return a.ID.String()[:8] }
