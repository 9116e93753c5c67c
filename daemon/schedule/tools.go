package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/schedule/state"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
	"github.com/choirhq/choir/strictjson"
)

// The agent's schedule tools (host tools, declared in agent/tool/builtin).
const (
	ToolSchedule = "choir.schedule"
	ToolList     = "choir.schedule.list"
	ToolCancel   = "choir.schedule.cancel"
	ToolRemind   = "choir.remind"
)

// approvalNote tells the model what a schedule waiting for approval means.
const approvalNote = "Filed for a person to approve or reject; the schedule fires only once approved. " +
	"Do not wait: carry on. The outcome will appear in your context when it is decided."

// ToolResult is what the schedule tools answer with: a schedule, its
// times in its own zone.
type ToolResult struct {
	ID         int64  `json:"id"`
	Status     string `json:"status"`
	Kind       string `json:"kind"`
	Cron       string `json:"cron,omitempty"`
	RunAt      string `json:"run_at,omitempty"`
	TimeZone   string `json:"time_zone"`
	NextRunAt  string `json:"next_run_at,omitempty"`
	Purpose    string `json:"purpose"`
	Text       string `json:"text"`
	Missed     string `json:"missed"`
	StartAgent bool   `json:"start_agent,omitempty"`
	Fires      int    `json:"fires"`
	ApprovalID string `json:"approval_id,omitempty"`
	Note       string `json:"note,omitempty"`
}

func toolResult(a admin.Schedule) ToolResult {
	loc, err := time.LoadLocation(a.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	r := ToolResult{ID: a.ID, Status: a.Status, Kind: a.Kind, Cron: a.Cron, TimeZone: a.TimeZone, Purpose: a.Purpose,
		Text: a.Text, Missed: a.Missed, StartAgent: a.StartAgent, Fires: a.Fires, ApprovalID: a.ApprovalID}
	if a.RunAt != nil {
		r.RunAt = a.RunAt.In(loc).Format(time.RFC3339)
	}
	if a.NextRunAt != nil {
		r.NextRunAt = a.NextRunAt.In(loc).Format(time.RFC3339)
	}
	if a.Status == state.PendingApproval {
		r.Note = approvalNote
	}
	return r
}

func decode(tool string, in json.RawMessage, v any) error {
	if len(in) == 0 {
		in = json.RawMessage("{}")
	}
	if err := strictjson.Decode(in, v, strictjson.Limits{MaxBytes: 1 << 16}); err != nil {
		return invalid(tool+" input", "%v", err)
	}
	return nil
}

// ToolSchedule is choir.schedule: a cron schedule or a one-shot (at) for
// the calling agent, on the DM of its session.
func (s *Service) ToolSchedule(ctx context.Context, c Caller, in json.RawMessage) (any, error) {
	var v struct {
		Cron       string `json:"cron,omitempty"`
		At         string `json:"at,omitempty"`
		TimeZone   string `json:"time_zone,omitempty"`
		Text       string `json:"text"`
		Missed     string `json:"missed,omitempty"`
		StartAgent bool   `json:"start_agent,omitempty"`
	}
	if err := decode(ToolSchedule, in, &v); err != nil {
		return nil, err
	}
	return s.agentAdd(ctx, c, admin.ScheduleAddRequest{Cron: v.Cron, At: v.At, TimeZone: v.TimeZone, Text: v.Text,
		Missed: v.Missed, StartAgent: v.StartAgent})
}

// ToolRemind is choir.remind: a one-shot reminder (at or in) that the
// agent passes on to its user when it fires.
func (s *Service) ToolRemind(ctx context.Context, c Caller, in json.RawMessage) (any, error) {
	var v struct {
		At       string `json:"at,omitempty"`
		In       string `json:"in,omitempty"`
		TimeZone string `json:"time_zone,omitempty"`
		Text     string `json:"text"`
	}
	if err := decode(ToolRemind, in, &v); err != nil {
		return nil, err
	}
	return s.agentAdd(ctx, c, admin.ScheduleAddRequest{At: v.At, In: v.In, TimeZone: v.TimeZone, Text: v.Text, Reminder: true})
}

// callerScope is the scope of an agent's schedule tool: its own agent,
// and the DM its session is bound to, so that an agent bound to one DM
// never lists or cancels the schedules that come to another.
func (s *Service) callerScope(ctx context.Context, c Caller) (control.Scope, error) {
	sess, err := seam.Queries(s.pool).SessionGetByID(ctx, c.SessionID)
	if err != nil {
		return control.Scope{}, fmt.Errorf("load session %s: %w", c.SessionID, err)
	}
	dm := session.Of(sess).DM()
	if sess.AgentID != c.AgentID || dm == "" {
		return control.Scope{}, fmt.Errorf("%w: session %s of agent %s is bound to no DM of agent %s", control.ErrForbidden,
			c.SessionID, sess.AgentID, c.AgentID)
	}
	return control.Scope{Agent: c.AgentID, DM: dm, Actor: "agent:" + c.AgentID}, nil
}

// ToolList is choir.schedule.list: the calling agent's open schedules
// that come to the DM of its session.
func (s *Service) ToolList(ctx context.Context, c Caller, in json.RawMessage) (any, error) {
	var v struct{}
	if err := decode(ToolList, in, &v); err != nil {
		return nil, err
	}
	sc, err := s.callerScope(ctx, c)
	if err != nil {
		return nil, err
	}
	list, err := s.List(ctx, sc, c.AgentID)
	if err != nil {
		return nil, err
	}
	out := make([]ToolResult, 0, len(list))
	for _, a := range list {
		out = append(out, toolResult(a))
	}
	return map[string]any{"schedules": out, "count": len(out)}, nil
}

// ToolCancel is choir.schedule.cancel: one of the calling agent's
// schedules that come to the DM of its session, by id.
func (s *Service) ToolCancel(ctx context.Context, c Caller, in json.RawMessage) (any, error) {
	var v struct {
		ID int64 `json:"id"`
	}
	if err := decode(ToolCancel, in, &v); err != nil {
		return nil, err
	}
	if v.ID <= 0 {
		return nil, invalid("id", "give the id of one of your schedules (choir.schedule.list shows them)")
	}
	sc, err := s.callerScope(ctx, c)
	if err != nil {
		return nil, err
	}
	a, err := s.Cancel(ctx, sc, v.ID)
	if err != nil {
		return nil, err
	}
	return toolResult(a), nil
}

// agentAdd creates a schedule for the calling agent, to the DM its session
// is bound to. When the agent's policy says so, the schedule waits for a
// person's approval: the pending approval, its notification and its
// timeout are queued with the row, and the approval's outcome arms or
// cancels it (jobs). A retried call finds the schedule the first made.
func (s *Service) agentAdd(ctx context.Context, c Caller, req admin.ScheduleAddRequest) (any, error) {
	q := seam.Queries(s.pool)
	sess, err := q.SessionGetByID(ctx, c.SessionID)
	if err != nil {
		return nil, fmt.Errorf("load session %s: %w", c.SessionID, err)
	}
	if prev, err := q.ScheduleGetByCall(ctx, c.byCall()); err == nil {
		return toolResult(Of(prev)), nil
	}
	req.AgentID, req.DM = c.AgentID, session.Of(sess).DM()
	p, err := s.check(req)
	if err != nil {
		return nil, err
	}
	cfg := s.config()
	needsApproval := cfg.Agents[c.AgentID].SchedulesNeedApproval
	p.params.CreatedBy, p.params.SessionID, p.params.CallID = "agent:"+c.AgentID, &c.SessionID, &c.CallID
	p.params.Sources = c.Sources
	if c.Key != "" {
		p.params.IdempotencyKey = &c.Key
	}
	if needsApproval {
		p.params.Status = state.PendingApproval
	}
	var row db.ChoirControlSchedule
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if row, err = s.insert(ctx, tx, p.params); err != nil {
			return err
		}
		if needsApproval {
			row, err = s.requestApproval(ctx, tx, row, p.first)
			return err
		}
		row, err = state.ArmTx(ctx, tx, s.jobs, row, p.first)
		return err
	})
	if errors.Is(err, choirsql.ErrNotFound) {
		// The same call, made concurrently, stored it first.
		prev, perr := q.ScheduleGetByCall(ctx, c.byCall())
		if perr == nil {
			return toolResult(Of(prev)), nil
		}
	}
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "schedule created by its agent", slog.Int64("schedule_id", row.ScheduleID),
		slog.String("agent_id", row.AgentID), slog.String("kind", row.Kind), slog.String("status", row.Status))
	return toolResult(Of(row)), nil
}

// requestApproval files the approval a new schedule waits for, with its
// notification and its timeout (approval.RequestTx), in tx.
func (s *Service) requestApproval(ctx context.Context, tx pgx.Tx, row db.ChoirControlSchedule, first time.Time) (db.ChoirControlSchedule, error) {
	cfg := s.config()
	q := seam.Queries(tx)
	payload, err := json.Marshal(Of(row))
	if err != nil {
		return row, err
	}
	created, err := q.ApprovalCreate(ctx, db.ApprovalCreateParams{SessionID: *row.SessionID, AgentID: row.AgentID,
		RequestID: fmt.Sprintf("schedule:%d", row.ScheduleID), RequestType: ApprovalType,
		Summary: Summary(row, first), Payload: payload, ExpiresAt: s.now().Add(cfg.ApprovalTimeout())})
	if err != nil {
		return row, fmt.Errorf("file the approval of schedule %d: %w", row.ScheduleID, err)
	}
	full, err := q.ApprovalGet(ctx, created.ApprovalID)
	if err != nil {
		return row, fmt.Errorf("load approval %s: %w", created.ApprovalID, err)
	}
	if err := q.ScheduleSetApproval(ctx, db.ScheduleSetApprovalParams{ScheduleID: row.ScheduleID, ApprovalID: &full.ApprovalID}); err != nil {
		return row, fmt.Errorf("record the approval of schedule %d: %w", row.ScheduleID, err)
	}
	gw, chat, _ := control.DMAddressIn(cfg, row.Dm)
	if err := s.approvals.RequestTx(ctx, tx, s.jobs, approval.Of(full), approval.Address{Gateway: gw, DM: row.Dm, ChatID: chat}); err != nil {
		return row, err
	}
	row.ApprovalID = &full.ApprovalID
	return row, nil
}

// Summary is the one line a person reads to approve a schedule.
func Summary(r db.ChoirControlSchedule, first time.Time) string {
	loc, err := time.LoadLocation(r.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	what := "schedule"
	if r.Purpose == "reminder" {
		what = "reminder"
	}
	when := "at " + first.In(loc).Format("Mon 2 Jan 2006 15:04 MST")
	if r.Cron != nil {
		when = fmt.Sprintf("cron %q (%s), first %s", *r.Cron, r.TimeZone, first.In(loc).Format("Mon 2 Jan 15:04 MST"))
	}
	line := fmt.Sprintf("%s #%d %s: %s", what, r.ScheduleID, when, r.Text)
	if r.StartAgent {
		line += " (starts the agent if it is not running)"
	}
	if len(line) > 500 {
		cut := 497
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut] + "…"
	}
	return line
}
