package message

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// SendDir is where agents leave files for choird to send, relative to the
// workspace.
const SendDir = ".choirtmp/send"

// FilePath turns the path by which an agent names a file to send,
// relative to .choirtmp/send ("report.pdf") or to the workspace
// (".choirtmp/send/report.pdf"), into the path to queue: relative to the
// workspace and below .choirtmp/send. It refuses paths that leave the
// directory. The result is all that is stored: the workspace's directory
// comes from config.json whenever the file is opened.
func FilePath(name string) (string, error) {
	rel := strings.TrimPrefix(filepath.ToSlash(name), "./")
	if !strings.HasPrefix(rel, SendDir+"/") {
		rel = SendDir + "/" + rel
	}
	if name == "" || path.IsAbs(filepath.ToSlash(name)) || strings.IndexByte(name, 0) >= 0 || !InSendDir(path.Clean(rel)) {
		return "", fmt.Errorf("file %q is not a path inside %s", name, SendDir)
	}
	return path.Clean(rel), nil
}

// InSendDir reports whether rel is a clean relative path below
// .choirtmp/send: the only files the worker may send and delete.
func InSendDir(rel string) bool {
	return filepath.IsLocal(rel) && path.Clean(rel) == rel && strings.HasPrefix(rel, SendDir+"/")
}

// File is a file queued for sending, as the delivery worker hands it to
// a channel: a path inside a workspace directory as config.json gives it.
// Every access goes through an os.Root on that directory, so no symbolic
// link the agent plants can lead outside it (into another workspace, say),
// and the file is opened without blocking, so a FIFO cannot hang choird.
type File struct {
	// Dir is the workspace's directory as configured.
	Dir string
	// Path is relative to Dir, below .choirtmp/send.
	Path string
}

// ErrNotRegular refuses a file to send that is not a regular file (a FIFO,
// a device, a directory): it can never be sent.
var ErrNotRegular = errors.New("not a regular file")

// Name is the file's base name, for the upload.
func (f File) Name() string { return path.Base(f.Path) }

func (f File) root() (*os.Root, error) {
	if !filepath.IsAbs(f.Dir) {
		return nil, fmt.Errorf("workspace %q is not an absolute path", f.Dir)
	}
	if !InSendDir(f.Path) {
		return nil, fmt.Errorf("file %q is not inside %s", f.Path, SendDir)
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
func (f File) Open() (*os.File, os.FileInfo, error) {
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
func (f File) Stat() (os.FileInfo, error) {
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
func (f File) Remove() error {
	root, err := f.root()
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Remove(f.Path)
}
