package build

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
	"github.com/choirhq/choir/agent/tool/manifest"
)

// ErrInvalidRepo reports repository contents that fail validation: an
// invalid tool manifest or skill, a missing identity file or Dockerfile.
// It is returned before the engine is called.
var ErrInvalidRepo = errors.New("invalid repository contents")

// Image paths of what the pipeline bakes (spec 15.1).
const (
	ChoirDir        = "/choir"
	VersionFile     = "/choir/version.json"
	AgentBinary     = "/choir/bin/choir-agent"
	CredHelperLink  = "/choir/bin/git-cred-helper"
	identityDir     = "identity"
	toolsDir        = "tools"
	skillsDir       = "skills"
	stubExecutable  = "#!/bin/sh\nexit 127\n"
	maxPeekManifest = 1 << 20
)

// staged is the merged /choir tree, laid out in dir/choir.
type staged struct {
	dir string // the final stage's build context; /choir is dir/choir
	// dockerfileOutputs are tool executables that the repositories do not
	// hold: a Dockerfile must produce them (image paths).
	dockerfileOutputs []string
	toolHash          string
	skillHash         string
	identityHash      string
}

// identityFiles are the identity documents an image holds: USER.md from
// the global repo only; SOUL.md and SOUL-CORE.md from the agent's repo if
// present, else the global one.
var identityFiles = []struct {
	file      string
	agentToo  bool
	whereHint string
}{
	{"USER.md", false, "the global repo's identity/USER.md"},
	{"SOUL.md", true, "identity/SOUL.md in the agent's repo or the global repo"},
	{"SOUL-CORE.md", true, "identity/SOUL-CORE.md in the agent's repo or the global repo"},
}

// stage merges the repositories into dst/choir and validates the result
// with the agent's own tool registry and skill loader.
func (b *Builder) stage(globalDir, agentDir, dst string) (*staged, error) {
	s := &staged{dir: dst}
	choir := filepath.Join(dst, "choir")
	if err := stageTools(globalDir, agentDir, choir); err != nil {
		return nil, err
	}
	if err := stageSkills(globalDir, agentDir, choir); err != nil {
		return nil, err
	}
	problems, err := stageIdentity(globalDir, agentDir, choir)
	if err != nil {
		return nil, err
	}
	if err := stageMCP(agentDir, choir); err != nil {
		problems = append(problems, err)
	}

	// The agent binary, and the credential helper as its second name.
	if err := copyFile(b.opts.AgentBinary, filepath.Join(choir, "bin", "choir-agent"), 0o755); err != nil {
		return nil, fmt.Errorf("stage the choir-agent binary: %w", err)
	}
	if err := os.Symlink("choir-agent", filepath.Join(choir, "bin", "git-cred-helper")); err != nil {
		return nil, err
	}

	if err := b.validate(s, choir); err != nil {
		problems = append(problems, err)
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidRepo, err)
	}

	if s.toolHash, err = treeHash(filepath.Join(choir, "tools")); err != nil {
		return nil, err
	}
	if isFile(filepath.Join(choir, manifest.MCPFileName)) {
		// The MCP servers are tools too: a changed mcp.json is a new image.
		sum, err := fileHash(filepath.Join(choir, manifest.MCPFileName))
		if err != nil {
			return nil, err
		}
		s.toolHash = hashOf(s.toolHash + "\x00" + manifest.MCPFileName + "\x00" + sum)
	}
	if s.skillHash, err = treeHash(filepath.Join(choir, "skills")); err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, id := range identityFiles {
		data, _ := os.ReadFile(filepath.Join(choir, id.file))
		fmt.Fprintf(h, "%s %d\n", id.file, len(data))
		h.Write(data)
	}
	s.identityHash = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// stageTools copies the tools of both repositories: the agent's override
// the global ones of the same name, and an overridden global tool leaves
// out its manifest and its <stem> entry.
func stageTools(globalDir, agentDir, choir string) error {
	agentTools := map[string]bool{}
	if agentDir != "" {
		for _, m := range manifests(filepath.Join(agentDir, toolsDir)) {
			if n := peekName(m, "llm"); n != "" {
				agentTools[n] = true
			}
		}
	}
	skipGlobal := map[string]bool{}
	for _, m := range manifests(filepath.Join(globalDir, toolsDir)) {
		if n := peekName(m, "llm"); agentTools[n] {
			stem := strings.TrimSuffix(filepath.Base(m), ".json")
			skipGlobal[stem+".json"], skipGlobal[stem] = true, true
		}
	}
	if err := copyTree(filepath.Join(globalDir, toolsDir), filepath.Join(choir, "tools", "global"), skipGlobal); err != nil {
		return err
	}
	if agentDir == "" {
		return nil
	}
	return copyTree(filepath.Join(agentDir, toolsDir), filepath.Join(choir, "tools", "agent"), nil)
}

// stageSkills copies the skills of both repositories; the agent's override
// the global ones of the same skill name.
func stageSkills(globalDir, agentDir, choir string) error {
	agentSkills := map[string]bool{}
	if agentDir != "" {
		for _, m := range manifests(filepath.Join(agentDir, skillsDir)) {
			if n := peekName(m, ""); n != "" {
				agentSkills[n] = true
			}
		}
	}
	skipSkill := map[string]bool{}
	for _, m := range manifests(filepath.Join(globalDir, skillsDir)) {
		if n := peekName(m, ""); agentSkills[n] {
			skipSkill[filepath.Base(m)] = true
		}
	}
	if err := copyJSON(filepath.Join(globalDir, skillsDir), filepath.Join(choir, "skills", "global"), skipSkill); err != nil {
		return err
	}
	if agentDir == "" {
		return nil
	}
	return copyJSON(filepath.Join(agentDir, skillsDir), filepath.Join(choir, "skills", "agent"), nil)
}

// mcpFile is where an agent repository declares its MCP servers; the
// image holds it as /choir/mcp.json, where the agent reads it.
var mcpFile = path.Join(".choir", manifest.MCPFileName)

// stageMCP copies the agent repository's .choir/mcp.json, if any, to
// choir/mcp.json and validates it with the agent's own loader. A file
// that does not load is an *mcpError: a problem of the repository.
func stageMCP(agentDir, choir string) error {
	if agentDir == "" || !isFile(filepath.Join(agentDir, filepath.FromSlash(mcpFile))) {
		return nil
	}
	if err := copyFile(filepath.Join(agentDir, filepath.FromSlash(mcpFile)), filepath.Join(choir, manifest.MCPFileName), 0o644); err != nil {
		return err
	}
	if _, err := manifest.LoadMCP(choir); err != nil {
		return &mcpError{err: err}
	}
	return nil
}

// mcpError is an agent repository's .choir/mcp.json that does not load.
type mcpError struct{ err error }

func (e *mcpError) Error() string { return "agent repo " + mcpFile + ": " + e.err.Error() }
func (e *mcpError) Unwrap() error { return e.err }

// stageIdentity copies the identity documents (identityFiles). A missing
// one is a problem of the repositories, returned for the build's report;
// the error is a failure to copy.
func stageIdentity(globalDir, agentDir, choir string) ([]error, error) {
	var problems []error
	for _, id := range identityFiles {
		var src string
		if id.agentToo && agentDir != "" && isFile(filepath.Join(agentDir, identityDir, id.file)) {
			src = filepath.Join(agentDir, identityDir, id.file)
		} else if isFile(filepath.Join(globalDir, identityDir, id.file)) {
			src = filepath.Join(globalDir, identityDir, id.file)
		}
		if src == "" {
			problems = append(problems, &missingIdentityError{file: id.file, hint: id.whereHint})
			continue
		}
		if err := copyFile(src, filepath.Join(choir, id.file), 0o644); err != nil {
			return nil, err
		}
	}
	return problems, nil
}

// validate builds the tool registry and the skill set from the staged
// tree, as the agent will at start-up. A tool whose executable is not in
// the repositories is taken to be compiled by a Dockerfile: it is
// validated against a stand-in and recorded, and Build checks that the
// image holds it.
func (b *Builder) validate(s *staged, choir string) error {
	val, err := os.MkdirTemp("", "choir-validate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(val)
	origins := []string{"global", "agent"}
	for _, origin := range origins {
		src := filepath.Join(choir, "tools", origin)
		dst := filepath.Join(val, origin)
		if err := copyTree(src, dst, nil); err != nil {
			return err
		}
		for _, m := range manifests(src) {
			exe, ok := defaultExecutable(m)
			if !ok || isFile(filepath.Join(src, exe)) {
				continue
			}
			stub := filepath.Join(dst, exe)
			if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
				return err
			}
			if fi, err := os.Stat(stub); err == nil && fi.IsDir() {
				continue // a source directory in its place: the registry reports it
			}
			if err := os.WriteFile(stub, []byte(stubExecutable), 0o755); err != nil {
				return err
			}
			s.dockerfileOutputs = append(s.dockerfileOutputs, path.Join(ChoirDir, "tools", origin, filepath.ToSlash(exe)))
		}
	}
	// Messages name files as the operator knows them; the validators'
	// own errors stay underneath for Check.
	roots := []stageRoot{
		{filepath.Join(val, "global") + "/", "global", toolsDir},
		{filepath.Join(val, "agent") + "/", "agent", toolsDir},
		{filepath.Join(choir, "skills", "global") + "/", "global", skillsDir},
		{filepath.Join(choir, "skills", "agent") + "/", "agent", skillsDir},
	}
	var pairs []string
	for _, r := range roots {
		pairs = append(pairs, r.prefix, r.repo+" repo "+r.dir+"/")
	}
	rename := strings.NewReplacer(pairs...)
	var errs []error
	reg, err := checkTools(filepath.Join(val, "global"), filepath.Join(val, "agent"), b.opts.Tools)
	if err != nil {
		errs = append(errs, &validatorError{msg: rename.Replace(err.Error()), err: err, roots: roots})
	}
	known := func(string) bool { return true }
	if reg != nil {
		known = reg.Has
	} else {
		// Skills are still checked, against every tool name the
		// repositories and the agent declare, broken manifests included:
		// their errors are reported already.
		names := map[string]bool{}
		for _, t := range append(catalog.Tools(), b.opts.Tools...) {
			names[t.Spec().LLM.Name] = true
		}
		for _, origin := range origins {
			for _, m := range manifests(filepath.Join(val, origin)) {
				names[peekName(m, "llm")] = true
			}
		}
		known = func(n string) bool { return names[n] }
	}
	if _, err := skill.Load(skill.Config{
		GlobalDir: filepath.Join(choir, "skills", "global"),
		AgentDir:  filepath.Join(choir, "skills", "agent"),
		KnownTool: known,
	}); err != nil {
		errs = append(errs, &validatorError{msg: rename.Replace(err.Error()), err: err, roots: roots})
	}
	slices.Sort(s.dockerfileOutputs)
	return errors.Join(errs...)
}

// manifests lists the *.json files directly in dir.
func manifests(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// peekName reads a manifest's name leniently (llm.name for a tool, name
// for a skill); "" if it cannot. Validation reports broken files.
func peekName(file, section string) string {
	data, err := readCapped(file)
	if err != nil {
		return ""
	}
	if section == "" {
		var v struct{ Name string }
		json.Unmarshal(data, &v)
		return v.Name
	}
	var v map[string]json.RawMessage
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	var inner struct{ Name string }
	json.Unmarshal(v[section], &inner)
	return inner.Name
}

// defaultExecutable returns a tool manifest's executable relative to its
// directory, if it is relative.
func defaultExecutable(manifest string) (string, bool) {
	data, err := readCapped(manifest)
	if err != nil {
		return "", false
	}
	var v struct {
		Runtime struct {
			ExecPath string `json:"exec_path"`
		} `json:"runtime"`
	}
	if json.Unmarshal(data, &v) != nil {
		return "", false
	}
	p := v.Runtime.ExecPath
	if p == "" {
		return strings.TrimSuffix(filepath.Base(manifest), ".json"), true
	}
	if filepath.IsAbs(p) || !filepath.IsLocal(p) {
		return "", false
	}
	return filepath.Clean(p), true
}

func readCapped(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxPeekManifest))
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// copyTree copies the directory src into dst (created), files, dirs and
// symbolic links, leaving out top-level entries named in skip. A missing
// src is an empty tree.
func copyTree(src, dst string, skip map[string]bool) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == src {
			return filepath.SkipAll
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		if top, _, _ := strings.Cut(filepath.ToSlash(rel), "/"); skip[top] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return copyFile(p, target, fi.Mode().Perm())
		}
		return nil // sockets, devices: nothing to bake
	})
}

// copyJSON copies the *.json files directly in src into dst.
func copyJSON(src, dst string, skip map[string]bool) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, m := range manifests(src) {
		if skip[filepath.Base(m)] {
			continue
		}
		if err := copyFile(m, filepath.Join(dst, filepath.Base(m)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// treeHash hashes a tree's paths, modes, link targets and contents.
func treeHash(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		// Only the kind and the executable bit: umask and checkout modes
		// must not change the hash.
		kind := "d"
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			kind = "l"
		case fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0:
			kind = "x"
		case fi.Mode().IsRegular():
			kind = "f"
		}
		fmt.Fprintf(h, "%s\x00%s\x00", filepath.ToSlash(rel), kind)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s", link)
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			fh := sha256.New()
			_, err = io.Copy(fh, f)
			f.Close()
			if err != nil {
				return err
			}
			h.Write(fh.Sum(nil))
		}
		h.Write([]byte{'\n'})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", root, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func fileHash(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// checkTools assembles the registry the agent would, from the built-ins'
// specs (package catalog), tools, and the external tools of the global,
// then the agent's directory, to report what the agent would refuse. It
// runs nothing, so it binds no executor.
func checkTools(globalDir, agentDir string, tools []tool.Tool) (*tool.Registry, error) {
	global, gerr := manifest.LoadTools(globalDir, tool.OriginGlobal, nil)
	agent, aerr := manifest.LoadTools(agentDir, tool.OriginAgent, nil)
	return tool.New(append(catalog.Tools(), tools...), tool.Layer{Defs: global, Err: gerr}, tool.Layer{Defs: agent, Err: aerr})
}
