package repopattern_test

import (
	"testing"

	"github.com/choirhq/choir/internal/repopattern"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p  string
		ok bool
	}{
		{"owner/repo", true},
		{"owner/*", true},
		{"Group/sub.group/repo-1_x", true},
		{"group/sub/*", true},
		{"repo", false},
		{"*", false},
		{"*/repo", false},
		{"owner/../repo", false},
		{"owner/.github", true},
		{"owner/.", false},
		{"owner//repo", false},
		{"owner/repo/", false},
		{"owner/re*po", false},
		{"owner/%2e%2e", false},
	} {
		if err := repopattern.Check(c.p); (err == nil) != c.ok {
			t.Errorf("Check(%q) = %v, want ok %v", c.p, err, c.ok)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p, repo string
		want    bool
	}{
		{"owner/repo", "owner/repo", true},
		{"owner/repo", "Owner/Repo.git", true},
		{"owner/repo", "/owner/repo.git/", true},
		{"owner/repo", "owner/other", false},
		{"owner/repo", "owner/repo/more", false},
		{"owner/*", "owner/anything.git", true},
		{"owner/*", "other/anything", false},
		{"owner/*", "owner/sub/repo", false},
		{"owner/*", "owner/..", false},
		{"group/sub/*", "group/sub/repo", true},
		{"group/sub/*", "group/repo", false},
	} {
		if got := repopattern.Match(c.p, c.repo); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.p, c.repo, got, c.want)
		}
	}
}

func TestValid(t *testing.T) {
	t.Parallel()
	for repo, want := range map[string]bool{
		"owner/repo.git": true, "repo.git": true, "group/sub/repo": true, ".github": true,
		"": false, "owner/": false, "/owner/repo": false, "owner/../repo": false, "owner/*": false, "owner/%2e": false,
	} {
		if got := repopattern.Valid(repo); got != want {
			t.Errorf("Valid(%q) = %v, want %v", repo, got, want)
		}
	}
}
