package browser_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/readable"
)

// BenchmarkBrowseTextWarm browses the local 200 KB page in text mode in a
// warm context (the agent's context and tab exist, the page was loaded
// once): a navigation, the page's HTML read back and its readable text
// extracted. It reports the p95 of the calls.
func BenchmarkBrowseTextWarm(b *testing.B) {
	w, s := newWorker(b, config.Web{}), testSite()
	in := json.RawMessage(`{"url": "` + s.srv.URL + `/huge"}`)
	ctx := context.Background()
	if _, err := w.Browse(ctx, "bench", in, nil); err != nil {
		b.Fatal(err)
	}
	var times []time.Duration
	for b.Loop() {
		start := time.Now()
		out, err := w.Browse(ctx, "bench", in, nil)
		times = append(times, time.Since(start))
		if err != nil || len(out.Text) < 60<<10 {
			b.Fatalf("browse: %v", err)
		}
	}
	reportPercentiles(b, times)
}

// BenchmarkFetchTextFloor is the floor of BenchmarkBrowseTextWarm without a
// browser: a plain HTTP GET of the same page and the same text extraction.
func BenchmarkFetchTextFloor(b *testing.B) {
	s := testSite()
	var times []time.Duration
	for b.Loop() {
		start := time.Now()
		resp, err := http.Get(s.srv.URL + "/huge")
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if _, err := readable.Extract(strings.NewReader(string(body))); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	reportPercentiles(b, times)
}

func reportPercentiles(b *testing.B, times []time.Duration) {
	slices.Sort(times)
	pct := func(p float64) float64 {
		return float64(times[int(p*float64(len(times)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkWorkerMemoryTwoIdleContexts measures the browsers' resident
// memory (the whole Chromium process tree of each agent's browser) with
// two idle agents:
// the sum of RSS, which counts shared pages once per process, and the sum
// of PSS, which shares them out.
func BenchmarkWorkerMemoryTwoIdleContexts(b *testing.B) {
	w := newWorker(b, config.Web{})
	for _, a := range []string{"idle-1", "idle-2"} {
		if err := w.Open(a); err != nil {
			b.Fatal(err)
		}
	}
	var rss, pss int64
	for b.Loop() {
		rss, pss = treeMemory(b, w.PID("idle-1"), w.PID("idle-2"))
	}
	b.ReportMetric(float64(rss)/1024, "rss-MB")
	b.ReportMetric(float64(pss)/1024, "pss-MB")
	b.ReportMetric(0, "ns/op")
}

// treeMemory sums VmRSS and Pss (kB) over the browser processes roots
// and their descendants.
func treeMemory(b *testing.B, roots ...int) (rss, pss int64) {
	parent := map[int]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		data, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(data)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		ppid, _ := strconv.Atoi(fields[1])
		parent[pid] = ppid
	}
	inTree := func(pid int) bool {
		for p := pid; p > 1; p = parent[p] {
			if slices.Contains(roots, p) {
				return true
			}
		}
		return false
	}
	for pid := range parent {
		if !inTree(pid) {
			continue
		}
		rss += kB(b, "/proc/"+strconv.Itoa(pid)+"/status", "VmRSS:")
		pss += kB(b, "/proc/"+strconv.Itoa(pid)+"/smaps_rollup", "Pss:")
	}
	return rss, pss
}

func kB(b *testing.B, file, key string) int64 {
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}
