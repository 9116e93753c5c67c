package arbiter

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"

	"github.com/choirhq/choir/agent/tool"
)

// MinScrubBytes is the shortest secret value scrubbed from tool output:
// shorter values would replace ordinary text, and no real credential is
// that short.
const MinScrubBytes = 6

// scrubber replaces known secret values in tool output with
// [secret:<name>] before the output is committed, and so before it
// reaches the log, choird's replica, memory chunks, the embedding provider
// or a model. What choir.exec prints is whatever the command printed, a
// secret it found included.
type scrubber struct {
	r *strings.Replacer
}

// newScrubber builds the replacements for secrets (name to value), or
// returns nil when there is nothing to scrub. Each value is replaced as it
// is and as it appears inside a JSON string (escaped), longest first, so
// that a secret that contains another is replaced whole.
func newScrubber(secrets map[string]string) *scrubber {
	type pair struct{ old, new string }
	var pairs []pair
	for name, v := range secrets {
		if len(v) < MinScrubBytes {
			continue
		}
		repl := "[secret:" + name + "]"
		if b, err := json.Marshal(repl); err == nil {
			repl = string(b[1 : len(b)-1]) // safe inside a JSON string as well
		}
		pairs = append(pairs, pair{v, repl})
		if b, err := json.Marshal(v); err == nil {
			if esc := string(b[1 : len(b)-1]); esc != v {
				pairs = append(pairs, pair{esc, repl})
			}
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	// strings.Replacer tries the old strings in argument order at each
	// position: longest first.
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(len(b.old), len(a.old)), strings.Compare(a.old, b.old))
	})
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.old, p.new)
	}
	return &scrubber{r: strings.NewReplacer(args...)}
}

func (s *scrubber) text(v string) string {
	if s == nil {
		return v
	}
	return s.r.Replace(v)
}

// result scrubs the summary and the output of res. The output stays valid
// JSON; should a replacement ever break it, it becomes the scrubbed text
// as one JSON string.
func (s *scrubber) result(res tool.Result) tool.Result {
	if s == nil {
		return res
	}
	res.Summary = s.text(res.Summary)
	if len(res.Output) > 0 {
		out := []byte(s.text(string(res.Output)))
		if !bytes.Equal(out, res.Output) && !json.Valid(out) {
			out, _ = json.Marshal(string(out))
		}
		res.Output = out
	}
	return res
}
