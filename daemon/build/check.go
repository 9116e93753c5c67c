package build

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/strictjson"
)

// Checker runs the pipeline's fetch and validators without an engine or an
// agent binary, for config load (spec 17.6): what it accepts, a build
// accepts too, because it is the same code.
type Checker struct {
	b *Builder
}

// NewChecker returns a Checker. tools are the built-in tools the agent
// registers beyond catalog.Tools, as in [Options.Tools]; gitExe is the git
// executable (default "git").
func NewChecker(tools []tool.Tool, gitExe string) (*Checker, error) {
	if gitExe == "" {
		gitExe = "git"
	}
	gitBin, err := exec.LookPath(gitExe)
	if err != nil {
		return nil, fmt.Errorf("config load: %w (install git)", err)
	}
	return &Checker{b: &Builder{opts: Options{Tools: tools}, gitBin: gitBin, log: slog.New(slog.DiscardHandler)}}, nil
}

// LockClone serialises work on the clone in dir with every build and
// check of the process; call the returned function to release it.
func (c *Checker) LockClone(dir string) func() { return lockPath(dir) }

// Fetch brings the clone in dir to repo's ref as a build does (clone on
// first use, fetch, detached checkout, clean) and returns the commit; a
// failure is a [*FetchError], and leaves an earlier clone as it was. name
// is "global" or "agent <id>". The caller holds LockClone(dir).
func (c *Checker) Fetch(ctx context.Context, name string, repo config.Repo, dir string) (string, error) {
	return c.b.fetch(ctx, name, repo, dir)
}

// Head returns the commit checked out in the clone in dir, or "" when dir
// holds no clone.
func (c *Checker) Head(ctx context.Context, dir string) string {
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		return ""
	}
	commit, err := c.b.git(ctx, dir, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return ""
	}
	return commit
}

// RepoProblem is one problem in a repository's contents.
type RepoProblem struct {
	// Repo is "global" or "agent" (the agent's own repository).
	Repo string
	// File is the file's path in the repository (tools/web.json); empty
	// when the problem is not about one file.
	File string
	// Path is the JSON path inside File ($.llm.name), empty when the
	// problem is about the whole file.
	Path string
	// Line is the line of a Dockerfile; zero for other files.
	Line    int
	Message string
}

// Check validates the clones globalDir and agentDir (empty when the agent
// has no repository) as [Builder.Prepare] does before a build, on what
// the build reads: the trees of the clones' checked-out commits, written
// from their object databases, with no symbolic link leaving a
// repository; the merged tools and skills with the agent's own registry
// and skill loader, the identity files, .choir/mcp.json, Dockerfile.base,
// and the Dockerfiles with [CheckDockerfile]. It returns every problem;
// the error is a failure to check (git, a temporary directory), not a
// problem of the repositories.
func (c *Checker) Check(ctx context.Context, globalDir, agentDir string) ([]RepoProblem, error) {
	dst, err := os.MkdirTemp("", "choir-check-")
	if err != nil {
		return nil, fmt.Errorf("config load: %w", err)
	}
	defer os.RemoveAll(dst)
	var out []RepoProblem
	export := func(repo, clone string) (string, error) {
		head := c.Head(ctx, clone)
		if head == "" {
			return "", fmt.Errorf("config load: %s repo: no clone in %s", repo, clone)
		}
		tree := filepath.Join(dst, "src", repo)
		err := c.b.exportCommit(ctx, repo, clone, head, tree)
		links := linkErrors(err)
		for _, l := range links {
			out = append(out, RepoProblem{Repo: l.Repo, File: l.File, Message: strings.TrimPrefix(l.Error(), l.Repo+" repo "+l.File+": ")})
		}
		if err != nil && len(links) == 0 {
			return "", fmt.Errorf("config load: %w", err)
		}
		return tree, nil
	}
	globalTree, err := export("global", globalDir)
	if err != nil {
		return nil, err
	}
	agentTree := ""
	if agentDir != "" {
		if agentTree, err = export("agent", agentDir); err != nil {
			return nil, err
		}
	}
	if len(out) > 0 {
		return out, nil // the trees are incomplete: nothing more to check in them
	}
	ps, err := c.checkTrees(globalTree, agentTree, filepath.Join(dst, "final"))
	return append(out, ps...), err
}

// checkTrees checks exported trees as the build does.
func (c *Checker) checkTrees(globalDir, agentDir, dst string) ([]RepoProblem, error) {
	out := dockerfileProblems(globalDir, agentDir)
	choir := filepath.Join(dst, "choir")
	if err := stageTools(globalDir, agentDir, choir); err != nil {
		return nil, fmt.Errorf("config load: stage tools: %w", err)
	}
	if err := stageSkills(globalDir, agentDir, choir); err != nil {
		return nil, fmt.Errorf("config load: stage skills: %w", err)
	}
	identity, err := stageIdentity(globalDir, agentDir, choir)
	if err != nil {
		return nil, fmt.Errorf("config load: stage identity: %w", err)
	}
	if err := stageMCP(agentDir, choir); err != nil {
		var me *mcpError
		if !errors.As(err, &me) {
			return nil, fmt.Errorf("config load: stage %s: %w", mcpFile, err)
		}
		out = append(out, RepoProblem{Repo: "agent", File: mcpFile, Message: me.err.Error()})
	}
	for _, e := range identity {
		var mi *missingIdentityError
		if errors.As(e, &mi) {
			out = append(out, RepoProblem{Repo: "global", File: identityDir + "/" + mi.file, Message: "missing: add " + mi.hint})
		}
	}
	if err := c.b.validate(&staged{dir: dst}, choir); err != nil {
		out = append(out, validatorProblems(err)...)
	}
	return out, nil
}

// dockerfileProblems checks Dockerfile.base (required) and the agent's
// Dockerfile (optional).
func dockerfileProblems(globalDir, agentDir string) []RepoProblem {
	var out []RepoProblem
	check := func(repo, dir, name string, required bool) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case errors.Is(err, os.ErrNotExist) && !required:
			return
		case errors.Is(err, os.ErrNotExist):
			out = append(out, RepoProblem{Repo: repo, File: name, Message: "missing: the global repo must hold Dockerfile.base, the base image of every agent"})
			return
		case err != nil:
			out = append(out, RepoProblem{Repo: repo, File: name, Message: err.Error()})
			return
		}
		checkFn := CheckDockerfile
		if repo == "agent" {
			checkFn = CheckAgentDockerfile
		}
		for _, p := range checkFn(data) {
			out = append(out, RepoProblem{Repo: repo, File: name, Line: p.Line, Message: p.Message})
		}
	}
	check("global", globalDir, "Dockerfile.base", true)
	if agentDir != "" {
		check("agent", agentDir, "Dockerfile", false)
	}
	return out
}

// validatorError is an error of the agent's validators with the staged
// file names replaced by the ones the operator knows; Check reads the
// validators' own errors underneath.
type validatorError struct {
	msg   string
	err   error
	roots []stageRoot
}

func (e *validatorError) Error() string { return e.msg }
func (e *validatorError) Unwrap() error { return e.err }

// stageRoot maps a staging directory back to a repository directory.
type stageRoot struct {
	prefix string // the staging directory, with a trailing separator
	repo   string // "global" or "agent"
	dir    string // tools or skills
}

// missingIdentityError is an identity file that neither repository holds.
type missingIdentityError struct{ file, hint string }

func (e *missingIdentityError) Error() string {
	return fmt.Sprintf("identity: %s is missing (add %s)", e.file, e.hint)
}

// validatorProblems turns validate's error into problems located by
// repository, file and JSON path.
func validatorProblems(err error) []RepoProblem {
	var out []RepoProblem
	var walk func(err error, roots []stageRoot)
	walk = func(err error, roots []stageRoot) {
		var file, kind string
		var inner error
		switch e := err.(type) {
		case *validatorError:
			walk(e.err, e.roots)
			return
		case *tool.ManifestError:
			file, kind, inner = e.File, "tool", e.Err
		case *skill.FileError:
			file, kind, inner = e.File, "skill", e.Err
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e, roots)
			}
			return
		default:
			// A wrapped file error: unwrap it, dropping the wrapper's
			// words, which the file's problems say again.
			_, isTool := errors.AsType[*tool.ManifestError](err)
			_, isSkill := errors.AsType[*skill.FileError](err)
			if next := errors.Unwrap(err); next != nil && (isTool || isSkill) {
				walk(next, roots)
				return
			}
			out = append(out, RepoProblem{Message: renameAll(err.Error(), roots)})
			return
		}
		repo, rel := locate(file, roots)
		for _, p := range jsonProblems(inner, kind) {
			p.Repo, p.File = repo, rel
			p.Message = renameAll(p.Message, roots)
			out = append(out, p)
		}
	}
	walk(err, nil)
	return out
}

// locate maps a staged file to its repository and its path there.
func locate(file string, roots []stageRoot) (repo, rel string) {
	for _, r := range roots {
		if rest, ok := strings.CutPrefix(file, r.prefix); ok {
			return r.repo, r.dir + "/" + filepath.ToSlash(rest)
		}
	}
	return "", file
}

func renameAll(s string, roots []stageRoot) string {
	for _, r := range roots {
		s = strings.ReplaceAll(s, r.prefix, r.repo+" repo "+r.dir+"/")
	}
	return s
}

// leadingPath is a validator message that starts with the JSON path of
// what it is about: "llm.name: ...", "states.a.transitions[0].to: ...";
// leadingName one that starts with a field and its value: `name "X" is
// taken`, `initial_state "x" is not a state`.
var (
	leadingPath = regexp.MustCompile(`^([a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_-]+|\[[0-9]+\])*): (.*)$`)
	leadingName = regexp.MustCompile(`^([a-z_][a-z0-9_]*) "`)
)

// jsonProblems splits one file's error into problems with JSON paths:
// strictjson's own problems carry theirs, validator messages lead with
// theirs, and a missing executable is about runtime.exec_path. kind is
// "tool" or "skill".
func jsonProblems(err error, kind string) []RepoProblem {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []RepoProblem
		for _, e := range joined.Unwrap() {
			out = append(out, jsonProblems(e, kind)...)
		}
		return out
	}
	if se, ok := errors.AsType[*strictjson.Error](err); ok {
		var out []RepoProblem
		for _, p := range se.Problems {
			out = append(out, RepoProblem{Path: p.Path, Message: p.Message})
		}
		return out
	}
	msg := err.Error()
	if m := leadingPath.FindStringSubmatch(msg); m != nil {
		return []RepoProblem{{Path: strictjson.Root + "." + m[1], Message: m[2]}}
	}
	if m := leadingName.FindStringSubmatch(msg); m != nil {
		field := m[1]
		if kind == "tool" && field == "name" {
			field = "llm.name"
		}
		return []RepoProblem{{Path: strictjson.Root + "." + field, Message: msg}}
	}
	if strings.HasPrefix(msg, "executable ") {
		return []RepoProblem{{Path: strictjson.Root + ".runtime.exec_path", Message: msg}}
	}
	return []RepoProblem{{Message: msg}}
}
