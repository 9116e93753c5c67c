// Command report runs Choir's benchmark suite and writes bench/report.md
// and bench/report.json: each figure's median and spread over several
// runs, beside its target with a pass or fail mark, and, where one exists,
// beside its floor (the same work by bare means) measured in the same run,
// with the machine's conditions. `make bench` runs it; it is not part of
// `make test`.
//
//	go run ./bench/report -database-url postgres://...
//	go run ./bench/report -only 'rpc|lock'
//
// Every benchmark's own output goes to bench/report.log.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

type options struct {
	root, out, dbURL, only, compare string
	runs, hybridRows                int
}

func main() {
	var o options
	flag.StringVar(&o.root, "root", ".", "the module's root directory")
	flag.StringVar(&o.out, "out", "bench", "directory for report.md, report.json and report.log")
	flag.StringVar(&o.dbURL, "database-url", os.Getenv("CHOIR_TEST_DATABASE_URL"),
		"Postgres to measure against (default $CHOIR_TEST_DATABASE_URL; `make bench` passes the throwaway cluster's)")
	flag.StringVar(&o.only, "only", "", "measure only the figures whose id matches this regular expression")
	flag.StringVar(&o.compare, "compare", "", "also measure this git revision (built in a temporary worktree), "+
		"figure by figure alternately with this tree, and report the change")
	flag.IntVar(&o.runs, "runs", 3, "runs per figure")
	flag.IntVar(&o.hybridRows, "hybrid-rows", 100000, "chunks for the hybrid-search figures")
	flag.Parse()
	if o.dbURL == "" {
		log.Fatal("no database: pass -database-url or set CHOIR_TEST_DATABASE_URL (make bench does: it starts the throwaway cluster)")
	}
	if o.runs < 1 {
		log.Fatal("-runs must be at least 1")
	}
	rep, err := run(context.Background(), o)
	if err != nil {
		log.Fatal(err)
	}
	if err := gate(rep); err != nil {
		log.Fatalf("%v; see %s", err, filepath.Join(o.out, "report.md"))
	}
}

// gate is make bench's verdict: an error naming each figure that could
// not be measured or missed its target (the median of its runs against
// the target), nil when every figure measured met its target.
func gate(rep report) error {
	var unmeasured, missed []string
	for _, f := range rep.Figures {
		switch {
		case f.Error != "":
			unmeasured = append(unmeasured, f.ID)
		case !f.Pass:
			missed = append(missed, f.ID)
		}
	}
	var parts []string
	if len(unmeasured) > 0 {
		parts = append(parts, fmt.Sprintf("%d figure(s) could not be measured (%s)", len(unmeasured), strings.Join(unmeasured, ", ")))
	}
	if len(missed) > 0 {
		parts = append(parts, fmt.Sprintf("%d figure(s) missed their target (%s)", len(missed), strings.Join(missed, ", ")))
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
}

// run measures the selected figures and writes the report.
func run(ctx context.Context, o options) (report, error) {
	var only *regexp.Regexp
	if o.only != "" {
		re, err := regexp.Compile(o.only)
		if err != nil {
			return report{}, fmt.Errorf("-only: %w", err)
		}
		only = re
	}
	root, err := filepath.Abs(o.root)
	if err != nil {
		return report{}, err
	}
	logf, err := os.Create(filepath.Join(o.out, "report.log"))
	if err != nil {
		return report{}, err
	}
	defer logf.Close()
	binDir, err := os.MkdirTemp("", "choir-bench-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(binDir)
	lw := io.Writer(logf)
	t0 := time.Now()
	rep := report{Machine: describeMachine(ctx, o.dbURL)}
	rep.Machine.Runs = o.runs
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		rep.Machine.Commit = strings.TrimSpace(string(out))
	}
	m := newMeasurer(root, filepath.Join(binDir, "this"), o, lw)
	var old *measurer
	if o.compare != "" {
		oldRoot, rev, cleanup, err := checkout(ctx, root, o.compare, binDir)
		if err != nil {
			return report{}, err
		}
		defer cleanup()
		old, rep.Machine.CompareRev = newMeasurer(oldRoot, filepath.Join(binDir, "compare"), o, lw), rev
	}
	for i, f := range suite {
		if only != nil && !only.MatchString(f.ID) {
			continue
		}
		fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), f.Title)
		if old == nil {
			rep.Figures = append(rep.Figures, m.measure(ctx, f))
			continue
		}
		// The two trees take turns going first, so that neither always
		// runs on a machine the other has just warmed or loaded.
		var r, was result
		if i%2 == 0 {
			was, r = old.measure(ctx, f), m.measure(ctx, f)
		} else {
			r, was = m.measure(ctx, f), old.measure(ctx, f)
		}
		r.compareWith(was)
		rep.Figures = append(rep.Figures, r)
	}
	rep.Machine.LoadAfter = loadavg()
	rep.Machine.DurationSec = time.Since(t0).Seconds()
	return rep, write(o.out, rep)
}

// newMeasurer measures the tree at root, building into binDir.
func newMeasurer(root, binDir string, o options, log io.Writer) *measurer {
	// A failure to make it shows as each figure's build error.
	_ = os.MkdirAll(binDir, 0o755)
	return &measurer{
		gb: &goBench{root: root, binDir: binDir, runs: o.runs, log: log, built: map[string]string{},
			env: []string{"CHOIR_TEST_DATABASE_URL=" + o.dbURL, "CHOIR_REQUIRE_DOCKER=1"}},
		pr:   probes{root: root, binDir: binDir, dbURL: o.dbURL, runs: o.runs, hybridRows: o.hybridRows, log: log},
		runs: map[string]benchRun{}, errs: map[string]error{}, probed: map[string]map[string][]float64{},
	}
}

// measure measures one figure and its floor.
func (m *measurer) measure(ctx context.Context, f figure) result {
	r := result{figure: f}
	var err error
	if r.Values, err = m.values(ctx, f.Source); err == nil && f.Floor != nil {
		r.FloorValues, err = m.values(ctx, *f.Floor)
	}
	if err != nil {
		r.Error = err.Error()
	}
	r.settle()
	return r
}

// measurer runs each benchmark and probe once, whatever the number of
// figures that read it.
type measurer struct {
	gb     *goBench
	pr     probes
	runs   map[string]benchRun
	errs   map[string]error
	probed map[string]map[string][]float64
}

// values returns the values of s, one per run.
func (m *measurer) values(ctx context.Context, s source) ([]float64, error) {
	if s.Probe != "" {
		kind, key, _ := strings.Cut(s.Probe, ":")
		if err, ok := m.errs[kind]; ok {
			return nil, err
		}
		got, ok := m.probed[kind]
		if !ok {
			var err error
			switch kind {
			case "hybrid":
				got, err = m.pr.hybrid(ctx)
			case "rss":
				got, err = m.pr.rss(ctx)
			case "recall":
				got, err = m.pr.recall(ctx)
			default:
				err = fmt.Errorf("unknown probe %q", s.Probe)
			}
			if err != nil {
				m.errs[kind] = err
				return nil, err
			}
			m.probed[kind] = got
		}
		if vs, ok := got[key]; ok {
			return vs, nil
		}
		return nil, fmt.Errorf("probe %s measured no %q", kind, key)
	}
	k := runKey(s)
	if err, ok := m.errs[k]; ok {
		return nil, err
	}
	r, ok := m.runs[k]
	if !ok {
		var err error
		if r, err = m.gb.run(ctx, s); err != nil {
			m.errs[k] = err
			return nil, err
		}
		m.runs[k] = r
	}
	return valuesOf(r, s)
}

// write writes report.json and report.md into dir.
func write(dir string, rep report) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	md := rep.markdown()
	// The kill-anywhere table is kept by make kill-anywhere, a run too
	// long for this suite, and the prompt-injection table by make
	// injection; the report carries the last of each.
	for _, name := range []string{"kill-anywhere.md", "injection.md"} {
		if kept, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			md += "\n" + string(kept)
		}
	}
	fmt.Print(md)
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644)
}
