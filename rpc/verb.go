package rpc

// Verb names an agent-to-choird call. On HTTP it is the last path segment
// of POST /rpc/<verb>, spelled exactly as the constant's value.
type Verb string

// The eight verbs of spec 12.5, and SEND_OUTBOUND, by which the agent hands
// choird a message or file for its user.
const (
	VerbInitHello          Verb = "INIT_HELLO"
	VerbGetSecrets         Verb = "GET_SECRETS"
	VerbHeartbeat          Verb = "HEARTBEAT"
	VerbRequestApproval    Verb = "REQUEST_APPROVAL"
	VerbReportStatus       Verb = "REPORT_STATUS"
	VerbTerminateSelf      Verb = "TERMINATE_SELF"
	VerbFetchDynamicConfig Verb = "FETCH_DYNAMIC_CONFIG"
	VerbExecuteHostTool    Verb = "EXECUTE_HOST_TOOL"
	VerbSendOutbound       Verb = "SEND_OUTBOUND"
)

// Verbs lists every verb, in the order of spec 12.5 then SEND_OUTBOUND.
var Verbs = []Verb{
	VerbInitHello, VerbGetSecrets, VerbHeartbeat, VerbRequestApproval, VerbReportStatus,
	VerbTerminateSelf, VerbFetchDynamicConfig, VerbExecuteHostTool, VerbSendOutbound,
}

// Valid reports whether v is a known verb.
func (v Verb) Valid() bool {
	_, ok := verbDefs[v]
	return ok
}

// Mutating reports whether v changes state on choird. A mutating verb
// replayed with a request_id already seen in its session returns the first
// response without running the handler again.
//
// GET_SECRETS and FETCH_DYNAMIC_CONFIG are the two non-mutating verbs: they
// only read, so running them twice is harmless, and keeping their responses
// out of the replay store keeps secrets out of it (a durable replay store
// would otherwise persist them).
func (v Verb) Mutating() bool {
	return v != VerbGetSecrets && v != VerbFetchDynamicConfig
}

// FencedByHandler reports whether v's handler must itself refuse a session
// that is no longer live, in the same transaction as the call's effect.
// HEARTBEAT is the one such verb: choird's heartbeat statement locks the
// session's row and writes only while it is active or stopping, so a
// revoked lease is refused there whatever the server saw before. For such
// a verb a server whose Authenticator is also an IdentityAuthenticator
// checks only that the token is the session's, which needs no lookup of
// the session's current state: the busiest call saves a round trip to the
// database.
func (v Verb) FencedByHandler() bool {
	return v == VerbHeartbeat
}
