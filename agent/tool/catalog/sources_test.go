package catalog

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/choirhq/choir/agent/tool"
)

// TestFileSources: a file read from where outside words land (a DM's
// upload, a mail's attachment, a fetched download) is a source; the
// agent's own files are not.
func TestFileSources(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, input, output string
		want                []string
	}{
		{"Upload", `{"path":".choirtmp/recv/42-notes.txt"}`, `{}`, []string{"file:.choirtmp/recv/42-notes.txt"}},
		{"MailAttachment", `{"path":"mail/7/invoice.txt"}`, `{}`, []string{"file:mail/7/invoice.txt"}},
		{"DownloadReadLater", `{"path":"./.choirtmp/downloads/report-1a2b.pdf"}`, `{}`, []string{"file:./.choirtmp/downloads/report-1a2b.pdf"}},
		{"SearchMatchInDownloads", `{"query":"x"}`, `{"matches":[{"path":".choirtmp/downloads/a.pdf"}]}`, []string{"file:.choirtmp/downloads"}},
		{"OwnFile", `{"path":"notes/summary.md"}`, `{}`, nil},
		{"OwnTmp", `{"path":".choirtmp/artifacts/out.txt"}`, `{}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := FileSources(json.RawMessage(tc.input), tool.Result{Output: json.RawMessage(tc.output)})
			if !slices.Equal(got, tc.want) {
				t.Errorf("FileSources(%s) = %v, want %v", tc.input, got, tc.want)
			}
		})
	}
}
