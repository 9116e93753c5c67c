// Package tool is the agent's tool registry (spec section 8): the types
// every tool shares (the [Spec] and its two views, the input schema, the
// [Result] and its shaping), the [Registry] that holds one agent's tools,
// and the confinement of paths to the workspace. The tools themselves live
// in family packages below it, and a model affects or observes the
// workspace only through them.
//
// # Families
//
// A family is a package under agent/tool that imports this one, never the
// reverse, and exports a Tools function returning its [Tool]s: proc
// (choir.exec), fs (choir.fs.read, write and search), and next web, mail,
// notion, tts and mcp. Every built-in's spec is in package catalog, which
// choird shares. Package builtin assembles the registry from the
// families' Tools, the declarations of host, meta and runtime tools, and
// the external tools that package external loads from manifests (package
// manifest reads them, for choird's build as well); a new family joins by
// adding its spec to catalog and its Tools to builtin. A family builds its results with
// [ErrorResult] and [SuccessResult], spills large outputs with
// [WriteArtifact], and confines every path it touches with
// [WorkspaceRoots] and [ResolveIn] before opening it through an [os.Root].
//
// # Two views of every tool
//
// A tool is described by a [Spec] with two sections (spec 8.3). The
// [LLMView] (name, description, JSON Schema parameters) is the only thing
// that ever reaches a model; [Registry.LLMViews] returns nothing else. The
// [Runtime] view (executable, timeout, lock templates, secrets, side effect,
// exposure, prompt mask, host and meta flags) stays inside the agent.
//
// # Injection modes
//
// How a lane's model is offered the tools it may call (direct, compact or
// discovery) is decided by package [github.com/choirhq/choir/agent/tool/offer],
// over the registry's views and its search corpus ([Registry.Corpus]).
//
// # Sources and precedence
//
// [New] assembles an immutable [Registry] from Go tools and layers of
// external tools: in the agent, the built-in tools, then the external tools
// of the global directory (/choir/tools/global), then those of the agent
// directory (/choir/tools/agent). An external tool is a manifest
// <stem>.json holding a Spec, next to its executable (by default <stem> in
// the same directory). An agent tool overrides a global tool of the same
// name; an external tool may not take the name of a built-in one, nor a name
// under the reserved choir.skill. prefix. Any invalid manifest fails the
// build with a [*ManifestError] naming the file and the reason; all of them
// are reported together.
//
// # Calling a tool
//
// The arbiter drives one call through a [*Def]:
//
//  1. [Def.Validate] checks the input against the compiled schema and
//     returns an [*InputError] listing every problem.
//  2. [Def.Locks] resolves the lock templates against the input and returns
//     the concrete [Lock] list; a path that leaves the workspace is refused
//     here with a [*PathError], before any lock is taken.
//  3. [Def.Execute] runs a built-in or external tool under its timeout and
//     returns a [Result]. Host tools (executed by choird through
//     EXECUTE_HOST_TOOL), meta tools (proposals, which go to
//     REQUEST_APPROVAL) and runtime tools (handled by the lane itself) have
//     no executor here; [Def.Kind] tells them apart and [Def.Shape] applies
//     the same output shaping to the result the arbiter obtains for them.
//
// # Lock templates
//
// A runtime view declares its locks as templates: "workspace", "choirtmp",
// "browser_tab", a reserved namespace with a literal name ("net:brave"), or
// "file:<path>" where the path is either literal or exactly one placeholder
// "{field}" naming a top-level string property of the input. A file path is
// confined to the workspace and canonicalised (symbolic links of the
// existing prefix resolved) before it becomes a key, so two spellings of one
// file lock the same key. A path that resolves to the workspace root (an
// absent or empty field, or ".") becomes the workspace key, and a path under
// .choirtmp/ becomes the choirtmp key, which spec 9.2 keeps independent of
// the workspace lock; both keep the template's mode.
//
// # Results, truncation and artifacts
//
// Every tool returns the structured [Result] of spec 8.5: status, summary,
// and optionally output and artifact_ref. When a result's output exceeds
// [Limits.ResultBytes], the full output is written, content-addressed, to
// .choirtmp/artifacts/<sha256> in the workspace, and the model receives a
// truncated preview with artifact_ref set to that workspace-relative path,
// which choir.fs.read reads in chunks (head, tail, line ranges). Artifacts
// are written to a temporary file and renamed into place, so a reader sees
// a whole artifact or none; two writers of the same content write the same
// bytes, which is why no lock guards them. choir.exec and choir.fs.search
// spill their own large output this way (head and tail of the output; the
// first matches), and any other tool's oversized output is spilled
// generically: a JSON string as its text, anything else as indented JSON.
//
// # Exposure and prompt mask
//
// A runtime view's exposure (edge, core, both or none; default both) says
// which lanes are offered the tool and see its results: LLMViews with a
// [Filter] for a lane leaves out tools not exposed to it, and
// [Def.ForModel] tells the prompt builder whether a committed result may
// enter a lane's prompt. A tool with exposure none is never offered to a
// model. With prompt_mask set, a result enters prompts only as status and
// summary: its output and artifact reference stay in the commit log.
//
// # Paths
//
// Every path a built-in tool touches is confined to the workspace: "..",
// absolute paths outside it, and symbolic links that lead out of it
// (directly, through a symlinked parent directory, or through a chain of
// links, dangling or not) are refused with a [*PathError] wrapping
// [ErrPathEscape]. The check resolves the existing prefix of the path link
// by link, and the file itself is then opened through an [os.Root] on the
// workspace, so a link swapped in after the check cannot lead out either.
package tool
