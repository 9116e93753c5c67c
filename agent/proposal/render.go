package proposal

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
)

// Wording of what an approved proposal leads to: the words a person reads
// before deciding, and after.
const (
	// WillDeploy is what happens to an approved tool, skill or repo
	// change.
	WillDeploy = "If approved, it will be merged, built and deployed: merged into the agent's repository, its image rebuilt, the agent updated."
	// WillApplyConfig is what happens to an approved config change.
	WillApplyConfig = "If approved, it will be written to config.json, then loaded and applied as choirctl config load and apply do."
)

// RenderTool is what a person reads of a tool proposal: the manifest,
// with its lock policy and secret scope spelled out, and every file it
// adds with its full content.
func RenderTool(t Tool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s tool %s\n", t.Change, t.Name)
	fmt.Fprintf(&b, "Why: %s\nBehaviour: %s\n", oneLine(t.Rationale), oneLine(t.Behavior))
	m := t.Manifest()
	fmt.Fprintf(&b, "Side effect: %s; network: %t; timeout: %d ms; idempotent: %t; results: %s\n",
		m.Runtime.SideEffect, m.Runtime.Network, m.Runtime.TimeoutMS, m.Runtime.Idempotent, trustText(m.Runtime))
	locks := make([]string, 0, len(m.Runtime.Locks))
	for _, l := range m.Runtime.Locks {
		locks = append(locks, l.Resource+" "+l.Mode)
	}
	fmt.Fprintf(&b, "Lock policy: %s\n", orNone(locks))
	fmt.Fprintf(&b, "Secret scope: %s\n", orNone(m.Runtime.SecretResources))
	if t.Implementation == nil {
		b.WriteString("Executable: none proposed; a person must add tools/" + t.Name + " (or a Dockerfile step building it) before it runs.\n")
	}
	for _, f := range t.Files() {
		writeFile(&b, f)
	}
	return b.String()
}

// RenderSkill is what a person reads of a skill proposal: each state with
// its objective, allowed tools and transitions, then the file.
func RenderSkill(s Skill, spec skill.Spec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s skill %s: %s\nWhy: %s\n", s.Change, spec.Name, oneLine(spec.Description), oneLine(s.Rationale))
	fmt.Fprintf(&b, "Starts in %s; at most %d steps; interruptible: %t\nStates:\n", spec.InitialState, spec.MaxSteps, spec.Interruptible)
	names := make([]string, 0, len(spec.States))
	for n := range spec.States {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		st := spec.States[n]
		if st.Terminal {
			fmt.Fprintf(&b, "- %s (terminal)\n", n)
			continue
		}
		var tr []string
		for _, t := range st.Transitions {
			tr = append(tr, t.String())
		}
		fmt.Fprintf(&b, "- %s: %s\n  tools: %s; transitions: %s\n", n, oneLine(st.Objective), orNone(st.AllowedTools), orNone(tr))
	}
	for _, f := range SkillFiles(spec) {
		writeFile(&b, f)
	}
	return b.String()
}

// writeFile shows a file in full.
func writeFile(b *strings.Builder, f File) {
	mode := ""
	if f.Executable {
		mode = ", executable"
	}
	fmt.Fprintf(b, "\n=== %s (%d bytes%s, full content) ===\n%s", f.Path, len(f.Content), mode, f.Content)
	if !strings.HasSuffix(f.Content, "\n") {
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "=== end of %s ===\n", f.Path)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Part sizes of a long preview: each part fits one chat message whole.
const (
	PartBytes = 3500
	// MaxParts bounds a preview: a change longer than this is refused as
	// too long to review in a chat; the agent splits it.
	MaxParts = 20
)

// Split cuts a preview into parts of at most PartBytes, at line
// boundaries where it can, never inside a UTF-8 sequence; nothing is left
// out.
func Split(text string) []string {
	var parts []string
	for len(text) > PartBytes {
		cut := strings.LastIndexByte(text[:PartBytes], '\n') + 1
		if cut <= PartBytes/2 {
			cut = PartBytes
			for cut > 0 && text[cut]&0xC0 == 0x80 {
				cut--
			}
		}
		parts = append(parts, text[:cut])
		text = text[cut:]
	}
	if text != "" {
		parts = append(parts, text)
	}
	return parts
}

// Summary is the one line naming a proposal, for lists and outcomes.
func Summary(requestType string, input json.RawMessage) string {
	var in struct {
		Change string `json:"change"`
		Name   string `json:"name"`
		Branch string `json:"branch"`
		Spec   struct {
			Name string `json:"name"`
		} `json:"spec"`
	}
	json.Unmarshal(input, &in) //nolint:errcheck // validated before
	switch requestType {
	case TypeTool:
		return in.Change + " tool " + in.Name
	case TypeSkill:
		return in.Change + " skill " + in.Spec.Name
	case TypeConfig:
		return "change config.json"
	case TypeRepo:
		return "merge branch " + in.Branch
	}
	return requestType
}

// trustText says whose words a tool's results carry.
func trustText(r tool.Runtime) string {
	if r.Trust != tool.TrustUntrusted {
		return "the agent's own data"
	}
	src := r.Source
	if src == "" {
		src = "outside"
	}
	return "untrusted text from " + src
}
