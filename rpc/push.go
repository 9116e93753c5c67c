package rpc

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/choirhq/choir/rpc/internal/check"
)

// PushKind names a message choird pushes to the agent.
type PushKind string

// The push kinds.
const (
	PushUserMessage      PushKind = "user_message"
	PushInjection        PushKind = "injection"
	PushCancel           PushKind = "cancel"
	PushApprovalResolved PushKind = "approval_resolved"
	PushConfigChanged    PushKind = "config_changed"
	PushShutdown         PushKind = "shutdown"
	PushCompact          PushKind = "compact"
)

// PushKinds lists every push kind.
var PushKinds = []PushKind{
	PushUserMessage, PushInjection, PushCancel, PushApprovalResolved, PushConfigChanged, PushShutdown,
	PushCompact,
}

// Push is one message from choird to the agent. Exactly one of the kind
// fields is set, the one Kind names.
//
// Epoch and Seq are set by the server: Seq increases by one with every push
// to a session, within an Epoch (one run of choird's push buffer). The
// client drops a push whose (Epoch, Seq) it has already delivered. A Seq
// that jumps by more than one means pushes were lost from the buffer (see
// [Server.Push]); the agent should resynchronise (FETCH_DYNAMIC_CONFIG;
// choird redelivers undelivered inbox rows itself).
type Push struct {
	Epoch string   `json:"epoch"`
	Seq   uint64   `json:"seq"`
	Kind  PushKind `json:"kind"`

	UserMessage      *UserMessage      `json:"user_message,omitempty"`
	Injection        *Injection        `json:"injection,omitempty"`
	Cancel           *Cancel           `json:"cancel,omitempty"`
	ApprovalResolved *ApprovalResolved `json:"approval_resolved,omitempty"`
	ConfigChanged    *ConfigChanged    `json:"config_changed,omitempty"`
	Shutdown         *Shutdown         `json:"shutdown,omitempty"`
	Compact          *Compact          `json:"compact,omitempty"`
}

// body returns the set kind fields, by kind.
func (p Push) body() map[PushKind]bool {
	set := map[PushKind]bool{}
	if p.UserMessage != nil {
		set[PushUserMessage] = true
	}
	if p.Injection != nil {
		set[PushInjection] = true
	}
	if p.Cancel != nil {
		set[PushCancel] = true
	}
	if p.ApprovalResolved != nil {
		set[PushApprovalResolved] = true
	}
	if p.ConfigChanged != nil {
		set[PushConfigChanged] = true
	}
	if p.Shutdown != nil {
		set[PushShutdown] = true
	}
	if p.Compact != nil {
		set[PushCompact] = true
	}
	return set
}

// Validate checks that exactly the field Kind names is set, and that field.
// It does not check Epoch and Seq, which the server assigns.
func (p Push) Validate() error {
	set := p.body()
	if len(set) != 1 || !set[p.Kind] {
		return check.Invalid("$", "kind %q must come with exactly its own field set (got %d fields)", p.Kind, len(set))
	}
	switch p.Kind {
	case PushUserMessage:
		return p.UserMessage.Validate()
	case PushInjection:
		return p.Injection.Validate()
	case PushCancel:
		return p.Cancel.Validate()
	case PushApprovalResolved:
		return p.ApprovalResolved.Validate()
	case PushConfigChanged:
		return p.ConfigChanged.Validate()
	case PushShutdown:
		return p.Shutdown.Validate()
	case PushCompact:
		return p.Compact.Validate()
	}
	return check.Invalid("$.kind", "unknown push kind")
}

// String describes the push without its contents (which may be private).
func (p Push) String() string { return fmt.Sprintf("%s#%s-%d", p.Kind, p.Epoch, p.Seq) }

// Attachment is a file that came with a user message, already saved where
// the agent can read it.
type Attachment struct {
	// Kind is document, photo, voice, video or audio.
	Kind string `json:"kind"`
	// FilePath is relative to the workspace's .choirtmp/recv directory.
	FilePath string `json:"file_path"`
	Name     string `json:"name,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
	Size     int64  `json:"size"`
}

// UserMessage is a message from the agent's user, from the durable inbox.
type UserMessage struct {
	// InboxID identifies the inbox row; the agent's user_msg event carries
	// it so that choird can mark the row delivered.
	InboxID     int64        `json:"inbox_id"`
	Gateway     string       `json:"gateway"`
	ChatID      string       `json:"chat_id"`
	UserID      string       `json:"user_id"`
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
	ReceivedAt  time.Time    `json:"received_at"`
	// Origin says whose words Text is, as choird knows it: OriginDM (or
	// empty) the user's own, OriginMail a stranger's mail notice,
	// OriginSchedule the agent's own earlier note. Only the user's words
	// reach the model as the user.
	Origin string `json:"origin,omitempty"`
	// Sources are the provenance of Text beyond the user's DM, decided by
	// choird and never by the model: "mail:bob@ext.test" for a mail
	// notice, the sources of the lane that created a schedule for its
	// fire. The lane that reads Text holds them from then on.
	Sources []string `json:"sources,omitempty"`
}

// The origins of a [UserMessage].
const (
	OriginDM       = "dm"
	OriginMail     = "mail"
	OriginSchedule = "schedule"
)

// Validate checks the message.
func (m *UserMessage) Validate() error {
	if m.InboxID <= 0 {
		return check.Invalid("$.user_message.inbox_id", "must be positive")
	}
	if err := check.Text("$.user_message.gateway", m.Gateway, check.MaxShortText, true); err != nil {
		return err
	}
	if err := check.Text("$.user_message.text", m.Text, 1<<20, len(m.Attachments) == 0); err != nil {
		return err
	}
	switch m.Origin {
	case "", OriginDM, OriginMail, OriginSchedule:
	default:
		return check.Invalid("$.user_message.origin", `must be "dm", "mail" or "schedule"`)
	}
	for i, s := range m.Sources {
		if err := check.Text(fmt.Sprintf("$.user_message.sources[%d]", i), s, 2048, true); err != nil {
			return err
		}
	}
	for i, a := range m.Attachments {
		p := fmt.Sprintf("$.user_message.attachments[%d]", i)
		if err := check.Text(p+".kind", a.Kind, check.MaxShortText, true); err != nil {
			return err
		}
		if err := check.SendPath(p+".file_path", a.FilePath); err != nil {
			return err
		}
		if a.Size < 0 {
			return check.Invalid(p+".size", "negative")
		}
	}
	if m.ReceivedAt.IsZero() {
		return check.Invalid("$.user_message.received_at", "required")
	}
	return nil
}

// Injection is an instruction the user injected into the edge lane with
// /inject (spec 12.8): appended to the edge context at its next safe point.
type Injection struct {
	InboxID    int64     `json:"inbox_id"`
	Text       string    `json:"text"`
	ReceivedAt time.Time `json:"received_at"`
}

// Validate checks the injection.
func (m *Injection) Validate() error {
	if m.InboxID <= 0 {
		return check.Invalid("$.injection.inbox_id", "must be positive")
	}
	return check.Text("$.injection.text", m.Text, 1<<20, true)
}

// CancelScope says what a cancel stops.
type CancelScope string

// The cancel scopes.
const (
	// CancelAll stops every lane's current work.
	CancelAll CancelScope = "all"
	// CancelEdge stops the edge lane's current turn.
	CancelEdge CancelScope = "edge"
	// CancelCore stops the named core job.
	CancelCore CancelScope = "core"
)

// Cancel asks the agent to stop work at its next safe point.
type Cancel struct {
	Scope CancelScope `json:"scope"`
	// JobName names the core job, for CancelCore.
	JobName string `json:"job_name,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Validate checks the scope and job name.
func (m *Cancel) Validate() error {
	switch m.Scope {
	case CancelAll, CancelEdge:
		if m.JobName != "" {
			return check.Invalid("$.cancel.job_name", "only allowed with scope core")
		}
	case CancelCore:
		if !ValidLane("core:" + m.JobName) {
			return check.Invalid("$.cancel.job_name", "not a valid job name")
		}
	default:
		return check.Invalid("$.cancel.scope", "want all, edge or core")
	}
	return check.Text("$.cancel.reason", m.Reason, check.MaxReason, false)
}

// ApprovalResolved tells the agent how an approval ended.
type ApprovalResolved struct {
	ApprovalID string `json:"approval_id"`
	// Status is approved or rejected (a timeout rejects).
	Status ApprovalStatus `json:"status"`
	// ResolvedBy is "choirctl:<user>", "telegram:<dm>" or "timeout".
	ResolvedBy string    `json:"resolved_by"`
	ResolvedAt time.Time `json:"resolved_at"`
	// RequestType and Payload are what was asked, as choird stored and
	// showed it: the agent runs an approved gated call with exactly this
	// (for a runtime.approval tool the payload is the call's input).
	RequestType string          `json:"request_type,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
}

// Validate checks the resolution.
func (m *ApprovalResolved) Validate() error {
	if err := check.Pattern("$.approval_resolved.approval_id", m.ApprovalID, check.IDPattern, "approval ID"); err != nil {
		return err
	}
	if m.Status != ApprovalApproved && m.Status != ApprovalRejected {
		return check.Invalid("$.approval_resolved.status", "want approved or rejected")
	}
	if err := check.Text("$.approval_resolved.resolved_by", m.ResolvedBy, check.MaxShortText, true); err != nil {
		return err
	}
	if m.ResolvedAt.IsZero() {
		return check.Invalid("$.approval_resolved.resolved_at", "required")
	}
	if len(m.Payload) > 0 && !json.Valid(m.Payload) {
		return check.Invalid("$.approval_resolved.payload", "not JSON")
	}
	return nil
}

// ConfigChanged says a new configuration is available; the agent fetches it
// with FETCH_DYNAMIC_CONFIG.
type ConfigChanged struct {
	ConfigVersion int64 `json:"config_version"`
}

// Validate checks the version.
func (m *ConfigChanged) Validate() error {
	if m.ConfigVersion <= 0 {
		return check.Invalid("$.config_changed.config_version", "must be positive")
	}
	return nil
}

// Shutdown asks the agent to stop: at a safe point, with a session summary,
// a final heartbeat and TERMINATE_SELF, within Grace (journey 4).
type Shutdown struct {
	Reason  string `json:"reason"`
	GraceMS int64  `json:"grace_ms"`
	// AfterTurn lets a turn in progress finish before the lane stops (the
	// day's rollover), rather than stopping it at its next safe point; a
	// turn longer than half the grace is stopped at a safe point after
	// all.
	AfterTurn bool `json:"after_turn,omitempty"`
}

// Validate checks the reason and grace period.
func (m *Shutdown) Validate() error {
	if m.GraceMS < 0 {
		return check.Invalid("$.shutdown.grace_ms", "negative")
	}
	return check.Text("$.shutdown.reason", m.Reason, check.MaxReason, true)
}

// Compact asks the agent to compact the edge lane's event window into its
// reference summary (choir.memory.compact) at the lane's next safe point,
// as the user's /compact does.
type Compact struct {
	Reason string `json:"reason,omitempty"`
}

// Validate checks the optional reason.
func (m *Compact) Validate() error {
	return check.Text("$.compact.reason", m.Reason, check.MaxReason, false)
}
