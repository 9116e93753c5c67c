package agent

import (
	"context"
	"log/slog"
	"time"
)

// notifyUsage tells the DM what the usage meter says (a cap 80% used, a
// cap lowered below the spend). It does not wait: the meter calls it on a
// lane's way to or from a model call.
func (s *session) notifyUsage(text string) {
	s.logger.Warn("usage notice", slog.String("text", text))
	e := s.edge
	if e == nil {
		return // before the lane exists: the first refused call says it
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.Notify(ctx, "usage", text); err != nil {
			s.logger.Warn("usage notice not sent", slog.String("error", err.Error()))
		}
	}()
}
