package rpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/choirhq/choir/rpc/internal/check"
	"github.com/choirhq/choir/rpc/wire"
)

// This file holds the request and response payload of every verb. Each has
// a Validate method that checks what strict decoding cannot: formats,
// enumerations and cross-field rules. The server validates every request
// before its handler sees it and every response before it leaves; the
// client validates every response it decodes.

// ValidAgentID reports whether id is a valid agent ID (the
// choir_control.agent_id domain).
func ValidAgentID(id string) bool { return check.ValidAgentID(id) }

// ValidID reports whether id is a valid request, call or message ID: 1-128
// characters of letters, digits and . _ : -, starting with a letter or
// digit. UUIDs qualify.
func ValidID(id string) bool { return check.ValidID(id) }

// ---- INIT_HELLO ----

// InitHelloRequest opens a session (spec 13.2, 14.2): the agent says who it
// is and what it runs.
type InitHelloRequest struct {
	AgentID string `json:"agent_id"`
	// SessionID must equal the envelope's session ID.
	SessionID         string `json:"session_id"`
	ImageVersion      string `json:"image_version"`
	ToolManifestHash  string `json:"tool_manifest_hash"`
	SkillManifestHash string `json:"skill_manifest_hash"`
}

// Validate checks the request's fields.
func (r InitHelloRequest) Validate() error {
	if err := check.Pattern("$.agent_id", r.AgentID, check.AgentIDPattern, "agent ID"); err != nil {
		return err
	}
	if err := check.SessionID("$.session_id", r.SessionID); err != nil {
		return err
	}
	if err := check.Text("$.image_version", r.ImageVersion, check.MaxShortText, true); err != nil {
		return err
	}
	if err := check.Text("$.tool_manifest_hash", r.ToolManifestHash, check.MaxShortText, true); err != nil {
		return err
	}
	return check.Text("$.skill_manifest_hash", r.SkillManifestHash, check.MaxShortText, true)
}

// HelloStatus says whether a session starts fresh or resumes.
type HelloStatus string

// The INIT_HELLO outcomes.
const (
	// HelloFresh: no prior state; the agent starts at revision 0 with the
	// genesis hash.
	HelloFresh HelloStatus = "fresh"
	// HelloResumed: the agent rehydrates from Snapshot and TailEvents and
	// continues after AckedRev.
	HelloResumed HelloStatus = "resumed"
)

// ResourceBindings names the resources leased to the session (spec 14.2):
// from the session's start-time overrides or the agent's defaults. Empty
// means not bound.
type ResourceBindings struct {
	Workspace    string `json:"workspace,omitempty"`
	GitIdentity  string `json:"git_identity,omitempty"`
	Notion       string `json:"notion,omitempty"`
	Email        string `json:"email,omitempty"`
	DM           string `json:"dm,omitempty"`
	Browser      string `json:"browser,omitempty"`
	VoiceProfile string `json:"voice_profile,omitempty"`
	// Models maps a role ("edge", "core", "embedding", ...) to a model.
	Models map[string]string `json:"models,omitempty"`
	// Secrets lists the secret names the agent may ask for with
	// GET_SECRETS: the "secret" fields of the bound resources.
	Secrets []string `json:"secrets,omitempty"`
	// MCPSecrets are the agent's agents.<id>.mcp_secrets: the only
	// secrets its MCP servers may receive (a server declaring another, the
	// model's key say, is not started).
	MCPSecrets []string `json:"mcp_secrets,omitempty"`
}

// Snapshot is a canonical working-memory snapshot (spec 13.4) at a
// revision. State is the agent's own structure; choird stores it opaque.
type Snapshot struct {
	Rev   int64           `json:"rev"`
	Hash  Hash            `json:"hash"`
	State json.RawMessage `json:"state"`
}

// InitHelloResponse tells the agent where to resume. The spec's
// lease_token is not returned: the agent already holds the token (it needed
// it for this very call), and choird keeps only its hash.
type InitHelloResponse struct {
	Status           HelloStatus      `json:"status"`
	ResourceBindings ResourceBindings `json:"resource_bindings"`
	// Snapshot and TailEvents rebuild the state at AckedRev: the events
	// up to AckedRev from the one after the snapshot's revision, or from
	// the lowest window boundary the snapshot records when that is lower
	// (the tail then holds the snapshot's event, with its hash).
	Snapshot   *Snapshot `json:"snapshot,omitempty"`
	TailEvents []Event   `json:"tail_events,omitempty"`
	// AckedRev and AckedHash are the last host-acknowledged revision and
	// its chain hash; the agent's next event is AckedRev+1 with hash_prev
	// AckedHash.
	AckedRev      int64 `json:"acked_rev"`
	AckedHash     Hash  `json:"acked_hash"`
	ConfigVersion int64 `json:"config_version"`
	// ResetBudgets says that the snapshot comes from an earlier session
	// whose per-session budgets this one does not continue (a person's
	// start, a day's rollover): the agent restores the snapshot's working
	// state but counts its session's tool calls and tokens from zero.
	ResetBudgets bool `json:"reset_budgets,omitempty"`
}

// Validate checks the response: the tail continues the snapshot and ends
// at AckedRev with AckedHash.
func (r InitHelloResponse) Validate() error {
	switch r.Status {
	case HelloFresh:
		if r.Snapshot != nil || len(r.TailEvents) > 0 {
			return check.Invalid("$.status", "a fresh session carries no snapshot or tail events")
		}
	case HelloResumed:
	default:
		return check.Invalid("$.status", "want %q or %q", HelloFresh, HelloResumed)
	}
	if r.AckedRev < 0 {
		return check.Invalid("$.acked_rev", "negative")
	}
	if r.ConfigVersion < 0 {
		return check.Invalid("$.config_version", "negative")
	}
	if err := check.Object("$.snapshot.state", snapshotState(r.Snapshot), r.Snapshot != nil); err != nil {
		return err
	}
	rev, prev := int64(-1), Hash{}
	if r.Snapshot != nil {
		rev, prev = r.Snapshot.Rev, r.Snapshot.Hash
		if rev < 0 || rev > r.AckedRev {
			return check.Invalid("$.snapshot.rev", "%d is outside 0..acked_rev (%d)", rev, r.AckedRev)
		}
	}
	if len(r.TailEvents) == 0 {
		if r.Snapshot != nil && (rev != r.AckedRev || prev != r.AckedHash) {
			return check.Invalid("$.snapshot", "ends at rev %d, not at acked_rev %d and acked_hash", rev, r.AckedRev)
		}
		return nil
	}
	if first := r.TailEvents[0]; rev < 0 || first.Rev <= rev {
		// No snapshot, or a tail that reaches back before it: it must
		// hold the snapshot's event.
		if i := rev - first.Rev; rev >= 0 && (i >= int64(len(r.TailEvents)) || r.TailEvents[i].Hash != prev) {
			return check.Invalid("$.tail_events", "do not hold the snapshot's event: rev %d with its hash", rev)
		}
		rev, prev = first.Rev-1, first.HashPrev
	}
	if err := checkChain("$.tail_events", r.TailEvents, rev, prev); err != nil {
		return err
	}
	last := r.TailEvents[len(r.TailEvents)-1]
	if last.Rev != r.AckedRev || last.Hash != r.AckedHash {
		return check.Invalid("$.tail_events", "end at rev %d, not at acked_rev %d and acked_hash", last.Rev, r.AckedRev)
	}
	return nil
}

func snapshotState(s *Snapshot) json.RawMessage {
	if s == nil {
		return nil
	}
	return s.State
}

// checkChain verifies that events are revisions base+1, base+2, ... and
// form a hash chain starting from prev.
func checkChain(path string, events []Event, base int64, prev Hash) error {
	return checkEvents(path, events, base, prev, true)
}

// checkEvents is checkChain, recomputing each event's hash only if
// verifyHashes is set; otherwise it checks only that each event's
// hash_prev links to the hash its predecessor carries.
func checkEvents(path string, events []Event, base int64, prev Hash, verifyHashes bool) error {
	for i := range events {
		e := &events[i]
		// The path is built only for an error: heartbeats carry many events.
		p := func(field string) string { return fmt.Sprintf("%s[%d]%s", path, i, field) }
		if e.Rev != base+1+int64(i) {
			return check.Invalid(p(".rev"), "want %d, got %d (events must be contiguous)", base+1+int64(i), e.Rev)
		}
		if !e.Type.Valid() {
			return check.Invalid(p(".type"), "unknown event type")
		}
		if !ValidLane(e.Lane) {
			return check.Invalid(p(".lane"), "not a valid lane (want edge, system or core:<job>)")
		}
		if !verifyHashes {
			if e.HashPrev != prev {
				return check.Invalid(p(".hash_prev"), "does not continue the chain at %s", prev)
			}
		} else if err := e.Verify(prev); err != nil {
			return check.Invalid(p(""), "%v", err)
		}
		prev = e.Hash
	}
	return nil
}

// ---- GET_SECRETS ----

// GetSecretsRequest asks for the values of named secrets (spec 14.2).
type GetSecretsRequest struct {
	Resources []string `json:"resources"`
}

const maxSecretNames = 256

// Validate checks the names: present, well-formed, distinct.
func (r GetSecretsRequest) Validate() error {
	if len(r.Resources) == 0 {
		return check.Invalid("$.resources", "required")
	}
	if len(r.Resources) > maxSecretNames {
		return check.Invalid("$.resources", "%d names, over the limit of %d", len(r.Resources), maxSecretNames)
	}
	seen := make(map[string]bool, len(r.Resources))
	for i, n := range r.Resources {
		p := fmt.Sprintf("$.resources[%d]", i)
		if err := check.Pattern(p, n, check.SecretPattern, "secret name"); err != nil {
			return err
		}
		if seen[n] {
			return check.Invalid(p, "duplicate name")
		}
		seen[n] = true
	}
	return nil
}

// Secrets maps secret names to values. It formats and logs as a count,
// never as its values.
type Secrets map[string]string

// String redacts the values.
func (s Secrets) String() string { return fmt.Sprintf("[%d secrets redacted]", len(s)) }

// GoString redacts the values.
func (s Secrets) GoString() string { return s.String() }

// LogValue redacts the values, listing only the names.
func (s Secrets) LogValue() slog.Value {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return slog.StringValue("redacted:" + strings.Join(names, ","))
}

// GetSecretsResponse holds the requested secrets. The agent keeps them in
// memory only (spec 14.3).
type GetSecretsResponse struct {
	Secrets Secrets `json:"secrets"`
}

// Validate checks the names.
func (r GetSecretsResponse) Validate() error {
	for n := range r.Secrets {
		if !check.SecretPattern.MatchString(n) {
			return check.Invalid("$.secrets", "a key is not a valid secret name")
		}
	}
	return nil
}

// ---- HEARTBEAT ----

// HeartbeatRequest replicates the committed events base_rev+1..new_rev
// (spec 13.1). A resent patch is a no-op for choird.
type HeartbeatRequest struct {
	BaseRev int64 `json:"base_rev"`
	NewRev  int64 `json:"new_rev"`
	// Patches are the events BaseRev+1..NewRev in order, possibly none.
	Patches       []Event   `json:"patches"`
	ConfigVersion int64     `json:"config_version"`
	HashPrev      Hash      `json:"hash_prev"`
	HashNew       Hash      `json:"hash_new"`
	Timestamp     time.Time `json:"timestamp"`
	// Snapshot, sent every few events, is the agent's working state at a
	// revision within BaseRev..NewRev (spec 13.4); recovery replays only
	// the events after it.
	Snapshot *Snapshot `json:"snapshot,omitempty"`
}

// Validate checks that the patches are contiguous, chained from HashPrev to
// HashNew, and that every event's hash matches its contents.
func (r HeartbeatRequest) Validate() error { return r.validate(true) }

// ValidateForSend is Validate without recomputing the event hashes: the
// agent computed them itself, and choird verifies them anyway.
func (r HeartbeatRequest) ValidateForSend() error { return r.validate(false) }

func (r HeartbeatRequest) validate(verifyHashes bool) error {
	if r.BaseRev < 0 {
		return check.Invalid("$.base_rev", "negative")
	}
	if r.NewRev < r.BaseRev {
		return check.Invalid("$.new_rev", "%d is below base_rev %d", r.NewRev, r.BaseRev)
	}
	if int64(len(r.Patches)) != r.NewRev-r.BaseRev {
		return check.Invalid("$.patches", "%d events for revisions %d..%d, want %d", len(r.Patches), r.BaseRev+1, r.NewRev, r.NewRev-r.BaseRev)
	}
	if r.ConfigVersion < 0 {
		return check.Invalid("$.config_version", "negative")
	}
	if r.Timestamp.IsZero() {
		return check.Invalid("$.timestamp", "required")
	}
	if err := checkEvents("$.patches", r.Patches, r.BaseRev, r.HashPrev, verifyHashes); err != nil {
		return err
	}
	end := r.HashPrev
	if n := len(r.Patches); n > 0 {
		end = r.Patches[n-1].Hash
	}
	if end != r.HashNew {
		return check.Invalid("$.hash_new", "does not match the chain's end %s", end)
	}
	if sn := r.Snapshot; sn != nil {
		if sn.Rev < r.BaseRev || sn.Rev > r.NewRev || sn.Rev < 1 {
			return check.Invalid("$.snapshot.rev", "%d is outside this heartbeat's revisions %d..%d", sn.Rev, r.BaseRev, r.NewRev)
		}
		want := r.HashPrev
		if sn.Rev > r.BaseRev {
			want = r.Patches[sn.Rev-r.BaseRev-1].Hash
		}
		if sn.Hash != want {
			return check.Invalid("$.snapshot.hash", "is not the hash of revision %d", sn.Rev)
		}
		if err := check.Object("$.snapshot.state", sn.State, true); err != nil {
			return err
		}
	}
	return nil
}

// HeartbeatResponse acknowledges the revisions choird has stored.
type HeartbeatResponse struct {
	AckRev              int64 `json:"ack_rev"`
	ConfigVersionLatest int64 `json:"config_version_latest"`
}

// Validate checks the revisions.
func (r HeartbeatResponse) Validate() error {
	if r.AckRev < 0 {
		return check.Invalid("$.ack_rev", "negative")
	}
	if r.ConfigVersionLatest < 0 {
		return check.Invalid("$.config_version_latest", "negative")
	}
	return nil
}

// ---- REQUEST_APPROVAL ----

// ApprovalRequest asks the user to approve an action. The answer arrives
// later as an approval_resolved push; choird deduplicates by request_id.
type ApprovalRequest struct {
	// RequestType classifies the action, e.g. "tool:choir.exec".
	RequestType string `json:"request_type"`
	// Summary is the one-line question shown to the user.
	Summary string `json:"summary"`
	// Payload is the action's details, a JSON object.
	Payload json.RawMessage `json:"payload"`
	// Sources are the untrusted sources the asking lane's context held
	// (issue 30), as the arbiter knows them: the approval card names them.
	Sources []string `json:"sources,omitempty"`
}

// Validate checks the type, summary and payload.
func (r ApprovalRequest) Validate() error {
	if err := check.Pattern("$.request_type", r.RequestType, check.RequestTypePattern, "request type"); err != nil {
		return err
	}
	if err := check.Text("$.summary", r.Summary, check.MaxReason, true); err != nil {
		return err
	}
	return check.Object("$.payload", r.Payload, true)
}

// ApprovalStatus is the state of a pending approval.
type ApprovalStatus string

// The approval states (choir_control.pending_approvals.status).
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalRejected ApprovalStatus = "rejected"
)

// Valid reports whether s is a known status.
func (s ApprovalStatus) Valid() bool {
	return s == ApprovalPending || s == ApprovalApproved || s == ApprovalRejected
}

// ApprovalResponse names the approval and its current status.
type ApprovalResponse struct {
	ApprovalID string         `json:"approval_id"`
	Status     ApprovalStatus `json:"status"`
}

// Validate checks the ID and status.
func (r ApprovalResponse) Validate() error {
	if err := check.Pattern("$.approval_id", r.ApprovalID, check.IDPattern, "approval ID"); err != nil {
		return err
	}
	if !r.Status.Valid() {
		return check.Invalid("$.status", "want pending, approved or rejected")
	}
	return nil
}

// ---- REPORT_STATUS ----

// ReportStatusRequest reports a lane's state for choirctl status and the
// audit trail.
type ReportStatusRequest struct {
	// Lane is "edge", "system" or "core:<job-name>".
	Lane string `json:"lane"`
	// State is the lane's state-machine state, e.g. "IDLE".
	State           string      `json:"state"`
	Skill           string      `json:"skill,omitempty"`
	Step            string      `json:"step,omitempty"`
	BudgetRemaining wire.Budget `json:"budget_remaining"`
	// Steps counts the model steps the lane (a core job) has taken.
	Steps int64 `json:"steps,omitempty"`
	// Progress is the lane's latest progress line (a core job's last
	// progress, plan or result line): at most MaxProgress bytes of
	// printable text, shown live in the DM and by choirctl.
	Progress string `json:"progress,omitempty"`
	// Sources are the untrusted sources the lane's context holds (issue
	// 30): what /status and choirctl show an operator.
	Sources []string `json:"sources,omitempty"`
}

// MaxProgress bounds ReportStatusRequest.Progress, in bytes.
const MaxProgress = 500

// Validate checks the lane, state and optional skill and step.
func (r ReportStatusRequest) Validate() error {
	if !ValidLane(r.Lane) {
		return check.Invalid("$.lane", "not a valid lane (want edge, system or core:<job>)")
	}
	if err := check.Pattern("$.state", r.State, check.StateNamePattern, "state name"); err != nil {
		return err
	}
	if r.Skill != "" {
		if err := check.Pattern("$.skill", r.Skill, check.StateNamePattern, "skill name"); err != nil {
			return err
		}
	}
	if r.Step != "" {
		if err := check.Pattern("$.step", r.Step, check.StateNamePattern, "step name"); err != nil {
			return err
		}
	}
	b := r.BudgetRemaining
	for _, f := range []struct {
		name string
		v    *int64
	}{{"tokens", b.Tokens}, {"tool_calls", b.ToolCalls}, {"time_ms", b.TimeMS}, {"steps", b.Steps}} {
		if f.v != nil && *f.v < 0 {
			return check.Invalid("$.budget_remaining."+f.name, "negative")
		}
	}
	if r.Steps < 0 {
		return check.Invalid("$.steps", "negative")
	}
	if len(r.Progress) > MaxProgress {
		return check.Invalid("$.progress", "longer than %d bytes", MaxProgress)
	}
	if !utf8.ValidString(r.Progress) || strings.ContainsFunc(r.Progress, func(c rune) bool { return unicode.IsControl(c) && c != '\n' }) {
		return check.Invalid("$.progress", "not printable UTF-8 text (control characters other than newline)")
	}
	return nil
}

// Ack is the response of verbs that only acknowledge.
type Ack struct {
	Ack bool `json:"ack"`
}

// Validate requires the acknowledgement to be true.
func (a Ack) Validate() error {
	if !a.Ack {
		return check.Invalid("$.ack", "want true")
	}
	return nil
}

// ReportStatusResponse acknowledges a status report.
type ReportStatusResponse = Ack

// ---- TERMINATE_SELF ----

// TerminateSelfRequest tells choird the agent is ending its session, after
// its final heartbeat (journey 4). choird revokes the lease token.
type TerminateSelfRequest struct {
	Reason string `json:"reason"`
	// BudgetSpent says the session ends because a per-session budget is
	// used up: choird starts its successor, with a fresh budget, at the
	// midnight after it (the day's rollover).
	BudgetSpent bool `json:"budget_spent,omitempty"`
}

// Validate requires a reason.
func (r TerminateSelfRequest) Validate() error {
	return check.Text("$.reason", r.Reason, check.MaxReason, true)
}

// TerminateSelfResponse acknowledges the termination.
type TerminateSelfResponse = Ack

// ---- FETCH_DYNAMIC_CONFIG ----

// FetchDynamicConfigRequest asks for the configuration if it is newer than
// the agent's.
type FetchDynamicConfigRequest struct {
	CurrentConfigVersion int64 `json:"current_config_version"`
}

// Validate checks the version.
func (r FetchDynamicConfigRequest) Validate() error {
	if r.CurrentConfigVersion < 0 {
		return check.Invalid("$.current_config_version", "negative")
	}
	return nil
}

// FetchDynamicConfigResponse carries the latest version, and the
// configuration itself when it differs from the agent's.
type FetchDynamicConfigResponse struct {
	ConfigVersion int64           `json:"config_version"`
	Config        json.RawMessage `json:"config,omitempty"`
}

// Validate checks the version and that a configuration is an object.
func (r FetchDynamicConfigResponse) Validate() error {
	if r.ConfigVersion < 0 {
		return check.Invalid("$.config_version", "negative")
	}
	return check.Object("$.config", r.Config, false)
}

// ---- EXECUTE_HOST_TOOL ----

// ExecuteHostToolRequest runs a tool that needs the host (spec 12.5).
// choird deduplicates by call_id as well as by request_id.
//
// IdempotencyKey is the call's key when it wrote ahead (issue 31): the
// same when a keyed call runs again after a restart, in whatever session,
// so a host tool that keeps what it did under the key does it once.
type ExecuteHostToolRequest struct {
	ToolName       string          `json:"tool_name"`
	CallID         string          `json:"call_id"`
	Input          json.RawMessage `json:"input"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// Sources are the untrusted sources of the calling lane, as its
	// arbiter knows them (issue 30): a schedule keeps them for its fires.
	Sources []string `json:"sources,omitempty"`
}

// Validate checks the tool name, call ID and input object.
func (r ExecuteHostToolRequest) Validate() error {
	if err := check.Pattern("$.tool_name", r.ToolName, check.ToolNamePattern, "tool name"); err != nil {
		return err
	}
	if err := check.Pattern("$.call_id", r.CallID, check.IDPattern, "call ID"); err != nil {
		return err
	}
	if r.IdempotencyKey != "" {
		if err := check.Pattern("$.idempotency_key", r.IdempotencyKey, check.IDPattern, "idempotency key"); err != nil {
			return err
		}
	}
	return check.Object("$.input", r.Input, true)
}

// ToolStatus is the outcome of a host tool.
type ToolStatus string

// The host-tool outcomes.
const (
	ToolSuccess ToolStatus = "success"
	ToolError   ToolStatus = "error"
)

// ExecuteHostToolResponse is the tool's result; on ToolError, Output
// describes the failure.
type ExecuteHostToolResponse struct {
	CallID string          `json:"call_id"`
	Status ToolStatus      `json:"status"`
	Output json.RawMessage `json:"output"`
}

// Validate checks the call ID, status and output.
func (r ExecuteHostToolResponse) Validate() error {
	if err := check.Pattern("$.call_id", r.CallID, check.IDPattern, "call ID"); err != nil {
		return err
	}
	if r.Status != ToolSuccess && r.Status != ToolError {
		return check.Invalid("$.status", "want success or error")
	}
	if len(bytes.TrimSpace(r.Output)) == 0 {
		return check.Invalid("$.output", "required")
	}
	return nil
}

// ---- SEND_OUTBOUND ----

// OutboundKind is what an outbound message carries.
type OutboundKind string

// The outbound kinds (choir_control.outbox.kind).
const (
	OutboundText     OutboundKind = "text"
	OutboundDocument OutboundKind = "document"
	OutboundPhoto    OutboundKind = "photo"
	OutboundVoice    OutboundKind = "voice"
	OutboundVideo    OutboundKind = "video"
)

// Valid reports whether k is a known kind.
func (k OutboundKind) Valid() bool {
	switch k {
	case OutboundText, OutboundDocument, OutboundPhoto, OutboundVoice, OutboundVideo:
		return true
	}
	return false
}

// SendOutboundRequest hands choird a message for the agent's user, to be
// written to the outbox and delivered through the session's bound DM.
// MessageID is the idempotency key: sending the same MessageID again,
// under any request_id, queues nothing new.
type SendOutboundRequest struct {
	MessageID string       `json:"message_id"`
	Kind      OutboundKind `json:"kind"`
	// Text is the message for kind text, and the optional caption
	// otherwise.
	Text string `json:"text,omitempty"`
	// FilePath names the file to send, relative to the workspace's
	// .choirtmp/send directory; required for every kind but text.
	FilePath string `json:"file_path,omitempty"`
	// EventRev is the revision of the committed event that produced the
	// message (the answer's model_output, say). choird queues the message
	// only once its replica of the session's log holds that revision, so
	// the outbox never runs ahead of the log: a session resumed from the
	// replica sees that it answered, and sends the same message ID again
	// instead of answering anew. Zero for a message no event produced (a
	// warning that choird is unreachable).
	EventRev int64 `json:"event_rev,omitempty"`
}

// Validate checks the ID, the kind, and that text or file fit the kind.
func (r SendOutboundRequest) Validate() error {
	if err := check.Pattern("$.message_id", r.MessageID, check.IDPattern, "message ID"); err != nil {
		return err
	}
	if r.EventRev < 0 {
		return check.Invalid("$.event_rev", "must not be negative")
	}
	if !r.Kind.Valid() {
		return check.Invalid("$.kind", "want text, document, photo, voice or video")
	}
	if r.Kind == OutboundText {
		if r.FilePath != "" {
			return check.Invalid("$.file_path", "not allowed for kind text")
		}
		return check.Text("$.text", r.Text, 1<<20, true)
	}
	if err := check.Text("$.text", r.Text, check.MaxReason, false); err != nil {
		return err
	}
	return check.SendPath("$.file_path", r.FilePath)
}

// OutboundStatus is the delivery state of an outbound message.
type OutboundStatus string

// The outbound states (choir_control.outbox.status).
const (
	OutboundPending OutboundStatus = "pending"
	OutboundSent    OutboundStatus = "sent"
	OutboundFailed  OutboundStatus = "failed"
)

// SendOutboundResponse names the outbox entry for the message.
type SendOutboundResponse struct {
	MessageID string         `json:"message_id"`
	OutboxID  int64          `json:"outbox_id"`
	Status    OutboundStatus `json:"status"`
	// Duplicate is true when MessageID was already queued; nothing new was
	// queued.
	Duplicate bool `json:"duplicate"`
}

// Validate checks the ID, outbox ID and status.
func (r SendOutboundResponse) Validate() error {
	if err := check.Pattern("$.message_id", r.MessageID, check.IDPattern, "message ID"); err != nil {
		return err
	}
	if r.OutboxID <= 0 {
		return check.Invalid("$.outbox_id", "must be positive")
	}
	switch r.Status {
	case OutboundPending, OutboundSent, OutboundFailed:
		return nil
	}
	return check.Invalid("$.status", "want pending, sent or failed")
}
