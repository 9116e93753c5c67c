package dmcmd

import (
	"context"
	"errors"
	"fmt"
	"github.com/choirhq/choir/rpc/admin"
	"maps"
	"slices"
	"strings"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
)

// startKeys are the /start keys: admin.StartOverrides' JSON names but dm, which
// is the DM the command comes from.
var startKeys = []string{"workspace", "llm", "voice_profile", "git_identity", "notion", "email"}

func (c *Commands) start(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	id := cmd.Args[0]
	if err := c.ctl.KnownAgent(id); err != nil {
		return action{}, err
	}
	o := admin.StartOverrides{DM: cmd.DM.Name}
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
	b, err := c.ctl.DMBindingOf(ctx, cmd.DM.Name)
	if err != nil && !errors.Is(err, control.ErrNotBound) {
		return action{}, err
	}
	if b.Live() && b.AgentID != id {
		return action{}, usagef("Refused: this DM is bound to %s, which is running. Stop it first (/stop %s), or start %s from another DM.",
			b.AgentID, b.AgentID, id)
	}
	return cmdLong(fmt.Sprintf("Starting %s on this DM…", id), func(ctx context.Context) (string, error) {
		st, err := c.ctl.AgentStart(ctx, sc, id, o)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s started (%s), session %s; it talks on this DM.", id, st.State, st.SessionID), nil
	}), nil
}

func (c *Commands) update(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	id, err := c.optionalAgent(ctx, sc, cmd, "/update [agent-id]")
	if err != nil {
		return action{}, err
	}
	return cmdLong(fmt.Sprintf("Updating %s: build if needed, then stop and start…", id), func(ctx context.Context) (string, error) {
		r, err := c.ctl.AgentUpdate(ctx, sc, id)
		if err != nil {
			return "", err
		}
		return formatUpdate(r), nil
	}), nil
}

func formatUpdate(r admin.UpdateResult) string {
	s := r.AgentID + ": " + r.Outcome
	if r.Image != "" {
		s += " (" + r.Image + ")"
	}
	if r.Error != "" {
		s += ": " + r.Error
	}
	return s
}

func (c *Commands) updateAll(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	if len(cmd.Args) > 0 {
		return action{}, usagef("Usage: /update_all (it takes no argument; /update <agent-id> updates one agent)")
	}
	if err := sc.AdminOnly("update-all"); err != nil {
		return action{}, err
	}
	cfg := c.ctl.Snapshot().Config
	ids := slices.Sorted(maps.Keys(cfg.Agents))
	return cmdLong(fmt.Sprintf("Updating %d agents one after the other: %s…", len(ids), strings.Join(ids, ", ")),
		func(ctx context.Context) (string, error) {
			// AgentUpdateAll's loop, with a message as each agent is done
			// (spec 19.7: progress as each agent is processed).
			count := map[string]int{}
			for i, id := range ids {
				r, _ := c.ctl.AgentUpdate(ctx, sc, id)
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

func (c *Commands) configCmd(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	if len(cmd.Args) != 1 {
		return action{}, usagef("Usage: /config load|diff|apply")
	}
	switch cmd.Args[0] {
	case "load":
		return cmdChange(func(ctx context.Context) (string, error) {
			r, err := c.ctl.ConfigLoad(ctx, sc)
			if err != nil {
				return "", err
			}
			return "Staged.\n" + r.String(), nil
		}), nil
	case "diff":
		return cmdRead(func(ctx context.Context) (string, error) {
			r, err := c.ctl.ConfigDiff(ctx, sc)
			if err != nil {
				return "", err
			}
			return r.String(), nil
		}), nil
	case "apply":
		return cmdChange(func(ctx context.Context) (string, error) {
			r, err := c.ctl.ConfigApply(ctx, sc)
			if err != nil {
				return "", err
			}
			return r.String(), nil
		}), nil
	}
	return action{}, usagef("Unknown /config %s. Usage: /config load|diff|apply", cmd.Args[0])
}

func (c *Commands) workspace(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	switch {
	case len(cmd.Args) == 1 && cmd.Args[0] == "list":
		return cmdRead(func(ctx context.Context) (string, error) {
			ws, err := c.ctl.WorkspaceList(ctx, sc)
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
			w, err := c.ctl.WorkspaceReset(ctx, sc, name)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("Workspace %s (%s) is empty.", w.Name, w.Path), nil
		}), nil
	}
	return action{}, usagef("Usage: /workspace list|reset <name>")
}

func (c *Commands) secret(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	if len(cmd.Args) != 1 || cmd.Args[0] != "list" {
		return action{}, usagef("Usage: /secret list (values are never shown; set them with choirctl secret set)")
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		names, err := c.ctl.SecretList(ctx, sc)
		if err != nil {
			return "", err
		}
		if len(names) == 0 {
			return "No secrets.", nil
		}
		return "Secrets: " + strings.Join(names, ", "), nil
	}), nil
}

func (c *Commands) agent(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	switch {
	case len(cmd.Args) == 1 && cmd.Args[0] == "list":
		return cmdRead(func(ctx context.Context) (string, error) {
			agents, err := c.ctl.AgentList(ctx, sc)
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
		if err := c.ctl.KnownAgent(id); err != nil {
			return action{}, err
		}
		return cmdLong(fmt.Sprintf("Building the image of %s…", id), func(ctx context.Context) (string, error) {
			r, err := c.ctl.AgentBuild(ctx, sc, id, false)
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
