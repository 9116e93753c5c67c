// Package proposal is the shape of a self-evolution proposal (spec 8.10,
// 20): the structured payload of choir.propose.tool, choir.propose.skill,
// choir.propose.config_change and choir.propose.repo_change, checked by the
// validators the build and the runtime use, and turned into the files it
// adds to the agent's repository and the text a person reads to decide it.
//
// The agent validates a proposal before filing it, against its live tool
// registry; choird validates it again when it is filed and before it
// applies it. Nothing here writes to a repository.
package proposal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/strictjson"
)

// Request types of the proposals: the meta tools' names.
const (
	TypeTool   = tool.NameProposeTool
	TypeSkill  = tool.NameProposeSkill
	TypeConfig = tool.NameProposeConfig
	TypeRepo   = tool.NameProposeRepo
)

// IsProposal reports whether an approval's request type is a proposal that
// choird applies once approved.
func IsProposal(requestType string) bool {
	switch requestType {
	case TypeTool, TypeSkill, TypeConfig, TypeRepo:
		return true
	}
	return false
}

// Changes to a tool or skill.
const (
	ChangeAdd    = "add"
	ChangeModify = "modify"
)

// File is one file a proposal writes to the agent's repository.
type File struct {
	// Path is relative to the repository's root, slash-separated.
	Path       string `json:"path"`
	Content    string `json:"content"`
	Executable bool   `json:"executable,omitempty"`
}

// ToolRuntime is the runtime view a tool proposal declares.
type ToolRuntime struct {
	SideEffect      tool.SideEffect     `json:"side_effect"`
	Locks           []tool.LockTemplate `json:"locks,omitempty"`
	SecretResources []string            `json:"secret_resources,omitempty"`
	Network         bool                `json:"network,omitempty"`
	TimeoutMS       int                 `json:"timeout_ms,omitempty"`
	Idempotent      bool                `json:"idempotent,omitempty"`
	// Trust and Source are whose words the tool's results carry (issue
	// 30): the person approving the tool sees them.
	Trust  tool.Trust `json:"trust"`
	Source string     `json:"source,omitempty"`
}

// Implementation is a tool's executable, written by the model: it is
// shown to the person in full before anything is approved.
type Implementation struct {
	Content string `json:"content"`
}

// Tool is the input of choir.propose.tool.
type Tool struct {
	Change         string          `json:"change"`
	Name           string          `json:"name"`
	Description    string          `json:"description"`
	Parameters     json.RawMessage `json:"parameters"`
	Behavior       string          `json:"behavior"`
	Runtime        ToolRuntime     `json:"runtime"`
	Implementation *Implementation `json:"implementation,omitempty"`
	Rationale      string          `json:"rationale"`
}

// DefaultToolTimeoutMS is a proposed tool's timeout when it names none.
const DefaultToolTimeoutMS = 30_000

// Manifest is the tool's manifest as the repository holds it.
func (t Tool) Manifest() tool.Spec {
	timeout := t.Runtime.TimeoutMS
	if timeout == 0 {
		timeout = DefaultToolTimeoutMS
	}
	return tool.Spec{
		LLM: tool.LLMView{Name: t.Name, Description: t.Description, Parameters: t.Parameters},
		Runtime: tool.Runtime{TimeoutMS: timeout, Locks: t.Runtime.Locks, Network: t.Runtime.Network,
			SecretResources: t.Runtime.SecretResources, SideEffect: t.Runtime.SideEffect,
			Idempotent: t.Runtime.Idempotent, Trust: t.Runtime.Trust, Source: t.Runtime.Source, Version: "1.0"},
	}
}

// Files are what the tool adds to the repository: tools/<name>.json, and
// tools/<name>, its executable, when the proposal carries one.
func (t Tool) Files() []File {
	m, _ := json.MarshalIndent(t.Manifest(), "", "  ")
	out := []File{{Path: "tools/" + t.Name + ".json", Content: string(m) + "\n"}}
	if t.Implementation != nil {
		out = append(out, File{Path: "tools/" + t.Name, Content: t.Implementation.Content, Executable: true})
	}
	return out
}

// Skill is the input of choir.propose.skill.
type Skill struct {
	Change    string          `json:"change"`
	Spec      json.RawMessage `json:"spec"`
	Rationale string          `json:"rationale"`
}

// Config is the input of choir.propose.config_change: a JSON merge patch
// (RFC 7386) of config.json.
type Config struct {
	Patch     json.RawMessage `json:"patch"`
	Rationale string          `json:"rationale"`
}

// Repo is the input of choir.propose.repo_change: a branch the agent
// pushed to its own repository.
type Repo struct {
	Branch    string `json:"branch"`
	Rationale string `json:"rationale"`
}

// Limits of what a proposal may carry.
const (
	maxPayloadBytes = 256 << 10
	// MaxImplementationBytes bounds a tool's executable: it must stay
	// readable, in full, by the person who approves it.
	MaxImplementationBytes = 32 << 10
)

var (
	toolNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
	slugRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
)

// ParseTool decodes and checks a tool proposal: the manifest it makes is
// validated as the external tool loader and the registry validate a
// manifest file (the build runs the same on the merged repository), and
// known, when not nil, reports the tools the agent already has, so that
// "add" must name a new tool and "modify" an existing one.
func ParseTool(input json.RawMessage, known func(string) bool) (Tool, error) {
	var t Tool
	if err := strictjson.Decode(input, &t, strictjson.Limits{MaxBytes: maxPayloadBytes}); err != nil {
		return t, fmt.Errorf("tool proposal: %w", err)
	}
	var errs []error
	if t.Change != ChangeAdd && t.Change != ChangeModify {
		errs = append(errs, fmt.Errorf("change: %q is neither %q nor %q", t.Change, ChangeAdd, ChangeModify))
	}
	if !toolNameRe.MatchString(t.Name) {
		errs = append(errs, fmt.Errorf("name: %q is not a dotted tool name such as weather.lookup", t.Name))
	}
	if known != nil && toolNameRe.MatchString(t.Name) {
		switch {
		case t.Change == ChangeAdd && known(t.Name):
			errs = append(errs, fmt.Errorf("name: tool %s already exists; propose change \"modify\" to change it", t.Name))
		case t.Change == ChangeModify && !known(t.Name):
			errs = append(errs, fmt.Errorf("name: tool %s does not exist; propose change \"add\" to create it", t.Name))
		}
	}
	if strings.TrimSpace(t.Behavior) == "" || strings.TrimSpace(t.Rationale) == "" {
		errs = append(errs, errors.New("behavior and rationale: both are required, in prose"))
	}
	if im := t.Implementation; im != nil {
		switch {
		case len(im.Content) > MaxImplementationBytes:
			errs = append(errs, fmt.Errorf("implementation.content: %d bytes; at most %d, so that a person can read all of it",
				len(im.Content), MaxImplementationBytes))
		case !strings.HasPrefix(im.Content, "#!"):
			errs = append(errs, errors.New(`implementation.content: must start with an interpreter line such as "#!/bin/sh"`))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return t, err
	}
	if err := loadManifest(t); err != nil {
		return t, err
	}
	return t, nil
}

// loadManifest validates the manifest file the proposal writes as the
// external tool loader does (strict decoding, then the registry's own
// validation of the spec), in memory: the agent's container may have no
// writable temporary directory. Its executable is the proposal's own file.
func loadManifest(t Tool) error {
	file := t.Files()[0]
	var spec tool.Spec
	if err := strictjson.Decode([]byte(file.Content), &spec, strictjson.Limits{MaxBytes: maxPayloadBytes}); err != nil {
		return fmt.Errorf("%s: %w", file.Path, err)
	}
	if _, err := tool.NewDef(spec, nil, tool.OriginAgent, file.Path); err != nil {
		return fmt.Errorf("%s: %w", file.Path, err)
	}
	return nil
}

// ParseSkill decodes a skill proposal and parses its spec as a skill file
// is parsed; [CheckSkill] validates it.
func ParseSkill(input json.RawMessage) (Skill, skill.Spec, error) {
	var s Skill
	if err := strictjson.Decode(input, &s, strictjson.Limits{MaxBytes: maxPayloadBytes}); err != nil {
		return s, skill.Spec{}, fmt.Errorf("skill proposal: %w", err)
	}
	if s.Change != ChangeAdd && s.Change != ChangeModify {
		return s, skill.Spec{}, fmt.Errorf("change: %q is neither %q nor %q", s.Change, ChangeAdd, ChangeModify)
	}
	spec, err := skill.Parse(s.Spec)
	if err != nil {
		return s, spec, fmt.Errorf("spec: %w", err)
	}
	return s, spec, nil
}

// CheckSkill compiles a proposed skill; known reports the tools its states
// may allow, and the skills the agent has (nil: not checked).
func CheckSkill(s Skill, spec skill.Spec, knownTool, knownSkill func(string) bool) error {
	if knownTool == nil {
		knownTool = func(string) bool { return true }
	}
	var errs []error
	if _, err := skill.Compile(spec, knownTool); err != nil {
		errs = append(errs, fmt.Errorf("spec: %w", err))
	}
	if knownSkill != nil && spec.Name != "" {
		switch {
		case s.Change == ChangeAdd && knownSkill(spec.Name):
			errs = append(errs, fmt.Errorf("spec.name: skill %s already exists; propose change \"modify\"", spec.Name))
		case s.Change == ChangeModify && !knownSkill(spec.Name):
			errs = append(errs, fmt.Errorf("spec.name: skill %s does not exist; propose change \"add\"", spec.Name))
		}
	}
	return errors.Join(errs...)
}

// SkillFiles is what a skill proposal writes: skills/<name>.json.
func SkillFiles(spec skill.Spec) []File {
	b, _ := json.MarshalIndent(spec, "", "  ")
	return []File{{Path: "skills/" + spec.Name + ".json", Content: string(b) + "\n"}}
}

// ParseConfig decodes a config change: the patch must be a JSON object.
func ParseConfig(input json.RawMessage) (Config, error) {
	var c Config
	if err := strictjson.Decode(input, &c, strictjson.Limits{MaxBytes: maxPayloadBytes}); err != nil {
		return c, fmt.Errorf("config proposal: %w", err)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(c.Patch, &obj) != nil || len(obj) == 0 {
		return c, errors.New(`patch: must be a non-empty JSON merge patch of config.json, e.g. {"agents": {"assistant": {"budgets": {"max_steps": 40}}}}`)
	}
	return c, nil
}

// ParseRepo decodes a repo change and checks that its branch is one the
// session may submit: proposal/<session-id>/<slug>.
func ParseRepo(input json.RawMessage, sessionID string) (Repo, error) {
	var r Repo
	if err := strictjson.Decode(input, &r, strictjson.Limits{MaxBytes: maxPayloadBytes}); err != nil {
		return r, fmt.Errorf("repo proposal: %w", err)
	}
	prefix := "proposal/" + sessionID + "/"
	slug, ok := strings.CutPrefix(r.Branch, prefix)
	if !ok || !slugRe.MatchString(slug) {
		return r, fmt.Errorf("branch: %q must be %s<slug>, with a slug of lower-case letters, digits, '.', '_' or '-'", r.Branch, prefix)
	}
	return r, nil
}

// MergePatch applies an RFC 7386 JSON merge patch to doc.
func MergePatch(doc, patch json.RawMessage) (json.RawMessage, error) {
	var d, p any
	if err := decodeNumbers(doc, &d); err != nil {
		return nil, fmt.Errorf("document: %w", err)
	}
	if err := decodeNumbers(patch, &p); err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	return json.MarshalIndent(mergeValue(d, p), "", "  ")
}

func mergeValue(d, p any) any {
	pm, ok := p.(map[string]any)
	if !ok {
		return p
	}
	dm, ok := d.(map[string]any)
	if !ok {
		dm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(dm, k)
			continue
		}
		dm[k] = mergeValue(dm[k], v)
	}
	return dm
}

// decodeNumbers decodes JSON keeping numbers as written.
func decodeNumbers(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}
