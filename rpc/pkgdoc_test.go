package rpc_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs requires a doc comment on every package under rpc/.
func TestPackageDocs(t *testing.T) {
	t.Parallel()
	documented := map[string]bool{} // directory -> has a package doc
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testdata") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		ok := f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package "+f.Name.Name+" ")
		documented[dir] = documented[dir] || ok
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(documented) < 3 {
		t.Fatalf("found only %d packages", len(documented))
	}
	for dir, ok := range documented {
		if !ok {
			t.Errorf("package in %s has no doc comment starting \"Package <name> \"", dir)
		}
	}
}
