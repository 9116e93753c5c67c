// Package catalog holds the specs of the built-in tools, the ones every
// agent's registry holds (spec section 8): their names, descriptions,
// input schemas and runtime views, and nothing that runs them. The agent
// and choird share it: the families that implement a tool (proc, fs,
// notion, tts) return its spec from here, the agent declares the host,
// meta and runtime tools from here (package builtin assembles both), and
// choird's image build checks an agent's tools and skills against
// [Tools] without linking any tool's code.
package catalog

import (
	"encoding/json"

	"github.com/choirhq/choir/agent/tool"
)

// Tools returns every built-in tool as a declaration, in the order of the
// agent's registry: choir.exec and the choir.fs tools, the [Declared]
// tools, then choir.notion.query and choir.tts.speak. A registry of them
// knows every built-in name and schema, for checking what an agent's
// repository adds; none of them runs.
func Tools() []tool.Tool {
	out := []tool.Tool{tool.Declare(Exec()), tool.Declare(FSRead()), tool.Declare(FSWrite()), tool.Declare(FSSearch())}
	out = append(out, Declared()...)
	return append(out, tool.Declare(NotionQuery()), tool.Declare(TTSSpeak()))
}

// Declared returns the tools the agent describes but does not run: the
// memory tools (spec 11.7; query and upsert run on the host, compact in
// the calling lane), the proposal meta-tools (spec 8.10), choir.send.file
// and the schedule tools (host tools).
func Declared() []tool.Tool {
	return []tool.Tool{
		tool.Declare(memoryQuerySpec),
		tool.DeclareWith(memoryUpsertSpec, upsertIdempotency),
		tool.Declare(memoryCompactSpec),
		tool.Declare(proposeToolSpec),
		tool.Declare(proposeSkillSpec),
		tool.Declare(proposeConfigSpec),
		tool.Declare(proposeRepoSpec),
		tool.Declare(sendFileSpec),
		tool.Declare(scheduleSpec),
		tool.Declare(scheduleListSpec),
		tool.Declare(scheduleCancelSpec),
		tool.Declare(remindSpec),
	}
}

// upsertIdempotency says that a knowledge write may run twice unless it
// inserts without a key: an update or delete lands on the same document,
// and an insert with a key updates the document the first run made, but
// an insert without one makes a second document.
func upsertIdempotency(input json.RawMessage) tool.Idempotency {
	var in struct {
		Op  string  `json:"op"`
		Key *string `json:"key"`
	}
	if json.Unmarshal(input, &in) != nil || in.Op == "insert" && in.Key == nil {
		return tool.IdempotencyUnsafe
	}
	return tool.IdempotencyIdempotent
}
