package adminapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/schedule"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
)

// scheduleErr codes the errors of choirctl schedule: an unknown schedule
// is not found, a change its state does not allow a conflict.
func scheduleErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, choirsql.ErrNotFound):
		return codedErr{wire.ErrNotFound, err}
	case errors.Is(err, schedule.ErrState):
		return codedErr{wire.ErrConflict, err}
	}
	return controlErr(err)
}

func mountSchedules(mux *admin.Mux, s *schedule.Service) {
	if s == nil {
		return
	}
	admin.Handle(mux, "GET", admin.PathSchedules, func(ctx context.Context, _ admin.Empty) ([]admin.Schedule, error) {
		out, err := s.List(ctx, adminScope(ctx), "")
		return out, scheduleErr(err)
	})
	admin.Handle(mux, "GET", admin.PathAgentSchedules, func(ctx context.Context, _ admin.Empty) ([]admin.Schedule, error) {
		out, err := s.List(ctx, adminScope(ctx), admin.PathValue(ctx, "id"))
		return out, scheduleErr(err)
	})
	admin.Handle(mux, "POST", admin.PathSchedules, func(ctx context.Context, in admin.ScheduleAddRequest) (admin.Schedule, error) {
		out, err := s.Add(ctx, adminScope(ctx), in)
		return out, scheduleErr(err)
	})
	change := func(path string, fn func(*schedule.Service, context.Context, control.Scope, int64) (admin.Schedule, error)) {
		admin.Handle(mux, "POST", path, func(ctx context.Context, _ admin.Empty) (admin.Schedule, error) {
			raw := admin.PathValue(ctx, "id")
			id, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || id <= 0 {
				return admin.Schedule{}, codedErr{wire.ErrBadRequest,
					fmt.Errorf("%q is not a schedule id: give the number choirctl schedule list shows", raw)}
			}
			out, err := fn(s, ctx, adminScope(ctx), id)
			return out, scheduleErr(err)
		})
	}
	change(admin.PathScheduleCancel, (*schedule.Service).Cancel)
	change(admin.PathSchedulePause, (*schedule.Service).Pause)
	change(admin.PathScheduleResume, (*schedule.Service).Resume)
}
