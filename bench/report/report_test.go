package main

import (
	"context"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBench(t *testing.T) {
	out := `goos: linux
BenchmarkRoundTrip/UDS-2         	   20000	     61234 ns/op	        42.00 p50-µs	       180.0 p99-µs	 16000 req/s
BenchmarkRoundTrip/UDS-2         	   20000	     59000 ns/op	        40.00 p50-µs	       170.0 p99-µs	 16500 req/s
BenchmarkRoundTrip/UDS-2         	   20000	     60000 ns/op	        41.00 p50-µs	       200.0 p99-µs	 16200 req/s
PASS
`
	r, err := parseBench(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "BenchmarkRoundTrip/UDS" {
		t.Errorf("name %q", r.Name)
	}
	if got := r.Metrics["p99-µs"]; len(got) != 3 || got[2] != 200 {
		t.Errorf("p99-µs %v", got)
	}
	vs, err := valuesOf(r, source{Metric: "ns/op", Scale: 1e-9, Invert: true})
	if err != nil || math.Abs(vs[1]-1/59000e-9) > 1e-6 {
		t.Errorf("inverted ns/op %v %v", vs, err)
	}
	if _, err := valuesOf(r, source{Metric: "p95-ms"}); err == nil || !strings.Contains(err.Error(), `"p95-ms"`) {
		t.Errorf("a missing metric: %v", err)
	}
	// A benchmark name without the GOMAXPROCS suffix (-test.cpu 1).
	r, err = parseBench("BenchmarkAcquireUncontended/Exec/Others0 \t 1000000\t 95.1 ns/op\n")
	if err != nil || r.Name != "BenchmarkAcquireUncontended/Exec/Others0" || r.Metrics["ns/op"][0] != 95.1 {
		t.Errorf("cpu 1: %+v %v", r, err)
	}
}

func TestParseBenchRefusesAmbiguousAndEmptyOutput(t *testing.T) {
	if _, err := parseBench("PASS\nok\n"); err == nil {
		t.Error("no result line was accepted")
	}
	two := "BenchmarkA-2 10 1 ns/op\nBenchmarkB-2 10 1 ns/op\n"
	if _, err := parseBench(two); err == nil || !strings.Contains(err.Error(), "more than one") {
		t.Errorf("two benchmarks: %v", err)
	}
}

func TestParseHybrid(t *testing.T) {
	out := `load average before measuring: 1.0
selective hybrid (text + vector) df 0.02-0.5%   n=300  p50   1.10 ms  p95   2.31 ms  p99   3.00 ms  max   4.00 ms  avg hits 10.0
selective full text only         df 0.02-0.5%   n=300  p50   0.50 ms  p95   0.90 ms  p99   1.00 ms  max   2.00 ms  avg hits 9.0
broad     hybrid (text + vector) df 40-60%      n=300  p50   2.00 ms  p95   4.50 ms  p99   6.00 ms  max   9.00 ms  avg hits 10.0
multi     hybrid (text + vector) df 4-5 words    n=300  p50   2.10 ms  p95   3.75 ms  p99   6.00 ms  max   9.00 ms  avg hits 10.0
multi     full text only         df 4-5 words    n=300  p50   1.10 ms  p95   2.75 ms  p99   3.00 ms  max   5.00 ms  avg hits 10.0
`
	p95, err := parseHybrid(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(p95) != 3 || p95["selective"] != 2.31 || p95["broad"] != 4.5 || p95["multi"] != 3.75 {
		t.Errorf("p95 %v", p95)
	}
	if _, err := parseHybrid("nothing\n"); err == nil {
		t.Error("output without results was accepted")
	}
}

func TestSettleAndMarkdown(t *testing.T) {
	lat := result{figure: figure{ID: "x", Title: "latency", Unit: "ms", Target: 5}, Values: []float64{4, 9, 3},
		FloorValues: []float64{2, 2, 1}}
	lat.settle()
	if lat.Median != 4 || lat.Min != 3 || lat.Max != 9 || !lat.Pass || lat.Ratio != 2 {
		t.Errorf("latency %+v", lat)
	}
	thr := result{figure: figure{ID: "y", Title: "throughput", Unit: "ops/s", Target: 1e6, Higher: true},
		Values: []float64{9e5, 1.2e6, 8e5, 1e6}}
	thr.settle()
	if thr.Median != 950000 || thr.Pass {
		t.Errorf("throughput %+v", thr)
	}
	bad := result{figure: figure{ID: "z", Title: "broken", Unit: "ms", Target: 1}, Error: "docker | gone\nreally"}
	bad.settle()
	md := report{Machine: machine{Cores: 2, Runs: 3, Postgres: map[string]string{"fsync": "off"}},
		Figures: []result{lat, thr, bad}}.markdown()
	for _, want := range []string{"| latency | 4.00 ms | 3.00–9.00 | 2.00 ms | 2.00× | ≤ 5.00 ms | pass |",
		"| throughput | 950000 ops/s |", "≥ 1.00M ops/s | FAIL |", "**not measured**: docker / gone really",
		"1 of 3 targets met.", "fsync off"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}

// TestParseRecall reads the held-out split's tallies only.
func TestParseRecall(t *testing.T) {
	out := `-- all (2000 questions)
   bm25    R@1 0.285  R@5 0.472  R@10 0.578
   hybrid  R@1 0.289  R@5 0.507  R@10 0.635
-- split held-out (odd conversations) (1000 questions)
   bm25    R@1 0.265  R@5 0.470  R@10 0.558
   hybrid  R@1 0.297  R@5 0.515  R@10 0.627
-- split tune (even conversations) (1000 questions)
   hybrid  R@1 0.281  R@5 0.499  R@10 0.643
latency hybrid  limit 10 p50   2.00 ms  p95   3.00 ms  p99   4.00 ms
`
	got, err := parseRecall(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"bm25:1": .265, "bm25:5": .47, "bm25:10": .558, "hybrid:1": .297, "hybrid:5": .515, "hybrid:10": .627}
	if !maps.Equal(got, want) {
		t.Errorf("parseRecall = %v, want %v", got, want)
	}
	if _, err := parseRecall("-- all (2 questions)\n   bm25    R@1 0.1  R@5 0.2  R@10 0.3\n"); err == nil {
		t.Error("no held-out split: no error")
	}
}

// TestMeasuredFiguresNeitherPassNorFail: a figure with no target shows
// "measured", counts in no target and never fails the gate.
func TestMeasuredFiguresNeitherPassNorFail(t *testing.T) {
	r := result{figure: figure{ID: "recall", Title: "recall", Higher: true, Measured: true}, Values: []float64{0.5}}
	r.settle()
	lat := result{figure: figure{ID: "x", Title: "latency", Unit: "ms", Target: 5}, Values: []float64{4}}
	lat.settle()
	rep := report{Figures: []result{r, lat}}
	if err := gate(rep); err != nil {
		t.Errorf("gate = %v", err)
	}
	md := rep.markdown()
	for _, want := range []string{"| recall | 0.50  | 0.50–0.50 | – | – | – | measured |", "1 of 1 targets met."} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}

// TestGateNamesWhatFailed: make bench fails, naming each figure, when one
// missed its target or could not be measured, and passes otherwise.
func TestGateNamesWhatFailed(t *testing.T) {
	fig := func(id string, target float64, values ...float64) result {
		r := result{figure: figure{ID: id, Title: id, Unit: "ms", Target: target}, Values: values}
		r.settle()
		return r
	}
	if err := gate(report{Figures: []result{fig("fast", 5, 4, 4.5, 6)}}); err != nil {
		t.Errorf("every target met: %v", err)
	}
	broken := result{figure: figure{ID: "broken", Unit: "ms", Target: 1}, Error: "docker gone"}
	broken.settle()
	err := gate(report{Figures: []result{fig("fast", 5, 4), fig("slow", 5, 6, 7, 4), broken}})
	if err == nil || !strings.Contains(err.Error(), "1 figure(s) missed their target (slow)") ||
		!strings.Contains(err.Error(), "1 figure(s) could not be measured (broken)") || strings.Contains(err.Error(), "fast") {
		t.Errorf("gate = %v", err)
	}
}

func TestCompareMarksWhatGotWorse(t *testing.T) {
	fig := func(title string, higher bool, now, was []float64) result {
		r := result{figure: figure{ID: title, Title: title, Unit: "u", Target: 1000, Higher: higher}, Values: now}
		r.settle()
		w := result{figure: r.figure, Values: was}
		w.settle()
		r.compareWith(w)
		return r
	}
	slower := fig("latency up 11%", false, []float64{10, 10, 10}, []float64{9, 9, 9})
	faster := fig("latency down", false, []float64{8}, []float64{9})
	edge := fig("throughput down 5%", true, []float64{95}, []float64{100})
	fewer := fig("throughput down 6%", true, []float64{94}, []float64{100})
	missing := fig("new figure", false, []float64{1}, nil)
	missing.Compare.Error = "no benchmark result in the output"
	for _, c := range []struct {
		r     result
		worse bool
	}{{slower, true}, {faster, false}, {edge, false}, {fewer, true}, {missing, false}} {
		if c.r.Compare.Worse != c.worse {
			t.Errorf("%s: change %+.3f, worse %v; want worse %v", c.r.Title, c.r.Compare.Change, c.r.Compare.Worse, c.worse)
		}
	}
	md := report{Machine: machine{Runs: 3, CompareRev: "abc1234"}, Figures: []result{slower, faster, edge, fewer, missing}}.markdown()
	for _, want := range []string{"| `abc1234` median | `abc1234` spread | change |",
		"| latency up 11% | 10.0 u | 10.0–10.0 | 9.00 u | 9.00–9.00 | **worse** +11.1% |",
		"| throughput down 5% | 95.0 u | 95.0–95.0 | 100.0 u | 100.0–100.0 | -5.0% |",
		"not measured: no benchmark result in the output |",
		"2 of 5 figures more than 5% worse than `abc1234`."} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| ") && strings.Count(line, " |") != 10 {
			t.Errorf("a row of %d columns, not 10: %s", strings.Count(line, " |"), line)
		}
	}
}

func TestCheckoutBuildsTheRevisionAside(t *testing.T) {
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	os.MkdirAll(filepath.Join(repo, "jobs"), 0o755)
	os.WriteFile(filepath.Join(repo, "jobs", "a.txt"), []byte("before"), 0o644)
	git("add", "-A")
	git("commit", "-qm", "one")
	first := git("rev-parse", "--short", "HEAD")
	os.Rename(filepath.Join(repo, "jobs"), filepath.Join(repo, "session"))
	git("add", "-A")
	git("commit", "-qm", "two: jobs moves to session")

	tree, rev, cleanup, err := checkout(context.Background(), repo, "HEAD~1", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if rev != first {
		t.Errorf("rev %s, want %s", rev, first)
	}
	if b, err := os.ReadFile(filepath.Join(tree, "jobs", "a.txt")); err != nil || string(b) != "before" {
		t.Errorf("the worktree of HEAD~1: %q %v", b, err)
	}
	// A benchmark that moved is found at its earlier home there.
	g := goBench{root: tree}
	if d := g.dir(source{Pkg: "session", Moved: []string{"jobs"}}); d != "jobs" {
		t.Errorf("dir in the old tree = %s, want jobs", d)
	}
	if d := (&goBench{root: repo}).dir(source{Pkg: "session", Moved: []string{"jobs"}}); d != "session" {
		t.Errorf("dir in the new tree = %s, want session", d)
	}
	cleanup()
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Errorf("the worktree is left after cleanup: %v", err)
	}
	if _, _, _, err := checkout(context.Background(), repo, "no-such-rev", t.TempDir()); err == nil ||
		!strings.Contains(err.Error(), "not a commit") {
		t.Errorf("an unknown revision: %v", err)
	}
}
