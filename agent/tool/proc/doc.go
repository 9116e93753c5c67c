// Package proc runs processes for tools: it holds choir.exec (a shell
// command in the workspace, spec 8.7) and what every tool that starts a
// process shares with it, choir.fs.search's ripgrep and external tools
// alike: the child's environment (a pass list, never a secret), a process
// group killed whole on cancellation, a Landlock domain of its own for
// each choir.exec command and external tool (so that one cannot read
// another's /proc entries), the exit status, and the buffers that keep a
// bounded part of the output.
package proc

import (
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
)

// Tools returns the process tools: choir.exec.
func Tools() []tool.Tool { return []tool.Tool{tool.WithSources(execTool{}, catalog.ExecSources)} }
