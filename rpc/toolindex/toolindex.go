// Package toolindex is the wire contract of semantic tool search's index
// (choir.tools.index): one tool's search text, and the manifest hash that
// names a corpus. The agent computes the hash over the corpus it sends and
// choird recomputes it over what it received, so that no agent can file
// tools of its own under another image's hash.
package toolindex

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Entry is one tool's search text.
type Entry struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// Hash is the manifest hash of a corpus: SHA-256 over each entry's name
// and text, length-prefixed and in order, as 64 lowercase hex digits.
func Hash(entries []Entry) string {
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%d:%s%d:%s", len(e.Name), e.Name, len(e.Text), e.Text)
	}
	return hex.EncodeToString(h.Sum(nil))
}
