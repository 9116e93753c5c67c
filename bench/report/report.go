package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// result is one figure as measured: its values (one per run), their
// median and spread, the floor's median, and the verdict.
type result struct {
	figure
	Values      []float64 `json:"values"`
	Median      float64   `json:"median"`
	Min         float64   `json:"min"`
	Max         float64   `json:"max"`
	FloorValues []float64 `json:"floor_values,omitempty"`
	FloorMedian float64   `json:"floor_median,omitempty"`
	// Ratio is Median/FloorMedian, when the figure has a floor.
	Ratio float64 `json:"ratio,omitempty"`
	Pass  bool    `json:"pass"`
	// Error says why the figure could not be measured.
	Error string `json:"error,omitempty"`
	// Compare is the figure on the -compare revision, when one is given.
	Compare *compared `json:"compare,omitempty"`
}

// settle fills the summary fields from Values and FloorValues.
func (r *result) settle() {
	if len(r.Values) == 0 {
		return
	}
	r.Median, r.Min, r.Max = median(r.Values), slices.Min(r.Values), slices.Max(r.Values)
	if len(r.FloorValues) > 0 {
		r.FloorMedian = median(r.FloorValues)
		if r.FloorMedian != 0 {
			r.Ratio = r.Median / r.FloorMedian
		}
	}
	switch {
	case r.Measured:
		r.Pass = true // nothing to miss
	case r.Higher:
		r.Pass = r.Median >= r.Target
	default:
		r.Pass = r.Median <= r.Target
	}
}

// median of vs (the mean of the middle two for an even count).
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// machine is the conditions of the run.
type machine struct {
	Cores       int               `json:"cores"`
	CPU         string            `json:"cpu"`
	Kernel      string            `json:"kernel"`
	GoVersion   string            `json:"go"`
	LoadBefore  string            `json:"load_before"`
	LoadAfter   string            `json:"load_after"`
	Postgres    map[string]string `json:"postgres"`
	Commit      string            `json:"commit"`
	CompareRev  string            `json:"compare_rev,omitempty"`
	StartedAt   time.Time         `json:"started_at"`
	DurationSec float64           `json:"duration_s"`
	Runs        int               `json:"runs"`
}

// report is report.json.
type report struct {
	Machine machine  `json:"machine"`
	Figures []result `json:"figures"`
}

// loadavg returns /proc/loadavg's three averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// describeMachine reads what the report states about the run's machine.
func describeMachine(ctx context.Context, dbURL string) machine {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	m := machine{Cores: runtime.NumCPU(), CPU: cpuModel(), Kernel: strings.TrimSpace(string(kernel)),
		GoVersion: runtime.Version(), LoadBefore: loadavg(), StartedAt: time.Now().UTC(), Postgres: map[string]string{}}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		m.Postgres["error"] = err.Error()
		return m
	}
	defer conn.Close(ctx)
	for _, name := range []string{"server_version", "shared_buffers", "work_mem", "effective_cache_size",
		"max_connections", "fsync", "synchronous_commit", "full_page_writes", "data_directory"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err == nil {
			m.Postgres[name] = v
		}
	}
	var vec string
	if conn.QueryRow(ctx, "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").Scan(&vec) == nil {
		m.Postgres["pgvector"] = vec
	}
	return m
}

// markdown renders report.md.
func (r report) markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# Choir benchmark report\n\n")
	fmt.Fprintf(&b, "Commit `%s`, started %s, took %.0f s; %d runs per figure (median, and the spread min–max).\n\n",
		m.Commit, m.StartedAt.Format(time.RFC3339), m.DurationSec, m.Runs)
	fmt.Fprintf(&b, "Machine: %d cores (%s), kernel %s, %s. Load average before %s, after %s.\n\n",
		m.Cores, m.CPU, m.Kernel, m.GoVersion, m.LoadBefore, m.LoadAfter)
	var pg []string
	for _, k := range []string{"server_version", "pgvector", "shared_buffers", "work_mem", "effective_cache_size",
		"max_connections", "fsync", "synchronous_commit", "full_page_writes", "data_directory", "error"} {
		if v, ok := m.Postgres[k]; ok {
			pg = append(pg, k+" "+v)
		}
	}
	fmt.Fprintf(&b, "Postgres: %s.\n\n", strings.Join(pg, ", "))
	if m.CompareRev != "" {
		fmt.Fprintf(&b, "Compared with `%s`, built from a worktree and measured figure by figure in turn with this tree (each goes first every other figure); "+
			"a change marked **worse** is past %.0f%% in the bad direction.\n\n", m.CompareRev, worseBeyond*100)
		fmt.Fprintf(&b, "| figure | median | spread | `%s` median | `%s` spread | change | floor (same run) | ratio | target | |\n"+
			"|---|---|---|---|---|---|---|---|---|---|\n", m.CompareRev, m.CompareRev)
	} else {
		b.WriteString("| figure | median | spread | floor (same run) | ratio | target | |\n|---|---|---|---|---|---|---|\n")
	}
	met, targeted, worse := 0, 0, 0
	for _, f := range r.Figures {
		cmp := "≤"
		if f.Higher {
			cmp = "≥"
		}
		target := fmt.Sprintf("%s %s %s", cmp, num(f.Target), f.Unit)
		if f.Measured {
			target = "–"
		} else {
			targeted++
		}
		versus := ""
		if m.CompareRev != "" {
			versus = f.Compare.cells(f.Unit) + " "
			if f.Compare != nil && f.Compare.Worse {
				worse++
			}
		}
		if f.Error != "" {
			fmt.Fprintf(&b, "| %s | – | – | %s– | – | %s | **not measured**: %s |\n", f.Title, versus, target, oneLine(f.Error))
			continue
		}
		floor, ratio := "–", "–"
		if len(f.FloorValues) > 0 {
			floor, ratio = num(f.FloorMedian)+" "+f.Unit, fmt.Sprintf("%.2f×", f.Ratio)
		}
		mark := "FAIL"
		switch {
		case f.Measured:
			mark = "measured"
		case f.Pass:
			mark, met = "pass", met+1
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s–%s | %s%s | %s | %s | %s |\n",
			f.Title, num(f.Median), f.Unit, num(f.Min), num(f.Max), versus, floor, ratio, target, mark)
	}
	if m.CompareRev != "" {
		fmt.Fprintf(&b, "\n%d of %d figures more than %.0f%% worse than `%s`.\n", worse, len(r.Figures), worseBeyond*100, m.CompareRev)
	}
	fmt.Fprintf(&b, "\n%d of %d targets met.\n", met, targeted)
	b.WriteString("\nFloors: the RPC against bare net/http on a Unix socket (`rpc/internal/fastpath` BenchmarkCall/Plain/unix); " +
		"heartbeats against the bare-SQL simulation of the same transaction (`daemon` BenchmarkHeartbeatBareSQL); " +
		"tool schemas against the same 150 tools sent whole (direct mode); the step of 4 calls against the same calls " +
		"one after another; the warm browse against a plain fetch and extraction of the same page. " +
		"The edge's reply is measured idle and beside the core jobs in the same run. " +
		"Retrieval is bench/recall's held-out half of its generated questions, beside BM25 over the same turns; " +
		"it is measured, with no target here (issue 22 set its targets against BM25). " +
		"The idle-memory targets are this report's own; no issue set one.\n")
	return b.String()
}

// cells are the compared revision's columns of report.md: median,
// spread and change, each ending in " |".
func (c *compared) cells(unit string) string {
	switch {
	case c == nil:
		return "– | – | – |"
	case c.Error != "":
		return "– | – | not measured: " + oneLine(c.Error) + " |"
	case c.Median == 0:
		return fmt.Sprintf("%s %s | %s–%s | – |", num(c.Median), unit, num(c.Min), num(c.Max))
	}
	change := fmt.Sprintf("%+.1f%%", c.Change*100)
	if c.Worse {
		change = "**worse** " + change
	}
	return fmt.Sprintf("%s %s | %s–%s | %s |", num(c.Median), unit, num(c.Min), num(c.Max), change)
}

// num prints a figure with sensible precision.
func num(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.ReplaceAll(s, "|", "/")
}
