package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
)

// maxEditBytes bounds the size of a file edited line by line (it is held
// in memory).
const maxEditBytes = 32 << 20

// The modes of choir.fs.write.
const (
	writeOverwrite = "overwrite"
	writeAppend    = "append"
	writeInsert    = "insert"
	writeReplace   = "replace"
)

// fsWrite is choir.fs.write: patch-based file edits (spec 8.7), written
// atomically through a temporary file and a rename.
type fsWrite struct{}

func (fsWrite) Spec() tool.Spec { return catalog.FSWrite() }

// fsWriteOutput is choir.fs.write's output.
type fsWriteOutput struct {
	Path       string `json:"path"`
	Mode       string `json:"mode"`
	Bytes      int    `json:"bytes"`
	TotalLines int    `json:"total_lines"`
	Created    bool   `json:"created,omitempty"`
}

func (fsWrite) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	var in struct {
		Path      string `json:"path"`
		Mode      string `json:"mode"`
		Content   string `json:"content"`
		Line      int    `json:"line"`
		StartLine int    `json:"start_line"`
		EndLine   int    `json:"end_line"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return tool.Result{}, &tool.InputError{Name: tool.NameFSWrite, Problems: []tool.Problem{{Message: err.Error()}}}
	}
	if in.Mode == "" {
		in.Mode = writeOverwrite
	}
	if err := checkWriteFields(in.Mode, in.Line, in.StartLine, in.EndLine); err != nil {
		return tool.Result{}, err
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
	if rel == "." {
		return tool.ErrorResult("%s is the workspace root, not a file", in.Path), nil
	}

	var old []byte
	perm := fs.FileMode(0o644)
	exists := false
	fi, err := w.root.Stat(rel)
	switch {
	case err == nil && fi.IsDir():
		return tool.ErrorResult("%s is a directory", in.Path), nil
	case err == nil && !fi.Mode().IsRegular():
		return tool.ErrorResult("%s is not a regular file", in.Path), nil
	case err == nil:
		exists, perm = true, fi.Mode().Perm()
		if in.Mode != writeOverwrite {
			if fi.Size() > maxEditBytes {
				return tool.ErrorResult("%s is %d bytes, over the %d bytes a line edit may load; use choir.exec", in.Path, fi.Size(), maxEditBytes), nil
			}
			if old, err = w.root.ReadFile(rel); err != nil {
				return fileError(in.Path, err), nil
			}
		}
	case errors.Is(err, fs.ErrNotExist):
		if in.Mode == writeReplace {
			return tool.ErrorResult("%s: no such file to replace lines in", in.Path), nil
		}
	default:
		return fileError(in.Path, err), nil
	}

	data, summary, err := applyEdit(old, in.Mode, in.Content, in.Line, in.StartLine, in.EndLine)
	if err != nil {
		return tool.ErrorResult("%s: %v", in.Path, err), nil
	}
	if err := ctx.Err(); err != nil {
		return tool.Result{}, err
	}
	if dir := path.Dir(rel); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return tool.ErrorResult("create the directories of %s: %s", in.Path, tool.ErrText(err)), nil
		}
	}
	if err := tool.WriteFileAtomic(w.root, rel, data, perm); err != nil {
		return tool.ErrorResult("write %s: %s", in.Path, tool.ErrText(err)), nil
	}
	out := fsWriteOutput{Path: rel, Mode: in.Mode, Bytes: len(data), TotalLines: countLines(data), Created: !exists}
	return tool.SuccessResult(fmt.Sprintf("%s %s (now %s, %s)", summary, rel, plural(out.TotalLines, "line"), plural(out.Bytes, "byte")), out), nil
}

// checkWriteFields refuses line fields that the mode does not use, and
// missing ones that it needs.
func checkWriteFields(mode string, line, start, end int) error {
	var ps []tool.Problem
	need := func(ok bool, field string) {
		if !ok {
			ps = append(ps, tool.Problem{Path: "/" + field, Message: "required with mode " + mode})
		}
	}
	forbid := func(set bool, field string) {
		if set {
			ps = append(ps, tool.Problem{Path: "/" + field, Message: "not used with mode " + mode})
		}
	}
	switch mode {
	case writeOverwrite, writeAppend:
		forbid(line > 0, "line")
		forbid(start > 0, "start_line")
		forbid(end > 0, "end_line")
	case writeInsert:
		need(line > 0, "line")
		forbid(start > 0, "start_line")
		forbid(end > 0, "end_line")
	case writeReplace:
		need(start > 0, "start_line")
		need(end > 0, "end_line")
		forbid(line > 0, "line")
		if start > 0 && end > 0 && end < start {
			ps = append(ps, tool.Problem{Path: "/end_line", Message: fmt.Sprintf("end_line %d is before start_line %d", end, start)})
		}
	}
	if ps != nil {
		return &tool.InputError{Name: tool.NameFSWrite, Problems: ps}
	}
	return nil
}

// applyEdit computes a file's new content. Lines keep their terminators;
// inserted and replacing text is given one if it lacks it, except where it
// becomes the last line of a file that had none.
func applyEdit(old []byte, mode, content string, line, start, end int) ([]byte, string, error) {
	switch mode {
	case writeOverwrite:
		return []byte(content), "overwrote", nil
	case writeAppend:
		out := bytes.Clone(old)
		if len(out) > 0 && out[len(out)-1] != '\n' && content != "" {
			out = append(out, '\n')
		}
		return append(out, content...), "appended to", nil
	}
	lines := splitLines(old)
	n := len(lines)
	text := content
	if text != "" && text[len(text)-1] != '\n' {
		text += "\n"
	}
	switch mode {
	case writeInsert:
		if line > n+1 {
			return nil, "", fmt.Errorf("line %d is past the end: the file has %d lines (insert at %d to append)", line, n, n+1)
		}
		if line == n+1 && n > 0 && !bytes.HasSuffix(lines[n-1], []byte("\n")) {
			lines[n-1] = append(bytes.Clone(lines[n-1]), '\n')
		}
		out := joinLines(lines[:line-1])
		out = append(out, text...)
		out = append(out, joinLines(lines[line-1:])...)
		return out, fmt.Sprintf("inserted %s at line %d of", plural(countLines([]byte(text)), "line"), line), nil
	case writeReplace:
		if end > n {
			return nil, "", fmt.Errorf("lines %d-%d are past the end: the file has %d lines", start, end, n)
		}
		if end == n && text != "" && !bytes.HasSuffix(lines[n-1], []byte("\n")) {
			text = text[:len(text)-1] // the last line had no terminator: keep it so
		}
		out := joinLines(lines[:start-1])
		out = append(out, text...)
		out = append(out, joinLines(lines[end:])...)
		verb := "replaced"
		if content == "" {
			verb = "deleted"
		}
		return out, fmt.Sprintf("%s lines %d-%d of", verb, start, end), nil
	}
	return nil, "", fmt.Errorf("unknown mode %q", mode)
}

// splitLines splits data into lines that keep their "\n".
func splitLines(data []byte) [][]byte {
	var lines [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lines = append(lines, data)
			break
		}
		lines = append(lines, data[:i+1])
		data = data[i+1:]
	}
	return lines
}

func joinLines(lines [][]byte) []byte { return bytes.Join(lines, nil) }

// countLines counts lines as choir.fs.read does: every "\n" ends one, and
// text after the last "\n" is one more.
func countLines(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

// plural renders a count and a noun, "1 line" or "2 lines".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// IdempotencyOf says that an overwrite may run twice and every other mode
// (append, insert, replace of lines) may not: a second run would change
// the file again.
func (fsWrite) IdempotencyOf(input json.RawMessage) tool.Idempotency {
	var in struct {
		Mode string `json:"mode"`
	}
	if json.Unmarshal(input, &in) == nil && (in.Mode == "" || in.Mode == writeOverwrite) {
		return tool.IdempotencyIdempotent
	}
	return tool.IdempotencyUnsafe
}
