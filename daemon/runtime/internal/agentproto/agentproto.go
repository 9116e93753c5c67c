// Package agentproto is what the runtime tests' stand-in agent
// (internal/testagent) reports over the control socket.
package agentproto

import "github.com/choirhq/choir/agent/sandbox"

// Hello is the stand-in agent's first line on the control socket: what it
// found in its environment and what it could write.
type Hello struct {
	AgentID    string `json:"agent_id"`
	SessionID  string `json:"session_id"`
	LeaseToken string `json:"lease_token"`
	Runtime    string `json:"runtime"`
	Workspace  string `json:"workspace"`
	Socket     string `json:"socket"`
	Home       string `json:"home"`
	Cwd        string `json:"cwd"`
	Pid        int    `json:"pid"`
	Uid        int    `json:"uid"`
	Gid        int    `json:"gid"`
	// TokenEOF says the lease token on stdin was followed by end of file.
	TokenEOF bool     `json:"token_eof"`
	Env      []string `json:"env"`
	Args     []string `json:"args"`
	// Sandbox is the self-check's report, under docker only.
	Sandbox           *sandbox.Report `json:"sandbox,omitempty"`
	WorkspaceWritable bool            `json:"workspace_writable"`
	HomeWritable      bool            `json:"home_writable"`
	TmpWritable       bool            `json:"tmp_writable"`
	RootWritable      bool            `json:"root_writable"`
}
