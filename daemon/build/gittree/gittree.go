// Package gittree writes a commit's tree out of a clone's object database
// (git ls-tree and git cat-file of the exact commit), never out of a
// working tree, and refuses symbolic links that leave it: what the image
// build stages, validates and sends to the engine is only what git holds
// (issue 29). A link to a host file (identity/SOUL.md ->
// ~/.ssh/id_ed25519) would otherwise be followed and its content baked
// into an image and a system prompt.
package gittree

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrInvalid reports a tree that cannot be written safely: a path git
// would not check out either, or too much of it.
var ErrInvalid = errors.New("invalid tree")

// LinkError is a symbolic link that leaves the tree (an absolute target,
// or one that climbs out, through other links too); File is its path in
// the tree.
type LinkError struct {
	File   string
	Target string
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("%s: a symbolic link to %s, outside the repository", e.File, e.Target)
}

// LinkErrors are the *LinkError values inside err.
func LinkErrors(err error) []*LinkError {
	var out []*LinkError
	var walk func(error)
	walk = func(err error) {
		if le, ok := err.(*LinkError); ok {
			out = append(out, le)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if next := errors.Unwrap(err); next != nil {
			walk(next)
		}
	}
	walk(err)
	return out
}

// git runs git in dir and returns its stdout.
func git(ctx context.Context, gitBin, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, gitBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// maxBytes bounds what one commit may write to the disk.
const maxBytes = 1 << 30

// treeEntry is one entry of `git ls-tree -r`.
type treeEntry struct {
	mode, kind, object, path string
}

// Export writes the tree of commit, as the object database of the clone
// holds it, into dst (which must not exist): regular files with their
// executable bit, and symbolic links, each checked to stay inside dst.
// Submodules (gitlinks) hold nothing here and are left out. Links that
// leave the tree are returned together as *LinkError values joined in the
// error; a path git would not check out, or a tree over maxBytes, is an
// ErrInvalid.
func Export(ctx context.Context, gitBin, clone, commit, dst string) error {
	out, err := git(ctx, gitBin, clone, "ls-tree", "-r", "-z", "--full-tree", commit)
	if err != nil {
		return fmt.Errorf("list commit %.12s: %w", commit, err)
	}
	var entries []treeEntry
	for rec := range strings.SplitSeq(out, "\x00") {
		if rec == "" {
			continue
		}
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			return fmt.Errorf("list commit %.12s: unexpected entry %q", commit, rec)
		}
		if f[1] != "blob" {
			continue // a gitlink: a submodule's commit, no content here
		}
		if err := checkTreePath(p); err != nil {
			return fmt.Errorf("%w: %q: %w", ErrInvalid, p, err)
		}
		entries = append(entries, treeEntry{mode: f[0], kind: f[1], object: f[2], path: p})
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := writeBlobs(ctx, gitBin, clone, root, entries); err != nil {
		return fmt.Errorf("export commit %.12s: %w", commit, err)
	}
	var bad []error
	for _, e := range entries {
		if e.mode != "120000" {
			continue
		}
		target, err := root.Readlink(e.path)
		if err != nil {
			return err
		}
		if !linkInside(root, e.path, target) {
			bad = append(bad, &LinkError{File: e.path, Target: target})
		}
	}
	if len(bad) > 0 {
		return errors.Join(bad...)
	}
	return nil
}

// checkTreePath refuses a path git would not check out either.
func checkTreePath(p string) error {
	if !filepath.IsLocal(p) || path.Clean(p) != p {
		return errors.New("not a plain relative path")
	}
	for part := range strings.SplitSeq(p, "/") {
		if strings.EqualFold(part, ".git") {
			return errors.New("a .git path inside the tree")
		}
	}
	return nil
}

// linkInside reports whether the link at name, with target, resolves
// inside root: never absolute, and followed by root (which refuses every
// step out, through other links too). A link to nothing is inside when its
// target, taken as written, is.
func linkInside(root *os.Root, name, target string) bool {
	if filepath.IsAbs(target) {
		return false
	}
	_, err := root.Stat(name)
	if err == nil {
		return true
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	return filepath.IsLocal(filepath.Join(filepath.Dir(name), target))
}

// writeBlobs streams the entries' blobs out of `git cat-file --batch` into
// root.
func writeBlobs(ctx context.Context, gitBin, clone string, root *os.Root, entries []treeEntry) error {
	if len(entries) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, gitBin, "cat-file", "--batch")
	cmd.Dir = clone
	cmd.Env = append(os.Environ(), "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1")
	var in bytes.Buffer
	for _, e := range entries {
		in.WriteString(e.object + "\n")
	}
	cmd.Stdin = &in
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	werr := writeBatch(bufio.NewReaderSize(stdout, 64<<10), root, entries)
	if werr != nil {
		cancel()
	}
	if err := cmd.Wait(); werr == nil && err != nil {
		werr = fmt.Errorf("git cat-file: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	return werr
}

// writeBatch reads cat-file's answers, one per entry in order.
func writeBatch(r *bufio.Reader, root *os.Root, entries []treeEntry) error {
	var total int64
	for _, e := range entries {
		head, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("read %s: %w", e.path, err)
		}
		f := strings.Fields(head)
		if len(f) != 3 || f[1] != "blob" {
			return fmt.Errorf("read %s: git answered %q", e.path, strings.TrimSpace(head))
		}
		size, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || size < 0 {
			return fmt.Errorf("read %s: size %q", e.path, f[2])
		}
		if total += size; total > maxBytes {
			return fmt.Errorf("%w: the commit holds more than %d MiB", ErrInvalid, maxBytes>>20)
		}
		if dir := path.Dir(e.path); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("write %s: %w", e.path, err)
			}
		}
		body := io.LimitReader(r, size)
		switch e.mode {
		case "120000":
			target, err := io.ReadAll(body)
			if err != nil {
				return err
			}
			if err := root.Symlink(string(target), e.path); err != nil {
				return fmt.Errorf("write %s: %w", e.path, err)
			}
		default:
			perm := os.FileMode(0o644)
			if e.mode == "100755" {
				perm = 0o755
			}
			if err := writeRootFile(root, e.path, body, perm); err != nil {
				return fmt.Errorf("write %s: %w", e.path, err)
			}
		}
		if _, err := r.Discard(1); err != nil { // the newline after each blob
			return err
		}
	}
	return nil
}

func writeRootFile(root *os.Root, name string, r io.Reader, perm os.FileMode) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil { // whatever the umask
		f.Close()
		return err
	}
	return f.Close()
}
