package inbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// The files users send are stored by the gateway in each workspace's
// gateway.RecvDir (spec 19.5) and named by the inbox rows of their
// messages: the inbox, which owns those rows, judges when the agent is
// done with a file, and its periodic recv_clean job removes it.

// Defaults of received-file cleanup.
const (
	// RecvRetention is how long a received file stays once its agent
	// acknowledged the message while that conversation goes on, and how
	// long a file no message names stays.
	RecvRetention = 24 * time.Hour
	// RecvCleanInterval is how often the cleanup runs.
	RecvCleanInterval = 10 * time.Minute
)

// RecvCleanArgs is the periodic cleanup of .choirtmp/recv.
type RecvCleanArgs struct{}

// Kind implements river.JobArgs.
func (RecvCleanArgs) Kind() string { return "recv_clean" }

// InsertOpts puts the cleanup on the control queue; a failed run is not
// retried, since the next one does the same work.
func (RecvCleanArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueControl, MaxAttempts: 1}
}

// RecvCleanWorker removes the files in each workspace's .choirtmp/recv
// that their agent is done with (spec 19.5: "after the agent acknowledges
// receipt"). A file is removed when every inbox row that names it was
// acknowledged by the agent (the heartbeat that replicated the message)
// and either the session it went to ended gracefully or the
// acknowledgement is older than Retention; a crashed session keeps its
// files, since choird resumes it. A file that no row names (a download cut
// short, the file of a refused message, anything else left there) is
// removed once its modification time is older than Retention. Files of
// messages not yet acknowledged are kept.
//
// The workspace belongs to the agent, which may have replaced the
// directory with a symbolic link: everything goes through an os.Root on
// the workspace, so nothing outside it is listed or removed, and entries
// are removed without being followed. Directories are left alone.
type RecvCleanWorker struct {
	river.WorkerDefaults[RecvCleanArgs]
	Pool *pgxpool.Pool
	// Workspaces returns the configured workspaces, name to directory.
	Workspaces func() map[string]string
	Logger     *slog.Logger
	// Retention is RecvRetention when zero.
	Retention time.Duration
	// Now is the clock for file ages (time.Now when nil).
	Now func() time.Time
}

var _ jobs.PeriodicFeature = (*RecvCleanWorker)(nil)

// AddWorkers registers the cleanup's worker (jobs.Feature).
func (w *RecvCleanWorker) AddWorkers(workers *river.Workers) error {
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return fmt.Errorf("register received-file cleanup worker: %w", err)
	}
	return nil
}

// PeriodicJobs is the cleanup, every RecvCleanInterval.
func (w *RecvCleanWorker) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(RecvCleanInterval),
		func() (river.JobArgs, *river.InsertOpts) { return RecvCleanArgs{}, nil },
		&river.PeriodicJobOpts{ID: "recv_clean", RunOnStart: true})}
}

// Timeout bounds one run.
func (w *RecvCleanWorker) Timeout(*river.Job[RecvCleanArgs]) time.Duration { return time.Minute }

// Work implements river.Worker.
func (w *RecvCleanWorker) Work(ctx context.Context, _ *river.Job[RecvCleanArgs]) error {
	ws := w.Workspaces()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(ws)) {
		if err := w.clean(ctx, name, ws[name]); err != nil {
			errs = append(errs, fmt.Errorf("clean %s of workspace %s: %w", gateway.RecvDir, name, err))
		}
	}
	return errors.Join(errs...)
}

// recvEntry is a file found in a recv directory.
type recvEntry struct {
	name    string
	modTime time.Time
}

// clean removes what is done with in one workspace's recv directory.
func (w *RecvCleanWorker) clean(ctx context.Context, name, dir string) error {
	entries, root, err := listRecv(dir)
	var refused *refusedDirError
	if errors.As(err, &refused) {
		// The agent's doing, and no failure of choird's: said, not retried.
		w.Logger.WarnContext(ctx, "received files not cleaned: refused", slog.String("workspace", name),
			slog.String("dir", gateway.RecvDir), slog.String("reason", refused.Error()))
		return nil
	}
	if err != nil || root == nil {
		return err
	}
	defer root.Close()
	if len(entries) == 0 {
		return nil
	}
	retention := w.Retention
	if retention <= 0 {
		retention = RecvRetention
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	paths := make([]string, len(entries))
	for i, e := range entries {
		paths[i] = path.Join(gateway.RecvDir, e.name)
	}
	claims, err := seam.Queries(w.Pool).RecvFilesClaimed(ctx, db.RecvFilesClaimedParams{
		RetentionSecs: retention.Seconds(), Paths: paths})
	if err != nil {
		return fmt.Errorf("look up the messages that name the files: %w", err)
	}
	byPath := make(map[string]db.RecvFilesClaimedRow, len(claims))
	for _, c := range claims {
		byPath[c.Path] = c
	}
	var errs []error
	for i, e := range entries {
		c := byPath[paths[i]]
		unclaimedAndOld := c.Rows == 0 && now().Sub(e.modTime) > retention
		if !c.Done && !unclaimedAndOld {
			continue
		}
		if err := root.Remove(e.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", paths[i], err))
			continue
		}
		reason := "its message was acknowledged and its conversation is over"
		if c.Rows == 0 {
			reason = "no message names it and it is older than the retention"
		}
		w.Logger.InfoContext(ctx, "received file removed", slog.String("workspace", name),
			slog.String("file", paths[i]), slog.String("reason", reason))
	}
	return errors.Join(errs...)
}

// refusedDirError is a recv directory the cleanup will not enter: a
// symbolic link, or a path that leaves the workspace.
type refusedDirError struct{ err error }

func (e *refusedDirError) Error() string { return e.err.Error() }

// listRecv opens dir's recv directory under an os.Root on dir and lists
// its entries that are not directories. A workspace without one yields a
// nil root; one that is not a plain directory inside the workspace is a
// *refusedDirError.
func listRecv(dir string) ([]recvEntry, *os.Root, error) {
	ws, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer ws.Close()
	fi, err := ws.Lstat(gateway.RecvDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, nil
	case err != nil:
		return nil, nil, &refusedDirError{err}
	case !fi.IsDir():
		return nil, nil, &refusedDirError{fmt.Errorf("%s is a %s, not a directory", gateway.RecvDir, fi.Mode().Type())}
	}
	root, err := ws.OpenRoot(gateway.RecvDir)
	if err != nil {
		return nil, nil, err
	}
	f, err := root.Open(".")
	if err != nil {
		root.Close()
		return nil, nil, err
	}
	des, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		root.Close()
		return nil, nil, err
	}
	var out []recvEntry
	for _, de := range des {
		if de.IsDir() {
			continue
		}
		fi, err := root.Lstat(de.Name())
		if err != nil {
			continue // gone meanwhile
		}
		out = append(out, recvEntry{name: de.Name(), modTime: fi.ModTime()})
	}
	return out, root, nil
}
