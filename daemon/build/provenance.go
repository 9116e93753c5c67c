package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// What an approved proposal applies is exactly what is built (issue 29):
// a proposal's build pins the merge commit choird made
// ([Request.AgentCommit]), and every build of an agent's repository looks
// for commits on its ref that the agent made itself, past choird: an
// agent whose git identity can push the configured ref would otherwise
// change its own image without anyone approving it.

// Commit is one commit of a ref's first-parent history.
type Commit struct {
	SHA            string
	AuthorEmail    string
	CommitterEmail string
	Subject        string
}

// Provenance is what choird knows of an agent's repository: the commits
// it made there (merges and reverts of proposals), and the e-mail
// addresses of the agent's git identity.
type Provenance struct {
	// Made are the commits choird made on the agent's ref.
	Made []string
	// AgentEmails are the addresses the agent commits as: its configured
	// git identity and <id>@choir.invalid.
	AgentEmails []string
}

// ErrForeignCommit reports commits on an agent's ref that the agent's
// identity made and choird did not.
var ErrForeignCommit = errors.New("the agent's ref holds commits the agent pushed itself")

// ForeignCommitError names those commits.
type ForeignCommitError struct {
	AgentID string
	Ref     string
	Commits []Commit
}

func (e *ForeignCommitError) Error() string {
	var shas []string
	for _, c := range e.Commits {
		shas = append(shas, fmt.Sprintf("%.12s (%s, committed as %s)", c.SHA, c.Subject, c.CommitterEmail))
	}
	return fmt.Sprintf("%v: %s on %s: build refused. The agent's git identity can push %s directly, past approval: "+
		"protect the branch (or give the agent a proposal-only remote), then revert these commits; "+
		"a change you merged yourself must be a merge commit (git merge --no-ff) made as you",
		ErrForeignCommit, strings.Join(shas, ", "), e.Ref, e.Ref)
}

func (e *ForeignCommitError) Unwrap() error { return ErrForeignCommit }

// pin checks a pinned agent commit against the fetched ref and builds it.
func (b *Builder) pin(ctx context.Context, p *Plan) error {
	want := p.Request.AgentCommit
	if want == "" {
		return nil
	}
	full, err := b.git(ctx, p.AgentDir, "rev-parse", "--verify", "--quiet", "--end-of-options", want+"^{commit}")
	if err != nil || full == "" {
		return fmt.Errorf("agent build %s: commit %.12s, made for an approved proposal, is not in the agent's repository: was %s rewritten?",
			p.Request.AgentID, want, p.Request.Agent.Ref)
	}
	if _, err := b.git(ctx, p.AgentDir, "merge-base", "--is-ancestor", full, p.Version.AgentRepoCommit); err != nil {
		return fmt.Errorf("agent build %s: commit %.12s, made for an approved proposal, is no longer on %s: was it rewritten?",
			p.Request.AgentID, want, p.Request.Agent.Ref)
	}
	p.Version.AgentRepoCommit = full
	return nil
}

// foreign returns the commits of head's first-parent history, back to the
// newest commit choird made, that the agent's identity authored or
// committed, or that carry a trailer only choird writes.
func (b *Builder) foreign(ctx context.Context, clone, head string, pv Provenance) ([]Commit, error) {
	args := []string{"rev-list", "--first-parent", "--format=%H%x00%ae%x00%ce%x00%s%x00%(trailers:key=Choir-Approval,key=Choir-Proposal,valueonly,separator=%x20)", head}
	var made []string
	for _, c := range pv.Made {
		if full, err := b.git(ctx, clone, "rev-parse", "--verify", "--quiet", "--end-of-options", c+"^{commit}"); err == nil && full != "" {
			made = append(made, full)
		}
	}
	if len(made) > 0 {
		args = append(append(args, "--not"), made...)
	}
	out, err := b.git(ctx, clone, args...)
	if err != nil {
		return nil, fmt.Errorf("read the history of %.12s: %w", head, err)
	}
	agent := map[string]bool{}
	for _, e := range pv.AgentEmails {
		agent[strings.ToLower(e)] = true
	}
	var bad []Commit
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\x00")
		if len(f) != 5 {
			continue // "commit <sha>" headers
		}
		c := Commit{SHA: f[0], AuthorEmail: f[1], CommitterEmail: f[2], Subject: f[3]}
		if agent[strings.ToLower(c.AuthorEmail)] || agent[strings.ToLower(c.CommitterEmail)] || strings.TrimSpace(f[4]) != "" {
			bad = append(bad, c)
		}
	}
	return bad, nil
}

// checkProvenance refuses a build whose agent ref holds commits the agent
// pushed itself.
func (b *Builder) checkProvenance(ctx context.Context, p *Plan) error {
	pv := p.Request.Provenance
	if pv == nil || p.AgentDir == "" {
		return nil
	}
	bad, err := b.foreign(ctx, p.AgentDir, p.Version.AgentRepoCommit, *pv)
	if err != nil {
		return fmt.Errorf("agent build %s: %w", p.Request.AgentID, err)
	}
	if len(bad) == 0 {
		return nil
	}
	fe := &ForeignCommitError{AgentID: p.Request.AgentID, Ref: p.Request.Agent.Ref, Commits: bad}
	b.log.ErrorContext(ctx, "agent build refused: the agent pushed its own ref", slog.String("agent_id", p.Request.AgentID),
		slog.String("ref", p.Request.Agent.Ref), slog.String("commit", bad[0].SHA), slog.Int("commits", len(bad)),
		slog.String("committer", bad[0].CommitterEmail))
	return fmt.Errorf("agent build %s: %w", p.Request.AgentID, fe)
}
