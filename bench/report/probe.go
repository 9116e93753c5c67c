package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// hybridLine matches bench/hybrid's result line of a hybrid query class.
var hybridLine = regexp.MustCompile(`^(\w+)\s+hybrid .*\bp95\s+([0-9.]+) ms`)

// parseHybrid reads bench/hybrid's output: the p95 in ms of each class.
func parseHybrid(out string) (map[string]float64, error) {
	p95 := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := hybridLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, fmt.Errorf("bench/hybrid: p95 %q of %s is not a number", m[2], m[1])
		}
		p95[m[1]] = v
	}
	if len(p95) == 0 {
		return nil, fmt.Errorf("bench/hybrid printed no hybrid result line")
	}
	return p95, nil
}

// recallLine matches a method's line of bench/recall's tallies.
var recallLine = regexp.MustCompile(`^\s+(\w+)\s+R@1 ([0-9.]+)\s+R@5 ([0-9.]+)\s+R@10 ([0-9.]+)$`)

// parseRecall reads bench/recall's held-out split: R@1, R@5 and R@10 of
// each method, keyed "<method>:<k>".
func parseRecall(out string) (map[string]float64, error) {
	got := map[string]float64{}
	held := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-- ") {
			held = strings.HasPrefix(line, "-- split held-out")
			continue
		}
		m := recallLine.FindStringSubmatch(line)
		if !held || m == nil {
			continue
		}
		for i, k := range []string{"1", "5", "10"} {
			v, err := strconv.ParseFloat(m[2+i], 64)
			if err != nil {
				return nil, fmt.Errorf("bench/recall: R@%s %q of %s is not a number", k, m[2+i], m[1])
			}
			got[m[1]+":"+k] = v
		}
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("bench/recall printed no held-out tallies")
	}
	return got, nil
}

// probes measures what no go benchmark reports: hybrid search through
// bench/hybrid, retrieval quality through bench/recall, and the idle
// memory of choird and choir-agent.
type probes struct {
	root, binDir, dbURL string
	runs, hybridRows    int
	log                 io.Writer
}

// hybrid runs bench/hybrid p.runs times on one loaded corpus (the first
// run loads it and keeps it, the others reuse it, the last drops it) and
// returns each class's p95 per run.
func (p probes) hybrid(ctx context.Context) (map[string][]float64, error) {
	bin := filepath.Join(p.binDir, "hybrid")
	if err := p.goBuild(ctx, bin, "./bench/hybrid"); err != nil {
		return nil, err
	}
	out := map[string][]float64{}
	for i := range p.runs {
		args := []string{"-server", p.dbURL, "-db", "choir_bench_report", "-rows", strconv.Itoa(p.hybridRows), "-recall", "0"}
		if i > 0 {
			args = append(args, "-reuse")
		}
		if i < p.runs-1 {
			args = append(args, "-keep")
		}
		var buf strings.Builder
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&buf, p.log), p.log
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("bench/hybrid run %d: %w", i+1, err)
		}
		p95, err := parseHybrid(buf.String())
		if err != nil {
			return nil, err
		}
		for class, v := range p95 {
			out[class] = append(out[class], v)
		}
	}
	return out, nil
}

// recall runs bench/recall once (its figures are the same in every run:
// the set is generated from a fixed seed and ties break by recency) and
// returns the held-out split's recall, keyed "<method>:<k>".
func (p probes) recall(ctx context.Context) (map[string][]float64, error) {
	bin := filepath.Join(p.binDir, "recall")
	if err := p.goBuild(ctx, bin, "./bench/recall"); err != nil {
		return nil, err
	}
	var buf strings.Builder
	cmd := exec.CommandContext(ctx, bin, "-server", p.dbURL, "-db", "choir_bench_report_recall")
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&buf, p.log), p.log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("bench/recall: %w", err)
	}
	r, err := parseRecall(buf.String())
	if err != nil {
		return nil, err
	}
	out := map[string][]float64{}
	for k, v := range r {
		out[k] = []float64{v}
	}
	return out, nil
}

func (p probes) goBuild(ctx context.Context, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = p.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s: %w", pkg, err)
	}
	return nil
}

// rss starts choird with one agent on the process runtime, p.runs times
// from a fresh home, lets both settle for idle, and reads their VmRSS in
// MiB: keyed "choird" and "choir-agent".
func (p probes) rss(ctx context.Context) (map[string][]float64, error) {
	if err := p.goBuild(ctx, p.binDir+"/", "./cmd/..."); err != nil {
		return nil, err
	}
	out := map[string][]float64{}
	for range p.runs {
		d, a, err := p.rssOnce(ctx)
		if err != nil {
			return nil, err
		}
		out["choird"] = append(out["choird"], d)
		out["choir-agent"] = append(out["choir-agent"], a)
	}
	return out, nil
}

// rssOnce is one start, settle, read and stop.
func (p probes) rssOnce(ctx context.Context) (choird, agent float64, err error) {
	const dbName = "choir_bench_rss"
	u, err := url.Parse(p.dbURL)
	if err != nil {
		return 0, 0, fmt.Errorf("database URL: %w", err)
	}
	if err := recreateDB(ctx, p.dbURL, dbName); err != nil {
		return 0, 0, err
	}
	home, err := os.MkdirTemp("", "choir-bench-home-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(home)
	ctl := func(args ...string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(p.binDir, "choirctl"), append([]string{"--home", home}, args...)...)
		cmd.Stdout, cmd.Stderr = p.log, p.log
		return cmd.Run()
	}
	if err := ctl("init", "--local", "--pg-host", u.Hostname(), "--pg-port", u.Port(), "--pg-database", dbName); err != nil {
		return 0, 0, fmt.Errorf("choirctl init: %w", err)
	}
	if err := ctl("db", "migrate"); err != nil {
		return 0, 0, fmt.Errorf("choirctl db migrate: %w", err)
	}
	d := exec.Command(filepath.Join(p.binDir, "choird"), "--home", home, "--runtime=process")
	d.Env = append(os.Environ(), "PATH="+p.binDir+":"+os.Getenv("PATH"))
	d.Stdout, d.Stderr = io.Discard, io.Discard
	if err := d.Start(); err != nil {
		return 0, 0, fmt.Errorf("starting choird: %w", err)
	}
	defer func() {
		ctl("agent", "stop", "assistant") //nolint:errcheck // Best effort; choird stops it anyway.
		d.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		d.Wait()                          //nolint:errcheck
	}()
	if err := waitFor(ctx, 60*time.Second, func() bool { return ctl("status") == nil }); err != nil {
		return 0, 0, fmt.Errorf("choird did not answer choirctl status: %w", err)
	}
	if err := ctl("agent", "start", "assistant"); err != nil {
		return 0, 0, fmt.Errorf("choirctl agent start: %w", err)
	}
	var agentPID int
	if err := waitFor(ctx, 60*time.Second, func() bool { agentPID = childNamed(d.Process.Pid, "choir-agent"); return agentPID > 0 }); err != nil {
		return 0, 0, fmt.Errorf("no choir-agent process under choird: %w", err)
	}
	time.Sleep(10 * time.Second) // Idle: past start-up, a few heartbeats in.
	if choird, err = vmRSS(d.Process.Pid); err == nil {
		agent, err = vmRSS(agentPID)
	}
	return choird, agent, err
}

// recreateDB drops and creates database name on the server of dbURL.
func recreateDB(ctx context.Context, dbURL, name string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", dbURL, err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{"DROP DATABASE IF EXISTS " + name + " WITH (FORCE)", "CREATE DATABASE " + name} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// waitFor polls cond every 100 ms until it holds or limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("still not so after %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// childNamed returns the pid of a child of parent whose command is name,
// or 0.
func childNamed(parent int, name string) int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		rest := strings.Fields(s[end+1:])
		if len(rest) < 2 || s[open+1:end] != name {
			continue
		}
		if ppid, _ := strconv.Atoi(rest[1]); ppid == parent {
			pid, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
			return pid
		}
	}
	return 0
}

// vmRSS reads a process's resident set size in MiB.
func vmRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
