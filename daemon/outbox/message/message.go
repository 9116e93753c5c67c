// Package message is the contract between the outbox's delivery worker
// (daemon/outbox) and the channels that send what it delivers
// (daemon/gateway): one message as a channel sends it (Part), the kinds a
// message may be, the file a message carries, confined to a workspace's
// .choirtmp/send, and the send gate by which the worker marks a part as
// being sent just before the channel's request completes. It holds no
// delivery policy, no rows and no channel: it is a leaf, so the gateway
// uses it without linking the database (layout_test.go), and the outbox
// and the gateway never import each other.
package message

// The outbound kinds, as stored in choir_control.outbox.kind (the values of
// rpc.OutboundKind).
const (
	Text     = "text"
	Document = "document"
	Photo    = "photo"
	Voice    = "voice"
	Video    = "video"
)

// Part is one message a channel sends: an outbox row as queued, or one of
// the parts a sender cuts it into.
type Part struct {
	Gateway string
	ChatID  string
	// Kind is one of the kinds above.
	Kind string
	// Text is the message text, or the caption of a file.
	Text string
	// File is the file to send; zero for text.
	File File
	// ApprovalID, when set, asks for the approval's [Approve] [Reject]
	// buttons under the message (under the last part of a long one).
	ApprovalID string
	// ResendOf, when not zero, asks for a [Send again] button under the
	// message (under the last part of a long one), which sends the
	// unconfirmed message of that outbox id again.
	ResendOf int64
}
