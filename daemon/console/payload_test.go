package console

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/choirhq/choir/internal/verbatim"
)

// TestPayloadBlocks lays out payloads: the plain fields as indented JSON,
// each text field of several lines on its own, a diff's lines marked.
func TestPayloadBlocks(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		raw  string
		want []payloadBlock
	}{
		"PlainObject": {`{"command":"true"}`, []payloadBlock{{Key: "payload", Lines: []payloadLine{{"", "{"}, {"", `  "command": "true"`}, {"", "}"}}}}},
		"NotAnObject": {`[1]`, []payloadBlock{{Key: "payload", Lines: []payloadLine{{"", "["}, {"", "  1"}, {"", "]"}}}}},
		"DiffField": {`{"preview":"merge x\n=== full diff ===\ndiff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n ctx\n"}`,
			[]payloadBlock{{Key: "preview", Lines: []payloadLine{{"", "merge x"}, {"", "=== full diff ==="}, {"meta", "diff --git a/f b/f"},
				{"meta", "--- a/f"}, {"meta", "+++ b/f"}, {"hunk", "@@ -1 +1 @@"}, {"del", "-a"}, {"add", "+b"}, {"", " ctx"}}}}},
		"TextNotDiff": {`{"body":"+1 for this\n- a list"}`, []payloadBlock{{Key: "body", Lines: []payloadLine{{"", "+1 for this"}, {"", "- a list"}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := payloadBlocks(json.RawMessage(tc.raw)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("payloadBlocks(%s) =\n%+v\nwant\n%+v", tc.raw, got, tc.want)
			}
		})
	}
}

// TestProposalText: a proposal's quoted text loses its bars, and its
// diff's lines are marked by what follows them.
func TestProposalText(t *testing.T) {
	t.Parallel()
	text := "The change, every line as the agent proposed it:\n" + verbatim.Lines("merge branch x\ndiff --git a/f b/f\n@@ -1 +1 @@\n-a│ b\n+c\u202e")
	got := textBlock("proposal", unquote(text))
	want := payloadBlock{Key: "proposal", Lines: []payloadLine{{"", "The change, every line as the agent proposed it:"},
		{"", "merge branch x"}, {"meta", "diff --git a/f b/f"}, {"hunk", "@@ -1 +1 @@"}, {"del", "-a│ b"}, {"add", `+c\u{202E}`}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
}
