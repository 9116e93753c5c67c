package catalog

import (
	"encoding/json"

	"github.com/choirhq/choir/agent/tool"
)

// The schedule tools run on the host (daemon/schedule): a schedule is a row
// and a River job there, and it fires by sending this agent a message,
// marked "[scheduled #id ...]" or "[reminder #id ...]", through the inbox.

var scheduleSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameSchedule,
		Description: "Schedule a task for yourself: when it fires you get a message \"[scheduled #id ...] <text>\" " +
			"and act on it. Give cron for a repeating schedule or at for one time, in the user's time zone unless time_zone " +
			"says otherwise. It may need a person's approval first (then its status is pending_approval).",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "cron": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Five fields: minute hour day-of-month month day-of-week, e.g. \"0 8 * * MON-FRI\" (08:00 on weekdays) or \"*/30 9-17 * * *\"."},
    "at": {"type": "string", "minLength": 1, "maxLength": 64, "description": "One time: \"2026-03-01 08:00\" in the time zone, or RFC 3339 with an offset."},
    "time_zone": {"type": "string", "minLength": 1, "maxLength": 64, "description": "IANA zone such as Europe/Berlin; default the user's."},
    "text": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "What you will be told to do when it fires."},
    "missed": {"type": "string", "enum": ["skip", "run_once"], "description": "A time missed while the host was down: skip it, or run once late. Default skip for cron, run_once for at."},
    "start_agent": {"type": "boolean", "description": "Start you if you are not running when it fires."}
  },
  "required": ["text"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 30_000, SideEffect: tool.SideEffectExternal, Idempotency: tool.IdempotencyKeyed, Version: "1.0", Host: true},
}

var remindSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameRemind,
		Description: "Set a one-time reminder for the user: at the time you get a message \"[reminder #id ...] <text>\" " +
			"and tell the user. Give at (a time) or in (a delay such as \"20m\" or \"2h30m\").",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "at": {"type": "string", "minLength": 1, "maxLength": 64, "description": "\"2026-03-01 08:00\" in the time zone, or RFC 3339 with an offset."},
    "in": {"type": "string", "minLength": 2, "maxLength": 32, "description": "A delay from now: \"90s\", \"20m\", \"2h30m\"."},
    "time_zone": {"type": "string", "minLength": 1, "maxLength": 64, "description": "IANA zone for at; default the user's."},
    "text": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "What to remind the user of."}
  },
  "required": ["text"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 30_000, SideEffect: tool.SideEffectExternal, Idempotency: tool.IdempotencyKeyed, Version: "1.0", Host: true},
}

var scheduleListSpec = tool.Spec{
	LLM: tool.LLMView{
		Name:        tool.NameScheduleList,
		Description: "List your schedules and reminders that are still to fire, waiting for approval, or paused, with their next times.",
		Parameters:  json.RawMessage(`{"type": "object", "properties": {}, "additionalProperties": false}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 30_000, SideEffect: tool.SideEffectRead, Idempotent: true, Version: "1.0", Host: true},
}

var scheduleCancelSpec = tool.Spec{
	LLM: tool.LLMView{
		Name:        tool.NameScheduleCancel,
		Description: "Cancel one of your schedules or reminders by its id (choir.schedule.list shows them).",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {"id": {"type": "integer", "minimum": 1}},
  "required": ["id"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 30_000, SideEffect: tool.SideEffectExternal, Idempotent: true, Version: "1.0", Host: true},
}
