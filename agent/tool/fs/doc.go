// Package fs holds the workspace file tools (spec 8.7): choir.fs.read
// (a chunk of a text file, by head, tail or line range), choir.fs.write
// (whole-file and line edits, written atomically) and choir.fs.search (a
// regular expression search, through ripgrep when it is on PATH and in Go
// otherwise, with the same output). Every path goes through the registry's
// confinement ([tool.ResolveIn]) and is then opened through an [os.Root] on
// the workspace, so no path, link or race leads a file tool out of it.
package fs

import (
	"os/exec"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
)

// Tools returns the file tools. choir.fs.search uses the rg found on PATH
// now, if any.
func Tools() []tool.Tool {
	rg, _ := exec.LookPath("rg")
	return []tool.Tool{tool.WithSources(fsRead{}, catalog.FileSources), fsWrite{},
		tool.WithSources(fsSearch{rg: rg}, catalog.FileSources)}
}
