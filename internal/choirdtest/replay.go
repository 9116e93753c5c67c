package choirdtest

import "github.com/choirhq/choir/rpc"

// ReplayEvent is one event of ReplayEvents.
type ReplayEvent struct {
	Lane    string
	Type    rpc.EventType
	Payload string
}

// ReplayEvents are ten events of a short conversation with a core job,
// on two lanes, for tests of session replays to replicate with
// StandIn.AppendOn. The eighth is the answer a forger would rewrite.
var ReplayEvents = []ReplayEvent{
	{"edge", rpc.EventUserMsg, `{"text":"find me a choir in Riga"}`},
	{"edge", rpc.EventLLMCallCommitted, `{"model":"local","lane":"edge","prompt_tokens":1200,"completion_tokens":80,` +
		`"latency_ms":900,"cost_usd":0.0123,"tool_mode":"deferred","tool_schema_tokens":640}`},
	{"core:research", rpc.EventCoreStarted, `{"job_name":"research","goal":"choirs in Riga"}`},
	{"core:research", rpc.EventToolCallCommitted, `{"call_id":"c1","tool":"web.search","input":{"q":"Riga choir"},"locks":[]}`},
	{"core:research", rpc.EventToolResultCommitted, `{"call_id":"c1","tool":"web.search","status":"ok","duration_ms":300,` +
		`"output":{"results":["Riga Cathedral Choir"]}}`},
	{"edge", rpc.EventModelOutput, `{"text":"Looking into it."}`},
	{"core:research", rpc.EventCoreStopped, `{"job_name":"research","status":"done"}`},
	{"edge", rpc.EventModelOutput, `{"text":"The Riga Cathedral Choir sings on Sundays."}`},
	{"edge", rpc.EventUserMsg, `{"text":"thanks"}`},
	{"edge", rpc.EventModelOutput, `{"text":"You are welcome."}`},
}
