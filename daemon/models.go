package daemon

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/choirhq/choir/daemon/modelcheck"
)

// checkModels asks every configured model's endpoint whether it answers
// and takes its key, and says in the start-up log what is wrong and, when
// no model answers, that agents cannot talk and how to set a model. It
// never stops the start: a model may come up later, and choirctl status
// asks again.
func (d *Daemon) checkModels(ctx context.Context) {
	snap := d.Snapshot()
	st := modelcheck.Probe(ctx, http.DefaultClient, snap.Config, snap.Secrets)
	for _, m := range st {
		attrs := []any{slog.String("model", m.Name), slog.String("endpoint", m.Endpoint), slog.String("model_id", m.Model)}
		if m.Reachable {
			d.logger.InfoContext(ctx, "model reachable", attrs...)
			continue
		}
		d.logger.WarnContext(ctx, "model unreachable: "+m.Error, append(attrs, slog.String("error", m.Error))...)
	}
	if msg := modelcheck.NoneReachable(st); msg != "" {
		d.logger.WarnContext(ctx, msg)
	}
}
