package fs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
	"github.com/choirhq/choir/agent/tool/proc"
)

// Bounds of choir.fs.search.
const (
	searchDefaultResults = 100
	// searchScanCap stops a search after this many matching lines: the
	// count is then a lower bound.
	searchScanCap = 10_000
	// searchTextBytes cuts the text of one matching line.
	searchTextBytes = 400
	// searchLineBytes is the longest line the Go search matches in full.
	searchLineBytes = 1 << 20
	// searchBinarySniff is how much of a file is checked for NUL bytes,
	// as ripgrep checks its first buffer.
	searchBinarySniff = 64 << 10
)

// fsSearch is choir.fs.search: a regular expression search over a file or
// a directory tree of the workspace. It runs ripgrep when rg was found on
// PATH, and a Go search otherwise (or when ripgrep fails); both produce the
// same output: matches in per-directory name order, hidden files included,
// .git and .choirtmp, symbolic links and binary files (a NUL byte in the
// first 64 KiB) skipped, ignore files not honoured.
type fsSearch struct {
	rg string // path of rg, or "" for the Go search
}

func (fsSearch) Spec() tool.Spec { return catalog.FSSearch() }

// skippedNames are never searched below the target: git's internals, and
// the staging area, whose artifacts would otherwise feed every search of
// the workspace with the output of earlier searches. A search that targets
// one of them, such as .choirtmp/artifacts, still works.
var skippedNames = []string{".git", tool.ChoirTmpDir}

func skippedName(name string) bool { return slices.Contains(skippedNames, name) }

// searchMatch is one matching line.
type searchMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// fsSearchOutput is choir.fs.search's output.
type fsSearchOutput struct {
	Matches []searchMatch `json:"matches"`
	// Count is the number of matching lines found.
	Count int `json:"count"`
	// Partial says the search stopped after searchScanCap matches.
	Partial bool `json:"partial,omitempty"`
	// Shown is how many of Count are in Matches; the rest are in the
	// artifact.
	Shown int `json:"shown"`
}

// searchQuery is a validated search.
type searchQuery struct {
	rel        string // resolved target, "." for the whole workspace
	isFile     bool
	re         *regexp.Regexp
	pattern    string // as given to ripgrep
	glob       string
	ignoreCase bool
	fixed      bool
}

func (t fsSearch) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	var in struct {
		Pattern      string `json:"pattern"`
		Path         string `json:"path"`
		Glob         string `json:"glob"`
		IgnoreCase   bool   `json:"ignore_case"`
		FixedStrings bool   `json:"fixed_strings"`
		MaxResults   int    `json:"max_results"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return tool.Result{}, &tool.InputError{Name: tool.NameFSSearch, Problems: []tool.Problem{{Message: err.Error()}}}
	}
	if in.MaxResults == 0 {
		in.MaxResults = searchDefaultResults
	}
	q := searchQuery{pattern: in.Pattern, glob: in.Glob, ignoreCase: in.IgnoreCase, fixed: in.FixedStrings}
	expr := in.Pattern
	if in.FixedStrings {
		expr = regexp.QuoteMeta(expr)
	}
	if in.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return tool.Result{}, &tool.InputError{Name: tool.NameFSSearch, Problems: []tool.Problem{{Path: "/pattern", Message: "invalid regular expression: " + err.Error()}}}
	}
	q.re = re
	if in.Glob != "" {
		if _, err := path.Match(in.Glob, ""); err != nil || strings.Contains(in.Glob, "[!") {
			return tool.Result{}, &tool.InputError{Name: tool.NameFSSearch, Problems: []tool.Problem{{Path: "/glob", Message: "invalid pattern: use *, ? and [...] classes, [^...] to negate"}}}
		}
	}

	w, err := openWorkspace(env)
	if err != nil {
		return tool.ErrorResult("%v", err), nil
	}
	defer w.Close()
	if q.rel, err = w.resolve(in.Path); err != nil {
		return tool.Result{}, err
	}
	fi, err := w.root.Stat(q.rel)
	if err != nil {
		return fileError(displayPath(in.Path), err), nil
	}
	switch {
	case fi.Mode().IsRegular():
		q.isFile = true
		if bin, err := isBinary(w, q.rel); err != nil {
			return fileError(in.Path, err), nil
		} else if bin {
			return tool.ErrorResult("%s is a binary file", in.Path), nil
		}
	case !fi.IsDir():
		return tool.ErrorResult("%s is neither a file nor a directory", in.Path), nil
	}

	var matches []searchMatch
	var partial bool
	if t.rg != "" {
		matches, partial, err = searchRipgrep(ctx, t.rg, w, q)
	}
	if t.rg == "" || err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, ctx.Err()
		}
		matches, partial, err = searchGo(ctx, w, q)
	}
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, ctx.Err()
		}
		return tool.ErrorResult("search %s: %v", displayPath(in.Path), tool.ErrText(err)), nil
	}
	return searchResult(env, matches, partial, in.MaxResults), nil
}

func displayPath(p string) string {
	if p == "" {
		return "the workspace"
	}
	return p
}

// searchResult shows the first matches that fit and spills all of them to
// an artifact when some are left out.
func searchResult(env tool.Env, matches []searchMatch, partial bool, maxResults int) tool.Result {
	lim := env.Limits.WithDefaults()
	out := fsSearchOutput{Matches: []searchMatch{}, Count: len(matches), Partial: partial}
	used := 200 // room for the other fields
	for _, m := range matches {
		if len(out.Matches) == maxResults {
			break
		}
		b, _ := tool.MarshalNoEscape(m)
		if used+len(b)+1 > lim.ResultBytes {
			break
		}
		used += len(b) + 1
		out.Matches = append(out.Matches, m)
	}
	out.Shown = len(out.Matches)
	more := ""
	if partial {
		more = "+"
	}
	summary := fmt.Sprintf("%d%s matching lines", out.Count, more)
	if out.Count == 1 {
		summary = "1 matching line"
	}
	var ref string
	if out.Shown < out.Count {
		var buf bytes.Buffer
		for _, m := range matches {
			fmt.Fprintf(&buf, "%s:%d:%s\n", m.Path, m.Line, m.Text)
		}
		var err error
		if ref, err = tool.WriteArtifact(env.Workspace, buf.Bytes()); err == nil {
			summary += fmt.Sprintf(", first %d shown; all in artifact_ref as path:line:text", out.Shown)
		} else {
			summary += fmt.Sprintf(", first %d shown", out.Shown)
		}
	}
	r := tool.SuccessResult(summary, out)
	r.ArtifactRef = ref
	r.Truncated = ref != ""
	return r
}

// isBinary reports whether a file has a NUL byte in its first 64 KiB.
func isBinary(w *workspaceFS, rel string) (bool, error) {
	f, fi, err := w.open(rel)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if !fi.Mode().IsRegular() {
		return false, errors.New("no longer a regular file") // swapped for a FIFO, say: never read
	}
	buf := make([]byte, searchBinarySniff)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return false, err
	}
	return bytes.IndexByte(buf[:n], 0) >= 0, nil
}

// matchText renders a matching line: without its terminator, valid UTF-8,
// cut to searchTextBytes.
func matchText(line []byte) string {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	s := strings.ToValidUTF8(string(line), "\uFFFD")
	if len(s) > searchTextBytes {
		s = tool.TruncateUTF8(s, searchTextBytes) + "…"
	}
	return s
}

// globOK reports whether a file's name passes the glob.
func (q searchQuery) globOK(rel string) bool {
	if q.glob == "" {
		return true
	}
	ok, _ := path.Match(q.glob, path.Base(rel))
	return ok
}

// searchGo is the search without ripgrep.
func searchGo(ctx context.Context, w *workspaceFS, q searchQuery) ([]searchMatch, bool, error) {
	var matches []searchMatch
	partial := false
	searchFile := func(rel string) error {
		f, fi, err := w.open(rel)
		if err != nil || !fi.Mode().IsRegular() {
			if f != nil {
				f.Close()
			}
			return nil // vanished, unreadable or no longer a regular file: skipped, as ripgrep does
		}
		defer f.Close()
		br := bufio.NewReaderSize(f, searchBinarySniff)
		if sniff, _ := br.Peek(searchBinarySniff); bytes.IndexByte(sniff, 0) >= 0 && !q.isFile {
			return nil
		}
		lr := &lineReader{br: br, keep: searchLineBytes}
		for n := 1; ; n++ {
			line, _, err := lr.next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return nil
			}
			// Match without the terminator, so that $ means end of line.
			if !q.re.Match(bytes.TrimSuffix(line, []byte("\n"))) {
				continue
			}
			if len(matches) == searchScanCap {
				partial = true
				return fs.SkipAll
			}
			matches = append(matches, searchMatch{Path: rel, Line: n, Text: matchText(line)})
		}
	}
	if q.isFile {
		if q.globOK(q.rel) {
			_ = searchFile(q.rel)
		}
		return matches, partial, nil
	}
	err := fs.WalkDir(w.root.FS(), q.rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == q.rel {
				return err
			}
			return nil // unreadable directory: skipped
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if skippedName(d.Name()) && p != q.rel {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil // e.g. a worktree's .git file, also skipped by ripgrep
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() || !q.globOK(p) {
			return nil // symbolic links and special files are not searched
		}
		return searchFile(path.Clean(p))
	})
	if err != nil && !errors.Is(err, fs.SkipAll) {
		return nil, false, err
	}
	return matches, partial, nil
}

// rgData is ripgrep's text-or-bytes value.
type rgData struct {
	Text  *string `json:"text"`
	Bytes *string `json:"bytes"`
}

func (d rgData) value() []byte {
	if d.Text != nil {
		return []byte(*d.Text)
	}
	if d.Bytes != nil {
		b, _ := base64.StdEncoding.DecodeString(*d.Bytes)
		return b
	}
	return nil
}

// searchRipgrep runs rg --json and reads its matches as they come.
func searchRipgrep(ctx context.Context, rg string, w *workspaceFS, q searchQuery) ([]searchMatch, bool, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	args := []string{"--json", "--no-config", "--no-ignore", "--hidden", "--sort", "path", "--no-messages"}
	for _, n := range skippedNames {
		args = append(args, "--glob", "!"+n)
	}
	if q.glob != "" {
		args = append(args, "--glob", q.glob)
	}
	if q.ignoreCase {
		args = append(args, "--ignore-case")
	}
	if q.fixed {
		args = append(args, "--fixed-strings")
	}
	args = append(args, "--regexp", q.pattern, "--", q.rel)
	cmd := exec.CommandContext(rctx, rg, args...)
	cmd.Dir = w.real
	cmd.Env = proc.ChildEnv(w.given)
	proc.SetProcessGroup(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, false, err
	}
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	var matches []searchMatch
	partial := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4*searchLineBytes)
	var scanErr error
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
			Data struct {
				Path       rgData `json:"path"`
				Lines      rgData `json:"lines"`
				LineNumber int    `json:"line_number"`
			} `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			scanErr = fmt.Errorf("ripgrep output: %w", err)
			break
		}
		if ev.Type != "match" {
			continue
		}
		p := filepath.ToSlash(filepath.Clean(string(ev.Data.Path.value())))
		if !q.globOK(p) {
			continue
		}
		if len(matches) == searchScanCap {
			partial = true
			break
		}
		matches = append(matches, searchMatch{Path: p, Line: ev.Data.LineNumber, Text: matchText(ev.Data.Lines.value())})
	}
	if scanErr == nil {
		scanErr = sc.Err()
	}
	if partial || scanErr != nil {
		cancel()
	}
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	if scanErr != nil {
		return nil, false, scanErr
	}
	if partial {
		return matches, true, nil
	}
	// Exit 1 is "no match"; 2 is an error, after which the Go search runs.
	if code, _ := proc.ExitStatus(cmd.ProcessState); werr != nil && code != 1 {
		return nil, false, fmt.Errorf("ripgrep: exit code %d", code)
	}
	return matches, false, nil
}
