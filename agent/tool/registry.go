package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Errors returned by [Def.Execute] and [Registry] lookups; match them with
// errors.Is.
var (
	// ErrUnknownTool is returned for a name the registry does not hold.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrNotExecutable is returned by Execute for host, meta and runtime
	// tools, which the agent does not run itself.
	ErrNotExecutable = errors.New("tool is not executed in the agent")
	// ErrToolPanic is returned when a built-in tool panicked.
	ErrToolPanic = errors.New("tool panicked")
)

// Tool is a tool the agent executes itself: a built-in Go tool or an
// external executable.
type Tool interface {
	// Spec returns the tool's dual view.
	Spec() Spec
	// Execute runs the tool on an input already validated against its
	// schema. Failures the model should see are results with status error;
	// an error return is for a refused path ([*PathError]) or a cancelled
	// context.
	Execute(ctx context.Context, env Env, input json.RawMessage) (Result, error)
}

// Kind says who executes a tool.
type Kind string

// The kinds of tool.
const (
	// KindBuiltin tools are Go code in the agent.
	KindBuiltin Kind = "builtin"
	// KindExternal tools are executables run by the agent.
	KindExternal Kind = "external"
	// KindHost tools are run by choird through EXECUTE_HOST_TOOL.
	KindHost Kind = "host"
	// KindMeta tools are proposals sent for approval (spec 8.10).
	KindMeta Kind = "meta"
	// KindRuntime tools are handled by the agent runtime itself, e.g.
	// choir.memory.compact by the calling lane.
	KindRuntime Kind = "runtime"
)

// Origin says where a tool was defined.
type Origin string

// The origins of tools, in increasing precedence.
const (
	OriginBuiltin Origin = "builtin"
	OriginGlobal  Origin = "global"
	OriginAgent   Origin = "agent"
)

// Def is a registered tool: its spec, compiled schema and executor. It is
// immutable and safe for concurrent use.
type Def struct {
	spec   Spec
	schema *jsonschema.Schema
	exec   Tool // nil for host, meta and runtime tools
	kind   Kind
	origin Origin
	file   string // manifest path; empty for built-ins
	// classify is the tool's per-call idempotency, when it has one.
	classify InputIdempotency
	// sources are the tool's per-call result sources, when it has them
	// (WithSources).
	sources func(json.RawMessage, Result) []string
	// effect is the tool's per-call side effect, when it has one.
	effect InputSideEffect
	// selfApproval says which calls the tool asks a person about itself.
	selfApproval SelfApproval
}

// Name returns the tool's canonical name.
func (d *Def) Name() string { return d.spec.LLM.Name }

// InputIdempotency is implemented by a tool whose idempotency depends on
// the call: choir.fs.write overwrites idempotently and appends unsafely.
type InputIdempotency interface {
	IdempotencyOf(input json.RawMessage) Idempotency
}

// Idempotency returns the class of one call of the tool: the tool's own
// answer for this input when it gives one, else its runtime's [Runtime.Class].
func (d *Def) Idempotency(input json.RawMessage) Idempotency {
	if d.classify != nil {
		if c := d.classify.IdempotencyOf(input); c != "" {
			return c
		}
	}
	return d.spec.Runtime.Class()
}

// Sources are the untrusted sources one call's result carries into the
// lane that reads it (issue 30), each "<kind>" or "<kind>:<detail>"
// ("web:https://example.com/a", "mail:bob@ext.test", "mcp:github"): the
// tool's own answer for this call when it gives one (WithSources), else
// its runtime's Source when its Trust is untrusted, else none. The model
// never decides them.
func (d *Def) Sources(input json.RawMessage, res Result) []string {
	if d.sources != nil {
		return d.sources(input, res)
	}
	if d.spec.Runtime.Trust != TrustUntrusted {
		return nil
	}
	if d.spec.Runtime.Source != "" {
		return []string{d.spec.Runtime.Source}
	}
	return []string{d.spec.LLM.Name}
}

// InputSideEffect is implemented by a tool whose side effect depends on
// the call: choir.notion.query reads unless it appends.
type InputSideEffect interface {
	SideEffectOf(input json.RawMessage) SideEffect
}

// SelfApproval is implemented by a tool that asks a person itself before
// some calls act (choir.email.send on an account that needs approval):
// the arbiter's untrusted-input policy then lets the tool's own approval,
// which names the lane's sources (LaneSources), be the one a person sees.
type SelfApproval interface {
	AsksApproval(input json.RawMessage) bool
}

// AsksApproval reports whether the tool asks a person itself before this
// call acts.
func (d *Def) AsksApproval(input json.RawMessage) bool {
	return d.selfApproval != nil && d.selfApproval.AsksApproval(input)
}

// SideEffect returns what one call of the tool does: the tool's own answer
// for this input when it gives one, else its runtime's side effect.
func (d *Def) SideEffect(input json.RawMessage) SideEffect {
	if d.effect != nil {
		if e := d.effect.SideEffectOf(input); e != "" {
			return e
		}
	}
	return d.spec.Runtime.SideEffect
}

// LLM returns a copy of the tool's LLM view.
func (d *Def) LLM() LLMView { return d.spec.Clone().LLM }

// Runtime returns a copy of the tool's runtime view.
func (d *Def) Runtime() Runtime { return d.spec.Clone().Runtime }

// Kind says who executes the tool.
func (d *Def) Kind() Kind { return d.kind }

// Origin says where the tool was defined.
func (d *Def) Origin() Origin { return d.origin }

// File returns the manifest path of an external tool, or "".
func (d *Def) File() string { return d.file }

// Validate checks input against the tool's schema and returns an
// [*InputError] listing every problem, or nil.
func (d *Def) Validate(input json.RawMessage) error {
	return ValidateInput(d.Name(), d.schema, input)
}

// Locks resolves the tool's lock templates for a validated input and
// returns the concrete locks, one per resource (S and X on one resource
// become X), sorted by resource. File paths are confined to the workspace
// ws and canonicalised, see [ResolvePath]; a path that leaves it is a
// [*PathError]. Meta tools have no locks.
func (d *Def) Locks(ws string, input json.RawMessage) ([]Lock, error) {
	tpls := d.spec.Runtime.Locks
	if len(tpls) == 0 {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	var given, real string
	byRes := map[string]string{}
	for _, lt := range tpls {
		res := lt.Resource
		field, isField := lt.fileField()
		literal, isFile := strings.CutPrefix(res, "file:")
		if isFile {
			p := literal
			if isField {
				if fields == nil {
					if err := json.Unmarshal(input, &fields); err != nil {
						return nil, &InputError{Name: d.Name(), Problems: []Problem{{Message: "want a JSON object"}}}
					}
				}
				p = ""
				if raw, ok := fields[field]; ok && string(raw) != "null" {
					if err := json.Unmarshal(raw, &p); err != nil {
						return nil, &InputError{Name: d.Name(), Problems: []Problem{{Path: "/" + field, Message: "want a string"}}}
					}
				}
			}
			if given == "" {
				var err error
				if given, real, err = WorkspaceRoots(ws); err != nil {
					return nil, fmt.Errorf("locks for %s: %w", d.Name(), err)
				}
			}
			rel, err := ResolveIn(given, real, p)
			if err != nil {
				return nil, err
			}
			res = lockKeyFor(rel)
		}
		if m, ok := byRes[res]; !ok || m == ModeShared {
			byRes[res] = lt.Mode
		}
	}
	out := make([]Lock, 0, len(byRes))
	for res, m := range byRes {
		out = append(out, Lock{Resource: res, Mode: m})
	}
	slices.SortFunc(out, func(a, b Lock) int { return strings.Compare(a.Resource, b.Resource) })
	return out, nil
}

// Execute validates input and runs a built-in or external tool under its
// timeout, with only its declared secrets, and shapes the result (an
// oversized output is spilled to an artifact). It returns [*InputError] for
// an invalid input, [*PathError] for a refused path, [ErrNotExecutable] for
// host, meta and runtime tools, [ErrToolPanic] if a built-in panicked, and
// the context's error if ctx ended; every other failure is a result with
// status error, for the model.
func (d *Def) Execute(ctx context.Context, env Env, input json.RawMessage) (res Result, err error) {
	if d.exec == nil {
		return Result{}, fmt.Errorf("execute %s (%s tool): %w", d.Name(), d.kind, ErrNotExecutable)
	}
	if err := d.Validate(input); err != nil {
		return Result{}, err
	}
	env = env.scoped(d.spec.Runtime.SecretResources)
	timeout := time.Duration(d.spec.Runtime.TimeoutMS) * time.Millisecond
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			res, err = Result{}, fmt.Errorf("execute %s: %w: %v", d.Name(), ErrToolPanic, p)
		}
	}()
	res, err = d.exec.Execute(tctx, env, input)
	if ctx.Err() != nil {
		// The caller gave up (cancellation, shutdown): that is not the
		// tool's result.
		return Result{}, fmt.Errorf("execute %s: %w", d.Name(), ctx.Err())
	}
	if err != nil {
		var pe *PathError
		var ie *InputError
		if errors.As(err, &pe) || errors.As(err, &ie) {
			return Result{}, err
		}
		if errors.Is(err, context.DeadlineExceeded) && tctx.Err() != nil {
			return shape(env, ErrorResult("timed out after %v", timeout)), nil
		}
		return shape(env, ErrorResult("%v", err)), nil
	}
	return shape(env, res), nil
}

// Shape applies the registry's output handling to a result obtained
// elsewhere, such as a host tool's from EXECUTE_HOST_TOOL: it normalises
// the status and spills an oversized output to an artifact in env's
// workspace.
func (d *Def) Shape(env Env, r Result) Result { return shape(env, r) }

// ForModel returns what a lane's prompt may contain of a committed result
// of this tool: ok is false if the tool's exposure keeps its results from
// that lane, and with prompt_mask only the status and summary remain.
func (d *Def) ForModel(lane Lane, r Result) (view Result, ok bool) {
	if !d.spec.Runtime.Exposure.Allows(lane) {
		return Result{}, false
	}
	if d.spec.Runtime.PromptMask {
		return Result{Status: r.Status, Summary: r.Summary, Masked: true}, true
	}
	r.Output = slices.Clone(r.Output)
	r.Usage = nil // the meter's, never the model's
	return r, true
}

// Registry is the immutable set of tools of one agent. It is safe for
// concurrent use.
type Registry struct {
	defs  map[string]*Def
	names []string // sorted
}

// ManifestError names an invalid external tool manifest and the reason.
type ManifestError struct {
	File string
	Err  error
}

func (e *ManifestError) Error() string {
	return fmt.Sprintf("tool manifest %s: %v", e.File, strings.ReplaceAll(e.Err.Error(), "\n", "; "))
}

func (e *ManifestError) Unwrap() error { return e.Err }

// Layer is the external tools of one directory, as loaded, and the error
// of loading it (every invalid manifest, joined), which [New] reports with
// its own.
type Layer struct {
	Defs []*Def
	Err  error
}

// New assembles a registry: the Go tools (built-in, whichever family they
// come from), then each layer of external tools in increasing precedence,
// a later layer's tool overriding an earlier one's of the same name. No
// external tool may take the name of a Go tool. It validates every Go tool
// and reports every problem at once, each external one as a
// [*ManifestError] naming its file.
func New(tools []Tool, layers ...Layer) (*Registry, error) {
	r := &Registry{defs: map[string]*Def{}}
	var errs []error

	for _, t := range tools {
		d, err := NewDef(t.Spec(), t, OriginBuiltin, "")
		if err != nil {
			errs = append(errs, fmt.Errorf("built-in tool %q: %w", t.Spec().LLM.Name, err))
			continue
		}
		if _, dup := r.defs[d.Name()]; dup {
			errs = append(errs, fmt.Errorf("built-in tool %q: defined twice", d.Name()))
			continue
		}
		r.defs[d.Name()] = d
	}
	builtin := make(map[string]bool, len(r.defs))
	for n := range r.defs {
		builtin[n] = true
	}

	for _, l := range layers {
		if l.Err != nil {
			errs = append(errs, l.Err)
		}
		for _, d := range l.Defs {
			if builtin[d.Name()] {
				errs = append(errs, &ManifestError{File: d.file, Err: fmt.Errorf("name %q is taken by a built-in tool", d.Name())})
				continue
			}
			r.defs[d.Name()] = d // agent after global: the agent's wins
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for n := range r.defs {
		r.names = append(r.names, n)
	}
	sort.Strings(r.names)
	return r, nil
}

// NewDef validates a spec, compiles its schema and classifies the tool:
// exec runs it (nil, or a [Declare]d tool, for one the agent does not
// run), origin says where it was defined, and file names an external
// tool's manifest. A family of tools has no need of it: [New] makes the
// Defs of Go tools; the external package makes those of manifests.
func NewDef(spec Spec, exec Tool, origin Origin, file string) (*Def, error) {
	spec = spec.Clone()
	props, perr := objectSchemaProps(spec.LLM.Parameters)
	var errs []error
	if perr != nil {
		errs = append(errs, fmt.Errorf("llm.parameters: %w", perr))
		props = map[string]bool{}
	}
	if err := spec.validate(props); err != nil {
		errs = append(errs, err)
	}
	var sch *jsonschema.Schema
	if perr == nil {
		var err error
		if sch, err = CompileSchema(spec.LLM.Name, spec.LLM.Parameters); err != nil {
			errs = append(errs, fmt.Errorf("llm.parameters: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var sources func(json.RawMessage, Result) []string
	if w, ok := exec.(sourced); ok {
		exec, sources = w.Tool, w.f
	}
	classify, _ := exec.(InputIdempotency)
	effect, _ := exec.(InputSideEffect)
	selfApproval, _ := exec.(SelfApproval)
	if _, ok := exec.(declaration); ok {
		exec = nil
	}
	d := &Def{spec: spec, schema: sch, exec: exec, origin: origin, file: file, classify: classify, sources: sources, effect: effect, selfApproval: selfApproval}
	switch {
	case spec.Runtime.Host:
		d.kind, d.exec = KindHost, nil
	case spec.Runtime.Meta:
		d.kind, d.exec = KindMeta, nil
	case exec == nil:
		d.kind = KindRuntime
	case origin == OriginBuiltin:
		d.kind = KindBuiltin
	default:
		d.kind = KindExternal
	}
	return d, nil
}

// Lookup returns the named tool.
func (r *Registry) Lookup(name string) (*Def, bool) {
	d, ok := r.defs[name]
	return d, ok
}

// Get returns the named tool or an error wrapping [ErrUnknownTool].
func (r *Registry) Get(name string) (*Def, error) {
	d, ok := r.defs[name]
	if !ok {
		return nil, fmt.Errorf("tool %q: %w", name, ErrUnknownTool)
	}
	return d, nil
}

// Has reports whether the registry holds the named tool.
func (r *Registry) Has(name string) bool {
	_, ok := r.defs[name]
	return ok
}

// Names returns the names of all tools, sorted.
func (r *Registry) Names() []string { return slices.Clone(r.names) }

// Filter selects the tools offered to a model.
type Filter struct {
	// Lane keeps only tools exposed to the lane. Empty keeps tools
	// exposed to either lane. Tools with exposure none are never kept.
	Lane Lane
	// Allow, if not nil, keeps only the named tools (a lane's or a skill
	// state's allowlist); names the registry does not hold are ignored.
	Allow []string
}

// availability is implemented by executors whose tools can become
// unavailable during a session; such tools are no longer offered.
type availability interface{ Available() bool }

// LLMViews returns the LLM views of the tools f keeps, sorted by name: the
// only description of tools that is ever sent to a model. A tool whose
// executor reports itself unavailable is left out.
func (r *Registry) LLMViews(f Filter) []LLMView {
	var allow map[string]bool
	if f.Allow != nil {
		allow = make(map[string]bool, len(f.Allow))
		for _, n := range f.Allow {
			allow[n] = true
		}
	}
	var out []LLMView
	for _, n := range r.names {
		d := r.defs[n]
		exp := d.spec.Runtime.Exposure
		if f.Lane != "" && !exp.Allows(f.Lane) || f.Lane == "" && exp == ExposureNone {
			continue
		}
		if allow != nil && !allow[n] {
			continue
		}
		if a, ok := d.exec.(availability); ok && !a.Available() {
			continue // e.g. the tool of an MCP server that died twice
		}
		out = append(out, d.LLM())
	}
	return out
}
