// Package dmcmd is the DM command layer: the regular and admin slash
// command tables of spec 19.3, the approval buttons and the [Send again]
// buttons of replies that may not have arrived, on top of the
// control layer that choirctl calls too. It parses a command, picks the
// agent it targets, calls the control function with the DM's scope, runs
// long commands in the background and words every answer for the chat.
package dmcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/daemon/outbox"
)

// Nothing here decides permissions or changes state by itself.
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

// Commands is the DM command layer. It implements gateway.Commands,
// gateway.Approvals for the approval buttons and gateway.Resends for the
// [Send again] buttons.
type Commands struct {
	ctl   *control.Control
	appr  *approval.Service
	inbox *inbox.Inbox
	// resends serve /resend and the [Send again] buttons; nil refuses
	// them.
	resends *outbox.Resends
	pool    *pgxpool.Pool
	logger  *slog.Logger
	// gateway runs the Telegram bots; nil when none is configured. It is
	// set once, before the bots poll (SetGateway).
	gateway *gateway.Gateway

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

var (
	_ gateway.Commands  = (*Commands)(nil)
	_ gateway.Approvals = (*Commands)(nil)
)

// maxApprovalChoices bounds the numbered list of pending approvals.
const maxApprovalChoices = 20

// Options configure the DM command layer.
type Options struct {
	Control *control.Control
	// Approvals serve /approve, /reject, /approvals and the buttons.
	Approvals *approval.Service
	Inbox     *inbox.Inbox
	// Resends serve /resend and the [Send again] buttons.
	Resends *outbox.Resends
	Pool    *pgxpool.Pool
	Logger  *slog.Logger
	// Notify, when set, replaces sending a long command's outcome and
	// progress to its chat through the bots.
	Notify func(ctx context.Context, cmd gateway.Command, text string)
}

// New returns a slash-command layer of the DMs. Each call makes a layer of
// its own: the gateway keeps the one it is given.
func New(o Options) *Commands {
	c := &Commands{ctl: o.Control, appr: o.Approvals, inbox: o.Inbox, resends: o.Resends, pool: o.Pool, logger: o.Logger, lists: map[string][]string{}}
	c.notify = c.send
	if o.Notify != nil {
		c.notify = o.Notify
	}
	return c
}

// SetGateway sets the Telegram bots, through which long commands answer.
func (c *Commands) SetGateway(g *gateway.Gateway) { c.gateway = g }

// send delivers text to a command's chat through its bot; without a bot
// for the gateway (a console DM), it is only logged.
func (c *Commands) send(ctx context.Context, cmd gateway.Command, text string) {
	g := c.gateway
	if g == nil || !g.Serves(cmd.DM.Gateway) {
		c.logger.InfoContext(ctx, "command outcome not sent: the dm's gateway has no bot", slog.String("dm", cmd.DM.Name),
			slog.String("command", cmd.Name), slog.String("outcome", text))
		return
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := g.SendText(sctx, cmd.DM.Gateway, cmd.ChatID, text); err != nil {
		c.logger.WarnContext(ctx, "command outcome not sent", slog.String("dm", cmd.DM.Name), slog.String("command", cmd.Name),
			slog.String("error", err.Error()))
	}
}

// Wait waits for the long commands running in the background.
func (c *Commands) Wait() { c.bg.Wait() }

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
	parse     func(c *Commands, ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error)
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
			parse: (*Commands).status},
		{name: "stop", usage: "/stop", adminUsage: "/stop [agent-id]", help: "stop gracefully (session kept)",
			parse: (*Commands).stop},
		{name: "restart", usage: "/restart", adminUsage: "/restart [agent-id]", help: "stop and start, same image",
			parse: (*Commands).restart},
		{name: "cores", usage: "/cores", adminUsage: "/cores [agent-id]", help: "core jobs with name, state and step",
			parse: (*Commands).cores},
		{name: "cancel", usage: "/cancel <name>", adminUsage: "/cancel [agent-id] <name>",
			help: "cancel a core job by name (edge: the edge's turn)", parse: (*Commands).cancel},
		{name: "compact", usage: "/compact", adminUsage: "/compact [agent-id]", help: "compact working memory",
			parse: (*Commands).compact},
		{name: "events", usage: "/events [n]", adminUsage: "/events [agent-id] [n]", help: "the last n events of the session",
			parse: (*Commands).events},
		{name: "model", usage: "/model | /model llm <name>", adminUsage: "/model [agent-id] [llm <name>]",
			help: "show or switch the LLM model until restart", parse: (*Commands).model},
		{name: "voice", usage: "/voice [name]", adminUsage: "/voice [agent-id] [name]",
			help: "show or switch the voice profile until restart", parse: (*Commands).voice},
		{name: "inject", usage: "/inject <message>", help: "inject a message at the edge's next safe point",
			parse: (*Commands).inject},
		{name: "approvals", usage: "/approvals", adminUsage: "/approvals [agent-id]", help: "list pending approvals",
			parse: (*Commands).approvals},
		{name: "approve", usage: "/approve [id|number]", help: "approve (reply to the request, or pick from the list)",
			parse: func(c *Commands, ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
				return c.decide(sc, cmd, "approve")
			}},
		{name: "reject", usage: "/reject [id|number]", help: "reject, as /approve",
			parse: func(c *Commands, ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
				return c.decide(sc, cmd, "reject")
			}},
		{name: "always", usage: "/always [id|number]", help: "approve for good, as /approve (an egress host: reached without asking from then on)",
			parse: func(c *Commands, ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
				return c.decide(sc, cmd, "always")
			}},
		{name: "resend", usage: "/resend [number]",
			help: "send again a reply that may not have arrived (bare: the only one, or a list)", parse: (*Commands).resend},
		{name: "schedules", usage: "/schedules", adminUsage: "/schedules [agent-id]",
			help: "schedules and reminders still to fire (admin: every agent's, or one's)", parse: (*Commands).schedules},
		{name: "usage", usage: "/usage", adminUsage: "/usage [agent-id]",
			help: "spend against each usage cap, and per day", parse: (*Commands).usageCmd},
		{name: "help", usage: "/help", help: "this list", parse: func(c *Commands, _ context.Context, sc control.Scope, _ gateway.Command) (action, error) {
			return cmdRead(func(context.Context) (string, error) { return c.help(sc), nil }), nil
		}},

		{name: "start", adminOnly: true, usage: "/start <agent-id> [key=value ...]",
			help: "start an agent bound to this DM; keys: " + strings.Join(startKeys, ", "), parse: (*Commands).start},
		{name: "update", adminOnly: true, usage: "/update [agent-id]", help: "build, stop and start with the new image",
			parse: (*Commands).update},
		{name: "update_all", adminOnly: true, usage: "/update_all", help: "build and redeploy every agent",
			parse: (*Commands).updateAll},
		{name: "config", adminOnly: true, usage: "/config load|diff|apply", help: "stage, compare, apply config.json",
			parse: (*Commands).configCmd},
		{name: "cap", adminOnly: true, usage: "/cap <agent-id> <field> <value>", help: "raise or set a usage cap in config.json and apply it",
			parse: (*Commands).capCmd},
		{name: "workspace", adminOnly: true, usage: "/workspace list|reset <name>", help: "list or reset workspaces",
			parse: (*Commands).workspace},
		{name: "secret", adminOnly: true, usage: "/secret list", help: "list secret names",
			parse: (*Commands).secret},
		{name: "agent", adminOnly: true, usage: "/agent list|build <agent-id>", help: "list agents, build an image",
			parse: (*Commands).agent},
	}
}

// CommandNames lists the names of the command table, in the order /help
// lists them.
func CommandNames() []string {
	out := make([]string, len(commandTable))
	for i, c := range commandTable {
		out[i] = c.name
	}
	return out
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
func (c *Commands) help(sc control.Scope) string {
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
func (c *Commands) Command(ctx context.Context, cmd gateway.Command) (string, error) {
	sc, err := c.ctl.DMScope(ctx, controlDM(cmd.DM))
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
		c.logger.InfoContext(ctx, "dm command refused", slog.String("dm", cmd.DM.Name), slog.String("command", cmd.Name),
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
			c.logger.InfoContext(ctx, "command redelivered; not run again", slog.String("dm", cmd.DM.Name),
				slog.String("command", cmd.Name), slog.Int64("update_id", cmd.UpdateID))
			return fmt.Sprintf("/%s was already received (update %d); it is not run twice.", cmd.Name, cmd.UpdateID), nil
		}
	}
	c.logger.InfoContext(ctx, "dm command", slog.String("dm", cmd.DM.Name), slog.String("command", cmd.Name),
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
func (c *Commands) answerErr(ctx context.Context, cmd gateway.Command, err error) string {
	if errors.Is(err, control.ErrForbidden) {
		c.logger.InfoContext(ctx, "dm command refused", slog.String("dm", cmd.DM.Name), slog.String("command", cmd.Name),
			slog.String("reason", err.Error()))
	}
	return answerErr(err)
}

// runRecovered runs the rest of a long command, in the background. A panic
// there fails that command, not choird: it is logged with its stack and
// answered as an internal error.
func (c *Commands) runRecovered(ctx context.Context, cmd gateway.Command, run func(context.Context) (string, error)) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.logger.ErrorContext(ctx, "dm command panicked", slog.String("dm", cmd.DM.Name),
				slog.String("command", cmd.Name), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			out, err = "", fmt.Errorf("/%s stopped on an internal error (see choird's log)", cmd.Name)
		}
	}()
	return run(ctx)
}

// names lists the command names a scope may use.
func (c *Commands) names(sc control.Scope) string {
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
func (c *Commands) claim(ctx context.Context, cmd gateway.Command) (bool, error) {
	text := strings.TrimSpace("/" + cmd.Name + " " + cmd.Text)
	_, err := inbox.Insert(ctx, c.pool, gateway.InboundMessage{DM: cmd.DM, UpdateID: cmd.UpdateID, ChatID: cmd.ChatID,
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
	case errors.Is(err, control.ErrForbidden):
		return "Refused: " + strings.ReplaceAll(err.Error(), control.ErrForbidden.Error()+": ", "")
	case errors.Is(err, control.ErrNotRunning):
		return strings.ReplaceAll(err.Error(), control.ErrNotRunning.Error()+": ", "")
	}
	return "Failed: " + err.Error()
}

// errUnbound answers a regular DM that no agent is bound to.
var errUnbound = usageError{"No agent is bound to this DM, so there is nothing to control. An admin can bind one with /start <agent-id>."}

// unbound answers a command from a regular DM that controls no agent:
// none is configured for it, or its agent runs bound to another DM.
func unbound(sc control.Scope, cmd gateway.Command) error {
	if sc.Unbound != nil {
		return fmt.Errorf("%w: /%s: %w", control.ErrForbidden, cmd.Name, sc.Unbound)
	}
	return errUnbound
}

// target resolves the agent a command acts on. explicit is the agent-id
// argument, if the command was given one. A regular DM always acts on its
// bound agent and takes no agent id; an admin DM acts on the agent it
// names, or else on the agent bound to it.
func (c *Commands) target(ctx context.Context, sc control.Scope, cmd gateway.Command, explicit string) (string, error) {
	if !sc.Admin {
		switch {
		case sc.Agent == "":
			return "", unbound(sc, cmd)
		case explicit == "":
			return sc.Agent, nil
		case explicit == sc.Agent:
			return "", fmt.Errorf("%w: this DM controls only agent %s and takes no agent id: send /%s without it",
				control.ErrForbidden, sc.Agent, cmd.Name)
		}
		return "", sc.Allow(explicit)
	}
	if explicit != "" {
		return explicit, c.ctl.KnownAgent(explicit)
	}
	b, err := c.ctl.DMBindingOf(ctx, cmd.DM.Name)
	if errors.Is(err, control.ErrNotBound) {
		cfg := c.ctl.Snapshot().Config
		return "", usagef("Name the agent: /%s <agent-id> (no agent is bound to this DM; agents: %s).", cmd.Name,
			strings.Join(slices.Sorted(maps.Keys(cfg.Agents)), ", "))
	}
	if err != nil {
		return "", err
	}
	return b.AgentID, nil
}

// isAgent reports whether s names a configured agent.
func (c *Commands) isAgent(s string) bool {
	cfg := c.ctl.Snapshot().Config
	_, ok := cfg.Agents[s]
	return ok
}

// optionalAgent takes the agent-id argument of a command whose only
// argument is an optional agent id.
func (c *Commands) optionalAgent(ctx context.Context, sc control.Scope, cmd gateway.Command, usage string) (string, error) {
	switch len(cmd.Args) {
	case 0:
		return c.target(ctx, sc, cmd, "")
	case 1:
		return c.target(ctx, sc, cmd, cmd.Args[0])
	}
	return "", usagef("Usage: %s", usage)
}

func (c *Commands) usage(sc control.Scope, name string) string {
	def, _ := lookupCommand(name)
	if sc.Admin && def.adminUsage != "" {
		return "Usage: " + def.adminUsage
	}
	return "Usage: " + def.usage
}

// controlDM is the control layer's identity of the gateway's sender.
func controlDM(dm gateway.DM) control.DM { return control.DM{Name: dm.Name, Admin: dm.Admin} }
