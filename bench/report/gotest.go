package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// benchRun is one run of a test binary with one -test.bench pattern: each
// metric of the benchmark it selected, one value per -test.count round.
type benchRun struct {
	Name    string
	Metrics map[string][]float64
}

// runKey identifies a test-binary run; figures that read different
// metrics of the same benchmark share it.
func runKey(s source) string {
	return fmt.Sprintf("%s|%s|%d|%s", s.Pkg, s.Bench, s.CPU, s.Benchtime)
}

// goBench compiles test binaries once per package and runs them.
type goBench struct {
	root, binDir string
	runs         int
	env          []string
	log          io.Writer
	built        map[string]string
}

// dir is the directory of s's package in this tree: Pkg, or the first of
// its earlier homes (Moved) the tree has.
func (g *goBench) dir(s source) string {
	for _, d := range append([]string{s.Pkg}, s.Moved...) {
		if fi, err := os.Stat(filepath.Join(g.root, d)); err == nil && fi.IsDir() {
			return d
		}
	}
	return s.Pkg
}

// binary returns the compiled test binary of pkg, building it on first use.
func (g *goBench) binary(ctx context.Context, pkg string) (string, error) {
	if bin, ok := g.built[pkg]; ok {
		return bin, nil
	}
	bin := filepath.Join(g.binDir, strings.ReplaceAll(pkg, "/", "_")+".test")
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./"+pkg)
	cmd.Dir = g.root
	cmd.Stdout, cmd.Stderr = g.log, g.log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("compiling the benchmarks of %s: %w", pkg, err)
	}
	g.built[pkg] = bin
	return bin, nil
}

// run runs the benchmark s selects, g.runs times in one process.
func (g *goBench) run(ctx context.Context, s source) (benchRun, error) {
	pkg := g.dir(s)
	bin, err := g.binary(ctx, pkg)
	if err != nil {
		return benchRun{}, err
	}
	args := []string{"-test.run", "^$", "-test.bench", s.Bench, "-test.count", strconv.Itoa(g.runs),
		"-test.timeout", "10m"}
	if s.CPU > 0 {
		args = append(args, "-test.cpu", strconv.Itoa(s.CPU))
	}
	if s.Benchtime != "" {
		args = append(args, "-test.benchtime", s.Benchtime)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = filepath.Join(g.root, pkg)
	cmd.Env = append(os.Environ(), g.env...)
	var out strings.Builder
	cmd.Stdout = io.MultiWriter(&out, g.log)
	cmd.Stderr = g.log
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return benchRun{}, fmt.Errorf("%s %s: %w", pkg, s.Bench, err)
	}
	fmt.Fprintf(g.log, "# %s %s %s took %s\n", g.root, pkg, s.Bench, time.Since(t0).Round(time.Millisecond))
	return parseBench(out.String())
}

// parseBench reads go test's benchmark lines ("BenchmarkX/sub-2  N  v unit
// v unit ...") and gathers every metric of the one benchmark they name.
// It fails when they name none, or more than one.
func parseBench(out string) (benchRun, error) {
	r := benchRun{Metrics: map[string][]float64{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := trimProcs(f[0])
		if r.Name != "" && r.Name != name {
			return benchRun{}, fmt.Errorf("the pattern selects more than one benchmark: %s and %s", r.Name, name)
		}
		r.Name = name
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return benchRun{}, fmt.Errorf("%s: value %q of %s is not a number", name, f[i], f[i+1])
			}
			r.Metrics[f[i+1]] = append(r.Metrics[f[i+1]], v)
		}
	}
	if r.Name == "" {
		return benchRun{}, fmt.Errorf("no benchmark result in the output")
	}
	return r, nil
}

// trimProcs drops the "-N" GOMAXPROCS suffix of a benchmark name.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}

// valuesOf turns a run's metric into the figure's unit.
func valuesOf(r benchRun, s source) ([]float64, error) {
	raw, ok := r.Metrics[s.Metric]
	if !ok {
		return nil, fmt.Errorf("%s reports no %q metric", r.Name, s.Metric)
	}
	out := make([]float64, len(raw))
	for i, v := range raw {
		if s.Scale != 0 {
			v *= s.Scale
		}
		if s.Invert {
			if v == 0 {
				return nil, fmt.Errorf("%s: %s is 0, cannot invert", r.Name, s.Metric)
			}
			v = 1 / v
		}
		out[i] = v
	}
	return out, nil
}
