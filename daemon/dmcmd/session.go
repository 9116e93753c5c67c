package dmcmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/internal/verbatim"
	"github.com/choirhq/choir/rpc/admin"
)

func (c *Commands) status(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "status"))
	if err != nil {
		return action{}, err
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		st, err := c.ctl.SessionStatus(ctx, sc, id)
		if err != nil {
			return "", err
		}
		return formatStatus(st), nil
	}), nil
}

func formatStatus(st admin.SessionStatusResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", st.AgentID, st.State)
	if st.SessionID != "" {
		fmt.Fprintf(&b, "\nsession %s (%s)", st.SessionID, st.Runtime)
	}
	if st.StartedAt != nil && st.State != admin.AgentCrashed {
		fmt.Fprintf(&b, "\nup %s", time.Since(*st.StartedAt).Round(time.Second))
	}
	if st.LastHeartbeatAt != nil {
		fmt.Fprintf(&b, ", last heartbeat %s ago", time.Since(*st.LastHeartbeatAt).Round(time.Second))
	}
	if st.RollsOverAt != nil {
		// Relative, as "up" is: the DM reads it in its own zone.
		if d := time.Until(*st.RollsOverAt).Round(time.Minute); d > 0 {
			fmt.Fprintf(&b, "\nthe session rolls over (fresh session budgets) in %s", d)
		} else {
			b.WriteString("\nthe session rolls over (fresh session budgets) at its next idle moment")
		}
	}
	for _, l := range st.Lanes {
		b.WriteString("\n" + laneLine(l))
	}
	return b.String()
}

// laneLine reads a lane for /status: "edge: idle, budget left 40 tool
// calls", "core job build: reasoning, 7 steps, budget left 43 steps" and
// its last progress line.
func laneLine(l admin.LaneStatus) string {
	name := l.Lane
	if job, ok := admin.CoreJobName(l.Lane); ok {
		name = "core job " + job
	}
	line := name + ": " + admin.LaneHeadline(l)
	if bud := admin.BudgetText(l.BudgetRemaining); bud != "" {
		line += ", budget left " + bud
	}
	if p := strings.Join(strings.Fields(l.Progress), " "); p != "" {
		line += "\n  last: " + truncate(p, 200)
	}
	if len(l.Sources) > 0 {
		line += "\n  read from outside: " +
			verbatim.Escape(truncate(admin.DescribeSources(l.Sources), 300))
	}
	return line
}

func (c *Commands) stop(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "stop"))
	if err != nil {
		return action{}, err
	}
	if err := sc.Allow(id); err != nil {
		return action{}, err
	}
	return cmdLong(fmt.Sprintf("Stopping %s: it finishes its current step, writes its summary and exits…", id),
		func(ctx context.Context) (string, error) {
			if _, err := c.ctl.AgentStop(ctx, sc, id); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s stopped; its session is saved.", id), nil
		}), nil
}

func (c *Commands) restart(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "restart"))
	if err != nil {
		return action{}, err
	}
	if err := sc.Allow(id); err != nil {
		return action{}, err
	}
	return cmdLong(fmt.Sprintf("Restarting %s…", id), func(ctx context.Context) (string, error) {
		st, err := c.ctl.AgentRestart(ctx, sc, id)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s restarted: %s, session %s.", id, st.State, st.SessionID), nil
	}), nil
}

func (c *Commands) cores(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "cores"))
	if err != nil {
		return action{}, err
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		res, err := c.ctl.SessionCores(ctx, sc, id)
		if err != nil {
			return "", err
		}
		return formatCores(id, res), nil
	}), nil
}

// formatCores lists the running core jobs as their progress messages read,
// and names the finished ones.
func formatCores(agentID string, res admin.SessionCoresResult) string {
	var b strings.Builder
	var finished []string
	for _, core := range res.Cores {
		if !core.Active {
			finished = append(finished, fmt.Sprintf("%s (%s)", core.Name, admin.StateText(core.State)))
			continue
		}
		b.WriteString("\n" + strings.Join(admin.ProgressLines(core.Name, core.LaneStatus), "\n  "))
	}
	out := fmt.Sprintf("%s runs no core job.", agentID)
	if b.Len() > 0 {
		out = fmt.Sprintf("Core jobs of %s:%s", agentID, b.String())
	}
	if len(finished) > 0 {
		out += "\nFinished: " + strings.Join(finished, ", ")
	}
	return out
}

func (c *Commands) cancel(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	var explicit, name string
	switch len(cmd.Args) {
	case 1:
		name = cmd.Args[0]
	case 2:
		explicit, name = cmd.Args[0], cmd.Args[1]
	default:
		return action{}, usagef("%s (the names /cores lists; edge cancels the edge's turn)", c.usage(sc, "cancel"))
	}
	id, err := c.target(ctx, sc, cmd, explicit)
	if err != nil {
		return action{}, err
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		if _, err := c.ctl.SessionCancel(ctx, sc, id, name); err != nil {
			return "", err
		}
		if name == "edge" {
			return fmt.Sprintf("Cancel sent: %s's edge stops its turn at the next safe point.", id), nil
		}
		return fmt.Sprintf("Cancel sent: core job %s of %s stops at its next safe point.", name, id), nil
	}), nil
}

func (c *Commands) compact(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "compact"))
	if err != nil {
		return action{}, err
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		if _, err := c.ctl.SessionCompact(ctx, sc, id); err != nil {
			return "", err
		}
		return fmt.Sprintf("Compaction requested: %s compacts the working memory of every lane (the edge and each running core job); each lane that folds anything tells you how much.", id), nil
	}), nil
}

func (c *Commands) events(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	var explicit string
	n := control.DefaultSessionEvents
	number := func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > control.MaxSessionEvents {
			return usagef("%s: n is a number from 1 to %d, not %q", c.usage(sc, "events"), control.MaxSessionEvents, s)
		}
		n = v
		return nil
	}
	switch len(cmd.Args) {
	case 0:
	case 1:
		if _, err := strconv.Atoi(cmd.Args[0]); err == nil {
			if err := number(cmd.Args[0]); err != nil {
				return action{}, err
			}
		} else {
			explicit = cmd.Args[0]
		}
	case 2:
		explicit = cmd.Args[0]
		if err := number(cmd.Args[1]); err != nil {
			return action{}, err
		}
	default:
		return action{}, usagef("%s", c.usage(sc, "events"))
	}
	id, err := c.target(ctx, sc, cmd, explicit)
	if err != nil {
		return action{}, err
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		res, err := c.ctl.SessionEvents(ctx, sc, id, n)
		if err != nil {
			return "", err
		}
		if len(res.Events) == 0 {
			return fmt.Sprintf("Session %s of %s has no events yet.", res.SessionID, id), nil
		}
		var b strings.Builder
		which := "live"
		if !res.Live {
			which = "last"
		}
		fmt.Fprintf(&b, "Last %d events of %s's %s session %s:", len(res.Events), id, which, res.SessionID)
		for _, e := range res.Events {
			fmt.Fprintf(&b, "\n#%d %s %s %s", e.Rev, e.CreatedAt.UTC().Format("15:04:05"), e.Lane, e.Type)
			if d := strings.Join(strings.Fields(e.Digest), " "); d != "" {
				b.WriteString(": " + truncate(d, 120))
			}
		}
		return b.String(), nil
	}), nil
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func (c *Commands) model(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	args := cmd.Args
	var explicit string
	if len(args) > 0 && args[0] != "llm" {
		explicit, args = args[0], args[1:]
	}
	var set string
	switch {
	case len(args) == 0:
	case len(args) == 2 && args[0] == "llm":
		set = args[1]
	default:
		return action{}, usagef("%s", c.usage(sc, "model"))
	}
	id, err := c.target(ctx, sc, cmd, explicit)
	if err != nil {
		return action{}, err
	}
	if set == "" {
		return cmdRead(func(ctx context.Context) (string, error) {
			st, err := c.ctl.ModelGet(ctx, sc, id)
			if err != nil {
				return "", err
			}
			return formatModel(st), nil
		}), nil
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		if _, err := c.ctl.ModelSet(ctx, sc, id, set); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s now uses model %s, until it restarts.", id, set), nil
	}), nil
}

func formatModel(st admin.ModelState) string {
	llm, voice := st.LLM, st.VoiceProfile
	if st.LLMOverridden {
		llm += " (switched for this session)"
	}
	if voice == "" {
		voice = "none"
	} else if st.VoiceOverridden {
		voice += " (switched for this session)"
	}
	running := ""
	if !st.Running {
		running = " (not running: its defaults)"
	}
	return fmt.Sprintf("%s%s\nmodel: %s\nvoice profile: %s", st.AgentID, running, llm, voice)
}

func (c *Commands) voice(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	var explicit, set string
	cfg := c.ctl.Snapshot().Config
	switch len(cmd.Args) {
	case 0:
	case 1:
		// One word is an agent (an admin's /voice <agent-id>) unless it
		// names a voice profile.
		if _, voice := cfg.VoiceProfiles[cmd.Args[0]]; c.isAgent(cmd.Args[0]) && !voice {
			explicit = cmd.Args[0]
		} else {
			set = cmd.Args[0]
		}
	case 2:
		explicit, set = cmd.Args[0], cmd.Args[1]
	default:
		return action{}, usagef("%s", c.usage(sc, "voice"))
	}
	id, err := c.target(ctx, sc, cmd, explicit)
	if err != nil {
		return action{}, err
	}
	if set == "" {
		return cmdRead(func(ctx context.Context) (string, error) {
			st, err := c.ctl.VoiceGet(ctx, sc, id)
			if err != nil {
				return "", err
			}
			return formatModel(st), nil
		}), nil
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		if _, err := c.ctl.VoiceSet(ctx, sc, id, set); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s now speaks with voice profile %s, until it restarts.", id, set), nil
	}), nil
}

func (c *Commands) inject(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	if strings.TrimSpace(cmd.Text) == "" {
		return action{}, usagef("Usage: /inject <message>")
	}
	id, err := c.target(ctx, sc, cmd, "")
	if err != nil {
		return action{}, err
	}
	// Not marked as changing: the injection's own inbox row, unique on
	// the same update, is what makes a redelivery a no-op.
	return cmdRead(func(ctx context.Context) (string, error) {
		if err := c.inbox.InboxInject(ctx, sc, cmd); err != nil {
			return "", err
		}
		return fmt.Sprintf("Injected: %s reads it at its next safe point.", id), nil
	}), nil
}
