// Package repopattern parses and matches the repository patterns of a git
// identity's allowlist (config.json git_identities.<name>.repos):
// "owner/repo" names one repository, "owner/*" every repository of owner,
// and deeper paths ("group/subgroup/repo", "group/subgroup/*") serve hosts
// with nested groups. A repository is compared the one way patterns are
// (lower case, without a trailing ".git"), so that git's two spellings of
// one remote are the same repository.
package repopattern

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// segmentRE is one path segment of a repository, such as "repo-1" or
// ".github": no escapes, nothing that could climb out of the host's
// repository path (validSegment also refuses "." and "..").
var segmentRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

func validSegment(s string) bool { return s != "." && s != ".." && segmentRE.MatchString(s) }

// Check reports what is wrong with pattern p, or nil.
func Check(p string) error {
	segs := strings.Split(p, "/")
	if len(segs) < 2 {
		return errors.New(`want "owner/repo" or "owner/*"`)
	}
	for i, s := range segs {
		if s == "*" && i == len(segs)-1 {
			continue
		}
		if !validSegment(s) {
			return fmt.Errorf("segment %q: want letters, digits, '.', '_' or '-' (and '*' only as the last segment), "+
				`as in "owner/repo" or "owner/*"`, s)
		}
	}
	return nil
}

// Valid reports whether repo is a repository path a pattern may match:
// one or more segments ("repo.git", "owner/repo", "group/sub/repo"), each
// of letters, digits, '.', '_' and '-', none of them "." or "..".
func Valid(repo string) bool {
	for s := range strings.SplitSeq(repo, "/") {
		if !validSegment(s) {
			return false
		}
	}
	return true
}

// Normalize is repository path repo as patterns compare it: lower case,
// without slashes around it or a trailing ".git".
func Normalize(repo string) string {
	return strings.TrimSuffix(strings.ToLower(strings.Trim(repo, "/")), ".git")
}

// Match reports whether pattern p, which Check passes, matches repo.
func Match(p, repo string) bool {
	ps, rs := strings.Split(Normalize(p), "/"), strings.Split(Normalize(repo), "/")
	if len(ps) != len(rs) {
		return false
	}
	for i, s := range ps {
		if s != rs[i] && (s != "*" || i != len(ps)-1 || !validSegment(rs[i])) {
			return false
		}
	}
	return true
}
