package jobs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/choirhq/choir/db"
)

// sendDir is where agents leave files for choird to send, relative to the
// workspace.
const sendDir = ".choirtmp/send"

// OutboundFilePath turns the path by which an agent names a file to send,
// relative to .choirtmp/send ("report.pdf") or to the workspace
// (".choirtmp/send/report.pdf"), into the path to queue: relative to the
// workspace and below .choirtmp/send. It refuses paths that leave the
// directory. The result is all that is stored: the workspace's directory
// comes from config.json whenever the file is opened.
func OutboundFilePath(name string) (string, error) {
	rel := strings.TrimPrefix(filepath.ToSlash(name), "./")
	if !strings.HasPrefix(rel, sendDir+"/") {
		rel = sendDir + "/" + rel
	}
	if name == "" || path.IsAbs(filepath.ToSlash(name)) || strings.IndexByte(name, 0) >= 0 || !isSendPath(path.Clean(rel)) {
		return "", fmt.Errorf("file %q is not a path inside %s", name, sendDir)
	}
	return path.Clean(rel), nil
}

// isSendPath reports whether rel is a clean relative path below
// .choirtmp/send: the only files the worker may send and delete.
func isSendPath(rel string) bool {
	return filepath.IsLocal(rel) && path.Clean(rel) == rel && strings.HasPrefix(rel, sendDir+"/")
}

// SendFile is a file queued for sending, as the delivery worker hands it to
// a sender: a path inside a workspace directory as config.json gives it.
// Every access goes through an os.Root on that directory, so no symbolic
// link the agent plants can lead outside it (into another workspace, say),
// and the file is opened without blocking, so a FIFO cannot hang choird.
type SendFile struct {
	// Dir is the workspace's directory as configured.
	Dir string
	// Path is relative to Dir, below .choirtmp/send.
	Path string
}

// ErrNotRegular refuses a file to send that is not a regular file (a FIFO,
// a device, a directory): it can never be sent.
var ErrNotRegular = errors.New("not a regular file")

// Name is the file's base name, for the upload.
func (f SendFile) Name() string { return path.Base(f.Path) }

func (f SendFile) root() (*os.Root, error) {
	if !filepath.IsAbs(f.Dir) {
		return nil, fmt.Errorf("workspace %q is not an absolute path", f.Dir)
	}
	if !isSendPath(f.Path) {
		return nil, fmt.Errorf("file %q is not inside %s", f.Path, sendDir)
	}
	root, err := os.OpenRoot(f.Dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", f.Dir, err)
	}
	return root, nil
}

// Open opens the file for reading. It refuses anything but a regular file
// with ErrNotRegular; O_NONBLOCK makes the open of a FIFO return at once
// instead of waiting for a writer, and it has no effect on a regular file.
func (f SendFile) Open() (*os.File, os.FileInfo, error) {
	root, err := f.root()
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	file, err := root.OpenFile(f.Path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", f.Path, err)
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, nil, fmt.Errorf("stat %s: %w", f.Path, err)
	}
	if !fi.Mode().IsRegular() {
		file.Close()
		return nil, nil, fmt.Errorf("%s: %w", f.Path, ErrNotRegular)
	}
	return file, fi, nil
}

// Stat describes the file without opening it, refusing anything but a
// regular file with ErrNotRegular.
func (f SendFile) Stat() (os.FileInfo, error) {
	root, err := f.root()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	fi, err := root.Stat(f.Path)
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", f.Path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", f.Path, ErrNotRegular)
	}
	return fi, nil
}

// Remove deletes the file (a link the agent put in its place, not the
// link's target).
func (f SendFile) Remove() error {
	root, err := f.root()
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Remove(f.Path)
}

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
		if !isSendPath(row.FilePath) {
			return SendFile{}, fmt.Errorf("file %q is not inside %s", row.FilePath, sendDir)
		}
		return SendFile{Dir: dir, Path: row.FilePath}, nil
	}
	var best SendFile
	for _, dir := range workspaces {
		d := filepath.Clean(dir)
		rel, ok := strings.CutPrefix(row.FilePath, d+"/")
		if ok && filepath.IsAbs(d) && isSendPath(rel) && len(d) > len(best.Dir) {
			best = SendFile{Dir: d, Path: rel}
		}
	}
	if best.Dir == "" {
		return SendFile{}, fmt.Errorf("file %q is not inside the %s directory of a configured workspace", row.FilePath, sendDir)
	}
	return best, nil
}
