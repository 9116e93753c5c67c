package outbox

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
)

// sendFileOf locates the file of an outbox row in the workspaces that
// config.json configures now (name to directory). A row names its
// workspace; a row queued before rows did holds an absolute path, which is
// matched against the configured directories (the deepest that holds it),
// never split at a marker inside it: the directory always comes from the
// configuration, and only the part below it from the row.
func sendFileOf(row db.ChoirControlOutbox, workspaces map[string]string) (message.File, error) {
	if row.Workspace != "" {
		dir, ok := workspaces[row.Workspace]
		if !ok {
			return message.File{}, fmt.Errorf("workspace %q of file %s is no longer configured", row.Workspace, row.FilePath)
		}
		if !message.InSendDir(row.FilePath) {
			return message.File{}, fmt.Errorf("file %q is not inside %s", row.FilePath, message.SendDir)
		}
		return message.File{Dir: dir, Path: row.FilePath}, nil
	}
	var best message.File
	for _, dir := range workspaces {
		d := filepath.Clean(dir)
		rel, ok := strings.CutPrefix(row.FilePath, d+"/")
		if ok && filepath.IsAbs(d) && message.InSendDir(rel) && len(d) > len(best.Dir) {
			best = message.File{Dir: d, Path: rel}
		}
	}
	if best.Dir == "" {
		return message.File{}, fmt.Errorf("file %q is not inside the %s directory of a configured workspace", row.FilePath, message.SendDir)
	}
	return best, nil
}
