package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/choirhq/choir/daemon/runtime"
)

// Events reports the death of every managed container of the scope. The
// first connection is made before it returns, so an unreachable engine is
// an error here; later breaks are retried until ctx ends.
func (r *Runtime) Events(ctx context.Context) (<-chan runtime.Exit, error) {
	if _, err := r.cli.Ping(ctx, client.PingOptions{}); err != nil {
		return nil, r.engineErr("watch agent containers", err)
	}
	w := &watcher{r: r, out: make(chan runtime.Exit, 16), oom: map[string]bool{}, seen: map[string]bool{}}
	// The first stream is opened here, so that a container that dies after
	// Events returns is reported. Should it break before any event, the
	// reconnect asks for the events since this moment (by choird's clock,
	// which is the engine's on a local engine).
	w.since = time.Now().UnixNano()
	sctx, cancel := context.WithCancel(ctx)
	first := r.cli.Events(sctx, w.options())
	go w.run(ctx, first, cancel)
	return w.out, nil
}

// watcher follows one event stream, reconnecting when it breaks.
type watcher struct {
	r   *Runtime
	out chan runtime.Exit
	// oom holds containers that reported an OOM kill, until they die.
	oom map[string]bool
	// since is where a reconnect resumes: the engine time of the newest
	// event handled.
	since int64
	// last is the engine time of the newest event handled, and seen the
	// events at exactly that time: a reconnect replays them.
	last int64
	seen map[string]bool
}

func (w *watcher) options() client.EventsListOptions {
	opts := client.EventsListOptions{
		Filters: w.r.filters().Add("type", string(events.ContainerEventType)).
			Add("event", string(events.ActionDie), string(events.ActionOOM)),
	}
	if w.since > 0 {
		opts.Since = fmt.Sprintf("%d.%09d", w.since/1e9, w.since%1e9)
	}
	return opts
}

func (w *watcher) run(ctx context.Context, first client.EventsResult, cancelFirst context.CancelFunc) {
	defer close(w.out)
	backoff := w.r.opts.ReconnectMin
	for {
		began := time.Now()
		var err error
		if cancelFirst != nil {
			err = w.follow(ctx, first)
			cancelFirst()
			cancelFirst = nil
		} else {
			sctx, cancel := context.WithCancel(ctx)
			err = w.follow(ctx, w.r.cli.Events(sctx, w.options()))
			cancel() // ends the client's reader goroutine
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > w.r.opts.ReconnectMax {
			backoff = w.r.opts.ReconnectMin // it ran for a while: start over
		}
		w.r.log.Warn("docker event stream broke; reconnecting", slog.Any("error", err), slog.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, w.r.opts.ReconnectMax)
	}
}

// follow reads one stream until it fails.
func (w *watcher) follow(ctx context.Context, res client.EventsResult) error {
	for {
		select {
		case m := <-res.Messages:
			w.handle(ctx, m)
		case err := <-res.Err:
			if err == nil || errors.Is(err, io.EOF) {
				err = errors.New("stream ended")
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (w *watcher) handle(ctx context.Context, m events.Message) {
	at := m.TimeNano
	if at == 0 {
		at = m.Time * 1e9
	}
	key := string(m.Action) + " " + m.Actor.ID
	switch {
	case at < w.last:
		return // replayed
	case at == w.last && w.seen[key]:
		return
	case at > w.last:
		w.last, w.since = at, at
		clear(w.seen)
	}
	w.seen[key] = true

	attrs := m.Actor.Attributes
	switch m.Action {
	case events.ActionOOM:
		w.oom[m.Actor.ID] = true
	case events.ActionDie:
		code, err := strconv.Atoi(attrs["exitCode"])
		if err != nil {
			code = -1
		}
		e := runtime.Exit{
			ID: m.Actor.ID, AgentID: attrs[runtime.LabelAgentID], SessionID: attrs[runtime.LabelSessionID],
			ExitCode: code, OOMKilled: w.oom[m.Actor.ID], At: time.Unix(0, at).UTC(),
		}
		delete(w.oom, m.Actor.ID)
		w.r.log.Info("agent container died", slog.String("container", shortID(e.ID)), slog.String("agent_id", e.AgentID),
			slog.Int("exit_code", code), slog.Bool("oom_killed", e.OOMKilled))
		select {
		case w.out <- e:
		case <-ctx.Done():
		}
	}
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
