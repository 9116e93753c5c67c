// Package egress is the one way out of an agent's container: choird's
// gateway on socks/egress.sock. A docker agent has no network; the agent's
// own clients open CONNECT tunnels over the socket and its tools reach it
// through the agent's loopback proxy (agent/netout). Every connection
// starts with a hello (rpc/egress) whose lease token the gateway checks,
// then speaks the HTTP proxy protocol. The gateway decides each
// connection: a tool's (origin proxy) faces the agent's egress policy on
// the host's name first, so that a refused name is never resolved
// (egress.allow, then egress.unknown: approve asks the agent's DM and the
// connection waits, refuse, allow); the agent's built-in clients pass to
// the configured service endpoints as configured. Then it resolves the name
// itself, refuses loopback, private, link-local and metadata addresses
// unless web.allow_hosts opens them (internal/netguard), and dials the
// address it checked. Every decision is a row of choir_audit.egress, with
// the bytes carried each way. Origin-form /svc/ requests go to the
// service routes, which find the authenticated caller with CallerFrom;
// they add credentials that never enter the container.
package egress
