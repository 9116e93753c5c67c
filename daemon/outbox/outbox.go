// Package outbox is the inbox's twin: every message choird sends to a chat
// is an outbox row, queued with its deliver_outbound job in the
// transaction that decided to send it (EnqueueTx), and sent by the
// delivery worker, at most once and in each chat's order, through a
// channel (Sender, which the gateway implements) at the pace the channel
// allows (Pacer). It owns the outbox table, the delivery job kind and its
// queue, the console channel, and what becomes of a message whose send it
// could not confirm (a notice, and a resend on request: Resends); what a channel sends (a message's parts,
// its file, the send gate) is the leaf package outbox/message, which the
// gateway uses without linking the database.
package outbox

import (
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/jobs"
)

// The console channel: messages of agents bound to no Telegram DM, read by
// choirctl chat from the outbox. Its sender only marks them sent.
const (
	ConsoleGateway = "console"
	ConsoleDM      = "console"
	ConsoleChat    = "operator"
)

var _ jobs.QueueFeature = Delivery{}

// AddWorkers registers the delivery worker (jobs.Feature).
func (d Delivery) AddWorkers(workers *river.Workers) error { return AddDeliveryWorker(workers, d) }

// Queues is the delivery queue (jobs.QueueFeature).
func (Delivery) Queues() map[string]river.QueueConfig {
	name, qc := DeliveryQueue()
	return map[string]river.QueueConfig{name: qc}
}
