// Package rpc holds the wire contracts between Choir's processes and their
// clients: the agent protocol (the envelope, the eight verbs of spec 12.5,
// server push, the ControlPlane and ControlPlaneHandler interfaces, and the
// Unix-socket and HTTP+SSE transports), the committed events the agent
// replicates by heartbeat, and the admin API that choirctl speaks to choird.
// Go structs with JSON tags are the schema.
package rpc
