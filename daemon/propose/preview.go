package propose

import (
	"context"
	"errors"
	"fmt"

	"github.com/choirhq/choir/daemon/approval"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Preview is the whole text of the proposal that approval approvalID asks
// about, exactly as its person was shown it in the chat (a repo change's
// commits and full diff, quoted line by line); ok is false when the
// approval is not a proposal. The caller has checked that its scope may
// see the approval.
func (p *Proposer) Preview(ctx context.Context, approvalID string) (text string, ok bool, err error) {
	id, err := approval.ParseID(approvalID)
	if err != nil {
		return "", false, err
	}
	prop, err := seam.Queries(p.o.Pool).ProposalGet(ctx, id)
	if errors.Is(err, choirsql.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("load proposal %s: %w", approvalID, err)
	}
	return prop.Preview, true, nil
}
