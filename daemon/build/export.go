package build

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
	"slices"
	"strconv"
	"strings"
)

// Builds read only what git holds (spec 15; issue 29): the trees the
// pipeline stages, validates and sends to the engine are written from the
// clone's object database at the exact commit fetched, never read from a
// working tree, and a symbolic link in them must resolve inside the
// repository. A link to a host file (identity/SOUL.md -> ~/.ssh/id_ed25519)
// would otherwise be followed by the staging copy and baked into the image
// and the system prompt.

// maxExportBytes bounds what one commit may write to the staging disk.
const maxExportBytes = 1 << 30

// LinkError is a symbolic link in a repository that leaves it (an
// absolute target, or one that climbs out), refused before anything is
// staged. Repo is "global" or "agent"; File is the link's path in the
// repository.
type LinkError struct {
	Repo   string
	File   string
	Target string
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("%s repo %s: a symbolic link to %s, outside the repository: builds read only what git holds; commit the file itself instead of a link",
		e.Repo, e.File, e.Target)
}

// treeEntry is one entry of `git ls-tree -r`.
type treeEntry struct {
	mode, kind, object, path string
}

// exportCommit writes the tree of commit, as the clone's object database
// holds it, into dst (which must not exist): regular files with their
// executable bit, and symbolic links, each checked to stay inside dst.
// Submodules (gitlinks) hold nothing here and are left out. repo names the
// repository in errors ("global" or "agent"); links that leave the tree
// are returned together as *LinkError values joined in the error, which
// wraps ErrInvalidRepo.
func (b *Builder) exportCommit(ctx context.Context, repo, clone, commit, dst string) error {
	out, err := b.git(ctx, clone, "ls-tree", "-r", "-z", "--full-tree", commit)
	if err != nil {
		return fmt.Errorf("list %s repo commit %s: %w", repo, short(commit), err)
	}
	var entries []treeEntry
	for rec := range strings.SplitSeq(out, "\x00") {
		if rec == "" {
			continue
		}
		meta, p, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			return fmt.Errorf("list %s repo commit %s: unexpected entry %q", repo, short(commit), rec)
		}
		if f[1] != "blob" {
			continue // a gitlink: a submodule's commit, no content here
		}
		if err := checkTreePath(p); err != nil {
			return fmt.Errorf("%w: %s repo %q: %w", ErrInvalidRepo, repo, p, err)
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
	if err := b.writeBlobs(ctx, clone, root, entries); err != nil {
		return fmt.Errorf("export %s repo commit %s: %w", repo, short(commit), err)
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
			bad = append(bad, &LinkError{Repo: repo, File: e.path, Target: target})
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidRepo, errors.Join(bad...))
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
func (b *Builder) writeBlobs(ctx context.Context, clone string, root *os.Root, entries []treeEntry) error {
	if len(entries) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.gitBin, "cat-file", "--batch")
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
		werr = fmt.Errorf("git cat-file: %w: %s", err, tail(errOut.String(), 3))
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
		if total += size; total > maxExportBytes {
			return fmt.Errorf("%w: the commit holds more than %d MiB", ErrInvalidRepo, maxExportBytes>>20)
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

// linkErrors are the *LinkError values inside err.
func linkErrors(err error) []*LinkError {
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
	return slices.Clip(out)
}
