package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Spec is the dual view of a tool (spec 8.3). An external tool's manifest
// is a Spec in JSON: {"llm": {...}, "runtime": {...}}.
type Spec struct {
	LLM     LLMView `json:"llm"`
	Runtime Runtime `json:"runtime"`
}

// LLMView is what a model sees of a tool, and all it ever sees: the
// function definition of an OpenAI-compatible tools parameter.
type LLMView struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is the JSON Schema of the input, an object schema.
	Parameters json.RawMessage `json:"parameters"`
}

// Runtime is the internal view of a tool, never shown to a model.
type Runtime struct {
	// ExecPath is an external tool's executable. Empty means the manifest's
	// file name without .json; a relative path is taken from the manifest's
	// directory. Built-in tools leave it empty.
	ExecPath string `json:"exec_path,omitempty"`
	// TimeoutMS bounds one execution, in milliseconds (required, > 0).
	TimeoutMS int `json:"timeout_ms"`
	// Locks are the lock templates resolved per call by [Def.Locks].
	Locks []LockTemplate `json:"locks,omitempty"`
	// Network says whether the tool needs the network. It is declared
	// metadata in v1: the container's network policy is the enforcement.
	Network bool `json:"network,omitempty"`
	// SecretResources names the secrets the tool may read; it receives
	// these and no others.
	SecretResources []string `json:"secret_resources,omitempty"`
	// SideEffect classifies the tool (spec 8.4), required.
	SideEffect SideEffect `json:"side_effect"`
	// Idempotent says whether running the tool twice with the same input
	// has the effect of running it once. Idempotency, when set, says more
	// and wins.
	Idempotent bool `json:"idempotent,omitempty"`
	// Idempotency says what may be done with a call a crash left without
	// a result (issue 31): run it again (idempotent), run it again with
	// the same idempotency key (keyed), or never (unsafe). Empty derives
	// it: read-only and Idempotent tools are idempotent, others unsafe.
	Idempotency Idempotency `json:"idempotency,omitempty"`
	// Version is the tool's version string, required.
	Version string `json:"version"`
	// Exposure says which lanes are offered the tool and see its results;
	// empty means both.
	Exposure Exposure `json:"exposure,omitempty"`
	// PromptMask keeps the tool's output out of prompts: models see only
	// the status and summary of its results.
	PromptMask bool `json:"prompt_mask,omitempty"`
	// Host marks a tool that choird executes (EXECUTE_HOST_TOOL).
	Host bool `json:"host,omitempty"`
	// Meta marks a control-plane tool (spec 8.10): a proposal that never
	// executes in the agent, never holds locks and always requires
	// approval. Reserved for built-in tools.
	Meta bool `json:"meta,omitempty"`
	// Category groups the tool for choir.tools.categories and
	// choir.tools.load; empty means the name without its last segment.
	Category string `json:"category,omitempty"`
	// Aliases are other words for the tool, searched by choir.tools.search.
	Aliases []string `json:"aliases,omitempty"`
	// Approval makes every call wait for a person's approval of that
	// exact input before it runs (the arbiter's gate, approvalgate.go).
	Approval bool `json:"approval,omitempty"`
	// Trust says whose words the tool's results carry (issue 30): own
	// (the agent's workspace, its memory, the control plane) or untrusted
	// (what strangers wrote: a web page, a mail, a Notion page, an MCP
	// server's answer). A lane that read an untrusted result holds its
	// Source from then on, and the arbiter's untrusted-input policy
	// applies to what it does next. A manifest must declare it; a tool
	// declared in code leaves it empty for own.
	Trust Trust `json:"trust,omitempty"`
	// Source is the kind of an untrusted tool's source: "web", "mail",
	// "notion", "file" or "mcp:<server>"; empty means the tool's name.
	Source string `json:"source,omitempty"`
}

// Trust says whose words a tool's results carry.
type Trust string

// The trust levels of a tool's results.
const (
	TrustOwn       Trust = "own"
	TrustUntrusted Trust = "untrusted"
)

// Valid reports whether t is a trust level; empty is valid (own).
func (t Trust) Valid() bool { return t == "" || t == TrustOwn || t == TrustUntrusted }

// SideEffect classifies what a tool does (spec 8.4).
type SideEffect string

// The side-effect classes.
const (
	SideEffectRead     SideEffect = "read"
	SideEffectWrite    SideEffect = "write"
	SideEffectExternal SideEffect = "external"
)

// Valid reports whether s is one of the classes.
func (s SideEffect) Valid() bool {
	return s == SideEffectRead || s == SideEffectWrite || s == SideEffectExternal
}

// Idempotency is what a call may have done twice, and so what is done
// with a call a crash interrupted after its intent was saved.
type Idempotency string

// The idempotency classes.
const (
	// IdempotencyIdempotent: running the call again has the effect of
	// running it once (an overwrite, an upsert, a read); it is re-run.
	IdempotencyIdempotent Idempotency = "idempotent"
	// IdempotencyKeyed: running it again with the same idempotency key
	// ([CallKey]) is a no-op if the first run took effect; it is re-run
	// with that key.
	IdempotencyKeyed Idempotency = "keyed"
	// IdempotencyUnsafe: it must not run twice and cannot tell whether it
	// ran (a shell command, an append, a message sent); it is never
	// re-run, and the user is told it may or may not have happened.
	IdempotencyUnsafe Idempotency = "unsafe"
)

// Valid reports whether i is a class; empty is valid (derived).
func (i Idempotency) Valid() bool {
	return i == "" || i == IdempotencyIdempotent || i == IdempotencyKeyed || i == IdempotencyUnsafe
}

// Class returns the runtime's declared idempotency, or the one derived
// from its side effect and Idempotent flag.
func (r Runtime) Class() Idempotency {
	switch {
	case r.Idempotency != "":
		return r.Idempotency
	case r.SideEffect == SideEffectRead || r.Idempotent:
		return IdempotencyIdempotent
	}
	return IdempotencyUnsafe
}

// Lane names a cognitive lane for exposure checks.
type Lane string

// The two lanes of spec 7.1.
const (
	LaneEdge Lane = "edge"
	LaneCore Lane = "core"
)

// Exposure says which lanes a tool is offered to and whose prompts its
// results enter.
type Exposure string

// The exposures of spec 8.5.
const (
	ExposureEdge Exposure = "edge"
	ExposureCore Exposure = "core"
	ExposureBoth Exposure = "both"
	ExposureNone Exposure = "none"
)

// Valid reports whether e is an exposure; empty counts as both.
func (e Exposure) Valid() bool {
	switch e {
	case "", ExposureEdge, ExposureCore, ExposureBoth, ExposureNone:
		return true
	}
	return false
}

// Allows reports whether lane may be offered the tool and see its results.
func (e Exposure) Allows(lane Lane) bool {
	switch e {
	case "", ExposureBoth:
		return lane == LaneEdge || lane == LaneCore
	case ExposureEdge:
		return lane == LaneEdge
	case ExposureCore:
		return lane == LaneCore
	}
	return false
}

// LockTemplate is one lock of a runtime view, with placeholders.
type LockTemplate struct {
	// Resource is "workspace", "choirtmp", "browser_tab", "file:<path>",
	// "file:{field}", or a reserved namespace with a literal name
	// ("mem:", "repo:", "net:", "ext:").
	Resource string `json:"resource"`
	// Mode is "S" (shared) or "X" (exclusive).
	Mode string `json:"mode"`
}

// Lock is one concrete lock requirement of a call: a resource key in the
// syntax of spec 9.2 and a mode, S or X. The arbiter converts it to a lock
// manager request.
type Lock struct {
	Resource string `json:"resource"`
	Mode     string `json:"mode"`
}

// String returns the lock as "<resource>:<mode>", e.g. "file:src/a.go:S".
func (l Lock) String() string { return l.Resource + ":" + l.Mode }

// Lock modes.
const (
	ModeShared    = "S"
	ModeExclusive = "X"
)

// Reserved name prefixes and limits.
const (
	// ReservedPrefix is the namespace of tools the skill engine provides
	// (choir.skill.transition); no registered tool may use it.
	ReservedPrefix = "choir.skill."
	// maxNameLen keeps the sanitised name (each '.' becomes "__") within
	// the 64 characters OpenAI-compatible APIs accept.
	maxSanitisedLen = 64
	maxSegments     = 8
	maxTimeoutMS    = 3_600_000
	maxDescription  = 4096
)

var (
	nameRe       = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)
	placeholder  = regexp.MustCompile(`^\{([A-Za-z_][A-Za-z0-9_]*)\}$`)
	reservedName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	secretNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	versionRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}$`)
)

// ValidName checks a tool name: lowercase dotted segments
// (^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$), at most 8 of them, with no "__"
// and no segment ending in "_", so that the sanitised form sent to
// OpenAI-compatible APIs (choir.fs.read becomes choir__fs__read) maps back
// to exactly one name and fits in 64 characters.
func ValidName(name string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("tool name %q: want lowercase dotted segments like choir.fs.read (^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$)", name)
	}
	segs := strings.Split(name, ".")
	if len(segs) > maxSegments {
		return fmt.Errorf("tool name %q: %d segments, at most %d", name, len(segs), maxSegments)
	}
	for _, s := range segs {
		if strings.Contains(s, "__") || strings.HasSuffix(s, "_") {
			return fmt.Errorf("tool name %q: segment %q has \"__\" or ends in \"_\", which makes the sanitised name ambiguous", name, s)
		}
	}
	if n := len(name) + len(segs) - 1; n > maxSanitisedLen {
		return fmt.Errorf("tool name %q: sanitised name is %d characters, at most %d", name, n, maxSanitisedLen)
	}
	return nil
}

// validate checks everything about a spec that does not need the schema
// compiled or the file system; props lists the schema's top-level string
// properties, for placeholders.
func (s *Spec) validate(stringProps map[string]bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if err := ValidName(s.LLM.Name); err != nil {
		errs = append(errs, fmt.Errorf("llm.name: %w", err))
	} else if strings.HasPrefix(s.LLM.Name, ReservedPrefix) {
		bad("llm.name: %q is under the reserved prefix %s", s.LLM.Name, ReservedPrefix)
	}
	switch d := strings.TrimSpace(s.LLM.Description); {
	case d == "":
		bad("llm.description: required")
	case len(s.LLM.Description) > maxDescription:
		bad("llm.description: %d bytes, at most %d", len(s.LLM.Description), maxDescription)
	}

	r := &s.Runtime
	if r.TimeoutMS <= 0 || r.TimeoutMS > maxTimeoutMS {
		bad("runtime.timeout_ms: %d, want 1 to %d", r.TimeoutMS, maxTimeoutMS)
	}
	if !r.SideEffect.Valid() {
		bad("runtime.side_effect: %q, want read, write or external", r.SideEffect)
	}
	if !r.Idempotency.Valid() {
		bad("runtime.idempotency: %q, want idempotent, keyed or unsafe", r.Idempotency)
	}
	if !versionRe.MatchString(r.Version) {
		bad("runtime.version: %q, want a version string such as 1.0", r.Version)
	}
	if !r.Trust.Valid() {
		bad("runtime.trust: %q, want own or untrusted", r.Trust)
	}
	if r.Source != "" && r.Trust != TrustUntrusted {
		bad("runtime.source: only an untrusted tool names its source; set runtime.trust to untrusted, or drop source")
	}
	if !r.Exposure.Valid() {
		bad("runtime.exposure: %q, want edge, core, both or none", r.Exposure)
	}
	if r.Host && r.Meta {
		bad("runtime: host and meta exclude each other (host tools run through EXECUTE_HOST_TOOL, meta tools through approval)")
	}
	if r.Meta && len(r.Locks) > 0 {
		bad("runtime.locks: a meta tool never holds locks")
	}
	seen := map[string]bool{}
	for i, name := range r.SecretResources {
		switch {
		case !secretNameRe.MatchString(name):
			bad("runtime.secret_resources[%d]: %q is not a secret name", i, name)
		case seen[name]:
			bad("runtime.secret_resources[%d]: %q listed twice", i, name)
		}
		seen[name] = true
	}
	for i, lt := range r.Locks {
		if err := lt.check(stringProps); err != nil {
			errs = append(errs, fmt.Errorf("runtime.locks[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// check validates one lock template.
func (lt LockTemplate) check(stringProps map[string]bool) error {
	if lt.Mode != ModeShared && lt.Mode != ModeExclusive {
		return fmt.Errorf("mode %q, want S or X", lt.Mode)
	}
	ns, arg, hasArg := strings.Cut(lt.Resource, ":")
	switch ns {
	case "workspace", "choirtmp", "browser_tab":
		if hasArg {
			return fmt.Errorf("resource %q: %s takes no argument", lt.Resource, ns)
		}
	case "file":
		if m := placeholder.FindStringSubmatch(arg); m != nil {
			if !stringProps[m[1]] {
				return fmt.Errorf("resource %q: placeholder {%s} names no top-level string property of llm.parameters", lt.Resource, m[1])
			}
			return nil
		}
		if strings.ContainsAny(arg, "{}") {
			return fmt.Errorf("resource %q: a placeholder must be the whole path, as in file:{path}", lt.Resource)
		}
		if _, err := lexicalRel(arg); err != nil || arg == "" || strings.HasPrefix(arg, "/") {
			return fmt.Errorf("resource %q: want a relative path inside the workspace or a {field} placeholder", lt.Resource)
		}
	case "mem", "repo", "net", "ext":
		if !reservedName.MatchString(arg) {
			return fmt.Errorf("resource %q: want %s:<name> with a name of letters, digits, '.', '_' and '-'", lt.Resource, ns)
		}
	default:
		return fmt.Errorf("resource %q: unknown namespace, want workspace, file:<path>, choirtmp, browser_tab, mem:, repo:, net: or ext:", lt.Resource)
	}
	return nil
}

// fileField returns the placeholder field of a file template, if any.
func (lt LockTemplate) fileField() (string, bool) {
	arg, ok := strings.CutPrefix(lt.Resource, "file:")
	if !ok {
		return "", false
	}
	m := placeholder.FindStringSubmatch(arg)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Clone returns a deep copy of the spec, so callers can never mutate the
// registry's.
func (s Spec) Clone() Spec {
	s.LLM.Parameters = slices.Clone(s.LLM.Parameters)
	s.Runtime.Locks = slices.Clone(s.Runtime.Locks)
	s.Runtime.SecretResources = slices.Clone(s.Runtime.SecretResources)
	s.Runtime.Aliases = slices.Clone(s.Runtime.Aliases)
	return s
}
