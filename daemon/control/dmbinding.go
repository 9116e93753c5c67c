package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// ErrNotBound reports a DM bound to no agent. A front-end that has its
// own word for it (the gateway's ErrNotBound) translates it.
var ErrNotBound = errors.New("no agent is bound to this dm")

// DM is who sends a command from a chat front-end: a DM of config.json,
// by name, and whether it is an admin DM. Each front-end translates its
// own identity of a sender (the gateway's DM) into this one.
type DM struct {
	// Name is the DM's name in config.json.
	Name  string
	Admin bool
}

// DMBinding is the agent a DM talks to.
type DMBinding struct {
	AgentID string
	// SessionID is the agent's live session holding the DM's lease; zero
	// when the agent is not running.
	SessionID uuid.UUID
}

// Live reports whether the agent is running with the DM bound.
func (b DMBinding) Live() bool { return b.SessionID != uuid.Nil }

// DMBindingOf is the one place that decides which agent a DM controls
// (DESIGN.md: a DM is bound to an agent only through a live lease). It is
// the live session holding the DM's lease; else the one agent whose
// defaults name the DM (spec 19.4: the binding a start without overrides
// makes), but only while that agent has no live session: an agent running
// bound to another DM belongs to that DM until it stops. ErrNotBound wraps
// the error when there is no such agent, or when several agents default to
// the DM; a *BoundElsewhereError (which wraps ErrNotBound too) says that
// the DM's default agent runs bound to another DM.
func (d *Control) DMBindingOf(ctx context.Context, dm string) (DMBinding, error) {
	q := seam.Queries(d.pool)
	h, err := q.DMHolder(ctx, dm)
	if err == nil {
		return DMBinding{AgentID: h.AgentID, SessionID: h.SessionID}, nil
	}
	if !errors.Is(err, choirsql.ErrNotFound) {
		return DMBinding{}, fmt.Errorf("look up the agent bound to dm %s: %w", dm, err)
	}
	cfg, _ := d.config()
	var free []string
	busy := &BoundElsewhereError{DM: dm}
	for _, id := range sortedKeys(cfg.Agents) {
		if cfg.Agents[id].Defaults.DM != dm {
			continue
		}
		s, err := q.SessionGetLiveByAgent(ctx, id)
		if errors.Is(err, choirsql.ErrNotFound) {
			free = append(free, id)
			continue
		}
		if err != nil {
			return DMBinding{}, fmt.Errorf("look up the session of %s, which defaults to dm %s: %w", id, dm, err)
		}
		if other := session.Of(s).DM(); other != dm {
			busy.AgentIDs, busy.OtherDMs = append(busy.AgentIDs, id), append(busy.OtherDMs, other)
			continue
		}
		// Its session took the DM's lease after DMHolder looked.
		return DMBinding{AgentID: id, SessionID: s.SessionID}, nil
	}
	switch {
	case len(free) == 1:
		return DMBinding{AgentID: free[0]}, nil
	case len(free) > 1:
		return DMBinding{}, fmt.Errorf("dm %s: %w: agents %s all default to it and none is running; start one with /start <agent-id>",
			dm, ErrNotBound, strings.Join(free, ", "))
	case len(busy.AgentIDs) > 0:
		return DMBinding{}, busy
	}
	return DMBinding{}, fmt.Errorf("dm %s: %w; an admin can bind one with /start <agent-id>", dm, ErrNotBound)
}

// BoundElsewhereError reports a DM whose default agents all run bound to
// other DMs: the DM controls, sees and reaches none of them until they
// stop, or are started bound to it. Its text is for the DM's user and does
// not name the other DMs; OtherDMs are for choird's log.
type BoundElsewhereError struct {
	DM       string
	AgentIDs []string
	OtherDMs []string
}

func (e *BoundElsewhereError) Error() string {
	if len(e.AgentIDs) == 1 {
		return fmt.Sprintf("%s, the agent of this DM, is running on another DM; this DM controls it again once it stops, or is started here",
			e.AgentIDs[0])
	}
	return fmt.Sprintf("agents %s, which default to this DM, are running on other DMs; this DM controls one again once it stops, or is started here",
		strings.Join(e.AgentIDs, ", "))
}

// Unwrap makes a DM whose agent is elsewhere a DM bound to no agent.
func (e *BoundElsewhereError) Unwrap() error { return ErrNotBound }

// LogAttrs are the error's fields for choird's log.
func (e *BoundElsewhereError) LogAttrs() []any {
	return []any{slog.String("dm", e.DM), slog.String("agent_id", strings.Join(e.AgentIDs, ",")),
		slog.String("bound_dm", strings.Join(e.OtherDMs, ","))}
}

// DMScope is the scope of a command from a DM: admin, or its bound agent.
// A regular DM bound to no agent gets a scope that allows nothing, and
// says why.
func (d *Control) DMScope(ctx context.Context, dm DM) (Scope, error) {
	sc := Scope{Admin: dm.Admin, DM: dm.Name, Actor: "telegram:" + dm.Name}
	if dm.Admin {
		return sc, nil
	}
	b, err := d.DMBindingOf(ctx, dm.Name)
	var busy *BoundElsewhereError
	if errors.As(err, &busy) {
		sc.Unbound = busy
		return sc, nil
	}
	if errors.Is(err, ErrNotBound) {
		return sc, nil
	}
	if err != nil {
		return Scope{}, err
	}
	sc.Agent = b.AgentID
	return sc, nil
}

// OutboundAddress is where a session's messages go: its bound DM.
func OutboundAddress(cfg *config.Config, b rpc.ResourceBindings) (gatewayName, chatID string, err error) {
	gatewayName, chatID, ok := DMAddressIn(cfg, b.DM)
	if !ok {
		return "", "", fmt.Errorf("the session's DM %q is no longer configured: %w", b.DM, wire.ErrNotFound)
	}
	return gatewayName, chatID, nil
}

// DMAddressIn locates a DM of cfg: its gateway and chat (for Telegram, a
// private chat's id is the user's).
func DMAddressIn(cfg *config.Config, dm string) (gatewayName, chatID string, ok bool) {
	c, ok := cfg.DMs[dm]
	return c.Gateway, c.UserID, ok
}

// AdminDMFor is where a request only an admin may decide is asked: dm
// itself when it is an admin DM, else the first admin DM by name. ok is
// false when the configuration has no admin DM (then only choirctl
// decides it).
func AdminDMFor(cfg *config.Config, dm string) (name string, ok bool) {
	if cfg.DMs[dm].Admin {
		return dm, true
	}
	names := make([]string, 0, len(cfg.DMs))
	for n, d := range cfg.DMs {
		if d.Admin {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	slices.Sort(names)
	return names[0], true
}
