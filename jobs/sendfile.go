package jobs

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/outbound"
)

// SendFile is a file queued for sending (outbound.File).
type SendFile = outbound.File

// ErrNotRegular refuses a file to send that is not a regular file
// (outbound.ErrNotRegular).
var ErrNotRegular = outbound.ErrNotRegular

// OutboundFilePath turns the path by which an agent names a file to send
// into the path to queue in OutboundParams.FilePath (outbound.FilePath).
func OutboundFilePath(name string) (string, error) { return outbound.FilePath(name) }

// sendFileOf locates the file of an outbox row in the workspaces that
// config.json configures now (name to directory). A row names its
// workspace; a row queued before rows did holds an absolute path, which is
// matched against the configured directories (the deepest that holds it),
// never split at a marker inside it: the directory always comes from the
// configuration, and only the part below it from the row.
func sendFileOf(row db.ChoirControlOutbox, workspaces map[string]string) (SendFile, error) {
	if row.Workspace != "" {
		dir, ok := workspaces[row.Workspace]
		if !ok {
			return SendFile{}, fmt.Errorf("workspace %q of file %s is no longer configured", row.Workspace, row.FilePath)
		}
		if !outbound.InSendDir(row.FilePath) {
			return SendFile{}, fmt.Errorf("file %q is not inside %s", row.FilePath, outbound.SendDir)
		}
		return SendFile{Dir: dir, Path: row.FilePath}, nil
	}
	var best SendFile
	for _, dir := range workspaces {
		d := filepath.Clean(dir)
		rel, ok := strings.CutPrefix(row.FilePath, d+"/")
		if ok && filepath.IsAbs(d) && outbound.InSendDir(rel) && len(d) > len(best.Dir) {
			best = SendFile{Dir: d, Path: rel}
		}
	}
	if best.Dir == "" {
		return SendFile{}, fmt.Errorf("file %q is not inside the %s directory of a configured workspace", row.FilePath, outbound.SendDir)
	}
	return best, nil
}
