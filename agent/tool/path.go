package tool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrPathEscape is wrapped by every [*PathError] for a path that would
// leave the workspace.
var ErrPathEscape = errors.New("path escapes the workspace")

// PathError refuses a path given to a tool. It is meant to go back to the
// model as a structured error.
type PathError struct {
	// Path is the path as the model gave it.
	Path string `json:"path"`
	// Reason says why it is refused.
	Reason string `json:"reason"`
	// escape is whether the path leaves the workspace.
	escape bool
}

func (e *PathError) Error() string { return fmt.Sprintf("path %q: %s", e.Path, e.Reason) }

// Unwrap returns [ErrPathEscape] for a path that leaves the workspace.
func (e *PathError) Unwrap() error {
	if e.escape {
		return ErrPathEscape
	}
	return nil
}

func escapeErr(p, format string, args ...any) *PathError {
	return &PathError{Path: p, Reason: fmt.Sprintf(format, args...) + ": paths must stay inside the workspace", escape: true}
}

// maxLinkHops bounds symbolic link resolution, as the kernel's ELOOP does.
const maxLinkHops = 40

// WorkspaceRoots returns the workspace root as configured (cleaned,
// absolute) and with its own symbolic links resolved.
func WorkspaceRoots(ws string) (given, real string, err error) {
	if ws == "" {
		return "", "", errors.New("no workspace configured")
	}
	given, err = filepath.Abs(ws)
	if err != nil {
		return "", "", fmt.Errorf("workspace %s: %w", ws, err)
	}
	real, err = filepath.EvalSymlinks(given)
	if err != nil {
		return "", "", fmt.Errorf("workspace %s: %w", ws, err)
	}
	return given, real, nil
}

// within returns abs relative to root if abs is root or below it.
func within(root, abs string) (string, bool) {
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// lexicalRel cleans a relative path and refuses one that climbs out.
func lexicalRel(p string) (string, error) {
	c := filepath.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", errors.New("climbs out with ..")
	}
	return c, nil
}

// ResolvePath confines p to the workspace ws and returns its canonical
// workspace-relative form ("." for the root itself). p may be relative to
// the workspace or absolute inside it; an empty p means the root. The
// existing prefix of the path is resolved link by link: a symbolic link is
// followed only if its target lies inside the workspace, whether or not the
// target exists (so a dangling link cannot be used to create a file
// outside). Components past the existing prefix are taken literally.
//
// The result is what lock keys and tools use. Tools still open the result
// through an [os.Root] on the workspace, so a link swapped in after this
// check cannot lead out of it either.
func ResolvePath(ws, p string) (string, error) {
	given, root, err := WorkspaceRoots(ws)
	if err != nil {
		return "", err
	}
	return ResolveIn(given, root, p)
}

// ResolveIn is [ResolvePath] for a workspace whose roots [WorkspaceRoots]
// already returned: given as configured, root with its links resolved. A
// tool that resolves several paths of one workspace calls it to look the
// roots up once.
func ResolveIn(given, root, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", &PathError{Path: p, Reason: "contains a NUL byte"}
	}
	var rel string
	switch {
	case p == "":
		rel = "."
	case filepath.IsAbs(p):
		c := filepath.Clean(p)
		r, ok := within(root, c)
		if !ok {
			r, ok = within(given, c)
		}
		if !ok {
			return "", escapeErr(p, "absolute path outside the workspace")
		}
		rel = r
	default:
		r, err := lexicalRel(p)
		if err != nil {
			return "", escapeErr(p, "%v", err)
		}
		rel = r
	}

	var parts []string
	if rel != "." {
		parts = strings.Split(rel, "/")
	}
	cur := "" // resolved so far, relative to root, free of links
	hops := 0
	for len(parts) > 0 {
		next := filepath.Join(cur, parts[0])
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				// Nothing below a missing name (or below a file) can be a
				// link: the rest is literal, and the I/O will report it.
				cur = filepath.Join(append([]string{cur}, parts...)...)
				break
			}
			return "", &PathError{Path: p, Reason: "cannot inspect " + next + ": " + ErrText(err)}
		}
		parts = parts[1:]
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		hops++
		if hops > maxLinkHops {
			return "", &PathError{Path: p, Reason: "too many levels of symbolic links"}
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", &PathError{Path: p, Reason: "cannot read symbolic link " + next}
		}
		var abs string
		if filepath.IsAbs(target) {
			abs = filepath.Clean(target)
		} else {
			// cur holds no links, so ".." in the target can be resolved
			// lexically from it.
			abs = filepath.Join(root, cur, target)
		}
		r, ok := within(root, abs)
		if !ok {
			r, ok = within(given, abs)
		}
		if !ok {
			return "", escapeErr(p, "symbolic link %s points outside the workspace", next)
		}
		// Restart from the root with the link's target in its place.
		var tp []string
		if r != "." {
			tp = strings.Split(r, "/")
		}
		parts = append(tp, parts...)
		cur = ""
	}
	if cur == "" {
		return ".", nil
	}
	return cur, nil
}

// lockKeyFor maps a resolved workspace-relative path to its lock resource:
// the workspace key for the root, the choirtmp key for .choirtmp and below
// (spec 9.2 keeps the staging area independent of the workspace lock), and
// file:<path> otherwise.
func lockKeyFor(rel string) string {
	switch {
	case rel == ".":
		return "workspace"
	case rel == ChoirTmpDir || strings.HasPrefix(rel, ChoirTmpDir+"/"):
		return "choirtmp"
	}
	return "file:" + rel
}

// ChoirTmpDir is the gateway staging area inside the workspace (spec 15.1).
const ChoirTmpDir = ".choirtmp"

// DownloadDir is where choir.web.fetch saves what it cannot show as text
// (a PDF, an image, an archive): bytes from the web, a stranger's words.
const DownloadDir = ChoirTmpDir + "/downloads"

// ErrText returns the cause of a file system error without the absolute
// path it names, for messages meant for the model.
func ErrText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err.Error()
	}
	return err.Error()
}
