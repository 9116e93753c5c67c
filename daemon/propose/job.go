package propose

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/jobs"
)

// ApplyArgs is one step of applying an approved proposal (spec
// 20): merge, build, update, or config, and the cleanup of a repo
// change's workspace clone. Each step is its own job, queued
// by the one before it in the transaction that records its outcome, so a
// restart resumes at the step that was running and never repeats one that
// finished. Args are unique, so a step is never queued twice.
type ApplyArgs struct {
	ApprovalID uuid.UUID `json:"approval_id"`
	Step       string    `json:"step"`
}

// Kind implements river.JobArgs.
func (ApplyArgs) Kind() string { return "proposal_apply" }

// InsertOpts runs the steps on the control queue, once per step.
func (ApplyArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueControl, MaxAttempts: 10, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// ApplyWorker runs the steps through its proposer (Proposer.Apply).
type ApplyWorker struct {
	river.WorkerDefaults[ApplyArgs]
	Proposer *Proposer
}

// Timeout bounds one step: an image build may take minutes.
func (w *ApplyWorker) Timeout(*river.Job[ApplyArgs]) time.Duration {
	return 30 * time.Minute
}

// Work implements river.Worker.
func (w *ApplyWorker) Work(ctx context.Context, job *river.Job[ApplyArgs]) error {
	if w.Proposer == nil {
		return errors.New("no proposal applier is configured in this choird")
	}
	return w.Proposer.Apply(ctx, job)
}

var _ jobs.Feature = (*Proposer)(nil)

// AddWorkers registers the proposal_apply worker (jobs.Feature).
func (p *Proposer) AddWorkers(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, &ApplyWorker{Proposer: p}); err != nil {
		return fmt.Errorf("register proposal apply worker: %w", err)
	}
	return nil
}

// RegisterApprovals registers the proposals' approval kinds: a proposal
// shows its own parts (RecordTx) and what approving it does; approved, its
// first step is queued, and a rejected repo change's clone is cleaned up,
// in the transaction that decided it; only an admin decides a change to
// choird's configuration.
func RegisterApprovals(r *approval.Registry) {
	for _, t := range []string{proposal.TypeTool, proposal.TypeSkill, proposal.TypeConfig, proposal.TypeRepo} {
		k := approval.Kind{OwnParts: true, Will: will(t), ResolvedTx: approvedTx,
			OutcomeText: func(_ context.Context, _ pgx.Tx, a approval.Approval) (string, error) {
				return outcomeText(a, a.Status == "approved"), nil
			}}
		if t == proposal.TypeConfig {
			k.AdminOnly = "a change to choird's configuration"
		}
		r.Register(t, k)
	}
}

// FirstStep is the step an approved proposal of requestType
// starts with.
func FirstStep(requestType string) string {
	if requestType == proposal.TypeConfig {
		return "config"
	}
	return "merge"
}

// StepCleanup is the step that removes a repo change's workspace
// clone once the proposal is done with (spec 20.7): after its last step
// when approved, at once when rejected or timed out. It runs whatever the
// approval's status.
const StepCleanup = "cleanup"

// approvedTx queues the first step of an approved proposal, or
// the cleanup of a rejected repo change, in the transaction that decided
// it.
func approvedTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, a approval.Approval) error {
	if a.Status == "rejected" && a.Type == proposal.TypeRepo {
		if _, err := ins.InsertTx(ctx, tx, ApplyArgs{ApprovalID: a.ID, Step: StepCleanup}, nil); err != nil {
			return fmt.Errorf("queue the cleanup of proposal %s: %w", a.ID, err)
		}
		return nil
	}
	if a.Status != "approved" || !proposal.IsProposal(a.Type) {
		return nil
	}
	if _, err := ins.InsertTx(ctx, tx, ApplyArgs{ApprovalID: a.ID, Step: FirstStep(a.Type)}, nil); err != nil {
		return fmt.Errorf("queue applying proposal %s: %w", a.ID, err)
	}
	return nil
}

// outcomeText is what the chat is told of a decided proposal.
func outcomeText(a approval.Approval, approve bool) string {
	switch {
	case !approve:
		return fmt.Sprintf("Rejected by %s: %s. Nothing is applied.", a.ResolvedBy, a.Summary)
	case a.Type == proposal.TypeConfig:
		return fmt.Sprintf("Approved by %s: %s. It will be written to config.json and applied; the outcome follows here.",
			a.ResolvedBy, a.Summary)
	}
	return fmt.Sprintf("Approved by %s: %s. It will be merged, built and deployed; each step is reported here.",
		a.ResolvedBy, a.Summary)
}

// will is what the request of a proposal adds to its summary:
// what approving it does.
func will(requestType string) string {
	switch requestType {
	case proposal.TypeConfig:
		return proposal.WillApplyConfig
	case proposal.TypeTool, proposal.TypeSkill, proposal.TypeRepo:
		return proposal.WillDeploy
	}
	return ""
}
