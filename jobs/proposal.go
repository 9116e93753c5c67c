package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/db"
)

// ProposalApplyArgs is one step of applying an approved proposal (spec
// 20): merge, build, update, or config, and the cleanup of a repo
// change's workspace clone. Each step is its own job, queued
// by the one before it in the transaction that records its outcome, so a
// restart resumes at the step that was running and never repeats one that
// finished. Args are unique, so a step is never queued twice.
type ProposalApplyArgs struct {
	ApprovalID uuid.UUID `json:"approval_id"`
	Step       string    `json:"step"`
}

// Kind implements river.JobArgs.
func (ProposalApplyArgs) Kind() string { return "proposal_apply" }

// InsertOpts runs the steps on the control queue, once per step.
func (ProposalApplyArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueControl, MaxAttempts: 10, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// ProposalApplyFunc runs one step; daemon/propose implements it.
type ProposalApplyFunc func(ctx context.Context, job *river.Job[ProposalApplyArgs]) error

// ProposalApplyWorker runs the steps through Apply. Its kind is always
// registered, so that approving a proposal can queue its first step
// whatever else the client runs.
type ProposalApplyWorker struct {
	river.WorkerDefaults[ProposalApplyArgs]
	Apply ProposalApplyFunc
}

// Timeout bounds one step: an image build may take minutes.
func (w *ProposalApplyWorker) Timeout(*river.Job[ProposalApplyArgs]) time.Duration {
	return 30 * time.Minute
}

// Work implements river.Worker.
func (w *ProposalApplyWorker) Work(ctx context.Context, job *river.Job[ProposalApplyArgs]) error {
	if w.Apply == nil {
		return errors.New("no proposal applier is configured in this choird")
	}
	return w.Apply(ctx, job)
}

// FirstProposalStep is the step an approved proposal of requestType
// starts with.
func FirstProposalStep(requestType string) string {
	if requestType == proposal.TypeConfig {
		return "config"
	}
	return "merge"
}

// ProposalStepCleanup is the step that removes a repo change's workspace
// clone once the proposal is done with (spec 20.7): after its last step
// when approved, at once when rejected or timed out. It runs whatever the
// approval's status.
const ProposalStepCleanup = "cleanup"

// proposalApprovedTx queues the first step of an approved proposal, or
// the cleanup of a rejected repo change, in the transaction that decided
// it.
func proposalApprovedTx(ctx context.Context, tx pgx.Tx, ins Inserter, a db.ChoirControlPendingApproval) error {
	if a.Status == "rejected" && a.RequestType == proposal.TypeRepo {
		if _, err := ins.InsertTx(ctx, tx, ProposalApplyArgs{ApprovalID: a.ApprovalID, Step: ProposalStepCleanup}, nil); err != nil {
			return fmt.Errorf("queue the cleanup of proposal %s: %w", a.ApprovalID, err)
		}
		return nil
	}
	if a.Status != "approved" || !proposal.IsProposal(a.RequestType) {
		return nil
	}
	if _, err := ins.InsertTx(ctx, tx, ProposalApplyArgs{ApprovalID: a.ApprovalID, Step: FirstProposalStep(a.RequestType)}, nil); err != nil {
		return fmt.Errorf("queue applying proposal %s: %w", a.ApprovalID, err)
	}
	return nil
}

// proposalOutcomeText is what the chat is told of a decided proposal.
func proposalOutcomeText(a db.ChoirControlPendingApproval, approve bool) string {
	switch {
	case !approve:
		return fmt.Sprintf("Rejected by %s: %s. Nothing is applied.", deref(a.ResolvedBy), a.Summary)
	case a.RequestType == proposal.TypeConfig:
		return fmt.Sprintf("Approved by %s: %s. It will be written to config.json and applied; the outcome follows here.",
			deref(a.ResolvedBy), a.Summary)
	}
	return fmt.Sprintf("Approved by %s: %s. It will be merged, built and deployed; each step is reported here.",
		deref(a.ResolvedBy), a.Summary)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// proposalWill is what the request of a proposal adds to its summary:
// what approving it does.
func proposalWill(requestType string) string {
	switch requestType {
	case proposal.TypeConfig:
		return "\n" + proposal.WillApplyConfig
	case proposal.TypeTool, proposal.TypeSkill, proposal.TypeRepo:
		return "\n" + proposal.WillDeploy
	}
	return ""
}
