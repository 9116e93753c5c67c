package build

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/choirhq/choir/config"
)

// FetchError reports a repository that could not be cloned, fetched or
// checked out, with git's own words.
type FetchError struct {
	// Repo names the repository: "global" or "agent <id>".
	Repo string
	URL  string
	Ref  string
	// Step is the git step that failed (clone, fetch, resolve ref, ...).
	Step string
	Err  error
	// Output is the tail of git's stderr.
	Output string
}

func (e *FetchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fetch %s repo %s (ref %s): %s: %v", e.Repo, e.URL, e.Ref, e.Step, e.Err)
	if e.Output != "" {
		b.WriteString(": " + e.Output)
	}
	setting := "global_repo"
	if id, ok := strings.CutPrefix(e.Repo, "agent "); ok {
		setting = "agents." + id + ".repo"
	}
	fmt.Fprintf(&b, "; check %s.url and .ref in config.json, and that the repository is reachable from this host", setting)
	return b.String()
}

func (e *FetchError) Unwrap() error { return e.Err }

// git runs git with a non-interactive environment and returns stdout.
func (b *Builder) git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.gitBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_TERMINAL_PROMPT=0", // never wait for a password
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
		"GIT_SSH_COMMAND=ssh -o BatchMode=yes",
		"LC_ALL=C",
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", &gitError{err: err, stderr: tail(errOut.String(), 6)}
	}
	return strings.TrimSpace(out.String()), nil
}

type gitError struct {
	err    error
	stderr string
}

func (e *gitError) Error() string { return e.err.Error() }
func (e *gitError) Unwrap() error { return e.err }

// tail returns the last n non-empty lines of s, joined by " | ".
func tail(s string, n int) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// fetch brings the clone in dir to repo's ref (the caller holds dir's
// lock): it clones on first use,
// fetches afterwards, checks the ref out detached and removes anything
// not in the commit (the cache is choird's, never edited by hand). It
// returns the commit.
func (b *Builder) fetch(ctx context.Context, name string, repo config.Repo, dir string) (string, error) {
	fail := func(step string, err error) error {
		fe := &FetchError{Repo: name, URL: repo.URL, Ref: repo.Ref, Step: step, Err: err}
		var ge *gitError
		if errors.As(err, &ge) {
			fe.Output = ge.stderr
		}
		return fe
	}
	if repo.URL == "" {
		return "", fail("configure", errors.New("no repository URL"))
	}
	if repo.Ref == "" {
		return "", fail("configure", errors.New("no ref: name a branch, tag or commit"))
	}
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		// Clone next to the final place and rename, so that an
		// interrupted clone never looks like a clone.
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return "", fail("clone", err)
		}
		os.RemoveAll(dir)
		tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".clone-")
		if err != nil {
			return "", fail("clone", err)
		}
		defer os.RemoveAll(tmp)
		if _, err := b.git(ctx, "", "clone", "--quiet", "--no-checkout", "--origin", "origin", "--", repo.URL, tmp); err != nil {
			return "", fail("git clone", err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			return "", fail("clone", err)
		}
	} else {
		if _, err := b.git(ctx, dir, "remote", "set-url", "origin", repo.URL); err != nil {
			return "", fail("git remote set-url", err)
		}
		if _, err := b.git(ctx, dir, "fetch", "--quiet", "--prune", "--force", "--tags", "origin",
			"+refs/heads/*:refs/remotes/origin/*"); err != nil {
			return "", fail("git fetch", err)
		}
	}

	var commit string
	for _, cand := range []string{"refs/remotes/origin/" + repo.Ref, "refs/tags/" + repo.Ref, repo.Ref} {
		if c, err := b.git(ctx, dir, "rev-parse", "--verify", "--quiet", "--end-of-options", cand+"^{commit}"); err == nil && c != "" {
			commit = c
			break
		}
	}
	if commit == "" {
		branches, _ := b.git(ctx, dir, "for-each-ref", "--format=%(refname:lstrip=3)", "refs/remotes/origin/")
		return "", fail("resolve ref", fmt.Errorf("no branch, tag or commit %q (branches: %s)", repo.Ref,
			strings.Join(strings.Fields(strings.ReplaceAll(branches, "HEAD\n", "")), ", ")))
	}
	if _, err := b.git(ctx, dir, "checkout", "--quiet", "--force", "--detach", commit); err != nil {
		return "", fail("git checkout", err)
	}
	if _, err := b.git(ctx, dir, "clean", "-ffdxq"); err != nil {
		return "", fail("git clean", err)
	}
	return commit, nil
}
