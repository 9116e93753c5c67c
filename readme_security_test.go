package choir_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSecuritySectionNamesRealTests holds the README's "What a
// compromised agent can and cannot do" to its word: each of its claims
// names the test behind it, and every test it names exists, so that a
// renamed or deleted test cannot leave a claim standing on nothing.
func TestSecuritySectionNamesRealTests(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	const title = "### What a compromised agent can and cannot do"
	_, sec, ok := strings.Cut(string(readme), title)
	if !ok {
		t.Fatalf("README.md has no section %q", title)
	}
	if end := strings.Index(sec, "\n### "); end >= 0 {
		sec = sec[:end]
	}
	_, cannot, _ := strings.Cut(sec, "It **cannot**:")
	cannot, _, _ = strings.Cut(cannot, "It **can**:")
	claims := regexp.MustCompile(`(?m)^- `).Split(cannot, -1)[1:]
	if len(claims) < 5 {
		t.Fatalf("the section lists %d things an agent cannot do; the README was cut", len(claims))
	}
	testName := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
	for _, c := range claims {
		if !testName.MatchString(c) && !strings.Contains(c, " tests") {
			t.Errorf("a claim names no test:\n- %s", c)
		}
	}
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(`)
	filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, _ := os.ReadFile(path)
			for _, m := range decl.FindAllSubmatch(b, -1) {
				funcs[string(m[1])] = true
			}
		}
		return nil
	})
	for _, m := range testName.FindAllStringSubmatch(sec, -1) {
		if !funcs[m[1]] {
			t.Errorf("the security section names %s, which no test file declares", m[1])
		}
	}
}
