// Package builtin assembles an agent's tool registry (spec section 8):
// the built-in families (choir.exec from proc, the choir.fs tools from fs,
// choir.notion.query and choir.tts.speak), the declarations of the tools
// the agent describes but does not run (the memory tools, the proposal
// meta-tools, choir.send.file, the schedule tools), further Go tools the
// caller passes, and the external tools of the global and agent
// directories, loaded by the external package. Every built-in's spec is
// package catalog's, which choird's build checks against without linking
// this package. A new family joins by adding its spec to catalog (and to
// [catalog.Tools]) and its Tools to [Tools]; the precedence rules are the
// registry's, see [tool.New].
package builtin

import (
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
	"github.com/choirhq/choir/agent/tool/external"
	"github.com/choirhq/choir/agent/tool/fs"
	"github.com/choirhq/choir/agent/tool/notion"
	"github.com/choirhq/choir/agent/tool/proc"
	"github.com/choirhq/choir/agent/tool/tts"
)

// Default directories of external tools inside the agent image (spec 15.1).
const (
	DefaultGlobalDir = "/choir/tools/global"
	DefaultAgentDir  = "/choir/tools/agent"
)

// Config says where Build finds tools.
type Config struct {
	// GlobalDir holds external tools shared by all agents
	// (DefaultGlobalDir in the image); empty skips it, and so does a
	// directory that does not exist.
	GlobalDir string
	// AgentDir holds the agent's own external tools (DefaultAgentDir);
	// they override global tools of the same name. Empty skips it.
	AgentDir string
	// Tools are further built-in tools implemented elsewhere (web search,
	// email, ...), added to those of [Tools].
	Tools []tool.Tool
	// Notion and TTS configure choir.notion.query and choir.tts.speak,
	// which every registry holds; zero values give tools that answer
	// every call with an error saying what is not set up.
	Notion notion.Config
	TTS    tts.Config
	// Layers are further external tools defined elsewhere (an agent's
	// MCP servers), after the agent's own.
	Layers []tool.Layer
}

// Build assembles the registry: the built-in tools, then the external
// tools of cfg.GlobalDir, then those of cfg.AgentDir. It validates every
// tool and reports every problem at once, each external one as a
// [*tool.ManifestError] naming its file.
func Build(cfg Config) (*tool.Registry, error) {
	global, gerr := external.Load(cfg.GlobalDir, tool.OriginGlobal)
	agent, aerr := external.Load(cfg.AgentDir, tool.OriginAgent)
	return tool.New(append(append(Tools(), serviceTools(cfg)...), cfg.Tools...),
		append([]tool.Layer{{Defs: global, Err: gerr}, {Defs: agent, Err: aerr}}, cfg.Layers...)...)
}

// Tools returns the tools every registry holds but the service tools:
// choir.exec and the choir.fs tools (executed here), and the declarations
// of the tools the agent does not run ([catalog.Declared]). Their specs
// are catalog's.
func Tools() []tool.Tool {
	return append(append(proc.Tools(), fs.Tools()...), catalog.Declared()...)
}
