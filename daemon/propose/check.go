package propose

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/verbatim"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/sql/seam"
)

// Checked is a proposal that passed validation: what the person is shown.
type Checked struct {
	Kind string
	// Summary is the approval's one line: the change and why.
	Summary string
	// Parts are the full change, each one chat message; together they are
	// the preview, nothing left out.
	Parts []string
	// BaseSHA256 is the config.json a config change was checked against.
	BaseSHA256 string
	// HeadCommit is the commit a repo change's branch held when it was
	// shown: the merge takes exactly this commit.
	HeadCommit string
}

// ErrTooLong reports a change too long to review in a chat.
var ErrTooLong = errors.New("the change is too long to review in a chat")

// Check validates a proposal as choird will apply it, with the same
// validators as the image build (tool manifests, skills) or as config
// load (config changes), and renders what its person is shown. An error
// is the validators' report: the request is refused and no one is asked.
func (p *Proposer) Check(ctx context.Context, agentID, sessionID string, req rpc.ApprovalRequest) (Checked, error) {
	kind, err := kindOf(req.RequestType)
	if err != nil {
		return Checked{}, err
	}
	var preview, base, head string
	switch kind {
	case "tool":
		t, err := proposal.ParseTool(req.Payload, nil)
		if err != nil {
			return Checked{}, err
		}
		preview = proposal.RenderTool(t)
	case "skill":
		s, spec, err := proposal.ParseSkill(req.Payload)
		if err == nil {
			err = proposal.CheckSkill(s, spec, nil, nil)
		}
		if err != nil {
			return Checked{}, err
		}
		preview = proposal.RenderSkill(s, spec)
	case "config":
		c, err := proposal.ParseConfig(req.Payload)
		if err != nil {
			return Checked{}, err
		}
		if err := checkPatchKeys(agentID, c.Patch); err != nil {
			return Checked{}, err
		}
		var changes []configdiff.Change
		base, changes, err = p.configChange(c.Patch)
		if err != nil {
			return Checked{}, err
		}
		preview = renderConfig(c, changes)
	case "repo":
		r, err := proposal.ParseRepo(req.Payload, sessionID)
		if err != nil {
			return Checked{}, err
		}
		if preview, head, err = p.repoPreview(ctx, agentID, r); err != nil {
			return Checked{}, err
		}
	}
	if kind != "config" {
		// Every line of a tool, skill or repo change is the agent's: it is
		// quoted whole, so no line of it can pass for the prompt's own.
		preview = "The change, every line as the agent proposed it:\n" + verbatim.Lines(preview)
	}
	parts := proposal.Split(preview)
	if len(parts) > proposal.MaxParts {
		return Checked{}, fmt.Errorf("%w: %d bytes, at most %d messages of %d bytes; split it into smaller proposals",
			ErrTooLong, len(preview), proposal.MaxParts, proposal.PartBytes)
	}
	line := proposal.Summary(req.RequestType, req.Payload)
	var why struct {
		Rationale string `json:"rationale"`
	}
	if jsonObject(req.Payload, &why) && strings.TrimSpace(why.Rationale) != "" {
		line += ": " + strings.Join(strings.Fields(why.Rationale), " ")
		if len(line) > 300 {
			line = strings.ToValidUTF8(line[:300], "") + "…"
		}
	}
	return Checked{Kind: kind, Parts: parts, BaseSHA256: base, HeadCommit: head, Summary: line}, nil
}

// RecordTx records a checked proposal with its approval, and queues the
// full change to the chat ahead of the request with its buttons, in the
// transaction that creates the approval.
func (p *Proposer) RecordTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, a approval.Approval, c Checked, to approval.Address) error {
	q := seam.Queries(tx)
	if err := q.ProposalCreate(ctx, db.ProposalCreateParams{ApprovalID: a.ID, AgentID: a.AgentID, Kind: c.Kind,
		Preview: strings.Join(c.Parts, ""), BaseSha256: c.BaseSHA256, HeadCommit: c.HeadCommit}); err != nil {
		return fmt.Errorf("record proposal %s: %w", a.ID, err)
	}
	for i, part := range c.Parts {
		head := fmt.Sprintf("Proposal from %s, part %d of %d:\n", a.AgentID, i+1, len(c.Parts))
		if _, err := outbox.EnqueueTx(ctx, tx, ins, outbox.Params{AgentID: a.AgentID, SessionID: &a.SessionID,
			MessageID: fmt.Sprintf("approval:%s:detail:%d", a.ID, i+1), Gateway: to.Gateway, DM: to.DM,
			ChatID: to.ChatID, Kind: message.Text, Text: head + part}); err != nil {
			return fmt.Errorf("queue proposal %s part %d: %w", a.ID, i+1, err)
		}
	}
	return nil
}

// configChange applies a merge patch to config.json and validates the
// result as config load does. config.json must hold what choird runs, so
// that the diff the person approves is the whole change.
func (p *Proposer) configChange(patch []byte) (baseSum string, changes []configdiff.Change, err error) {
	path := filepath.Join(p.o.Home, config.ConfigFile)
	disk, err := os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("read config.json: %w", err)
	}
	snap := p.o.Control.Snapshot()
	onDisk, err := config.Parse(disk)
	if err != nil {
		return "", nil, fmt.Errorf("config.json does not parse; an operator must fix it first: %w", err)
	}
	if pending, err := configdiff.Diff(snap.Config, onDisk); err != nil || len(pending) > 0 {
		return "", nil, fmt.Errorf("config.json has %d change(s) not applied yet (e.g. %s); an operator must apply or revert them before a config change can be proposed",
			len(pending), firstPath(pending))
	}
	patched, err := proposal.MergePatch(disk, patch)
	if err != nil {
		return "", nil, err
	}
	next, err := config.Parse(patched)
	if err != nil {
		return "", nil, fmt.Errorf("the patched config.json: %w", err)
	}
	if err := next.ValidateAt(p.o.Home, snap.Secrets); err != nil {
		return "", nil, fmt.Errorf("the patched config.json: %w", err)
	}
	changes, err = configdiff.Diff(snap.Config, next)
	if err != nil {
		return "", nil, err
	}
	if len(changes) == 0 {
		return "", nil, errors.New("patch: it changes nothing in config.json")
	}
	sum := sha256.Sum256(disk)
	return hex.EncodeToString(sum[:]), changes, nil
}

func firstPath(ch []configdiff.Change) string {
	if len(ch) == 0 {
		return "-"
	}
	return ch[0].Path
}

// renderConfig shows every changed setting with its full old and new
// values: lock policies, secret scopes and approval settings included.
func renderConfig(c proposal.Config, changes []configdiff.Change) string {
	var b strings.Builder
	fmt.Fprintf(&b, "change config.json\nWhy, in the agent's words:\n%s\n%d setting(s) change:\n", verbatim.Lines(c.Rationale), len(changes))
	for _, ch := range changes {
		switch ch.Op {
		case configdiff.OpChange:
			fmt.Fprintf(&b, "~ %s\n  from:\n%s\n  to:\n%s\n", verbatim.Escape(ch.Path), verbatim.Lines(ch.Old), verbatim.Lines(ch.New))
		default:
			fmt.Fprintf(&b, "%s %s\n", ch.Op, verbatim.Escape(ch.Path))
		}
	}
	fmt.Fprintf(&b, "\nThe merge patch, in full:\n%s\n", verbatim.Lines(string(c.Patch)))
	return b.String()
}
