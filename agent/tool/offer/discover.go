package offer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/choirhq/choir/agent/tool"
)

// Names of the discovery tools, offered in [ModeDiscovery] and answered by
// [Offer.Call] in the lane, never by the arbiter: they run nothing and only
// describe tools the lane's filter already allows.
const (
	NameToolsSearch     = "choir.tools.search"
	NameToolsDescribe   = "choir.tools.describe"
	NameToolsCategories = "choir.tools.categories"
	NameToolsLoad       = "choir.tools.load"
)

// discoveryViews are the LLM views of the discovery tools.
func discoveryViews() []tool.LLMView {
	return []tool.LLMView{
		{Name: NameToolsSearch, Description: "Find tools for a task by keywords or a description of what you need. " +
			"Returns names and one-line descriptions; you may call a found tool directly.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":25}},"required":["query"],"additionalProperties":false}`)},
		{Name: NameToolsDescribe, Description: "Give the full input schema of a tool; it is then offered to you for the rest of the turn.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false}`)},
		{Name: NameToolsCategories, Description: "List the categories of tools you may use, with how many tools each holds.",
			Parameters: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)},
		{Name: NameToolsLoad, Description: "Load every tool of a category: their schemas are offered to you for the rest of the turn.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"category":{"type":"string"}},"required":["category"],"additionalProperties":false}`)},
	}
}

// Handles reports whether the lane must answer a call of name with
// [Offer.Call]: the discovery tools, in discovery mode.
func (o *Offer) Handles(name string) bool {
	if o.Mode() != ModeDiscovery {
		return false
	}
	switch name {
	case NameToolsSearch, NameToolsDescribe, NameToolsCategories, NameToolsLoad:
		return true
	}
	return false
}

// Call answers a discovery tool's call under f. Its answer is the tool
// result the model sees; bad input is a rejection naming the problem.
func (o *Offer) Call(ctx context.Context, f tool.Filter, name string, args json.RawMessage) json.RawMessage {
	var in struct {
		Query    string `json:"query"`
		Limit    int    `json:"limit"`
		Name     string `json:"name"`
		Category string `json:"category"`
	}
	if len(args) > 0 && json.Unmarshal(args, &in) != nil {
		return rejected("invalid_input", name+": want a JSON object as input")
	}
	allowed := o.r.LLMViews(f)
	switch name {
	case NameToolsSearch:
		if strings.TrimSpace(in.Query) == "" {
			return rejected("invalid_input", name+`: want {"query": "<what you need>"}`)
		}
		if in.Limit <= 0 || in.Limit > 25 {
			in.Limit = 8
		}
		var found []map[string]string
		for _, n := range o.rank(ctx, allowed, in.Query, in.Limit) {
			d, _ := o.r.Lookup(n)
			found = append(found, map[string]string{"name": n, "description": oneLine(d.LLM().Description),
				"category": d.Category()})
		}
		return success(map[string]any{"tools": found})
	case NameToolsDescribe:
		for _, v := range allowed {
			if v.Name == in.Name {
				o.show(v.Name)
				return success(map[string]any{"name": v.Name, "description": v.Description, "parameters": v.Parameters})
			}
		}
		return o.unknown(ctx, allowed, name, in.Name)
	case NameToolsCategories:
		cats := categories(o.r, allowed)
		out := make([]map[string]any, 0, len(cats))
		for _, c := range slices.Sorted(maps.Keys(cats)) {
			out = append(out, map[string]any{"category": c, "tools": len(cats[c])})
		}
		return success(map[string]any{"categories": out})
	case NameToolsLoad:
		names, ok := categories(o.r, allowed)[in.Category]
		if !ok {
			return rejected("unknown_category", fmt.Sprintf("%s: no category %q; list them with %s",
				name, in.Category, NameToolsCategories))
		}
		o.show(names...)
		return success(map[string]any{"category": in.Category, "loaded": names})
	}
	return rejected("unknown_tool", fmt.Sprintf("there is no tool %q", name))
}

// unknown answers a describe of a tool the lane may not call or that does
// not exist, with the nearest names.
func (o *Offer) unknown(ctx context.Context, allowed []tool.LLMView, tool, name string) json.RawMessage {
	b := rejected("unknown_tool", fmt.Sprintf("%s: there is no tool %q you may call", tool, name))
	var m map[string]any
	json.Unmarshal(b, &m) //nolint:errcheck // our own JSON
	m["nearest_tools"] = o.rank(ctx, allowed, name, 5)
	out, _ := json.Marshal(m)
	return out
}

// nearest are the tools f allows that best match an unknown name.
func (o *Offer) nearest(ctx context.Context, f tool.Filter, name string) []string {
	return o.rank(ctx, o.r.LLMViews(f), name, 5)
}

// rank returns up to limit names of allowed tools for a query: the
// keyword ranking and the semantic one (when there is a search) fused by
// reciprocal rank, as memory search fuses its text and vector rankings.
// The semantic ranking is cut to allowed, so it never widens a filter.
func (o *Offer) rank(ctx context.Context, allowed []tool.LLMView, query string, limit int) []string {
	ok := make(map[string]bool, len(allowed))
	for _, v := range allowed {
		ok[v.Name] = true
	}
	score := map[string]float64{}
	for i, n := range keywordRank(o.r, allowed, query) {
		score[n] += 1 / float64(60+i+1)
	}
	if o.search != nil {
		if names, err := o.search(ctx, query, 3*limit); err == nil {
			i := 0
			for _, n := range names {
				if ok[n] {
					i++
					score[n] += 1 / float64(60+i)
				}
			}
		}
	}
	out := slices.Collect(maps.Keys(score))
	sort.Slice(out, func(a, b int) bool {
		if score[out[a]] != score[out[b]] {
			return score[out[a]] > score[out[b]]
		}
		return out[a] < out[b]
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// keywordRank ranks the allowed tools that share a word with query, best
// first: a word of the name counts 3, an alias 2, any other word of the
// corpus 1.
func keywordRank(r *tool.Registry, allowed []tool.LLMView, query string) []string {
	terms := words(query)
	type hit struct {
		name  string
		score int
	}
	var hits []hit
	for _, v := range allowed {
		d, _ := r.Lookup(v.Name)
		name, alias, body := set(words(d.Name())), set(words(strings.Join(d.Runtime().Aliases, " "))), set(words(d.SearchText()))
		s := 0
		for _, t := range terms {
			switch {
			case name[t]:
				s += 3
			case alias[t]:
				s += 2
			case body[t]:
				s++
			}
		}
		if s > 0 {
			hits = append(hits, hit{v.Name, s})
		}
	}
	sort.SliceStable(hits, func(a, b int) bool { return hits[a].score > hits[b].score })
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.name
	}
	return out
}

// words splits text into lowercase stemmed words of two letters or more.
func words(s string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if len(w) < 2 {
			continue
		}
		out = append(out, stem(w))
	}
	return out
}

// stem strips the commonest English suffixes, so that "files" matches
// "file" and "searching" "search".
func stem(w string) string {
	for _, suf := range []string{"ing", "es", "ed", "s"} {
		if len(w) > len(suf)+2 && strings.HasSuffix(w, suf) {
			return strings.TrimSuffix(w, suf)
		}
	}
	return w
}

func set(ws []string) map[string]bool {
	m := make(map[string]bool, len(ws))
	for _, w := range ws {
		m[w] = true
	}
	return m
}

// categories groups the allowed tools by category, names sorted.
func categories(r *tool.Registry, allowed []tool.LLMView) map[string][]string {
	out := map[string][]string{}
	for _, v := range allowed {
		d, _ := r.Lookup(v.Name)
		out[d.Category()] = append(out[d.Category()], v.Name)
	}
	return out
}

func rejected(kind, msg string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"status": "rejected", "error": map[string]string{"error": kind, "message": msg}})
	return b
}

func success(v map[string]any) json.RawMessage {
	v["status"] = "success"
	b, _ := json.Marshal(v)
	return b
}
