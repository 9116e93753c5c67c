package skill

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/choirhq/choir/agent/tool"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TransitionToolName is the structured tool through which a model moves a
// skill run to its next state. It is under [tool.ReservedPrefix], so no
// registered tool can take it.
const TransitionToolName = tool.ReservedPrefix + "transition"

// DefaultRetryBudget is how many invalid proposals in a row a run
// tolerates (spec 10.2) before it takes its error transition.
const DefaultRetryBudget = 2

// Default directories of skill files inside the agent image.
const (
	DefaultGlobalDir = "/choir/skills/global"
	DefaultAgentDir  = "/choir/skills/agent"
)

//go:embed builtin/*.json
var builtinFS embed.FS

// Origin says where a skill was defined.
type Origin string

// The origins of skills, in increasing precedence.
const (
	OriginBuiltin Origin = "builtin"
	OriginGlobal  Origin = "global"
	OriginAgent   Origin = "agent"
)

// schema is a compiled JSON Schema with the name its problems carry.
type schema struct {
	name string
	sch  *jsonschema.Schema
}

func (s *schema) validate(v json.RawMessage) error { return tool.ValidateInput(s.name, s.sch, v) }

// stateTool is a state's transition tool, compiled once.
type stateTool struct {
	view   tool.LLMView
	schema *jsonschema.Schema
}

// Skill is a validated skill, immutable and safe for concurrent use.
type Skill struct {
	spec   Spec
	input  *schema // nil: any input
	output *schema // nil: no output required
	tools  map[string]stateTool
	origin Origin
	file   string
}

// Name returns the skill's name.
func (k *Skill) Name() string { return k.spec.Name }

// Description returns the skill's description.
func (k *Skill) Description() string { return k.spec.Description }

// Spec returns a copy of the skill's definition.
func (k *Skill) Spec() Spec { return k.spec.clone() }

// MaxSteps returns the skill's step limit.
func (k *Skill) MaxSteps() int { return k.spec.MaxSteps }

// Interruptible reports whether a user message may interrupt a run.
func (k *Skill) Interruptible() bool { return k.spec.Interruptible }

// Origin says where the skill was defined.
func (k *Skill) Origin() Origin { return k.origin }

// File names the skill's file ("builtin/<name>.json" for a built-in).
func (k *Skill) File() string { return k.file }

// Compile validates a skill against its rules (see the package
// documentation) and the tool registry: known reports whether a tool name
// is registered. All violations are reported together.
func Compile(spec Spec, known func(name string) bool) (*Skill, error) {
	if known == nil {
		return nil, errors.New("compile skill: no tool registry to check allowed_tools against")
	}
	spec = spec.clone()
	err := spec.validate(known)
	in, out, serr := compileSchemas(&spec)
	if err := errors.Join(err, serr); err != nil {
		return nil, err
	}
	k := &Skill{spec: spec, input: in, output: out, tools: map[string]stateTool{}}
	for name, st := range spec.States {
		if st.Terminal {
			continue
		}
		view := k.transitionView(name)
		sch, err := tool.CompileSchema("skill:"+spec.Name+":"+name, view.Parameters)
		if err != nil {
			return nil, fmt.Errorf("states.%s: transition tool: %w", name, err)
		}
		k.tools[name] = stateTool{view: view, schema: sch}
	}
	return k, nil
}

// transitionView builds the transition tool of one state: its schema
// enumerates exactly that state's events, and when an event ends the skill
// and the skill declares an output schema, it asks for the output too.
func (k *Skill) transitionView(state string) tool.LLMView {
	st := k.spec.States[state]
	events := make([]string, len(st.Transitions))
	edges := make([]string, len(st.Transitions))
	ends := false
	for i, tr := range st.Transitions {
		events[i] = tr.On
		edges[i] = tr.On + " (to " + tr.To + ")"
		ends = ends || k.spec.States[tr.To].Terminal
	}
	props := map[string]any{
		"event": map[string]any{
			"type":        "string",
			"enum":        events,
			"description": "What happened: " + strings.Join(edges, ", ") + ".",
		},
	}
	desc := fmt.Sprintf("Move skill %s from state %s to its next state once the current objective is met. "+
		"This is the only way to change state. Events: %s.", k.spec.Name, state, strings.Join(edges, ", "))
	if ends && len(k.spec.OutputSchema) > 0 {
		props["output"] = json.RawMessage(k.spec.OutputSchema)
		desc += " An event that ends the skill needs its output."
	}
	params, _ := json.Marshal(map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             []string{"event"},
		"additionalProperties": false,
	}) // maps of strings and raw JSON always marshal
	return tool.LLMView{Name: TransitionToolName, Description: desc, Parameters: params}
}

// Summary is what a lane's system prompt lists of a skill (spec 11.3).
type Summary struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Set is the immutable set of skills of one agent.
type Set struct {
	skills      map[string]*Skill
	names       []string
	retryBudget int
}

// Config says where [Load] finds skills and what it checks them against.
type Config struct {
	// GlobalDir holds skills shared by all agents (DefaultGlobalDir);
	// empty, or a directory that does not exist, holds none.
	GlobalDir string
	// AgentDir holds the agent's own skills (DefaultAgentDir); they
	// override global and built-in skills of the same name.
	AgentDir string
	// KnownTool reports whether a tool is registered, e.g.
	// (*tool.Registry).Has. Required.
	KnownTool func(name string) bool
	// RetryBudget is how many invalid proposals in a row a run tolerates;
	// zero means DefaultRetryBudget.
	RetryBudget int
}

// FileError names an invalid skill file and the reason.
type FileError struct {
	File string
	Err  error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("skill %s: %s", e.File, strings.ReplaceAll(e.Err.Error(), "\n", "; "))
}

func (e *FileError) Unwrap() error { return e.Err }

// Load builds the skill set: the built-in skills (tool-builder,
// skill-builder), then the *.json files of cfg.GlobalDir, then those of
// cfg.AgentDir, a later one overriding an earlier one of the same name.
// Every invalid file is reported, as a [*FileError] naming it.
func Load(cfg Config) (*Set, error) {
	if cfg.KnownTool == nil {
		return nil, errors.New("load skills: no tool registry (Config.KnownTool)")
	}
	if cfg.RetryBudget < 0 {
		return nil, fmt.Errorf("load skills: retry budget %d, want 0 or more", cfg.RetryBudget)
	}
	set := &Set{skills: map[string]*Skill{}, retryBudget: cfg.RetryBudget}
	if set.retryBudget == 0 {
		set.retryBudget = DefaultRetryBudget
	}
	var errs []error
	for _, src := range []struct {
		fsys   fs.FS
		dir    string
		origin Origin
	}{
		{builtinFS, "builtin", OriginBuiltin},
		{dirFS(cfg.GlobalDir), cfg.GlobalDir, OriginGlobal},
		{dirFS(cfg.AgentDir), cfg.AgentDir, OriginAgent},
	} {
		skills, err := loadDir(src.fsys, src.dir, src.origin, cfg.KnownTool)
		if err != nil {
			errs = append(errs, err)
		}
		for _, k := range skills {
			set.skills[k.Name()] = k
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for n := range set.skills {
		set.names = append(set.names, n)
	}
	sort.Strings(set.names)
	return set, nil
}

// dirFS returns the file system of a directory, or nil for none.
func dirFS(dir string) fs.FS {
	if dir == "" {
		return nil
	}
	return os.DirFS(dir)
}

// loadDir loads the *.json skills of one directory, in name order.
func loadDir(fsys fs.FS, dir string, origin Origin, known func(string) bool) ([]*Skill, error) {
	if fsys == nil {
		return nil, nil
	}
	root := "."
	if origin == OriginBuiltin {
		root = dir
	}
	entries, err := fs.ReadDir(fsys, root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("skill directory %s: %w", dir, err)
	}
	var skills []*Skill
	var errs []error
	byName := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		file := filepath.Join(dir, name)
		data, err := fs.ReadFile(fsys, path.Join(root, name))
		if err != nil {
			errs = append(errs, &FileError{File: file, Err: err})
			continue
		}
		spec, err := Parse(data)
		if err != nil {
			errs = append(errs, &FileError{File: file, Err: err})
			continue
		}
		k, err := Compile(spec, known)
		if err != nil {
			errs = append(errs, &FileError{File: file, Err: err})
			continue
		}
		if prev, dup := byName[k.Name()]; dup {
			errs = append(errs, &FileError{File: file, Err: fmt.Errorf("skill %q is already defined by %s in the same directory", k.Name(), prev)})
			continue
		}
		byName[k.Name()] = file
		k.origin, k.file = origin, file
		skills = append(skills, k)
	}
	return skills, errors.Join(errs...)
}

// Get returns the named skill.
func (s *Set) Get(name string) (*Skill, bool) {
	k, ok := s.skills[name]
	return k, ok
}

// Names returns the skills' names, sorted.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Summaries returns the name and description of every skill, sorted by
// name, for the lanes' system prompts.
func (s *Set) Summaries() []Summary {
	out := make([]Summary, len(s.names))
	for i, n := range s.names {
		out[i] = Summary{Name: n, Description: s.skills[n].Description()}
	}
	return out
}
