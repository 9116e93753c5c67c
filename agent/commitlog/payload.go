package commitlog

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/usage"
)

// Payload is the typed payload of one event type; [Appender.AppendPayload]
// commits it as an event of that type.
//
// The JSON names of the types below are a contract with Postgres: the
// choir_audit.llm_calls and choir_audit.tool_calls views read them from
// session_events.payload. Renaming one breaks the audit views.
type Payload interface {
	EventType() rpc.EventType
}

// LLMCall is the payload of llm_call_committed: one model call and what it
// cost.
type LLMCall struct {
	Model            string `json:"model"`
	Lane             string `json:"lane"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	LatencyMS        int64  `json:"latency_ms"`
	// CachedTokens are the prompt tokens served from the provider's cache;
	// CostUSD and CostSource the call's cost and where it came from
	// (provider, prices; empty when unpriced). JobID names the core job.
	CachedTokens int64   `json:"cached_tokens,omitempty"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
	CostSource   string  `json:"cost_source,omitempty"`
	JobID        string  `json:"job_id,omitempty"`
	// Purpose is empty for a lane's own step, or what else the call was
	// for: [PurposeCompaction], [PurposeSessionSummary]. A resumed core job
	// counts its steps by the calls without one.
	Purpose string `json:"purpose,omitempty"`
	// Sources are the untrusted sources the call's context held (issue
	// 30); the arbiter fills them in as it commits the call.
	Sources []string `json:"sources,omitempty"`
	// ToolMode and ToolSchemaTokens are how the call was offered the
	// tools (direct, compact, discovery) and the estimated tokens of its
	// tools parameter, so the saving of each mode can be measured.
	ToolMode         string `json:"tool_mode,omitempty"`
	ToolSchemaTokens int64  `json:"tool_schema_tokens,omitempty"`
	// SpendKey is the call's name in choird's spend ledger when it went
	// through the egress gateway's service route: the usage views count
	// the gateway's record of it, not this one.
	SpendKey string `json:"spend_key,omitempty"`
}

// Purposes of a model call besides a lane's step.
const (
	PurposeCompaction     = "compaction"
	PurposeSessionSummary = "session_summary"
	// PurposeBilledFailure is a call that failed after the provider
	// billed it: logged for its spend, it is no step.
	PurposeBilledFailure = "billed_failure"
)

// EventType returns rpc.EventLLMCallCommitted.
func (LLMCall) EventType() rpc.EventType { return rpc.EventLLMCallCommitted }

// Validate checks that the model and lane are named and the counts are not
// negative.
func (c LLMCall) Validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("llm call: empty model"))
	}
	if !rpc.ValidLane(c.Lane) {
		errs = append(errs, fmt.Errorf("llm call: lane %q, want edge, system or core:<job>", c.Lane))
	}
	if c.PromptTokens < 0 || c.CompletionTokens < 0 || c.LatencyMS < 0 {
		errs = append(errs, fmt.Errorf("llm call: negative tokens or latency (%d, %d, %d ms)", c.PromptTokens, c.CompletionTokens, c.LatencyMS))
	}
	return errors.Join(errs...)
}

// ToolRequest is the payload of tool_call_requested: a tool call as the
// model proposed it, before the arbiter validated it.
type ToolRequest struct {
	CallID string          `json:"call_id"`
	Tool   string          `json:"tool"`
	Input  json.RawMessage `json:"input"`
}

// EventType returns rpc.EventToolCallRequested.
func (ToolRequest) EventType() rpc.EventType { return rpc.EventToolCallRequested }

// Validate checks that the call and tool are named.
func (r ToolRequest) Validate() error { return validateCall(r.CallID, r.Tool) }

// MarshalJSON writes a missing input as {}.
func (r ToolRequest) MarshalJSON() ([]byte, error) {
	type plain ToolRequest
	if len(r.Input) == 0 {
		r.Input = json.RawMessage(`{}`)
	}
	return json.Marshal(plain(r))
}

// ToolCall is the payload of tool_call_committed: a validated tool call
// the arbiter is about to execute, with the canonical lockset it holds for
// it (lock.Strings of the granted lockset).
//
// A call with side effects is also its write-ahead intent (issue 31): it
// carries the digest of its input, its idempotency class and key, and
// WriteAhead, and the tool runs only once choird has acknowledged it.
// After a crash, an intent without a result is reconciled by its class,
// never run again blindly.
type ToolCall struct {
	CallID string          `json:"call_id"`
	Tool   string          `json:"tool"`
	Input  json.RawMessage `json:"input"`
	Locks  []string        `json:"locks"`
	// WriteAhead marks an intent: the call waited for choird's
	// acknowledgement of this event before it ran.
	WriteAhead bool `json:"write_ahead,omitempty"`
	// InputSHA256 is the hex SHA-256 of Input as committed.
	InputSHA256 string `json:"input_sha256,omitempty"`
	// Idempotency is the call's class (tool.Idempotency): idempotent,
	// keyed or unsafe.
	Idempotency string `json:"idempotency,omitempty"`
	// IdempotencyKey is the key every run of this call carries: random,
	// unique to the call, and the same when a keyed call runs again.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Sources are the untrusted sources the proposing lane's context held
	// (issue 30), and Policy what the untrusted-input policy decided of
	// the call: "" when the lane held none, else PolicyNotCovered,
	// PolicyAllowlisted, PolicyOptedOut or PolicyHeld.
	Sources []string `json:"sources,omitempty"`
	Policy  string   `json:"policy,omitempty"`
}

// The untrusted-input policy's decisions on a call of a lane that read
// strangers' words (ToolCall.Policy; a refused call is a rejection).
const (
	// PolicyNotCovered: the call may not act and carries no data out.
	PolicyNotCovered = "not_covered"
	// PolicyAllowlisted: the agent's untrusted_input.allow lets it run.
	PolicyAllowlisted = "allowlisted"
	// PolicyOptedOut: the agent's untrusted_input.mode is allow.
	PolicyOptedOut = "opted_out"
	// PolicyHeld: it waits for a person's approval of that exact call.
	PolicyHeld = "held"
	// PolicyRefused: the agent's untrusted_input.mode is refuse; the call
	// is rejected, and never committed as a call.
	PolicyRefused = "refused"
)

// EventType returns rpc.EventToolCallCommitted.
func (ToolCall) EventType() rpc.EventType { return rpc.EventToolCallCommitted }

// Validate checks that the call and tool are named and no lock is empty.
func (c ToolCall) Validate() error {
	if err := validateCall(c.CallID, c.Tool); err != nil {
		return err
	}
	for i, l := range c.Locks {
		if l == "" {
			return fmt.Errorf("tool call %s: lock %d is empty", c.CallID, i)
		}
	}
	return nil
}

// MarshalJSON writes a missing input as {} and no locks as [], never null.
func (c ToolCall) MarshalJSON() ([]byte, error) {
	type plain ToolCall
	if len(c.Input) == 0 {
		c.Input = json.RawMessage(`{}`)
	}
	if c.Locks == nil {
		c.Locks = []string{}
	}
	return json.Marshal(plain(c))
}

// ToolStatus is the outcome of a tool call.
type ToolStatus string

// The outcomes the audit view reports.
const (
	ToolSuccess ToolStatus = "success"
	ToolError   ToolStatus = "error"
	// ToolInDoubt is the result of an unsafe call a crash interrupted
	// after its intent: it may or may not have taken effect, and it is
	// not run again.
	ToolInDoubt ToolStatus = "in_doubt"
)

// ToolResult is the payload of tool_result_committed: how a tool call
// ended, joined to its ToolCall by call_id.
type ToolResult struct {
	CallID     string          `json:"call_id"`
	Tool       string          `json:"tool"`
	Status     ToolStatus      `json:"status"`
	DurationMS int64           `json:"duration_ms"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      string          `json:"error,omitempty"`
	// Usage is what the tool used of paid services (see rpc/usage).
	Usage []usage.Record `json:"usage,omitempty"`
	// Reconciled says the result was committed after a restart, by the
	// reconciliation of the call's intent: a re-run, or in doubt.
	Reconciled bool `json:"reconciled,omitempty"`
	// Sources are the untrusted sources the result brings into the lane
	// (tool.Def.Sources), decided by the arbiter from the tool's
	// declaration: the lane holds them from this event on.
	Sources []string `json:"sources,omitempty"`
}

// EventType returns rpc.EventToolResultCommitted.
func (ToolResult) EventType() rpc.EventType { return rpc.EventToolResultCommitted }

// Validate checks the names, the status, that an error result says what
// went wrong and a successful one does not, and the duration.
func (r ToolResult) Validate() error {
	if err := validateCall(r.CallID, r.Tool); err != nil {
		return err
	}
	switch {
	case r.Status != ToolSuccess && r.Status != ToolError && r.Status != ToolInDoubt:
		return fmt.Errorf("tool result %s: status %q, want success, error or in_doubt", r.CallID, r.Status)
	case r.Status != ToolSuccess && r.Error == "":
		return fmt.Errorf("tool result %s: status error without an error message", r.CallID)
	case r.Status == ToolSuccess && r.Error != "":
		return fmt.Errorf("tool result %s: status success with an error message", r.CallID)
	case r.DurationMS < 0:
		return fmt.Errorf("tool result %s: negative duration %d ms", r.CallID, r.DurationMS)
	}
	return nil
}

func validateCall(callID, tool string) error {
	switch {
	case callID == "":
		return errors.New("tool call: empty call_id")
	case tool == "":
		return fmt.Errorf("tool call %s: empty tool name", callID)
	}
	return nil
}

// Decode decodes e's payload as P, checking that e is of P's event type.
func Decode[P Payload](e rpc.Event) (P, error) {
	var p P
	if e.Type != p.EventType() {
		return p, fmt.Errorf("decode event rev %d: type %s, want %s", e.Rev, e.Type, p.EventType())
	}
	if err := json.Unmarshal(e.Payload, &p); err != nil {
		return p, fmt.Errorf("decode %s event rev %d: %w", e.Type, e.Rev, err)
	}
	return p, nil
}
