// Package configdiff compares configurations (spec 17.6): what `choirctl config
// diff` shows and `config apply` reports, a change at a JSON path of
// config.json or a secret of secrets.json, never a secret's value.
package configdiff

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/strictjson"
)

// The operations of a [Change].
const (
	OpAdd    = "+"
	OpRemove = "-"
	OpChange = "~"
)

// Change is one difference between two configurations (spec 17.6): a value
// added, removed or changed at a JSON path of config.json, or a secret
// added, removed or changed in secrets.json. Secret values never appear in
// a Change: a changed secret says only that its value changed.
type Change struct {
	// Op is OpAdd, OpRemove or OpChange.
	Op string `json:"op"`
	// File is ConfigFile or SecretsFile.
	File string `json:"file"`
	// Path is the JSON path inside File, as in validation problems:
	// $.models.local.endpoint, or $["openrouter-key"] for a secret.
	Path string `json:"path"`
	// Old and New show a changed config.json value: strings as they are
	// ("" when empty), anything else as compact JSON. They are empty for
	// added and removed entries and for secrets.
	Old string `json:"old,omitempty"`
	New string `json:"new,omitempty"`
	// Effect says when the change takes effect; the caller that knows
	// (choird) fills it in, with a Hint saying what the operator runs.
	Effect string `json:"effect,omitempty"`
	Hint   string `json:"hint,omitempty"`
	// Repo is set on a change of a git repository's contents (spec
	// 17.6): "global" or an agent id. File is then the path in the
	// repository (tools/web.json), or empty for the change of the commit
	// checked out, whose Old and New are the commit SHAs.
	Repo string `json:"repo,omitempty"`
}

// maxShown bounds the old and new values shown on one line.
const maxShown = 80

// String renders the change on one line, such as
//
//	~ models.local.endpoint: http://a -> http://b  [hot-reload]
//	+ dms.bob  [hot-reload]
//	~ secrets.json: openrouter-key (value changed)  [secret-apply: choirctl secret apply]
func (c Change) String() string {
	var b strings.Builder
	b.WriteString(c.Op)
	b.WriteByte(' ')
	b.WriteString(c.DisplayPath())
	switch {
	case c.Repo != "" && c.File != "":
		// A file of a repository: the path says it all.
	case c.File == config.SecretsFile && c.Op == OpChange:
		b.WriteString(" (value changed)")
	case c.Op == OpChange:
		fmt.Fprintf(&b, ": %s -> %s", shorten(c.Old), shorten(c.New))
	}
	if c.Effect != "" {
		b.WriteString("  [")
		b.WriteString(c.Effect)
		if c.Hint != "" {
			b.WriteString(": ")
			b.WriteString(c.Hint)
		}
		b.WriteByte(']')
	}
	return b.String()
}

// DisplayPath is Path without the leading "$.", prefixed with the file
// name for secrets: models.local.endpoint, secrets.json: openrouter-key;
// for a repository change, repo:file (global:tools/web.json), or
// "global repo" for its commit.
func (c Change) DisplayPath() string {
	if c.Repo != "" {
		if c.File == "" {
			return c.Repo + " repo"
		}
		return c.Repo + ":" + c.File
	}
	p := strings.TrimPrefix(strings.TrimPrefix(c.Path, strictjson.Root), ".")
	if c.File == config.SecretsFile {
		return config.SecretsFile + ": " + secretName(p)
	}
	return p
}

// Keys returns the object keys along Path: $.agents["a-1"].repo.ref gives
// agents, a-1, repo, ref. Paths made by [Diff] hold only object keys.
func (c Change) Keys() []string {
	var keys []string
	p := strings.TrimPrefix(c.Path, strictjson.Root)
	for p != "" {
		switch {
		case strings.HasPrefix(p, "."):
			p = p[1:]
			i := strings.IndexAny(p, ".[")
			if i < 0 {
				i = len(p)
			}
			keys = append(keys, p[:i])
			p = p[i:]
		case strings.HasPrefix(p, "["):
			dec := json.NewDecoder(strings.NewReader(p[1:]))
			var k string
			if err := dec.Decode(&k); err != nil {
				return keys
			}
			keys = append(keys, k)
			p = p[1+int(dec.InputOffset()):]
			p = strings.TrimPrefix(p, "]")
		default:
			return keys
		}
	}
	return keys
}

// secretName undoes PathKey's quoting of a secret name.
func secretName(p string) string {
	if strings.HasPrefix(p, "[") {
		var k string
		if json.Unmarshal([]byte(strings.TrimSuffix(p[1:], "]")), &k) == nil {
			return k
		}
	}
	return p
}

func shorten(s string) string {
	if len(s) <= maxShown {
		return s
	}
	return s[:maxShown-3] + "..."
}

// Diff compares two configurations as they are laid out in config.json and
// returns the changes from running to staged, sorted by path. A resource
// present in only one of them is one added or removed entry (+ dms.bob);
// inside a resource present in both, each changed value is one change at
// its own path (~ models.local.endpoint). Defaults are applied to both
// first, so an omitted tunable equals its default.
func Diff(running, staged *config.Config) ([]Change, error) {
	a, err := configTree(running)
	if err != nil {
		return nil, err
	}
	b, err := configTree(staged)
	if err != nil {
		return nil, err
	}
	var out []Change
	diffTree(strictjson.Root, a, b, &out)
	return out, nil
}

// configTree renders c as config.json would hold it, decoded into maps.
func configTree(c *config.Config) (any, error) {
	cp := *c
	cp.ApplyDefaults()
	data, err := json.Marshal(&cp)
	if err != nil {
		return nil, fmt.Errorf("marshal config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // so 0.1 and 0.10000000000000001 are not "changed"
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	return tree, nil
}

func diffTree(p string, a, b any, out *[]Change) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := slices.Sorted(maps.Keys(am))
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			va, ina := am[k]
			vb, inb := bm[k]
			kp := strictjson.PathKey(p, k)
			switch {
			case !ina:
				*out = append(*out, Change{Op: OpAdd, File: config.ConfigFile, Path: kp})
			case !inb:
				*out = append(*out, Change{Op: OpRemove, File: config.ConfigFile, Path: kp})
			default:
				diffTree(kp, va, vb, out)
			}
		}
		return
	}
	oa, ob := show(a), show(b)
	if oa != ob {
		*out = append(*out, Change{Op: OpChange, File: config.ConfigFile, Path: p, Old: oa, New: ob})
	}
}

// show renders a value for a Change: a string as it is, anything else as
// compact JSON.
func show(v any) string {
	if s, ok := v.(string); ok {
		if s == "" {
			return `""`
		}
		return s
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// SecretsDiff compares two secret sets by name and value and returns the
// changes from running to staged, sorted by name. It never includes a
// value: a changed secret is reported as changed, nothing more.
func SecretsDiff(running, staged config.Secrets) []Change {
	names := running.Names()
	for name := range staged {
		if _, ok := running[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out []Change
	for _, name := range names {
		va, ina := running[name]
		vb, inb := staged[name]
		p := strictjson.PathKey(strictjson.Root, name)
		switch {
		case !ina:
			out = append(out, Change{Op: OpAdd, File: config.SecretsFile, Path: p})
		case !inb:
			out = append(out, Change{Op: OpRemove, File: config.SecretsFile, Path: p})
		case va != vb:
			out = append(out, Change{Op: OpChange, File: config.SecretsFile, Path: p})
		}
	}
	return out
}

// Blocker is one reason a staged configuration cannot be applied, located
// by JSON path in config.json.
type Blocker struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Blocker) String() string { return p.Path + ": " + p.Message }

// DiffReport is a staged configuration compared with the running one (spec
// 17.6): each change with when it takes effect, and anything that makes
// apply refuse. It never holds a secret value.
type DiffReport struct {
	RunningVersion int64     `json:"running_version"`
	LoadedAt       time.Time `json:"loaded_at"`
	Changes        []Change  `json:"changes"`
	// Blockers are why apply would refuse the staged configuration; empty
	// when it would apply.
	Blockers []Blocker `json:"blockers"`
	// Warnings are what config load could not do but did not need to: a
	// repository it could not fetch, whose last fetched copy it checked.
	Warnings []string `json:"warnings,omitempty"`
}

// String renders the report for a terminal or a chat in the form of spec
// 17.6: a summary line, then one line per change with its path, its
// effect and what applies it (a changed config.json value follows on its
// own line), then warnings and blockers.
//
//	~ config.json: models.default     [hot-reload]        → included in: choirctl config apply
//	~ global:tools/web_browse.json    [restart-required]  → use: choirctl agent update-all
//	  global repo: abc1234 -> def5678 [restart-required]  → use: choirctl agent update-all
func (r DiffReport) String() string {
	var b strings.Builder
	n, repo := 0, 0
	for _, ch := range r.Changes {
		switch {
		case ch.Repo != "":
			repo++
		case ch.File == config.ConfigFile:
			n++
		}
	}
	if n == 0 {
		fmt.Fprintf(&b, "staged config.json equals the running one (version %d)", r.RunningVersion)
	} else {
		fmt.Fprintf(&b, "staged config.json vs running version %d: %d changes", r.RunningVersion, n)
	}
	if repo > 0 {
		fmt.Fprintf(&b, "; %d repository changes", repo)
	}
	b.WriteByte('\n')
	left := make([]string, len(r.Changes))
	wl, we := 0, 0
	for i, ch := range r.Changes {
		left[i] = ch.specLeft()
		wl = max(wl, min(len(left[i]), 48))
		we = max(we, len(ch.Effect)+2)
	}
	for i, ch := range r.Changes {
		line := fmt.Sprintf("%-*s %-*s %s", wl, left[i], we, "["+ch.Effect+"]", ch.arrow())
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		if ch.Repo == "" && ch.File == config.ConfigFile && ch.Op == OpChange {
			fmt.Fprintf(&b, "      %s -> %s\n", shorten(ch.Old), shorten(ch.New))
		}
	}
	if len(r.Warnings) > 0 {
		b.WriteString("warnings:\n")
		for _, w := range r.Warnings {
			b.WriteString("  " + w + "\n")
		}
	}
	switch {
	case len(r.Blockers) > 0:
		b.WriteString("config apply would refuse:\n")
		for _, p := range r.Blockers {
			b.WriteString("  " + p.String() + "\n")
		}
	case n > 0:
		b.WriteString("run choirctl config apply to apply it\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// specLeft is a change's path as spec 17.6 shows it: the operation, then
// config.json: path, secrets.json: name, repo:file, or, for a commit,
// "  global repo: abc1234 -> def5678".
func (c Change) specLeft() string {
	switch {
	case c.Repo != "" && c.File == "":
		return fmt.Sprintf("  %s: %s -> %s", c.DisplayPath(), shortSHA(c.Old), shortSHA(c.New))
	case c.Repo != "":
		return c.Op + " " + c.DisplayPath()
	case c.File == config.SecretsFile && c.Op == OpChange:
		return c.Op + " " + c.DisplayPath() + " (value changed)"
	case c.File == config.SecretsFile:
		return c.Op + " " + c.DisplayPath()
	}
	return c.Op + " " + config.ConfigFile + ": " + c.DisplayPath()
}

// arrow says what applies a change, by its effect.
func (c Change) arrow() string {
	switch c.Effect {
	case "hot-reload":
		return "→ included in: choirctl config apply"
	case "next-start", "rebuild":
		if c.Hint == "" {
			return "→ included in: choirctl config apply"
		}
		return "→ included in: choirctl config apply, then use: " + c.Hint
	case "choird-restart":
		return "→ use: restart choird (config apply refuses it)"
	}
	if c.Hint == "" {
		return ""
	}
	return "→ use: " + c.Hint
}

// shortSHA is the first 7 hex digits of a commit, or "none".
func shortSHA(s string) string {
	switch {
	case s == "":
		return "none"
	case len(s) > 7:
		return s[:7]
	}
	return s
}

// ApplyReport says what applying a staged configuration did.
type ApplyReport struct {
	// Version is the config_version now running; PreviousVersion the one
	// before. They are equal when nothing changed.
	Version         int64 `json:"version"`
	PreviousVersion int64 `json:"previous_version"`
	// Applied are the config.json changes now running.
	Applied []Change `json:"applied"`
	// Notified is how many running agents were told to fetch the new
	// version.
	Notified int `json:"notified"`
	// NotApplied are differences apply leaves alone: secrets.json, which
	// secret apply applies.
	NotApplied []Change `json:"not_applied"`
}

// String renders the report for a terminal or a chat.
func (r ApplyReport) String() string {
	var b strings.Builder
	if len(r.Applied) == 0 {
		fmt.Fprintf(&b, "nothing to apply: config version %d already runs\n", r.Version)
	} else {
		fmt.Fprintf(&b, "config version %d applied (was %d); %d running agents notified\n", r.Version, r.PreviousVersion, r.Notified)
	}
	for _, ch := range r.Applied {
		b.WriteString(ch.String() + "\n")
	}
	if len(r.NotApplied) > 0 {
		b.WriteString("not applied:\n")
		for _, ch := range r.NotApplied {
			b.WriteString(ch.String() + "\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}
