package fs_test

import (
	"errors"
	"fmt"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

type readOut struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	StartLine  int    `json:"start_line"`
	EndLine    int    `json:"end_line"`
	TotalLines int    `json:"total_lines"`
	Truncated  bool   `json:"truncated"`
	NextLine   int    `json:"next_line"`
}

func lines(from, to int) string {
	var sb strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	return sb.String()
}

func TestFSRead(t *testing.T) {
	t.Parallel()
	b := tooltest.Setup(t, builtin.Config{})
	tooltest.WriteFile(t, filepath.Join(b.WS, "ten.txt"), lines(1, 10), 0o644)
	tooltest.WriteFile(t, filepath.Join(b.WS, "noeol.txt"), "a\nb", 0o644)
	tooltest.WriteFile(t, filepath.Join(b.WS, "empty.txt"), "", 0o644)
	tooltest.WriteFile(t, filepath.Join(b.WS, "bin.dat"), "ab\x00cd", 0o644)
	tooltest.WriteFile(t, filepath.Join(b.WS, "big.txt"), lines(1, 5000), 0o644)
	tooltest.WriteFile(t, filepath.Join(b.WS, "oneline.txt"), strings.Repeat("é", 20000), 0o644)
	if err := os.Mkdir(filepath.Join(b.WS, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		input string
		want  readOut
	}{
		{"WholeFile", `{"path": "ten.txt"}`, readOut{Path: "ten.txt", Content: lines(1, 10), StartLine: 1, EndLine: 10, TotalLines: 10}},
		{"Head", `{"path": "ten.txt", "head": 3}`, readOut{Path: "ten.txt", Content: lines(1, 3), StartLine: 1, EndLine: 3, TotalLines: 10, NextLine: 4}},
		{"HeadLongerThanFile", `{"path": "ten.txt", "head": 30}`, readOut{Path: "ten.txt", Content: lines(1, 10), StartLine: 1, EndLine: 10, TotalLines: 10}},
		{"Tail", `{"path": "ten.txt", "tail": 2}`, readOut{Path: "ten.txt", Content: lines(9, 10), StartLine: 9, EndLine: 10, TotalLines: 10}},
		{"TailLongerThanFile", `{"path": "ten.txt", "tail": 20}`, readOut{Path: "ten.txt", Content: lines(1, 10), StartLine: 1, EndLine: 10, TotalLines: 10}},
		{"Range", `{"path": "ten.txt", "start_line": 4, "end_line": 6}`, readOut{Path: "ten.txt", Content: lines(4, 6), StartLine: 4, EndLine: 6, TotalLines: 10, NextLine: 7}},
		{"RangeFromLine", `{"path": "ten.txt", "start_line": 8}`, readOut{Path: "ten.txt", Content: lines(8, 10), StartLine: 8, EndLine: 10, TotalLines: 10}},
		{"RangeToLine", `{"path": "ten.txt", "end_line": 2}`, readOut{Path: "ten.txt", Content: lines(1, 2), StartLine: 1, EndLine: 2, TotalLines: 10, NextLine: 3}},
		{"NoFinalNewline", `{"path": "noeol.txt", "tail": 1}`, readOut{Path: "noeol.txt", Content: "b", StartLine: 2, EndLine: 2, TotalLines: 2}},
		{"EmptyFile", `{"path": "empty.txt"}`, readOut{Path: "empty.txt"}},
		{"CanonicalPath", `{"path": "./dir/../ten.txt", "head": 1}`, readOut{Path: "ten.txt", Content: lines(1, 1), StartLine: 1, EndLine: 1, TotalLines: 10, NextLine: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := b.MustCall(t, tool.NameFSRead, tt.input)
			if r.Status != tool.StatusSuccess {
				t.Fatalf("got %+v", r)
			}
			if got := tooltest.Output[readOut](t, r); got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}

	t.Run("LargeFileCutToFitWithNextLine", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, tool.NameFSRead, `{"path": "big.txt"}`)
		got := tooltest.Output[readOut](t, r)
		if !got.Truncated || got.StartLine != 1 || got.NextLine != got.EndLine+1 || got.TotalLines != 5000 || got.Content != lines(1, got.EndLine) {
			t.Errorf("got start %d end %d next %d total %d truncated %v", got.StartLine, got.EndLine, got.NextLine, got.TotalLines, got.Truncated)
		}
		if len(r.JSON()) > tool.DefaultResultBytes {
			t.Errorf("result is %d bytes", len(r.JSON()))
		}
		if !strings.Contains(r.Summary, fmt.Sprintf("continue at line %d", got.NextLine)) {
			t.Errorf("summary %q", r.Summary)
		}
		// Reading on from next_line continues seamlessly.
		r2 := b.MustCall(t, tool.NameFSRead, fmt.Sprintf(`{"path": "big.txt", "start_line": %d}`, got.NextLine))
		got2 := tooltest.Output[readOut](t, r2)
		if got2.StartLine != got.NextLine || got2.Content != lines(got2.StartLine, got2.EndLine) {
			t.Errorf("continued at %d-%d", got2.StartLine, got2.EndLine)
		}
	})

	t.Run("LargeTailKeepsTheLastLines", func(t *testing.T) {
		t.Parallel()
		got := tooltest.Output[readOut](t, b.MustCall(t, tool.NameFSRead, `{"path": "big.txt", "tail": 4000}`))
		if !got.Truncated || got.EndLine != 5000 || got.Content != lines(got.StartLine, 5000) || got.StartLine <= 1000 {
			t.Errorf("got %d-%d truncated %v", got.StartLine, got.EndLine, got.Truncated)
		}
	})

	t.Run("GiantLineGivesItsBeginning", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, tool.NameFSRead, `{"path": "oneline.txt"}`)
		got := tooltest.Output[readOut](t, r)
		if !got.Truncated || got.StartLine != 1 || got.EndLine != 1 || !strings.HasPrefix(strings.Repeat("é", 20000), got.Content) || len(got.Content) < 8000 {
			t.Errorf("got %d bytes, truncated %v", len(got.Content), got.Truncated)
		}
		if len(r.JSON()) > tool.DefaultResultBytes {
			t.Errorf("result is %d bytes", len(r.JSON()))
		}
	})

	t.Run("Failures", func(t *testing.T) {
		t.Parallel()
		for input, want := range map[string]string{
			`{"path": "missing.txt"}`:                "missing.txt: no such file",
			`{"path": "dir"}`:                        "dir is a directory",
			`{"path": "bin.dat"}`:                    "bin.dat is a binary file",
			`{"path": "ten.txt", "start_line": 11}`:  "start_line 11 is past the end of ten.txt, which has 10 lines",
			`{"path": "empty.txt", "start_line": 2}`: "past the end",
			`{"path": "missing/deeper/x.txt"}`:       "no such file",
			`{"path": "ten.txt/x"}`:                  "ten.txt/x",
		} {
			r := b.MustCall(t, tool.NameFSRead, input)
			if r.Status != tool.StatusError || !strings.Contains(r.Summary, want) {
				t.Errorf("%s: got %+v, want an error with %q", input, r, want)
			}
		}
	})

	t.Run("ConflictingChunkFieldsAreInputErrors", func(t *testing.T) {
		t.Parallel()
		for _, input := range []string{
			`{"path": "ten.txt", "head": 1, "tail": 1}`,
			`{"path": "ten.txt", "head": 1, "start_line": 2}`,
			`{"path": "ten.txt", "start_line": 5, "end_line": 2}`,
		} {
			_, err := b.Call(t, tool.NameFSRead, input)
			var ie *tool.InputError
			if !errors.As(err, &ie) {
				t.Errorf("%s: got %v, want *InputError", input, err)
			}
		}
	})
}

type writeOut struct {
	Path       string `json:"path"`
	Mode       string `json:"mode"`
	Bytes      int    `json:"bytes"`
	TotalLines int    `json:"total_lines"`
	Created    bool   `json:"created"`
}

func TestFSWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		initial *string // nil: no file
		input   string  // without path
		want    string
		summary string
	}{
		{"OverwriteCreates", nil, `"content": "hello\n"`, "hello\n", "overwrote"},
		{"OverwriteReplaces", ptr("old\n"), `"mode": "overwrite", "content": "new"`, "new", "overwrote"},
		{"AppendToFile", ptr("a\n"), `"mode": "append", "content": "b\n"`, "a\nb\n", "appended to"},
		{"AppendAddsMissingNewline", ptr("a"), `"mode": "append", "content": "b\n"`, "a\nb\n", "appended to"},
		{"AppendCreates", nil, `"mode": "append", "content": "x"`, "x", "appended to"},
		{"InsertAtTop", ptr("b\nc\n"), `"mode": "insert", "line": 1, "content": "a"`, "a\nb\nc\n", "inserted 1 line at line 1"},
		{"InsertInMiddle", ptr("a\nc\n"), `"mode": "insert", "line": 2, "content": "b1\nb2\n"`, "a\nb1\nb2\nc\n", "inserted 2 lines at line 2"},
		{"InsertAtEnd", ptr("a\nb"), `"mode": "insert", "line": 3, "content": "c"`, "a\nb\nc\n", "at line 3"},
		{"InsertIntoNewFile", nil, `"mode": "insert", "line": 1, "content": "x"`, "x\n", "at line 1"},
		{"ReplaceRange", ptr("1\n2\n3\n4\n"), `"mode": "replace", "start_line": 2, "end_line": 3, "content": "two\nthree\nmore"`, "1\ntwo\nthree\nmore\n4\n", "replaced lines 2-3"},
		{"ReplaceLastLineKeepsNoFinalNewline", ptr("1\n2"), `"mode": "replace", "start_line": 2, "end_line": 2, "content": "two\n"`, "1\ntwo", "replaced lines 2-2"},
		{"DeleteLines", ptr("1\n2\n3\n"), `"mode": "replace", "start_line": 1, "end_line": 2, "content": ""`, "3\n", "deleted lines 1-2"},
		{"DeleteAll", ptr("1\n2\n"), `"mode": "replace", "start_line": 1, "end_line": 2, "content": ""`, "", "deleted lines 1-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tooltest.Setup(t, builtin.Config{})
			p := filepath.Join(b.WS, "sub", "dir", "f.txt")
			if tt.initial != nil {
				tooltest.WriteFile(t, p, *tt.initial, 0o600)
			}
			r := b.MustCall(t, tool.NameFSWrite, `{"path": "sub/dir/f.txt", `+tt.input+`}`)
			if r.Status != tool.StatusSuccess || !strings.Contains(r.Summary, tt.summary) {
				t.Fatalf("got %+v, want summary %q", r, tt.summary)
			}
			if got := tooltest.ReadFile(t, p); got != tt.want {
				t.Errorf("file = %q, want %q", got, tt.want)
			}
			out := tooltest.Output[writeOut](t, r)
			if out.Path != "sub/dir/f.txt" || out.Bytes != len(tt.want) || out.Created != (tt.initial == nil) {
				t.Errorf("output %+v", out)
			}
			fi, _ := os.Stat(p)
			if want := os.FileMode(0o600); tt.initial != nil && fi.Mode().Perm() != want {
				t.Errorf("mode %v, want %v kept", fi.Mode().Perm(), want)
			}
			entries, _ := os.ReadDir(filepath.Dir(p))
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries: a temporary file was left", len(entries))
			}
		})
	}

	t.Run("Failures", func(t *testing.T) {
		t.Parallel()
		b := tooltest.Setup(t, builtin.Config{})
		tooltest.WriteFile(t, filepath.Join(b.WS, "f.txt"), "1\n2\n", 0o644)
		tooltest.WriteFile(t, filepath.Join(b.WS, "file"), "x", 0o644)
		if err := os.Mkdir(filepath.Join(b.WS, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		for input, want := range map[string]string{
			`{"path": "f.txt", "mode": "insert", "line": 4, "content": "x"}`:                         "line 4 is past the end: the file has 2 lines (insert at 3 to append)",
			`{"path": "f.txt", "mode": "replace", "start_line": 2, "end_line": 3, "content": ""}`:    "lines 2-3 are past the end",
			`{"path": "nope.txt", "mode": "replace", "start_line": 1, "end_line": 1, "content": ""}`: "no such file to replace lines in",
			`{"path": "d", "content": "x"}`:            "d is a directory",
			`{"path": "file/sub.txt", "content": "x"}`: "file/sub.txt: not a directory",
			`{"path": ".", "content": "x"}`:            "is the workspace root",
		} {
			r := b.MustCall(t, tool.NameFSWrite, input)
			if r.Status != tool.StatusError || !strings.Contains(r.Summary, want) {
				t.Errorf("%s: got %+v, want an error with %q", input, r, want)
			}
		}
		if got := tooltest.ReadFile(t, filepath.Join(b.WS, "f.txt")); got != "1\n2\n" {
			t.Errorf("a failed edit changed the file: %q", got)
		}
	})

	t.Run("FieldsMustFitTheMode", func(t *testing.T) {
		t.Parallel()
		b := tooltest.Setup(t, builtin.Config{})
		for _, input := range []string{
			`{"path": "f", "mode": "insert", "content": "x"}`,
			`{"path": "f", "mode": "replace", "start_line": 1, "content": "x"}`,
			`{"path": "f", "mode": "replace", "start_line": 3, "end_line": 2, "content": "x"}`,
			`{"path": "f", "content": "x", "line": 2}`,
			`{"path": "f", "mode": "append", "content": "x", "end_line": 2}`,
		} {
			_, err := b.Call(t, tool.NameFSWrite, input)
			var ie *tool.InputError
			if !errors.As(err, &ie) {
				t.Errorf("%s: got %v, want *InputError", input, err)
			}
		}
	})

	t.Run("WriteThenReadRoundTrips", func(t *testing.T) {
		t.Parallel()
		b := tooltest.Setup(t, builtin.Config{})
		b.MustCall(t, tool.NameFSWrite, `{"path": "notes/a.md", "content": "# Title\n\nbody\n"}`)
		b.MustCall(t, tool.NameFSWrite, `{"path": "notes/a.md", "mode": "insert", "line": 2, "content": "subtitle"}`)
		got := tooltest.Output[readOut](t, b.MustCall(t, tool.NameFSRead, `{"path": "notes/a.md"}`))
		if got.Content != "# Title\nsubtitle\n\nbody\n" || got.TotalLines != 4 {
			t.Errorf("got %+v", got)
		}
	})
}

func ptr(s string) *string { return &s }
