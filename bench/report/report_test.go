package main

import (
	"math"
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
