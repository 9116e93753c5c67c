package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/rpc"
)

// inDoubtNotices returns, for every reconciliation in the log that left a
// call in doubt, the one message that tells the user which actions may or
// may not have happened. A reconciliation is a run of consecutive
// reconciled results (one Reconcile); its message's ID derives from its
// first event, so the message is the same at every start that sees it, and
// choird's outbox, unique on the ID, queues it once: a crash between the
// results and the message loses nothing and repeats nothing.
func inDoubtNotices(log *commitlog.Log) []lane.OutboundMessage {
	head, _ := log.Head()
	evs, err := log.Range(log.Oldest(), head)
	if err != nil {
		return nil
	}
	intents := map[string]commitlog.ToolCall{}
	var out []lane.OutboundMessage
	var group []string // the in-doubt calls of the reconciliation being read
	var first, last rpc.Event
	flush := func() {
		if len(group) > 0 {
			out = append(out, lane.OutboundMessage{ID: lane.MessageID("in-doubt", first.Hash), Text: inDoubtText(group), Rev: last.Rev})
		}
		group, first = nil, rpc.Event{}
	}
	for _, ev := range evs {
		switch ev.Type {
		case rpc.EventToolCallCommitted:
			if c, err := commitlog.Decode[commitlog.ToolCall](ev); err == nil && c.WriteAhead {
				intents[c.CallID] = c
			}
		case rpc.EventToolResultCommitted:
			r, err := commitlog.Decode[commitlog.ToolResult](ev)
			if err != nil || !r.Reconciled {
				break
			}
			if first.Rev == 0 {
				first = ev
			}
			last = ev
			if r.Status == commitlog.ToolInDoubt {
				c := intents[r.CallID]
				group = append(group, describeCall(r.Tool, c.Input))
			}
			continue
		}
		flush()
	}
	flush()
	return out
}

// inDoubtText is the message for the calls of one reconciliation.
func inDoubtText(calls []string) string {
	var b strings.Builder
	if len(calls) == 1 {
		b.WriteString("I was restarted in the middle of an action, so I cannot tell whether it happened:")
	} else {
		fmt.Fprintf(&b, "I was restarted in the middle of %d actions, so I cannot tell whether they happened:", len(calls))
	}
	for _, c := range calls {
		b.WriteString("\n- " + c)
	}
	b.WriteString("\nI did not do them again. Please check, and ask me to repeat what did not happen.")
	return b.String()
}

// describeCall is one line naming a call for the user: the tool and the
// start of its input.
func describeCall(name string, input json.RawMessage) string {
	in := strings.Join(strings.Fields(string(input)), " ")
	if r := []rune(in); len(r) > 200 {
		in = string(r[:200]) + "…"
	}
	return strings.TrimSpace(name + " " + in)
}
