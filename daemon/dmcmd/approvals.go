package dmcmd

import (
	"context"
	"errors"
	"fmt"
	"github.com/choirhq/choir/rpc/admin"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/internal/verbatim"
	choirsql "github.com/choirhq/choir/sql"
)

// listFilter reads the optional agent a listing command names: none (the
// empty string) or one its scope may see. A regular DM bound to no agent
// has nothing to list.
func (c *Commands) listFilter(ctx context.Context, sc control.Scope, cmd gateway.Command, command string) (string, error) {
	var agentID string
	switch len(cmd.Args) {
	case 0:
	case 1:
		id, err := c.target(ctx, sc, cmd, cmd.Args[0])
		if err != nil {
			return "", err
		}
		agentID = id
	default:
		return "", usagef("%s", c.usage(sc, command))
	}
	if !sc.Admin && sc.Agent == "" {
		return "", unbound(sc, cmd)
	}
	return agentID, nil
}

func (c *Commands) approvals(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	filter, err := c.listFilter(ctx, sc, cmd, "approvals")
	if err != nil {
		return action{}, err
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		pending, err := c.appr.List(ctx, sc, filter)
		if err != nil {
			return "", err
		}
		if len(pending) == 0 {
			return "No approval is pending.", nil
		}
		return c.numbered(cmd, pending, "Pending approvals"), nil
	}), nil
}

// numbered lists approvals with numbers and remembers the list for this
// DM, so that "/approve 2" picks the second.
func (c *Commands) numbered(cmd gateway.Command, pending []admin.Approval, title string) string {
	if len(pending) > maxApprovalChoices {
		pending = pending[:maxApprovalChoices]
	}
	ids := make([]string, len(pending))
	var b strings.Builder
	fmt.Fprintf(&b, "%s (/approve <number> or /reject <number>):", title)
	for i, a := range pending {
		ids[i] = a.ID
		fmt.Fprintf(&b, "\n%d. %s: %s [%s, id %s, expires %s]", i+1, a.AgentID, verbatim.Escape(truncate(a.Summary, 200)), verbatim.Escape(a.RequestType), a.ID,
			a.ExpiresAt.UTC().Format("15:04 MST"))
	}
	c.mu.Lock()
	c.lists[cmd.DM.Name] = ids
	c.mu.Unlock()
	return b.String()
}

// decide is /approve, /reject and /always (approve for good, where the
// approval's kind can be: an egress host): an id or a number of the last
// list decides that approval; with neither, the approval whose request
// message the command replies to, else the only pending one, else a
// numbered list.
func (c *Commands) decide(sc control.Scope, cmd gateway.Command, verb string) (action, error) {
	if !sc.Admin && sc.Agent == "" {
		return action{}, unbound(sc, cmd)
	}
	var arg string
	switch len(cmd.Args) {
	case 0:
	case 1:
		arg = cmd.Args[0]
	default:
		return action{}, usagef("Usage: /%s [id|number]", verb)
	}
	var pick func(ctx context.Context) (string, string, error) // approval id, or an answer instead
	switch {
	case arg != "" && isSmallNumber(arg):
		n, _ := strconv.Atoi(arg)
		pick = func(ctx context.Context) (string, string, error) { return c.pickNumbered(ctx, sc, cmd, verb, n) }
	case arg != "":
		if _, err := approval.ParseID(arg); err != nil {
			return action{}, usagef("%q is neither an approval id nor a number from the list: send /approvals to see them, then /%s <number>.",
				arg, verb)
		}
		pick = func(context.Context) (string, string, error) { return arg, "", nil }
	case cmd.ReplyToMessageID != 0:
		pick = func(ctx context.Context) (string, string, error) {
			a, err := c.appr.ForMessage(ctx, sc, cmd.DM.Gateway, cmd.ChatID, cmd.ReplyToMessageID)
			if errors.Is(err, choirsql.ErrNotFound) {
				return "", fmt.Sprintf("The message you replied to is not an approval request. Send /%s without replying to pick from the pending ones.", verb), nil
			}
			return a.ID, "", err
		}
	default:
		pick = func(ctx context.Context) (string, string, error) {
			pending, err := c.appr.List(ctx, sc, "")
			if err != nil {
				return "", "", err
			}
			switch len(pending) {
			case 0:
				return "", "No approval is pending.", nil
			case 1:
				return c.onlyPending(ctx, sc, cmd, verb, pending)
			}
			return "", c.numbered(cmd, pending, fmt.Sprintf("%d approvals are pending; which one", len(pending))), nil
		}
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		id, answer, err := pick(ctx)
		if err != nil || answer != "" {
			return answer, err
		}
		var a admin.Approval
		if verb == "always" {
			a, err = c.appr.Always(ctx, sc, id)
		} else {
			a, err = c.appr.Decide(ctx, sc, id, verb == "approve")
		}
		if errors.Is(err, control.ErrForbidden) {
			return "", err
		}
		if errors.Is(err, approval.ErrNotRemembered) {
			return err.Error(), nil
		}
		ans, err := DecisionAnswer(a, err)
		if err != nil {
			return "", err
		}
		if verb == "always" && ans == "Approved" {
			ans = "Approved for good"
		}
		if a.ID == "" {
			return ans + ".", nil
		}
		return fmt.Sprintf("%s: %s (%s, id %s).", ans, verbatim.Escape(truncate(a.Summary, 200)), a.AgentID, a.ID), nil
	}), nil
}

func isSmallNumber(s string) bool {
	if len(s) == 0 || len(s) > 3 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// pickNumbered returns the approval of number n in the list last shown to
// the DM, if it is still pending.
func (c *Commands) pickNumbered(ctx context.Context, sc control.Scope, cmd gateway.Command, verb string, n int) (string, string, error) {
	c.mu.Lock()
	ids := slices.Clone(c.lists[cmd.DM.Name])
	c.mu.Unlock()
	if len(ids) == 0 {
		return "", fmt.Sprintf("No numbered list was shown in this chat: send /approvals first, then /%s <number>.", verb), nil
	}
	if n < 1 || n > len(ids) {
		return "", fmt.Sprintf("The last list had %d approvals; there is no number %d. Send /approvals for the current list.", len(ids), n), nil
	}
	a, err := c.appr.Show(ctx, sc, ids[n-1])
	if errors.Is(err, choirsql.ErrNotFound) {
		return "", fmt.Sprintf("Number %d of the last list no longer exists. Send /approvals for the current list.", n), nil
	}
	if err != nil {
		return "", "", err
	}
	if a.Status != "pending" {
		by := ""
		if a.ResolvedBy != "" {
			by = " by " + a.ResolvedBy
		}
		return "", fmt.Sprintf("Number %d (%s) is no longer pending: it was already %s%s. Send /approvals for the current list.",
			n, truncate(a.Summary, 100), a.Status, by), nil
	}
	return a.ID, "", nil
}

// Decide implements gateway.Approvals: an [Approve] or [Reject] press.
func (c *Commands) Decide(ctx context.Context, dec gateway.Decision) (string, error) {
	sc, err := c.ctl.DMScope(ctx, controlDM(dec.DM))
	if err != nil {
		return "", err
	}
	a, err := c.appr.Decide(ctx, sc, dec.ApprovalID, dec.Approve)
	if errors.Is(err, control.ErrForbidden) {
		c.logger.InfoContext(ctx, "approval button press refused", slog.String("dm", dec.DM.Name),
			slog.String("approval_id", dec.ApprovalID), slog.String("reason", err.Error()))
	}
	return DecisionAnswer(a, err)
}

// DecisionAnswer is what a DM is told of its decision. Errors the user
// should read are answers; only a failure to decide at all is an error.
func DecisionAnswer(a admin.Approval, err error) (string, error) {
	switch {
	case err == nil && a.Status == "approved":
		return "Approved", nil
	case err == nil:
		return "Rejected", nil
	case errors.Is(err, approval.ErrResolved):
		if a.ResolvedBy == "timeout" {
			return "already rejected: it timed out", nil
		}
		return "already " + a.Status, nil
	case errors.Is(err, control.ErrForbidden):
		return "not your approval: " + err.Error(), nil
	case errors.Is(err, choirsql.ErrNotFound):
		return "no such approval", nil
	}
	return "", err
}

// recentWindow is how far back a bare /approve looks for other requests:
// when more than one was filed in it, the one pending now may not be the
// one the person read.
const recentWindow = time.Minute

// onlyPending decides the one pending approval of a bare /approve or
// /reject, unless another was filed in the last minute (decided since,
// or timed out): then the person is asked which, by number or id.
func (c *Commands) onlyPending(ctx context.Context, sc control.Scope, cmd gateway.Command, verb string, pending []admin.Approval) (string, string, error) {
	recent, err := c.appr.FiledSince(ctx, sc, time.Now().Add(-recentWindow))
	if err != nil {
		return "", "", err
	}
	if len(recent) < 2 {
		return pending[0].ID, "", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d approvals were filed in the last minute, so a bare /%s may not decide the one you read. ", len(recent), verb)
	b.WriteString("Those no longer pending:")
	for _, a := range recent {
		if a.Status != "pending" {
			fmt.Fprintf(&b, "\n- %s: %s [%s, id %s]", a.AgentID, verbatim.Line(truncate(a.Summary, 200)), a.Status, a.ID)
		}
	}
	b.WriteString("\n\n")
	b.WriteString(c.numbered(cmd, pending, "Still pending"))
	return "", b.String(), nil
}
