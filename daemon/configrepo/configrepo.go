// Package configrepo is the repository half of `config load` (spec 17.6):
// it fetches the global and per-agent git repositories that config.json
// names into .choir.d/repos, with the agent build's own fetch (an
// unreachable remote is a warning, and the last fetched copy is checked),
// validates every tool and skill manifest, identity file and Dockerfile
// with the build's own validators (daemon/build's Checker), and compares
// the repositories of two loads as configuration changes (files a build
// bakes, and commits), each restart-required with the command that
// applies it. A load that finds any problem stages nothing and reports
// every problem with its repository, file and JSON path.
package configrepo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/daemon/build"
)

// GlobalRepo is the name of the global repository in a [State] and in
// problems and changes; agents' repositories go by their agent id.
const GlobalRepo = "global"

// EffectRestartRequired is the effect of a repository change: it reaches
// an agent only through a new image (spec 17.6).
const EffectRestartRequired = "restart-required"

// Options configure a load.
type Options struct {
	// Home is the .choir.d directory; clones live in Home/repos.
	Home string
	// Tools are the built-in tools the agent registers beyond
	// catalog.Tools, as for the build.
	Tools []tool.Tool
	// Git is the git executable (default "git").
	Git string
	// Logger receives what the load did (default: discard).
	Logger *slog.Logger
}

// Repo is one repository as a load found it.
type Repo struct {
	URL    string `json:"url"`
	Ref    string `json:"ref"`
	Commit string `json:"commit"`
	// Stale is set when the fetch failed and Commit is the last fetched
	// copy.
	Stale bool `json:"stale,omitempty"`
	// Files are the SHA-256 of each file a build bakes (tools/**,
	// skills/*.json, identity/*, Dockerfile, Dockerfile.base), by its
	// slash-separated path in the repository.
	Files map[string]string `json:"files"`
}

// State is the repositories of one load, by name (GlobalRepo or an agent
// id). It is never modified after the load that made it.
type State struct {
	Repos map[string]Repo `json:"repos"`
}

// Problem is one reason a load stages nothing.
type Problem struct {
	// Repo is GlobalRepo or an agent id.
	Repo string `json:"repo"`
	// File is the path in the repository; empty for a repository that
	// could not be fetched at all.
	File string `json:"file,omitempty"`
	// Path is the JSON path in File ($.llm.name), when the problem has
	// one.
	Path string `json:"path,omitempty"`
	// Line is the line of a Dockerfile.
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// String renders the problem as global:tools/web.json $.llm.name: message.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.Repo)
	if p.File != "" {
		b.WriteString(":" + p.File)
	}
	if p.Path != "" {
		b.WriteString(" " + p.Path)
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, " line %d", p.Line)
	}
	b.WriteString(": " + p.Message)
	return b.String()
}

// InvalidError is returned by Load when a repository is invalid or cannot
// be had at all: nothing is staged. It lists every problem.
type InvalidError struct {
	Problems []Problem
	// Warnings are the fetches that failed but had a copy to fall back on.
	Warnings []string
}

func (e *InvalidError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config load: nothing staged: %d problems in the repositories (fix them, commit, push, and run choirctl config load again):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	for _, w := range e.Warnings {
		b.WriteString("\n  warning: " + w)
	}
	return b.String()
}

// Repos holds the repositories choird runs with, against which a load's
// are compared; the zero value is ready. It is safe for concurrent use.
type Repos struct {
	mu      sync.Mutex
	running *State
}

// target is one repository to fetch.
type target struct {
	name  string // GlobalRepo or an agent id
	fetch string // the build's name for it: "global" or "agent <id>"
	repo  config.Repo
	dir   string
}

// Load fetches and validates the repositories cfg names and returns them,
// with a warning for each fetch that failed but had an earlier copy. The
// clones are locked, against builds too, from the first fetch to the
// last check, so the state is one snapshot. On the first load the clones
// as they were before fetching become the running repositories. Any
// problem is an [*InvalidError]. A config without global_repo has no
// repositories to check: build needs one, and Load says so as a warning.
func (r *Repos) Load(ctx context.Context, opts Options, cfg *config.Config) (*State, []string, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.GlobalRepo.URL == "" {
		r.baseline(&State{Repos: map[string]Repo{}})
		return &State{Repos: map[string]Repo{}}, []string{"config.json has no global_repo: no repository was fetched or checked (agent build needs one)"}, nil
	}
	checker, err := build.NewChecker(opts.Tools, opts.Git)
	if err != nil {
		return nil, nil, err
	}
	targets := []target{{name: GlobalRepo, fetch: "global", repo: cfg.GlobalRepo, dir: filepath.Join(opts.Home, "repos", "global")}}
	for _, id := range slices.Sorted(maps.Keys(cfg.Agents)) {
		if repo := cfg.Agents[id].Repo; repo.URL != "" {
			targets = append(targets, target{name: id, fetch: "agent " + id, repo: repo, dir: filepath.Join(opts.Home, "repos", "agents", id)})
		}
	}
	// Global first, then agents in order: the build's order too.
	for _, t := range targets {
		defer checker.LockClone(t.dir)()
	}
	before := &State{Repos: map[string]Repo{}}
	for _, t := range targets {
		if commit := checker.Head(ctx, t.dir); commit != "" {
			before.Repos[t.name] = Repo{URL: t.repo.URL, Ref: t.repo.Ref, Commit: commit, Files: hashFiles(t.dir)}
		}
	}
	r.baseline(before)

	st := &State{Repos: map[string]Repo{}}
	var warnings []string
	var problems []Problem
	for _, t := range targets {
		rp := Repo{URL: t.repo.URL, Ref: t.repo.Ref}
		commit, err := checker.Fetch(ctx, t.fetch, t.repo, t.dir)
		if err != nil {
			rp.Commit, rp.Stale = checker.Head(ctx, t.dir), true
			if rp.Commit == "" {
				problems = append(problems, Problem{Repo: t.name, Message: err.Error() + "; and there is no earlier copy to check"})
				continue
			}
			w := fmt.Sprintf("%v; checked the last fetched copy, commit %s", err, shortSHA(rp.Commit))
			warnings = append(warnings, w)
			log.WarnContext(ctx, "repository fetch failed; using the last fetched copy", slog.String("repo", t.name), slog.String("error", w))
		} else {
			rp.Commit = commit
		}
		rp.Files = hashFiles(t.dir)
		st.Repos[t.name] = rp
	}

	checked, err := check(ctx, checker, targets, st)
	if err != nil {
		return nil, nil, err
	}
	problems = append(problems, checked...)
	if len(problems) > 0 {
		log.WarnContext(ctx, "repositories invalid; nothing staged", slog.Int("problems", len(problems)), slog.Int("warnings", len(warnings)))
		return nil, nil, &InvalidError{Problems: problems, Warnings: warnings}
	}
	commits := make([]any, 0, len(st.Repos))
	for _, name := range slices.Sorted(maps.Keys(st.Repos)) {
		commits = append(commits, slog.String(name, shortSHA(st.Repos[name].Commit)))
	}
	log.InfoContext(ctx, "repositories fetched and valid", slog.Int("repos", len(st.Repos)), slog.Int("warnings", len(warnings)),
		slog.Group("commits", commits...))
	return st, warnings, nil
}

// check validates the global repository alone, then each agent's merged
// with it, and returns every problem once.
func check(ctx context.Context, checker *build.Checker, targets []target, st *State) ([]Problem, error) {
	global := targets[0]
	if _, ok := st.Repos[GlobalRepo]; !ok {
		return nil, nil // reported already: nothing to merge agents with
	}
	var out []Problem
	seen := map[Problem]bool{}
	add := func(agent string, ps []build.RepoProblem) {
		for _, p := range ps {
			q := Problem{Repo: GlobalRepo, File: p.File, Path: p.Path, Line: p.Line, Message: p.Message}
			if p.Repo == "agent" {
				q.Repo = agent
			}
			if !seen[q] {
				seen[q] = true
				out = append(out, q)
			}
		}
	}
	ps, err := checker.Check(ctx, global.dir, "")
	if err != nil {
		return nil, err
	}
	add("", ps)
	for _, t := range targets[1:] {
		if _, ok := st.Repos[t.name]; !ok {
			continue
		}
		ps, err := checker.Check(ctx, global.dir, t.dir)
		if err != nil {
			return nil, err
		}
		add(t.name, ps)
	}
	return out, nil
}

// baseline makes s the running repositories if there are none yet.
func (r *Repos) baseline(s *State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running == nil {
		r.running = s
	}
}

// Apply makes a loaded state the running one: config apply accepted it,
// and the next agent build or update uses these clones.
func (r *Repos) Apply(s *State) {
	if s == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = s
}

// Diff compares a loaded state with the running one.
func (r *Repos) Diff(staged *State) []configdiff.Change {
	r.mu.Lock()
	running := r.running
	r.mu.Unlock()
	return Diff(running, staged)
}

// bakedFile reports whether a build bakes the file at rel (slash path).
func bakedFile(rel string) bool {
	dir, rest, nested := strings.Cut(rel, "/")
	switch {
	case !nested:
		return rel == "Dockerfile" || rel == "Dockerfile.base"
	case dir == "tools":
		return true
	case dir == "skills":
		return !strings.Contains(rest, "/") && strings.HasSuffix(rest, ".json")
	case dir == "identity":
		return !strings.Contains(rest, "/")
	}
	return false
}

// hashFiles hashes the files of a clone that a build bakes.
func hashFiles(dir string) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if !bakedFile(rel) {
			return nil
		}
		h := sha256.New()
		if d.Type()&fs.ModeSymlink != 0 {
			link, _ := os.Readlink(p)
			h.Write([]byte("link:" + link))
		} else if data, err := os.ReadFile(p); err == nil {
			h.Write(data)
		} else {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o111 != 0 {
			h.Write([]byte{'x'}) // a lost executable bit is a change
		}
		out[rel] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	return out
}

func shortSHA(s string) string {
	if len(s) > 7 {
		return s[:7]
	}
	return s
}
