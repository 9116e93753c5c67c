// Package external runs external tools: a manifest <stem>.json holding a
// [tool.Spec], next to its executable, in the global or the agent's tool
// directory. [Load] validates a directory's manifests (package manifest
// reads them) and binds each to this package's executor, which runs it in
// the workspace, in
// its own process group, with the call's input on stdin and its declared
// secrets on file descriptor 3, and reads one JSON result from its stdout.
// The precedence between directories and built-ins is the registry's
// ([tool.New]).
package external
