package agentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/schedule"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
)

// ScheduleTools serves choir.schedule, choir.schedule.list,
// choir.schedule.cancel and choir.remind from choird's schedules, for the
// calling session's agent on the session's DM. A refused input, an unknown
// schedule, another agent's schedule or a change the schedule's state does
// not allow goes back to the model as the tool's error.
func ScheduleTools(s *schedule.Service) map[string]HostTool {
	wrap := func(name string, fn func(ctx context.Context, c schedule.Caller, in json.RawMessage) (any, error)) HostTool {
		return func(ctx context.Context, agentID string, in json.RawMessage) (json.RawMessage, error) {
			hc, ok := ctx.Value(hostCallKey{}).(hostCall)
			if !ok {
				return nil, fmt.Errorf("%s called outside a session", name)
			}
			out, err := fn(ctx, schedule.Caller{AgentID: agentID, SessionID: hc.sessionID, CallID: hc.callID,
				Key: hc.key, Sources: hc.sources}, in)
			var bad *schedule.InputError
			switch {
			case errors.As(err, &bad), errors.Is(err, session.ErrUnknownResource), errors.Is(err, choirsql.ErrNotFound),
				errors.Is(err, schedule.ErrState):
				return nil, codedErr{wire.ErrBadRequest, err}
			case errors.Is(err, control.ErrForbidden):
				return nil, codedErr{wire.ErrPermissionDenied, err}
			case err != nil:
				return nil, err
			}
			return json.Marshal(out)
		}
	}
	return map[string]HostTool{
		schedule.ToolSchedule: wrap(schedule.ToolSchedule, s.ToolSchedule),
		schedule.ToolRemind:   wrap(schedule.ToolRemind, s.ToolRemind),
		schedule.ToolList:     wrap(schedule.ToolList, s.ToolList),
		schedule.ToolCancel:   wrap(schedule.ToolCancel, s.ToolCancel),
	}
}
