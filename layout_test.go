package choir_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/choirhq/choir"

// Limits of the layout (DESIGN.md): no package outside the generated db/
// over about 2,500 non-test lines, no function over about 100.
const (
	maxPackageLines  = 2600
	maxFunctionLines = 100
)

// sourceDirs maps each directory holding Go files to its non-test files.
func sourceDirs(t *testing.T) map[string][]string {
	t.Helper()
	dirs := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

func generated(dir string) bool { return dir == "db" || strings.HasPrefix(dir, "db/") }

func TestEveryPackageHasADocComment(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	for dir, files := range sourceDirs(t) {
		documented := false
		for _, f := range files {
			file, err := parser.ParseFile(fset, f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if file.Doc != nil && strings.TrimSpace(file.Doc.Text()) != "" {
				documented = true
				break
			}
		}
		if !documented {
			t.Errorf("package %s has no doc comment: say in one paragraph what it owns, above its package clause", dir)
		}
	}
}

func TestPackagesAndFunctionsStayReadable(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	for dir, files := range sourceDirs(t) {
		if generated(dir) {
			continue
		}
		lines := 0
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			lines += strings.Count(string(src), "\n")
			file, err := parser.ParseFile(fset, f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				var body *ast.BlockStmt
				name := "a function literal"
				switch x := n.(type) {
				case *ast.FuncDecl:
					body, name = x.Body, x.Name.Name
				case *ast.FuncLit:
					body = x.Body
				}
				if body == nil {
					return true
				}
				start, end := fset.Position(n.Pos()), fset.Position(body.End())
				if l := end.Line - start.Line + 1; l > maxFunctionLines {
					t.Errorf("%s:%d: %s is %d lines, over %d: give its phases functions of their own",
						start.Filename, start.Line, name, l, maxFunctionLines)
				}
				return true
			})
		}
		if lines > maxPackageLines {
			t.Errorf("package %s has %d non-test lines, over %d: cut it along what it does", dir, lines, maxPackageLines)
		}
	}
}

// TestQueriesGoThroughTheSeam checks that every query choird and the
// tools run returns the seam's named errors (sql.Interpret) by
// construction: sqlc's queries are built only by seam.Queries and
// seam.AgentQueries (sql/seam), never by db.New or agentdb.New, and a query
// written by hand (SQL in a string literal) runs on
// choirsql.Interpreted(...). The seam itself (sql/, sql/seam), the generated db/,
// test helpers and the benchmarks are exempt.
func TestQueriesGoThroughTheSeam(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	for dir, files := range sourceDirs(t) {
		if generated(dir) || dir == "sql" || dir == "sql/seam" || strings.HasPrefix(dir, "bench") || testHelper(dir) {
			continue
		}
		for _, f := range files {
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			gen := map[string]bool{} // local names of db and db/agentdb
			for _, im := range file.Imports {
				p := strings.Trim(im.Path.Value, `"`)
				if p != module+"/db" && p != module+"/db/agentdb" {
					continue
				}
				name := filepath.Base(p)
				if im.Name != nil {
					name = im.Name.Name
				}
				gen[name] = true
			}
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pos := fset.Position(call.Pos())
				if x, ok := sel.X.(*ast.Ident); ok && gen[x.Name] && sel.Sel.Name == "New" {
					t.Errorf("%s:%d: %s.New builds queries that skip the error seam: use seam.Queries or seam.AgentQueries",
						pos.Filename, pos.Line, x.Name)
				}
				switch sel.Sel.Name {
				case "Exec", "Query", "QueryRow":
				default:
					return true
				}
				if len(call.Args) < 2 {
					return true
				}
				if _, ok := call.Args[1].(*ast.BasicLit); !ok {
					return true
				}
				if inner, ok := sel.X.(*ast.CallExpr); ok {
					if f, ok := inner.Fun.(*ast.SelectorExpr); ok && f.Sel.Name == "Interpreted" {
						return true
					}
				}
				t.Errorf("%s:%d: a query written by hand skips the error seam: run it on choirsql.Interpreted(...), or give it to sqlc",
					pos.Filename, pos.Line)
				return true
			})
		}
	}
}

// rowOwners are the sqlc row types of features that have a domain type of
// their own, with the package that reads them at its edge: elsewhere the
// feature's type is passed (approval.Approval, session.Session,
// admin.Schedule), so a feature depends on another's meaning, not on its
// table.
var rowOwners = map[string]string{
	"ChoirControlPendingApproval": "daemon/approval",
	"ChoirControlSession":         "daemon/session",
	"ChoirControlSchedule":        "daemon/schedule",
}

// TestRowTypesStayWithTheirFeature checks that a feature's row type is
// named only in its own package tree (and by generated code and sql/'s
// tests of the schema).
func TestRowTypesStayWithTheirFeature(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if d.IsDir() || !strings.HasSuffix(path, ".go") || generated(dir) || dir == "sql" {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		dbName := ""
		for _, im := range file.Imports {
			if strings.Trim(im.Path.Value, `"`) == module+"/db" {
				dbName = "db"
				if im.Name != nil {
					dbName = im.Name.Name
				}
			}
		}
		if dbName == "" {
			return nil
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			owner, owned := rowOwners[sel.Sel.Name]
			if !ok || x.Name != dbName || !owned || dir == owner || strings.HasPrefix(dir, owner+"/") {
				return true
			}
			pos := fset.Position(sel.Pos())
			t.Errorf("%s:%d: db.%s is %s's row: take the feature's own type from it (for example %s.Of(row))",
				pos.Filename, pos.Line, sel.Sel.Name, owner, filepath.Base(owner))
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A dependencyRule forbids the packages under from (test helpers aside)
// to depend on anything under one of forbidden, but for the packages named
// exactly in except.
type dependencyRule struct {
	from      string
	forbidden []string
	except    []string
	why       string
}

// aboveLeaves are the trees a leaf library never depends on: everything
// of the project but the other leaves (internal/..., strictjson).
var aboveLeaves = []string{"agent", "bench", "cmd", "config", "ctl", "daemon", "db", "dbtest", "e2e", "jobs", "outbound", "rpc", "sql"}

// dependencyRules are the arrows DESIGN.md forbids.
var dependencyRules = []dependencyRule{
	{"ctl", []string{"daemon", "jobs", "db", "agent"}, nil, "choirctl reaches choird only through rpc/admin"},
	{"cmd/choirctl", []string{"daemon", "jobs", "db", "agent"}, nil, "choirctl reaches choird only through rpc/admin"},
	{"agent", []string{"daemon", "jobs", "db", "sql"}, nil, "the agent never imports daemon and never touches Postgres"},
	{"cmd/choir-agent", []string{"daemon", "jobs", "db", "sql"}, nil, "the agent never imports daemon and never touches Postgres"},
	{"daemon", []string{"rpc/client"}, nil, "choird is the server end of the agent protocol; only an agent calls it"},
	{"daemon/gateway", []string{"jobs", "db"}, nil, "the gateway reaches choird through its own small interfaces"},
	{"daemon/memory", []string{"jobs"}, nil, "the memory pipeline has one home; jobs only schedules it"},
	{"jobs", []string{"daemon", "agent"}, nil, "jobs is a runner: each feature owns its job kinds and registers its workers"},
	// Arrows point inward (issue 33).
	{"daemon/control", []string{"daemon/gateway", "daemon/dmcmd", "daemon/adminapi", "daemon/agentapi", "daemon/inbox"}, nil,
		"the control layer imports no front-end: a front-end translates its senders and errors into control's, and implements control's ports"},
	{"cmd/choird", []string{"agent"}, []string{"agent/tool", "agent/tool/catalog", "agent/tool/manifest", "agent/skill", "agent/proposal"},
		"choird links none of the agent's tool implementations: it shares only the tools' specs (agent/tool/catalog), manifests (agent/tool/manifest), skills and proposals"},
	{"ctl", []string{"rpc/internal"}, nil, "choirctl links none of the agent protocol's server: the admin contract shares rpc/wire with rpc"},
	{"cmd/choirctl", []string{"rpc/internal"}, nil, "choirctl links none of the agent protocol's server: the admin contract shares rpc/wire with rpc"},
	{"rpc/admin", []string{"rpc/internal"}, nil, "choirctl links none of the agent protocol's server: the admin contract shares rpc/wire with rpc"},
	{"rpc/wire", append([]string{"internal", "strictjson"}, aboveLeaves...), nil, "rpc/wire is a leaf that the agent protocol and the admin API share"},
	{"internal", aboveLeaves, nil, "internal/ holds leaf libraries, which import nothing above them (its test harnesses, named *test, may)"},
	{"strictjson", aboveLeaves, nil, "strictjson is a leaf library"},
}

// TestDependenciesPointOneWay checks the arrows DESIGN.md forbids, and
// that no package but a test helper links a test helper.
func TestDependenciesPointOneWay(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-json=ImportPath,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		deps[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p.Deps
	}
	under := func(pkg, tree string) bool { return pkg == tree || strings.HasPrefix(pkg, tree+"/") }
	for pkg, ds := range deps {
		if testHelper(pkg) {
			continue
		}
		for _, d := range ds {
			d, ok := strings.CutPrefix(d, module+"/")
			if !ok {
				continue
			}
			if testHelper(d) {
				t.Errorf("%s depends on %s: only tests and test helpers link a test helper", pkg, d)
			}
			for _, r := range dependencyRules {
				if under(pkg, r.from) && !slices.Contains(r.except, d) &&
					slices.ContainsFunc(r.forbidden, func(f string) bool { return under(d, f) }) {
					t.Errorf("%s depends on %s: %s", pkg, d, r.why)
				}
			}
		}
	}
}

// testHelper reports whether pkg is a test helper (dbtest, runtimetest and
// the programs under it, internal/choirdtest): one stands in for the other
// end where a test needs it, so the arrows do not bind it, and it may link
// choird whole. A package under internal/ is a leaf library unless it is
// one.
func testHelper(pkg string) bool {
	return slices.ContainsFunc(strings.Split(pkg, "/"), func(s string) bool { return strings.HasSuffix(s, "test") })
}
