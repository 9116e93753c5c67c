package admin

import (
	"fmt"
	"time"
)

// StatusResponse is choird's health, for choirctl status.
type StatusResponse struct {
	Choird        DaemonStatus   `json:"choird"`
	Postgres      PostgresStatus `json:"postgres"`
	ConfigVersion int64          `json:"config_version"`
	// Agents lists every configured agent, sorted by ID.
	Agents []AgentStatus `json:"agents"`
	// Memory is the embedding pipeline's state, when choird could read it.
	Memory *MemoryStatus `json:"memory,omitempty"`
	// Models are the LLM endpoints of config.json as they answered now;
	// NoModel says, when none answers, that agents cannot talk and how to
	// set a model.
	Models  []ModelStatus `json:"models,omitempty"`
	NoModel string        `json:"no_model,omitempty"`
}

// MemoryStatus is the embedding pipeline as choirctl status shows it: which
// embedder runs (the offline one is labelled as such), what waits for a
// vector, and the latest failure. While the provider fails, memory search
// answers from full text.
type MemoryStatus struct {
	Provider   string `json:"provider"`
	Model      string `json:"model,omitempty"`
	Dimensions int    `json:"dimensions"`
	Offline    bool   `json:"offline"`
	Note       string `json:"note,omitempty"`
	// ConsecutiveFailures counts failed embedding calls since the last
	// success: above zero, the provider is down or refusing.
	ConsecutiveFailures int64 `json:"consecutive_failures"`
	// Pending documents wait for a vector; Failed ones gave up and are
	// found by full text only until choirctl memory reembed.
	Pending   int    `json:"pending"`
	Failed    int    `json:"failed"`
	LastError string `json:"last_error,omitempty"`
}

// DaemonStatus describes the running choird.
type DaemonStatus struct {
	Version   string    `json:"version"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	UptimeMS  int64     `json:"uptime_ms"`
}

// Uptime returns UptimeMS as a duration.
func (d DaemonStatus) Uptime() time.Duration { return time.Duration(d.UptimeMS) * time.Millisecond }

// PostgresStatus says whether choird reaches Postgres.
type PostgresStatus struct {
	Reachable bool `json:"reachable"`
	// ServerVersion is Postgres's server_version, when reachable.
	ServerVersion string `json:"server_version,omitempty"`
	// Error says why Postgres is unreachable.
	Error string `json:"error,omitempty"`
}

// AgentState is an agent's state as choirctl shows it: its live session's
// status, or stopped, or crashed when its last session crashed.
type AgentState string

// The agent states.
const (
	AgentStopped  AgentState = "stopped"
	AgentStarting AgentState = "starting"
	AgentActive   AgentState = "active"
	AgentStopping AgentState = "stopping"
	AgentCrashed  AgentState = "crashed"
)

// AgentStatus is one configured agent.
type AgentStatus struct {
	AgentID string     `json:"agent_id"`
	State   AgentState `json:"state"`
	// SessionID, Runtime, StartedAt and LastHeartbeatAt describe the live
	// (or, for crashed, the last) session.
	SessionID       string     `json:"session_id,omitempty"`
	Runtime         string     `json:"runtime,omitempty"`
	StartedAt       *time.Time `json:"started_at,omitempty"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
	// RollsOverAt is when the live session rolls over into its successor
	// with fresh session budgets (its DM's next midnight; later if it is
	// busy then); unset until choird has armed it, or without a runtime.
	RollsOverAt *time.Time `json:"rolls_over_at,omitempty"`
	// Lanes are the states the session's lanes last reported (edge,
	// system and each core job), sorted by lane.
	Lanes []LaneStatus `json:"lanes,omitempty"`
}

// Validate checks the states, so that a client never shows one it does not
// know.
func (s StatusResponse) Validate() error {
	for i, a := range s.Agents {
		switch a.State {
		case AgentStopped, AgentStarting, AgentActive, AgentStopping, AgentCrashed:
		default:
			return fmt.Errorf("$.agents[%d].state: unknown state %q", i, a.State)
		}
	}
	return nil
}

// ModelStatus is what a model's endpoint answered choird's probe
// (GET <endpoint>/models with its key).
type ModelStatus struct {
	Name      string `json:"name"`
	Model     string `json:"model"`
	Endpoint  string `json:"endpoint"`
	Reachable bool   `json:"reachable"`
	// Error says what is wrong and how to fix it: nothing answers, or the
	// provider rejects the key (naming the environment variable it came
	// from, when choirctl init took it from one).
	Error string `json:"error,omitempty"`
}
