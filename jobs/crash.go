package jobs

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/db"
	choirsql "github.com/choirhq/choir/sql"
)

// DefaultStartGrace is how long an agent may take from its start to its
// hello before it counts as crashed, when that is longer than the crash
// threshold: a container start on a loaded host takes seconds.
const DefaultStartGrace = 30 * time.Second

// CrashDetectArgs is the periodic crash-detection job.
type CrashDetectArgs struct{}

// Kind implements river.JobArgs.
func (CrashDetectArgs) Kind() string { return "crash_detect" }

// InsertOpts puts crash detection on the control queue. A failed run is
// not retried: the next periodic run, a second later, does the same work.
func (CrashDetectArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueControl, MaxAttempts: 1}
}

// CrashDetectWorker marks sessions whose last heartbeat is older than the
// threshold as crashed and releases their leases, in one transaction with
// the job's completion.
type CrashDetectWorker struct {
	river.WorkerDefaults[CrashDetectArgs]
	Pool      *pgxpool.Pool
	Logger    *slog.Logger
	Threshold func() time.Duration
	// DMAddress locates a DM for the crash notice; nil sends none.
	DMAddress func(dm string) (gateway, chatID string, ok bool)
	// StartGrace is how long a session that has not said hello yet may go
	// without heartbeat (at least Threshold); zero means DefaultStartGrace.
	StartGrace time.Duration
	// RemoveInstances enqueues the removal of a crashed session's
	// container or process (the worker is registered with it).
	RemoveInstances bool
	// SessionEnded enqueues, in the transaction that marks a session
	// crashed, the filing of its events into memory (Memory.SessionEndedTx);
	// nil files nothing.
	SessionEnded func(ctx context.Context, client *Client, tx pgx.Tx, sessionID uuid.UUID) error
}

// Timeout bounds one run; the query touches only live sessions.
func (w *CrashDetectWorker) Timeout(*river.Job[CrashDetectArgs]) time.Duration {
	return 10 * time.Second
}

// Work implements river.Worker.
func (w *CrashDetectWorker) Work(ctx context.Context, job *river.Job[CrashDetectArgs]) error {
	threshold := w.Threshold()
	var crashed []db.SessionsCrashStaleRow
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		crashed, err = db.New(choirsql.Interpreted(tx)).SessionsCrashStale(ctx, db.SessionsCrashStaleParams{
			ThresholdMs: threshold.Milliseconds(), StartGraceMs: cmp.Or(w.StartGrace, DefaultStartGrace).Milliseconds()})
		if err != nil {
			return fmt.Errorf("mark stale sessions crashed: %w", err)
		}
		// What a crashed session replicated still becomes memory.
		if len(crashed) > 0 {
			client := river.ClientFromContext[pgx.Tx](ctx)
			for _, c := range crashed {
				if w.SessionEnded != nil {
					if err := w.SessionEnded(ctx, client, tx, c.SessionID); err != nil {
						return err
					}
				}
				if w.RemoveInstances {
					if _, err := client.InsertTx(ctx, tx, RemoveInstanceArgs{SessionID: c.SessionID}, nil); err != nil {
						return fmt.Errorf("enqueue removal of the instance of session %s: %w", c.SessionID, err)
					}
				}
				if err := CrashNoticeTx(ctx, tx, client, w.DMAddress, c.AgentID, c.SessionID, c.ResourceBindings,
					fmt.Sprintf("no heartbeat for over %s", threshold)); err != nil {
					return err
				}
			}
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete crash detection job: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range crashed {
		w.Logger.WarnContext(ctx, "session crashed: no heartbeat",
			slog.String("agent_id", c.AgentID), slog.String("session_id", c.SessionID.String()),
			slog.Time("last_heartbeat_at", c.LastHeartbeatAt), slog.Int64("threshold_ms", threshold.Milliseconds()),
			slog.Int("leases_released", int(c.LeasesReleased)))
	}
	return nil
}

// CrashNoticeTx queues, in the caller's transaction, a message to the DM a
// crashed session was bound to. It is keyed by the session, so the
// runtime's exit report and the heartbeat check, whichever comes second,
// queue nothing more.
func CrashNoticeTx(ctx context.Context, tx pgx.Tx, ins Inserter, address func(string) (string, string, bool),
	agentID string, sessionID uuid.UUID, bindings json.RawMessage, why string) error {
	if address == nil {
		return nil
	}
	var b struct {
		DM string `json:"dm"`
	}
	if json.Unmarshal(bindings, &b) != nil || b.DM == "" {
		return nil
	}
	gw, chat, ok := address(b.DM)
	if !ok {
		return nil
	}
	text := fmt.Sprintf("%s stopped unexpectedly (%s). Everything it had acknowledged is kept; "+
		"/restart (or choirctl agent start %s) resumes it where it left off.", agentID, why, agentID)
	if _, err := EnqueueOutboundTx(ctx, tx, ins, OutboundParams{AgentID: agentID, SessionID: &sessionID,
		MessageID: "crash:" + sessionID.String(), Gateway: gw, DM: b.DM, ChatID: chat, Kind: OutboundText, Text: text}); err != nil {
		return fmt.Errorf("queue crash notice of session %s: %w", sessionID, err)
	}
	return nil
}

// RemoveInstanceArgs removes the container or process of a crashed
// session: a frozen agent must not wake up and act.
type RemoveInstanceArgs struct {
	SessionID uuid.UUID `json:"session_id"`
}

// Kind implements river.JobArgs.
func (RemoveInstanceArgs) Kind() string { return "remove_instance" }

// InsertOpts runs removals on the control queue.
func (RemoveInstanceArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueControl, MaxAttempts: 5}
}

// RemoveInstanceWorker calls choird's runtime to remove the instance.
type RemoveInstanceWorker struct {
	river.WorkerDefaults[RemoveInstanceArgs]
	Remove func(ctx context.Context, sessionID uuid.UUID) error
}

// Work implements river.Worker.
func (w *RemoveInstanceWorker) Work(ctx context.Context, job *river.Job[RemoveInstanceArgs]) error {
	return w.Remove(ctx, job.Args.SessionID)
}
