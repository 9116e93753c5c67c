package fs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"unicode/utf8"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
)

// workspaceFS is a workspace opened for one call: paths are resolved with
// ResolveIn and the I/O goes through the os.Root, which refuses anything a
// concurrent change might have made escape since.
type workspaceFS struct {
	root        *os.Root
	given, real string
}

func openWorkspace(env tool.Env) (*workspaceFS, error) {
	given, real, err := tool.WorkspaceRoots(env.Workspace)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	return &workspaceFS{root: root, given: given, real: real}, nil
}

func (w *workspaceFS) Close() error { return w.root.Close() }

func (w *workspaceFS) resolve(p string) (string, error) { return tool.ResolveIn(w.given, w.real, p) }

// open opens rel for reading and describes it. O_NONBLOCK makes the open of
// a FIFO return at once instead of waiting for a writer, which would hang
// the call, and the arbiter's lock on the path, for good; it changes
// nothing for a regular file. Callers read only regular files: a FIFO,
// device or socket is refused (or skipped) from the FileInfo before any
// read.
func (w *workspaceFS) open(rel string) (*os.File, fs.FileInfo, error) {
	f, err := w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// fsRead is choir.fs.read: a chunk of a text file, with its line count.
type fsRead struct{}

func (fsRead) Spec() tool.Spec { return catalog.FSRead() }

// fsReadOutput is choir.fs.read's output.
type fsReadOutput struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	// StartLine and EndLine are the first and last lines in Content (0
	// when it is empty).
	StartLine  int `json:"start_line"`
	EndLine    int `json:"end_line"`
	TotalLines int `json:"total_lines"`
	// Truncated says the requested lines did not all fit.
	Truncated bool `json:"truncated,omitempty"`
	// NextLine is the line to continue from, when lines remain after
	// EndLine.
	NextLine int `json:"next_line,omitempty"`
}

// binarySniff is how much of a file is checked for NUL bytes.
const binarySniff = 8 << 10

func (fsRead) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	var in struct {
		Path      string `json:"path"`
		Head      int    `json:"head"`
		Tail      int    `json:"tail"`
		StartLine int    `json:"start_line"`
		EndLine   int    `json:"end_line"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return tool.Result{}, &tool.InputError{Name: tool.NameFSRead, Problems: []tool.Problem{{Message: err.Error()}}}
	}
	modes := 0
	for _, set := range []bool{in.Head > 0, in.Tail > 0, in.StartLine > 0 || in.EndLine > 0} {
		if set {
			modes++
		}
	}
	if modes > 1 {
		return tool.Result{}, &tool.InputError{Name: tool.NameFSRead, Problems: []tool.Problem{{Message: "use one of head, tail, or start_line/end_line"}}}
	}
	if in.EndLine > 0 && in.StartLine > in.EndLine {
		return tool.Result{}, &tool.InputError{Name: tool.NameFSRead, Problems: []tool.Problem{{Path: "/end_line", Message: fmt.Sprintf("end_line %d is before start_line %d", in.EndLine, in.StartLine)}}}
	}

	w, err := openWorkspace(env)
	if err != nil {
		return tool.ErrorResult("%v", err), nil
	}
	defer w.Close()
	rel, err := w.resolve(in.Path)
	if err != nil {
		return tool.Result{}, err
	}
	f, fi, err := w.open(rel)
	if err != nil {
		return fileError(in.Path, err), nil
	}
	defer f.Close()
	if fi.IsDir() {
		return tool.ErrorResult("%s is a directory: list it with choir.exec (ls) or search it with choir.fs.search", in.Path), nil
	}
	if !fi.Mode().IsRegular() {
		return tool.ErrorResult("%s is not a regular file", in.Path), nil
	}

	br := bufio.NewReaderSize(f, 64<<10)
	if sniff, _ := br.Peek(binarySniff); bytes.IndexByte(sniff, 0) >= 0 {
		return tool.ErrorResult("%s is a binary file", in.Path), nil
	}
	lim := env.Limits.WithDefaults()
	budget := lim.ResultBytes - 512 // room for the other fields
	out := fsReadOutput{Path: rel}
	var err2 error
	if in.Tail > 0 {
		err2 = readTail(ctx, br, in.Tail, budget, &out)
	} else {
		from, to := 1, 0
		switch {
		case in.Head > 0:
			to = in.Head
		case in.StartLine > 0 || in.EndLine > 0:
			from, to = max(in.StartLine, 1), in.EndLine
		}
		err2 = readRange(ctx, br, from, to, budget, &out)
		if err2 == nil && from > out.TotalLines && !(from == 1 && out.TotalLines == 0) {
			return tool.ErrorResult("start_line %d is past the end of %s, which has %d lines", from, in.Path, out.TotalLines), nil
		}
	}
	if err2 != nil {
		if ctx.Err() != nil {
			return tool.Result{}, err2
		}
		return tool.ErrorResult("read %s: %v", in.Path, tool.ErrText(err2)), nil
	}
	summary := fmt.Sprintf("%s: lines %d-%d of %d", rel, out.StartLine, out.EndLine, out.TotalLines)
	switch {
	case out.TotalLines == 0:
		summary = rel + ": empty file"
	case out.Truncated && out.NextLine > 0:
		summary += fmt.Sprintf(" (cut to fit; continue at line %d)", out.NextLine)
	case out.Truncated:
		summary += " (cut to fit)"
	case out.NextLine > 0:
		summary += fmt.Sprintf(" (continue at line %d)", out.NextLine)
	}
	return tool.SuccessResult(summary, out), nil
}

// fileError turns an I/O error into a result for the model.
func fileError(p string, err error) tool.Result {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return tool.ErrorResult("%s: no such file", p)
	case errors.Is(err, fs.ErrPermission):
		return tool.ErrorResult("%s: permission denied", p)
	}
	return tool.ErrorResult("%s: %s", p, tool.ErrText(err))
}

// lineReader yields the lines of a file, each cut to at most keep bytes,
// with its full length.
type lineReader struct {
	br   *bufio.Reader
	keep int
	buf  []byte
}

// next returns the next line with its terminator, cut to keep bytes, and
// whether it was cut; io.EOF after the last line.
func (lr *lineReader) next() (line []byte, cut bool, err error) {
	lr.buf = lr.buf[:0]
	total := 0
	for {
		chunk, err := lr.br.ReadSlice('\n')
		total += len(chunk)
		if room := lr.keep - len(lr.buf); room > 0 {
			lr.buf = append(lr.buf, chunk[:min(room, len(chunk))]...)
		}
		switch {
		case err == nil:
			return lr.buf, total > lr.keep, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if total == 0 {
				return nil, false, io.EOF
			}
			return lr.buf, total > lr.keep, nil
		default:
			return nil, false, err
		}
	}
}

// readRange reads lines from..to (to 0: unbounded) into out, as many as fit
// in budget bytes of JSON, and counts all lines.
func readRange(ctx context.Context, br *bufio.Reader, from, to, budget int, out *fsReadOutput) error {
	lr := &lineReader{br: br, keep: budget}
	var content []byte
	used, n, lastIn := 0, 0, 0
	full := false
	for {
		line, cut, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n++
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if n < from || to > 0 && n > to || full {
			continue
		}
		el := escapedLen(line)
		if used+el > budget || cut {
			if out.StartLine == 0 {
				// Not even this one line fits: give its beginning.
				part := cutEscaped(line, budget)
				content = append(content, part...)
				out.StartLine, out.EndLine, lastIn = n, n, n
			}
			out.Truncated, full = true, true
			continue
		}
		content = append(content, line...)
		used += el
		if out.StartLine == 0 {
			out.StartLine = n
		}
		out.EndLine, lastIn = n, n
	}
	out.TotalLines = n
	out.Content = string(content)
	if lastIn > 0 && lastIn < n {
		out.NextLine = lastIn + 1
	}
	return nil
}

// readTail reads the last count lines into out, as many of them as fit in
// budget bytes of JSON (the latest ones), and counts all lines.
func readTail(ctx context.Context, br *bufio.Reader, count, budget int, out *fsReadOutput) error {
	type kept struct {
		text []byte
		el   int
		cut  bool
	}
	lr := &lineReader{br: br, keep: budget}
	var ring []kept
	used, n := 0, 0
	for {
		line, cut, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		n++
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		k := kept{text: bytes.Clone(line), cut: cut}
		if cut || escapedLen(line) > budget {
			k.text, k.cut = cutEscaped(line, budget), true
		}
		k.el = escapedLen(k.text)
		ring = append(ring, k)
		used += k.el
		for len(ring) > count || used > budget && len(ring) > 1 {
			used -= ring[0].el
			ring = ring[1:]
		}
	}
	out.TotalLines = n
	if len(ring) == 0 {
		return nil
	}
	var content []byte
	for _, k := range ring {
		content = append(content, k.text...)
		out.Truncated = out.Truncated || k.cut
	}
	out.Content = string(content)
	out.StartLine, out.EndLine = n-len(ring)+1, n
	out.Truncated = out.Truncated || len(ring) < min(count, n)
	return nil
}

// escapedLen is the length of b as the content of a JSON string, as
// encoding/json writes it without HTML escaping.
func escapedLen(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6 // \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// cutEscaped returns the longest prefix of b, whole characters only, whose
// escaped length is at most budget.
func cutEscaped(b []byte, budget int) []byte {
	n, i := 0, 0
	for i < len(b) {
		_, size := utf8.DecodeRune(b[i:])
		el := escapedLen(b[i : i+size])
		if n+el > budget {
			break
		}
		n += el
		i += size
	}
	return b[:i]
}
