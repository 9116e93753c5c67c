package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/rpc/admin"
)

// The DM command layer: the regular and admin command tables of spec 19.3
// on top of the control functions that choirctl calls too. Nothing here
// decides permissions or changes state by itself; it parses a command,
// picks the agent it targets, calls the control function with the DM's
// scope and words the answer.
//
// Redelivery. Telegram may deliver an update again after choird restarts
// (same gateway and update id). A command that changes state is first
// recorded as an inbox row of kind 'command' (unique on gateway, update
// id, with no agent, so the inbox's delivery never picks it up) and runs
// only if that insert made the row: a redelivered /stop, /approve or
// /model llm is answered "already received" and not run again. Commands
// that only read run every time. /inject is the exception: its own inbox
// row (kind 'inject') is its record, with the same key.
//
// Long commands. The gateway calls Command on its update loop, which must
// not wait for a graceful stop, a build or an update. Those commands answer
// at once ("Stopping assistant…") and send their outcome, and /update-all
// its progress per agent, as messages to the chat when done.

// dmCommands implements gateway.Commands.
type dmCommands struct {
	d *Daemon

	mu sync.Mutex
	// lists holds, per DM, the approval ids of the numbered list last
	// shown there, for "/approve 2". Bounded by the configured DMs and
	// maxApprovalChoices.
	lists map[string][]string

	// bg counts the long commands still running.
	bg sync.WaitGroup
	// notify sends a long command's outcome or progress to the chat the
	// command came from.
	notify func(ctx context.Context, cmd gateway.Command, text string)
}

var _ gateway.Commands = (*dmCommands)(nil)

// maxApprovalChoices bounds the numbered list of pending approvals.
const maxApprovalChoices = 20

// dmCommands returns the slash-command layer of the DMs. Each call makes
// a layer of its own: the gateway keeps the one it is given.
func (d *Daemon) dmCommands() gateway.Commands { return d.newDMCommands() }

func (d *Daemon) newDMCommands() *dmCommands {
	c := &dmCommands{d: d, lists: map[string][]string{}}
	c.notify = c.send
	return c
}

// send delivers text to a command's chat through its bot; without a bot
// for the gateway (a console DM), it is only logged.
func (c *dmCommands) send(ctx context.Context, cmd gateway.Command, text string) {
	g := c.d.gateway
	if g == nil || !g.Serves(cmd.DM.Gateway) {
		c.d.logger.InfoContext(ctx, "command outcome not sent: the dm's gateway has no bot", slog.String("dm", cmd.DM.Name),
			slog.String("command", cmd.Name), slog.String("outcome", text))
		return
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := g.SendText(sctx, cmd.DM.Gateway, cmd.ChatID, text); err != nil {
		c.d.logger.WarnContext(ctx, "command outcome not sent", slog.String("dm", cmd.DM.Name), slog.String("command", cmd.Name),
			slog.String("error", err.Error()))
	}
}

// wait waits for the long commands running in the background.
func (c *dmCommands) wait() { c.bg.Wait() }

// action is a parsed command, ready to run.
type action struct {
	// changes marks a command that changes state: it runs at most once
	// per update.
	changes bool
	// background, when set, is the immediate answer; run then goes on in
	// the background and its answer is sent when it ends.
	background string
	run        func(ctx context.Context) (string, error)
}

func cmdRead(fn func(ctx context.Context) (string, error)) action { return action{run: fn} }
func cmdChange(fn func(ctx context.Context) (string, error)) action {
	return action{changes: true, run: fn}
}
func cmdLong(msg string, fn func(ctx context.Context) (string, error)) action {
	return action{changes: true, background: msg, run: fn}
}

// dmCommand is one row of the command tables.
type dmCommand struct {
	name string
	// usage and adminUsage are the forms in regular and admin DMs.
	usage, adminUsage string
	help              string
	// adminOnly commands are refused in regular DMs.
	adminOnly bool
	parse     func(c *dmCommands, ctx context.Context, sc Scope, cmd gateway.Command) (action, error)
}

// commandTable is spec 19.3's regular table, then the admin table, in the
// order /help lists them.
var commandTable []dmCommand

// commandAliases map other spellings to a table name.
var commandAliases = map[string]string{
	// Telegram command names are letters, digits and underscores, so a
	// client sends /update-all as /update_all.
	"update-all": "update_all", "updateall": "update_all",
}

func init() {
	commandTable = []dmCommand{
		{name: "status", usage: "/status", adminUsage: "/status [agent-id]", help: "state, lanes, budgets, skill and uptime",
			parse: (*dmCommands).status},
		{name: "stop", usage: "/stop", adminUsage: "/stop [agent-id]", help: "stop gracefully (session kept)",
			parse: (*dmCommands).stop},
		{name: "restart", usage: "/restart", adminUsage: "/restart [agent-id]", help: "stop and start, same image",
			parse: (*dmCommands).restart},
		{name: "cores", usage: "/cores", adminUsage: "/cores [agent-id]", help: "core jobs with name, state and step",
			parse: (*dmCommands).cores},
		{name: "cancel", usage: "/cancel <name>", adminUsage: "/cancel [agent-id] <name>",
			help: "cancel a core job by name (edge: the edge's turn)", parse: (*dmCommands).cancel},
		{name: "compact", usage: "/compact", adminUsage: "/compact [agent-id]", help: "compact working memory",
			parse: (*dmCommands).compact},
		{name: "events", usage: "/events [n]", adminUsage: "/events [agent-id] [n]", help: "the last n events of the session",
			parse: (*dmCommands).events},
		{name: "model", usage: "/model | /model llm <name>", adminUsage: "/model [agent-id] [llm <name>]",
			help: "show or switch the LLM model until restart", parse: (*dmCommands).model},
		{name: "voice", usage: "/voice [name]", adminUsage: "/voice [agent-id] [name]",
			help: "show or switch the voice profile until restart", parse: (*dmCommands).voice},
		{name: "inject", usage: "/inject <message>", help: "inject a message at the edge's next safe point",
			parse: (*dmCommands).inject},
		{name: "approvals", usage: "/approvals", adminUsage: "/approvals [agent-id]", help: "list pending approvals",
			parse: (*dmCommands).approvals},
		{name: "approve", usage: "/approve [id|number]", help: "approve (reply to the request, or pick from the list)",
			parse: func(c *dmCommands, ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
				return c.decide(sc, cmd, true)
			}},
		{name: "reject", usage: "/reject [id|number]", help: "reject, as /approve",
			parse: func(c *dmCommands, ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
				return c.decide(sc, cmd, false)
			}},
		{name: "help", usage: "/help", help: "this list", parse: func(c *dmCommands, _ context.Context, sc Scope, _ gateway.Command) (action, error) {
			return cmdRead(func(context.Context) (string, error) { return c.help(sc), nil }), nil
		}},

		{name: "start", adminOnly: true, usage: "/start <agent-id> [key=value ...]",
			help: "start an agent bound to this DM; keys: " + strings.Join(startKeys, ", "), parse: (*dmCommands).start},
		{name: "update", adminOnly: true, usage: "/update [agent-id]", help: "build, stop and start with the new image",
			parse: (*dmCommands).update},
		{name: "update_all", adminOnly: true, usage: "/update_all", help: "build and redeploy every agent",
			parse: (*dmCommands).updateAll},
		{name: "config", adminOnly: true, usage: "/config load|diff|apply", help: "stage, compare, apply config.json",
			parse: (*dmCommands).configCmd},
		{name: "workspace", adminOnly: true, usage: "/workspace list|reset <name>", help: "list or reset workspaces",
			parse: (*dmCommands).workspace},
		{name: "secret", adminOnly: true, usage: "/secret list", help: "list secret names",
			parse: (*dmCommands).secret},
		{name: "agent", adminOnly: true, usage: "/agent list|build <agent-id>", help: "list agents, build an image",
			parse: (*dmCommands).agent},
	}
}

func lookupCommand(name string) (dmCommand, bool) {
	if a, ok := commandAliases[name]; ok {
		name = a
	}
	for _, c := range commandTable {
		if c.name == name {
			return c, true
		}
	}
	return dmCommand{}, false
}

// help lists the commands a DM may use.
func (c *dmCommands) help(sc Scope) string {
	var b strings.Builder
	if sc.Admin {
		b.WriteString("Admin commands (an agent id picks the agent; without one, the agent bound to this DM):\n")
	} else if sc.Agent != "" {
		fmt.Fprintf(&b, "Commands (this DM controls %s):\n", sc.Agent)
	} else if sc.Unbound != nil {
		fmt.Fprintf(&b, "Commands (this DM controls no agent now: %v):\n", sc.Unbound)
	} else {
		b.WriteString("Commands (no agent is bound to this DM yet; an admin can bind one with /start <agent-id>):\n")
	}
	for _, cmd := range commandTable {
		if cmd.adminOnly && !sc.Admin {
			continue
		}
		usage := cmd.usage
		if sc.Admin && cmd.adminUsage != "" {
			usage = cmd.adminUsage
		}
		fmt.Fprintf(&b, "%s: %s\n", usage, cmd.help)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Command implements gateway.Commands. Refusals, usage and failures are
// answers; an error means the command could not be looked at (Postgres is
// unreachable), and the gateway retries the update.
func (c *dmCommands) Command(ctx context.Context, cmd gateway.Command) (string, error) {
	sc, err := c.d.DMScope(ctx, cmd.DM)
	if err != nil {
		return "", err
	}
	def, ok := lookupCommand(cmd.Name)
	if !ok {
		return fmt.Sprintf("Unknown command /%s.\n%s", cmd.Name, c.help(sc)), nil
	}
	if def.name == "start" && len(cmd.Args) == 0 {
		// Telegram sends a bare /start when a user first opens the chat.
		return c.help(sc), nil
	}
	if def.adminOnly && !sc.Admin {
		c.d.logger.InfoContext(ctx, "dm command refused", slog.String("dm", cmd.DM.Name), slog.String("command", cmd.Name),
			slog.String("reason", "needs an admin dm"))
		return fmt.Sprintf("Refused: /%s needs an admin DM (this DM can use: %s).", def.name, c.names(sc)), nil
	}
	act, err := def.parse(c, ctx, sc, cmd)
	if err != nil {
		return c.answerErr(ctx, cmd, err), nil
	}
	if act.changes {
		first, err := c.claim(ctx, cmd)
		if err != nil {
			return "", err
		}
		if !first {
			c.d.logger.InfoContext(ctx, "command redelivered; not run again", slog.String("dm", cmd.DM.Name),
				slog.String("command", cmd.Name), slog.Int64("update_id", cmd.UpdateID))
			return fmt.Sprintf("/%s was already received (update %d); it is not run twice.", cmd.Name, cmd.UpdateID), nil
		}
	}
	c.d.logger.InfoContext(ctx, "dm command", slog.String("dm", cmd.DM.Name), slog.String("command", cmd.Name),
		slog.Bool("admin", sc.Admin), slog.Int64("update_id", cmd.UpdateID))
	if act.background != "" {
		c.bg.Go(func() {
			out, err := c.runRecovered(ctx, cmd, act.run)
			if err != nil {
				out = c.answerErr(ctx, cmd, err)
			}
			c.notify(ctx, cmd, out)
		})
		return act.background, nil
	}
	out, err := act.run(ctx)
	if err != nil {
		return c.answerErr(ctx, cmd, err), nil
	}
	return out, nil
}

// answerErr words a command's error for the chat, and logs a refusal.
func (c *dmCommands) answerErr(ctx context.Context, cmd gateway.Command, err error) string {
	if errors.Is(err, ErrForbidden) {
		c.d.logger.InfoContext(ctx, "dm command refused", slog.String("dm", cmd.DM.Name), slog.String("command", cmd.Name),
			slog.String("reason", err.Error()))
	}
	return answerErr(err)
}

// runRecovered runs the rest of a long command, in the background. A panic
// there fails that command, not choird: it is logged with its stack and
// answered as an internal error.
func (c *dmCommands) runRecovered(ctx context.Context, cmd gateway.Command, run func(context.Context) (string, error)) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.d.logger.ErrorContext(ctx, "dm command panicked", slog.String("dm", cmd.DM.Name),
				slog.String("command", cmd.Name), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			out, err = "", fmt.Errorf("/%s stopped on an internal error (see choird's log)", cmd.Name)
		}
	}()
	return run(ctx)
}

// names lists the command names a scope may use.
func (c *dmCommands) names(sc Scope) string {
	var out []string
	for _, cmd := range commandTable {
		if !cmd.adminOnly || sc.Admin {
			out = append(out, "/"+cmd.name)
		}
	}
	return strings.Join(out, " ")
}

// claim records a state-changing command by its update; false means the
// update was seen before.
func (c *dmCommands) claim(ctx context.Context, cmd gateway.Command) (bool, error) {
	text := strings.TrimSpace("/" + cmd.Name + " " + cmd.Text)
	_, err := inboxInsert(ctx, c.d.pool, gateway.InboundMessage{DM: cmd.DM, UpdateID: cmd.UpdateID, ChatID: cmd.ChatID,
		MessageID: cmd.MessageID, Text: text}, "command", nil)
	if errors.Is(err, gateway.ErrDuplicate) {
		return false, nil
	}
	return err == nil, err
}

// usageError is a command used wrongly; its text is the answer.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// answerErr words a control error for the chat.
func answerErr(err error) string {
	var u usageError
	switch {
	case errors.As(err, &u):
		return u.msg
	case errors.Is(err, ErrForbidden):
		return "Refused: " + strings.ReplaceAll(err.Error(), ErrForbidden.Error()+": ", "")
	case errors.Is(err, ErrNotRunning):
		return strings.ReplaceAll(err.Error(), ErrNotRunning.Error()+": ", "")
	}
	return "Failed: " + err.Error()
}

// errUnbound answers a regular DM that no agent is bound to.
var errUnbound = usageError{"No agent is bound to this DM, so there is nothing to control. An admin can bind one with /start <agent-id>."}

// unbound answers a command from a regular DM that controls no agent:
// none is configured for it, or its agent runs bound to another DM.
func unbound(sc Scope, cmd gateway.Command) error {
	if sc.Unbound != nil {
		return fmt.Errorf("%w: /%s: %w", ErrForbidden, cmd.Name, sc.Unbound)
	}
	return errUnbound
}

// target resolves the agent a command acts on. explicit is the agent-id
// argument, if the command was given one. A regular DM always acts on its
// bound agent and takes no agent id; an admin DM acts on the agent it
// names, or else on the agent bound to it.
func (c *dmCommands) target(ctx context.Context, sc Scope, cmd gateway.Command, explicit string) (string, error) {
	if !sc.Admin {
		switch {
		case sc.Agent == "":
			return "", unbound(sc, cmd)
		case explicit == "":
			return sc.Agent, nil
		case explicit == sc.Agent:
			return "", fmt.Errorf("%w: this DM controls only agent %s and takes no agent id: send /%s without it",
				ErrForbidden, sc.Agent, cmd.Name)
		}
		return "", sc.allow(explicit)
	}
	if explicit != "" {
		return explicit, c.d.knownAgent(explicit)
	}
	b, err := c.d.DMBindingOf(ctx, cmd.DM.Name)
	if errors.Is(err, gateway.ErrNotBound) {
		cfg, _ := c.d.config()
		return "", usagef("Name the agent: /%s <agent-id> (no agent is bound to this DM; agents: %s).", cmd.Name,
			strings.Join(sortedKeys(cfg.Agents), ", "))
	}
	if err != nil {
		return "", err
	}
	return b.AgentID, nil
}

// isAgent reports whether s names a configured agent.
func (c *dmCommands) isAgent(s string) bool {
	cfg, _ := c.d.config()
	_, ok := cfg.Agents[s]
	return ok
}

// optionalAgent takes the agent-id argument of a command whose only
// argument is an optional agent id.
func (c *dmCommands) optionalAgent(ctx context.Context, sc Scope, cmd gateway.Command, usage string) (string, error) {
	switch len(cmd.Args) {
	case 0:
		return c.target(ctx, sc, cmd, "")
	case 1:
		return c.target(ctx, sc, cmd, cmd.Args[0])
	}
	return "", usagef("Usage: %s", usage)
}

func (c *dmCommands) usage(sc Scope, name string) string {
	def, _ := lookupCommand(name)
	if sc.Admin && def.adminUsage != "" {
		return "Usage: " + def.adminUsage
	}
	return "Usage: " + def.usage
}

func (c *dmCommands) status(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "status"))
	if err != nil {
		return action{}, err
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		st, err := c.d.SessionStatus(ctx, sc, id)
		if err != nil {
			return "", err
		}
		return formatStatus(st), nil
	}), nil
}

func formatStatus(st SessionStatusResult) string {
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
	for _, l := range st.Lanes {
		fmt.Fprintf(&b, "\n%s: %s", l.Lane, l.State)
		if l.Skill != "" {
			fmt.Fprintf(&b, ", skill %s", l.Skill)
		}
		if l.Step != "" {
			fmt.Fprintf(&b, ", step %s", l.Step)
		}
		if bud := formatBudget(l); bud != "" {
			b.WriteString(", budget left " + bud)
		}
	}
	return b.String()
}

func formatBudget(l LaneStatus) string {
	var parts []string
	if v := l.BudgetRemaining.Tokens; v != nil {
		parts = append(parts, fmt.Sprintf("%d tokens", *v))
	}
	if v := l.BudgetRemaining.ToolCalls; v != nil {
		parts = append(parts, fmt.Sprintf("%d tool calls", *v))
	}
	if v := l.BudgetRemaining.TimeMS; v != nil {
		parts = append(parts, (time.Duration(*v) * time.Millisecond).String())
	}
	return strings.Join(parts, ", ")
}

func (c *dmCommands) stop(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "stop"))
	if err != nil {
		return action{}, err
	}
	if err := sc.allow(id); err != nil {
		return action{}, err
	}
	return cmdLong(fmt.Sprintf("Stopping %s: it finishes its current step, writes its summary and exits…", id),
		func(ctx context.Context) (string, error) {
			if _, err := c.d.AgentStop(ctx, sc, id); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s stopped; its session is saved.", id), nil
		}), nil
}

func (c *dmCommands) restart(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "restart"))
	if err != nil {
		return action{}, err
	}
	if err := sc.allow(id); err != nil {
		return action{}, err
	}
	return cmdLong(fmt.Sprintf("Restarting %s…", id), func(ctx context.Context) (string, error) {
		st, err := c.d.AgentRestart(ctx, sc, id)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s restarted: %s, session %s.", id, st.State, st.SessionID), nil
	}), nil
}

func (c *dmCommands) cores(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "cores"))
	if err != nil {
		return action{}, err
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		res, err := c.d.SessionCores(ctx, sc, id)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		n := 0
		for _, core := range res.Cores {
			if !core.Active {
				continue
			}
			n++
			fmt.Fprintf(&b, "\n%s: %s", core.Name, core.State)
			if core.Step != "" {
				fmt.Fprintf(&b, ", step %s", core.Step)
			}
			if core.Skill != "" {
				fmt.Fprintf(&b, ", skill %s", core.Skill)
			}
		}
		if n == 0 {
			return fmt.Sprintf("%s runs no core job.", id), nil
		}
		return fmt.Sprintf("Core jobs of %s:%s", id, b.String()), nil
	}), nil
}

func (c *dmCommands) cancel(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
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
		if _, err := c.d.SessionCancel(ctx, sc, id, name); err != nil {
			return "", err
		}
		if name == "edge" {
			return fmt.Sprintf("Cancel sent: %s's edge stops its turn at the next safe point.", id), nil
		}
		return fmt.Sprintf("Cancel sent: core job %s of %s stops at its next safe point.", name, id), nil
	}), nil
}

func (c *dmCommands) compact(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, c.usage(sc, "compact"))
	if err != nil {
		return action{}, err
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		if _, err := c.d.SessionCompact(ctx, sc, id); err != nil {
			return "", err
		}
		return fmt.Sprintf("Compaction requested: %s compacts its working memory at the next safe point.", id), nil
	}), nil
}

func (c *dmCommands) events(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	var explicit string
	n := DefaultSessionEvents
	number := func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > MaxSessionEvents {
			return usagef("%s: n is a number from 1 to %d, not %q", c.usage(sc, "events"), MaxSessionEvents, s)
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
		res, err := c.d.SessionEvents(ctx, sc, id, n)
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

func (c *dmCommands) model(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
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
			st, err := c.d.ModelGet(ctx, sc, id)
			if err != nil {
				return "", err
			}
			return formatModel(st), nil
		}), nil
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		if _, err := c.d.ModelSet(ctx, sc, id, set); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s now uses model %s, until it restarts.", id, set), nil
	}), nil
}

func formatModel(st ModelState) string {
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

func (c *dmCommands) voice(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	var explicit, set string
	cfg, _ := c.d.config()
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
			st, err := c.d.VoiceGet(ctx, sc, id)
			if err != nil {
				return "", err
			}
			return formatModel(st), nil
		}), nil
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		if _, err := c.d.VoiceSet(ctx, sc, id, set); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s now speaks with voice profile %s, until it restarts.", id, set), nil
	}), nil
}

func (c *dmCommands) inject(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
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
		if err := c.d.InboxInject(ctx, sc, cmd); err != nil {
			return "", err
		}
		return fmt.Sprintf("Injected: %s reads it at its next safe point.", id), nil
	}), nil
}

func (c *dmCommands) approvals(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	var filter string
	switch len(cmd.Args) {
	case 0:
	case 1:
		id, err := c.target(ctx, sc, cmd, cmd.Args[0])
		if err != nil {
			return action{}, err
		}
		filter = id
	default:
		return action{}, usagef("%s", c.usage(sc, "approvals"))
	}
	if !sc.Admin && sc.Agent == "" {
		return action{}, unbound(sc, cmd)
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		pending, err := c.d.ApprovalList(ctx, sc, filter)
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
func (c *dmCommands) numbered(cmd gateway.Command, pending []Approval, title string) string {
	if len(pending) > maxApprovalChoices {
		pending = pending[:maxApprovalChoices]
	}
	ids := make([]string, len(pending))
	var b strings.Builder
	fmt.Fprintf(&b, "%s (/approve <number> or /reject <number>):", title)
	for i, a := range pending {
		ids[i] = a.ID
		fmt.Fprintf(&b, "\n%d. %s: %s [%s, id %s, expires %s]", i+1, a.AgentID, truncate(a.Summary, 200), a.RequestType, a.ID,
			a.ExpiresAt.UTC().Format("15:04 MST"))
	}
	c.mu.Lock()
	c.lists[cmd.DM.Name] = ids
	c.mu.Unlock()
	return b.String()
}

// decide is /approve and /reject: an id or a number of the last list
// decides that approval; with neither, the approval whose request message
// the command replies to, else the only pending one, else a numbered list.
func (c *dmCommands) decide(sc Scope, cmd gateway.Command, approve bool) (action, error) {
	verb := "approve"
	if !approve {
		verb = "reject"
	}
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
		if _, err := parseApprovalID(arg); err != nil {
			return action{}, usagef("%q is neither an approval id nor a number from the list: send /approvals to see them, then /%s <number>.",
				arg, verb)
		}
		pick = func(context.Context) (string, string, error) { return arg, "", nil }
	case cmd.ReplyToMessageID != 0:
		pick = func(ctx context.Context) (string, string, error) {
			a, err := c.d.ApprovalForMessage(ctx, sc, cmd.DM.Gateway, cmd.ChatID, cmd.ReplyToMessageID)
			if errors.Is(err, ErrNotFound) {
				return "", fmt.Sprintf("The message you replied to is not an approval request. Send /%s without replying to pick from the pending ones.", verb), nil
			}
			return a.ID, "", err
		}
	default:
		pick = func(ctx context.Context) (string, string, error) {
			pending, err := c.d.ApprovalList(ctx, sc, "")
			if err != nil {
				return "", "", err
			}
			switch len(pending) {
			case 0:
				return "", "No approval is pending.", nil
			case 1:
				return pending[0].ID, "", nil
			}
			return "", c.numbered(cmd, pending, fmt.Sprintf("%d approvals are pending; which one", len(pending))), nil
		}
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		id, answer, err := pick(ctx)
		if err != nil || answer != "" {
			return answer, err
		}
		a, err := c.d.ApprovalDecide(ctx, sc, id, approve)
		if errors.Is(err, ErrForbidden) {
			return "", err
		}
		ans, err := decisionAnswer(a, err)
		if err != nil {
			return "", err
		}
		if a.ID == "" {
			return ans + ".", nil
		}
		return fmt.Sprintf("%s: %s (%s, id %s).", ans, truncate(a.Summary, 200), a.AgentID, a.ID), nil
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
func (c *dmCommands) pickNumbered(ctx context.Context, sc Scope, cmd gateway.Command, verb string, n int) (string, string, error) {
	c.mu.Lock()
	ids := slices.Clone(c.lists[cmd.DM.Name])
	c.mu.Unlock()
	if len(ids) == 0 {
		return "", fmt.Sprintf("No numbered list was shown in this chat: send /approvals first, then /%s <number>.", verb), nil
	}
	if n < 1 || n > len(ids) {
		return "", fmt.Sprintf("The last list had %d approvals; there is no number %d. Send /approvals for the current list.", len(ids), n), nil
	}
	a, err := c.d.ApprovalShow(ctx, sc, ids[n-1])
	if errors.Is(err, ErrNotFound) {
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

// startKeys are the /start keys: StartOverrides' JSON names but dm, which
// is the DM the command comes from.
var startKeys = []string{"workspace", "llm", "voice_profile", "git_identity", "notion", "email"}

func (c *dmCommands) start(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	id := cmd.Args[0]
	if err := c.d.knownAgent(id); err != nil {
		return action{}, err
	}
	o := StartOverrides{DM: cmd.DM.Name}
	fields := map[string]*string{"workspace": &o.Workspace, "llm": &o.LLM, "voice_profile": &o.VoiceProfile,
		"git_identity": &o.GitIdentity, "notion": &o.Notion, "email": &o.Email}
	seen := map[string]bool{}
	for _, kv := range cmd.Args[1:] {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.ReplaceAll(strings.ToLower(k), "-", "_")
		switch {
		case !ok || v == "":
			return action{}, usagef("%q is not key=value. Usage: /start <agent-id> [key=value ...] with keys %s.", kv,
				strings.Join(startKeys, ", "))
		case k == "dm":
			return action{}, usagef("dm cannot be set: /start binds the agent to this DM (%s). Send /start from the DM it should talk on.",
				cmd.DM.Name)
		case fields[k] == nil:
			return action{}, usagef("Unknown key %q. Valid keys: %s.", k, strings.Join(startKeys, ", "))
		case seen[k]:
			return action{}, usagef("Key %s is given twice.", k)
		}
		seen[k] = true
		*fields[k] = v
	}
	b, err := c.d.DMBindingOf(ctx, cmd.DM.Name)
	if err != nil && !errors.Is(err, gateway.ErrNotBound) {
		return action{}, err
	}
	if b.Live() && b.AgentID != id {
		return action{}, usagef("Refused: this DM is bound to %s, which is running. Stop it first (/stop %s), or start %s from another DM.",
			b.AgentID, b.AgentID, id)
	}
	return cmdLong(fmt.Sprintf("Starting %s on this DM…", id), func(ctx context.Context) (string, error) {
		st, err := c.d.AgentStart(ctx, sc, id, o)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s started (%s), session %s; it talks on this DM.", id, st.State, st.SessionID), nil
	}), nil
}

func (c *dmCommands) update(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, "/update [agent-id]")
	if err != nil {
		return action{}, err
	}
	return cmdLong(fmt.Sprintf("Updating %s: build if needed, then stop and start…", id), func(ctx context.Context) (string, error) {
		r, err := c.d.AgentUpdate(ctx, sc, id)
		if err != nil {
			return "", err
		}
		return formatUpdate(r), nil
	}), nil
}

func formatUpdate(r UpdateResult) string {
	s := r.AgentID + ": " + r.Outcome
	if r.Image != "" {
		s += " (" + r.Image + ")"
	}
	if r.Error != "" {
		s += ": " + r.Error
	}
	return s
}

func (c *dmCommands) updateAll(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	if len(cmd.Args) > 0 {
		return action{}, usagef("Usage: /update_all (it takes no argument; /update <agent-id> updates one agent)")
	}
	if err := sc.adminOnly("update-all"); err != nil {
		return action{}, err
	}
	cfg, _ := c.d.config()
	ids := sortedKeys(cfg.Agents)
	return cmdLong(fmt.Sprintf("Updating %d agents one after the other: %s…", len(ids), strings.Join(ids, ", ")),
		func(ctx context.Context) (string, error) {
			// AgentUpdateAll's loop, with a message as each agent is done
			// (spec 19.7: progress as each agent is processed).
			count := map[string]int{}
			for i, id := range ids {
				r, _ := c.d.AgentUpdate(ctx, sc, id)
				count[r.Outcome]++
				c.notify(ctx, cmd, fmt.Sprintf("[%d/%d] %s", i+1, len(ids), formatUpdate(r)))
			}
			var parts []string
			for _, o := range []string{"redeployed", "built", "skipped", "failed"} {
				parts = append(parts, fmt.Sprintf("%d %s", count[o], o))
			}
			return "update-all done: " + strings.Join(parts, ", ") + ".", nil
		}), nil
}

func (c *dmCommands) configCmd(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	if len(cmd.Args) != 1 {
		return action{}, usagef("Usage: /config load|diff|apply")
	}
	switch cmd.Args[0] {
	case "load":
		return cmdChange(func(ctx context.Context) (string, error) {
			r, err := c.d.ConfigLoad(ctx, sc)
			if err != nil {
				return "", err
			}
			return "Staged.\n" + r.String(), nil
		}), nil
	case "diff":
		return cmdRead(func(ctx context.Context) (string, error) {
			r, err := c.d.ConfigDiff(ctx, sc)
			if err != nil {
				return "", err
			}
			return r.String(), nil
		}), nil
	case "apply":
		return cmdChange(func(ctx context.Context) (string, error) {
			r, err := c.d.ConfigApply(ctx, sc)
			if err != nil {
				return "", err
			}
			return r.String(), nil
		}), nil
	}
	return action{}, usagef("Unknown /config %s. Usage: /config load|diff|apply", cmd.Args[0])
}

func (c *dmCommands) workspace(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	switch {
	case len(cmd.Args) == 1 && cmd.Args[0] == "list":
		return cmdRead(func(ctx context.Context) (string, error) {
			ws, err := c.d.WorkspaceList(ctx, sc)
			if err != nil {
				return "", err
			}
			var b strings.Builder
			b.WriteString("Workspaces:")
			for _, w := range ws {
				holder := "free"
				if w.Holder != "" {
					holder = "leased by " + w.Holder
				}
				fmt.Fprintf(&b, "\n%s: %s (%s)", w.Name, w.Path, holder)
			}
			return b.String(), nil
		}), nil
	case len(cmd.Args) == 2 && cmd.Args[0] == "reset":
		name := cmd.Args[1]
		return cmdLong(fmt.Sprintf("Resetting workspace %s (its agent is stopped first)…", name), func(ctx context.Context) (string, error) {
			w, err := c.d.WorkspaceReset(ctx, sc, name)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("Workspace %s (%s) is empty.", w.Name, w.Path), nil
		}), nil
	}
	return action{}, usagef("Usage: /workspace list|reset <name>")
}

func (c *dmCommands) secret(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	if len(cmd.Args) != 1 || cmd.Args[0] != "list" {
		return action{}, usagef("Usage: /secret list (values are never shown; set them with choirctl secret set)")
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		names, err := c.d.SecretList(ctx, sc)
		if err != nil {
			return "", err
		}
		if len(names) == 0 {
			return "No secrets.", nil
		}
		return "Secrets: " + strings.Join(names, ", "), nil
	}), nil
}

func (c *dmCommands) agent(ctx context.Context, sc Scope, cmd gateway.Command) (action, error) {
	switch {
	case len(cmd.Args) == 1 && cmd.Args[0] == "list":
		return cmdRead(func(ctx context.Context) (string, error) {
			agents, err := c.d.AgentList(ctx, sc)
			if err != nil {
				return "", err
			}
			var b strings.Builder
			b.WriteString("Agents:")
			for _, a := range agents {
				fmt.Fprintf(&b, "\n%s: %s", a.AgentID, a.State)
				if a.SessionID != "" {
					fmt.Fprintf(&b, ", session %s", a.SessionID)
				}
			}
			return b.String(), nil
		}), nil
	case len(cmd.Args) == 2 && cmd.Args[0] == "build":
		id := cmd.Args[1]
		if err := c.d.knownAgent(id); err != nil {
			return action{}, err
		}
		return cmdLong(fmt.Sprintf("Building the image of %s…", id), func(ctx context.Context) (string, error) {
			r, err := c.d.AgentBuild(ctx, sc, id, false)
			if err != nil {
				return "", err
			}
			if !r.Built {
				return fmt.Sprintf("%s: %s is up to date.", id, r.Image), nil
			}
			return fmt.Sprintf("%s: built %s.", id, r.Image), nil
		}), nil
	}
	return action{}, usagef("Usage: /agent list|build <agent-id>")
}
