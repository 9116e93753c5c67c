// Package rpc holds the wire contract between choir-agent and choird, and
// choird's end of it: the envelope, the payloads of the verbs (the eight of
// spec 12.5 and SEND_OUTBOUND), the messages choird pushes, the committed
// events the agent replicates by heartbeat, and the Server that choird
// mounts its ControlPlaneHandler on. Go structs with JSON tags are the
// schema. The agent's end, the Client, is in rpc/client; the admin API
// that choirctl speaks to choird is in rpc/admin; the errors and what else
// both APIs put on the wire are in rpc/wire, which imports nothing of the
// project, so choirctl links the admin contract without this server;
// Unix-socket listening is in rpc/unixsock.
//
// # Transports
//
// Both transports carry HTTP/1.1 and share every line of protocol code;
// only the byte stream differs, and it is chosen once, in the client's
// options (--control-plane=uds --socket=... or --control-plane=http
// --endpoint=https://... --ca-cert=...) and by the listener handed to
// Server.Serve (ListenUnix or ListenTCP). A call is
//
//	POST /rpc/<VERB>
//	Content-Type: application/json
//	X-Choir-Request-Id: <request_id>
//	X-Choir-Session-Id: <session_id>
//	Authorization: Bearer <lease token>
//
//	<payload>
//
// answered 200 with the response payload, or with an error status and
// {"error": "...", "code": "..."}. Pushes flow on GET /events, a
// text/event-stream whose events carry "id: <epoch>-<seq>", "event: <kind>"
// and "data: <Push JSON>"; a reconnecting client sends Last-Event-ID and
// the server resumes after it.
//
// Calls are the hot path: every agent heartbeats every heartbeat_interval_ms
// (5 s by default), and again to flush its log before each SEND_OUTBOUND and
// at shutdown, each heartbeat carrying its new events, whose hashes choird
// checks. So neither end runs calls through net/http's connection machinery:
// the client writes each call and reads its answer in the caller's goroutine
// on a pooled connection, and the server reads each call with
// http.ReadRequest and answers it in the connection's goroutine. That call
// loop, the pool, the JSON writers that encode a heartbeat without
// reflection and the scanner that spares re-encoding canonical payloads to
// hash them live in rpc/internal/fastpath, with the benchmarks that compare
// them with plain net/http and encoding/json. The event stream, and any
// request that is not a call, go through net/http on both ends; its push
// queue, writer and reader are in rpc/internal/stream. What the server does
// around a handler (sessions, rate limits, the failed-authentication guard,
// the single flight of mutating calls, body reads, envelope parsing) is in
// rpc/internal/callserve, and what the client does around a call (the
// transport choice, retries, the event stream's reconnection) in
// rpc/internal/callclient. Field syntax and the Validate primitives are in
// rpc/internal/check, event hashing and canonical JSON in
// rpc/internal/chain, dialling, the TCP listener and the self-signed
// certificate in rpc/internal/transport, the memory replay store's
// bookkeeping in rpc/internal/replay.
//
// # Guarantees
//
// Every call and stream needs the session's lease token (256 random bits;
// choird keeps its SHA-256, see NewLeaseToken). Each session has a
// request-rate limit and a payload cap (Limits); payloads are decoded
// strictly (unknown fields, duplicate keys, trailing data, oversize and
// over-deep documents refused, with the JSON path) and validated. A bad
// call gets a clear error and leaves the connection usable; a handler panic
// becomes an internal error.
//
// Mutating verbs (all but GET_SECRETS and FETCH_DYNAMIC_CONFIG) are
// executed at most once per (session, request_id): a replay returns the
// first outcome, a concurrent duplicate waits for it, and a reuse of the
// request ID with another payload is a conflict. See ReplayStore.
package rpc
