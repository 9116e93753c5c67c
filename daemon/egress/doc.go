// Package egress is the one way out of an agent's container. A container
// has no route to any network; the agent's local proxy forwards every
// connection a tool or the agent itself opens over a Unix socket to
// choird, where the gateway checks it after DNS against netguard and the
// agent's egress policy, adds the credentials of the service routes (the
// keys never enter the container), and reserves spend in Postgres before
// a metered call is forwarded.
//
// The gateway knows who is calling from the lease token the agent presents
// when it opens a connection; a handler finds the caller with CallerFrom.
package egress
