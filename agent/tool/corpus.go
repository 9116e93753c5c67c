package tool

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/choirhq/choir/rpc/toolindex"
)

// Category returns the tool's category: runtime.category, or its name
// without the last segment (choir.fs for choir.fs.read).
func (d *Def) Category() string {
	if c := d.spec.Runtime.Category; c != "" {
		return c
	}
	n := d.Name()
	return n[:strings.LastIndexByte(n, '.')]
}

// SearchText is the tool's search corpus: its name, description,
// parameter names, side effect and aliases. Tool search in choird embeds
// and indexes exactly this text.
func (d *Def) SearchText() string {
	var props struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	json.Unmarshal(d.spec.LLM.Parameters, &props) //nolint:errcheck // compiled at registration
	parts := []string{d.Name(), d.spec.LLM.Description}
	parts = append(parts, slices.Sorted(maps.Keys(props.Properties))...)
	parts = append(parts, "side effect "+string(d.spec.Runtime.SideEffect))
	parts = append(parts, d.spec.Runtime.Aliases...)
	return strings.Join(parts, "\n")
}

// Corpus returns the search text of every tool, sorted by name, and its
// hash (toolindex.Hash, which choird recomputes over what it receives):
// choird rebuilds its tool index when the hash of an agent's image
// changes.
func (r *Registry) Corpus() ([]toolindex.Entry, string) {
	out := make([]toolindex.Entry, 0, len(r.names))
	for _, n := range r.names {
		out = append(out, toolindex.Entry{Name: n, Text: r.defs[n].SearchText()})
	}
	return out, toolindex.Hash(out)
}
