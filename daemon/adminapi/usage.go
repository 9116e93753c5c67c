package adminapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/choirhq/choir/daemon/usage"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

func usageErr(err error) error {
	if errors.Is(err, usage.ErrUnknownAgent) {
		return codedErr{wire.ErrNotFound, err}
	}
	return controlErr(err)
}

func mountUsage(mux *admin.Mux, s *usage.Service) {
	if s == nil {
		return
	}
	admin.Handle(mux, "GET", admin.PathAgentUsage, func(ctx context.Context, _ admin.Empty) (admin.UsageReport, error) {
		r, err := s.Report(ctx, admin.PathValue(ctx, "id"), 0)
		return r, usageErr(err)
	})
	admin.Handle(mux, "GET", admin.PathAgentUsageDays, func(ctx context.Context, _ admin.Empty) (admin.UsageReport, error) {
		raw := admin.PathValue(ctx, "days")
		days, err := strconv.Atoi(raw)
		if err != nil || days <= 0 || days > usage.MaxDays {
			return admin.UsageReport{}, codedErr{wire.ErrBadRequest,
				fmt.Errorf("days %q: give a number of days from 1 to %d, e.g. --days 30", raw, usage.MaxDays)}
		}
		r, err := s.Report(ctx, admin.PathValue(ctx, "id"), days)
		return r, usageErr(err)
	})
}
