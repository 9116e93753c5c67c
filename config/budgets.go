package config

import "time"

// Defaults of an agent's budgets (spec 7.6), applied to a budget that is
// omitted or zero. A session lasts at most a day (it rolls over at its
// DM's midnight, daemon/session's rollover), so the session budgets are a
// day's: a busy day of conversation (a few hundred turns of some 20k
// prompt tokens) and a handful of core jobs (up to 50 steps each, their
// prompts growing to some 60k tokens) fits in 20M tokens and 5000 tool
// calls. They are a runaway guard, not a spending limit: per_day_cost_usd
// is that.
const (
	DefaultMaxCoreJobs            = 4
	DefaultTotalSessionTokens     = 20_000_000
	DefaultMaxToolCallsPerSession = 5000
	DefaultMaxStepsPerMessage     = 20
	DefaultPerJobMaxSteps         = 50
	DefaultPerJobMaxToolCalls     = 200
	DefaultPerJobWallTimeMS       = 30 * 60 * 1000
	DefaultMaxInjectionsPerJob    = 10
)

// DefaultContextWindow is a model's context window, in tokens, when its
// context_window is omitted.
const DefaultContextWindow = 128_000

// DefaultCompactionThresholdPercent is the share of a model's context
// window that the compactable content of a lane's prompt may fill before
// compaction starts (spec 11.3).
const DefaultCompactionThresholdPercent = 80

// Budgets bound what one session of an agent may spend (spec 7.6). The
// session budgets are enforced by the edge lane, the job budgets by each
// core job; none is reset by an injection or a recovery. A session lasts
// at most until its DM's next midnight: its successor then starts the
// session budgets afresh (as a person's start does); the rollover waits
// for a turn or a core job in progress. Zero means the default.
type Budgets struct {
	// Session budgets.
	MaxCoreJobs            int   `json:"max_core_jobs"`
	TotalSessionTokens     int64 `json:"total_session_tokens"`
	MaxToolCallsPerSession int64 `json:"max_tool_calls_per_session"`
	// MaxStepsPerMessage bounds the edge's model calls for one message.
	MaxStepsPerMessage int `json:"max_steps_per_message"`
	// Job budgets, each per core job.
	PerJobMaxSteps     int   `json:"per_job_max_steps"`
	PerJobMaxToolCalls int   `json:"per_job_max_tool_calls"`
	PerJobWallTimeMS   int64 `json:"per_job_wall_time_ms"`
	// MaxInjectionsPerJob caps the instructions the edge may inject into
	// one core job (spec 12.8).
	MaxInjectionsPerJob int `json:"max_injections_per_job"`
	// Caps are the hard token and cost caps per session, core job and
	// day (see caps.go); zero means no cap.
	Caps
}

// WithDefaults returns b with every zero budget replaced by its default.
func (b Budgets) WithDefaults() Budgets {
	b.MaxCoreJobs = orDefault(b.MaxCoreJobs, DefaultMaxCoreJobs)
	b.TotalSessionTokens = orDefault(b.TotalSessionTokens, DefaultTotalSessionTokens)
	b.MaxToolCallsPerSession = orDefault(b.MaxToolCallsPerSession, DefaultMaxToolCallsPerSession)
	b.MaxStepsPerMessage = orDefault(b.MaxStepsPerMessage, DefaultMaxStepsPerMessage)
	b.PerJobMaxSteps = orDefault(b.PerJobMaxSteps, DefaultPerJobMaxSteps)
	b.PerJobMaxToolCalls = orDefault(b.PerJobMaxToolCalls, DefaultPerJobMaxToolCalls)
	b.PerJobWallTimeMS = orDefault(b.PerJobWallTimeMS, DefaultPerJobWallTimeMS)
	b.MaxInjectionsPerJob = orDefault(b.MaxInjectionsPerJob, DefaultMaxInjectionsPerJob)
	return b
}

// PerJobWallTime returns per_job_wall_time_ms, or its default.
func (b Budgets) PerJobWallTime() time.Duration {
	return ms(orDefault(b.PerJobWallTimeMS, DefaultPerJobWallTimeMS))
}

// ContextWindowTokens returns the model's context_window, or its default.
func (m Model) ContextWindowTokens() int64 { return orDefault(m.ContextWindow, DefaultContextWindow) }

// CompactionThreshold returns compaction_threshold_percent, or its default.
func (c *Config) CompactionThreshold() int {
	return orDefault(c.CompactionThresholdPercent, DefaultCompactionThresholdPercent)
}

func (v *validator) budgets(p string, b Budgets) {
	for _, f := range []struct {
		name  string
		value int64
	}{
		{"max_core_jobs", int64(b.MaxCoreJobs)}, {"total_session_tokens", b.TotalSessionTokens},
		{"max_tool_calls_per_session", b.MaxToolCallsPerSession}, {"max_steps_per_message", int64(b.MaxStepsPerMessage)},
		{"per_job_max_steps", int64(b.PerJobMaxSteps)}, {"per_job_max_tool_calls", int64(b.PerJobMaxToolCalls)},
		{"per_job_wall_time_ms", b.PerJobWallTimeMS}, {"max_injections_per_job", int64(b.MaxInjectionsPerJob)},
	} {
		if f.value < 0 {
			v.add(sub(p, f.name), "must be positive (or omitted for the default)")
		}
	}
	v.caps(p, b.Caps)
	if b.PerJobWallTimeMS > 0 && b.PerJobWallTimeMS < 1000 {
		v.add(sub(p, "per_job_wall_time_ms"), "must be at least 1000 (one second)")
	}
}
