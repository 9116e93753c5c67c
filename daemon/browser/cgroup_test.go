package browser_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/logbuf"
)

// TestBrowserRunsInACgroup checks that the browser and the renderers it
// starts for pages run in a cgroup with the configured memory and CPU
// limits. Where the host offers no cgroup the worker says why in its log;
// the test then skips with that reason, unless CHOIR_REQUIRE_CGROUP=1.
func TestBrowserRunsInACgroup(t *testing.T) {
	t.Parallel()
	var logs logbuf.Buffer
	w := newWorkerLogging(t, config.Web{BrowseNavigationTimeoutMS: 20_000}, &logs)
	mustBrowse(t, w, "cgroup", "", `{"url": "`+testSite().srv.URL+`/js"}`)
	dirs, pid := w.CgroupDirs("cgroup"), w.PID("cgroup")
	if len(dirs) == 0 {
		if !strings.Contains(logs.String(), "WITHOUT memory and CPU limits") {
			t.Fatalf("the browser runs unconfined and the log does not say why:\n%s", logs.String())
		}
		if os.Getenv("CHOIR_REQUIRE_CGROUP") == "1" {
			t.Fatalf("no cgroup for the browser:\n%s", logs.String())
		}
		t.Skipf("this host offers no cgroup for the browser:\n%s", logs.String())
	}
	for _, d := range dirs {
		procs, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		pids := strings.Fields(string(procs))
		if !strings.Contains(" "+string(procs)+" ", strconv.Itoa(pid)) || len(pids) < 3 {
			t.Errorf("%s holds %v; want the browser %d and its helpers and renderers", d, pids, pid)
		}
		for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil && strings.TrimSpace(string(b)) != "2147483648" {
				t.Errorf("%s/%s = %s, want 2147483648", d, f, b)
			}
		}
		// One core, in the short CFS period that keeps the browser's
		// bursts short.
		quota, _ := os.ReadFile(filepath.Join(d, "cpu.cfs_quota_us"))
		period, _ := os.ReadFile(filepath.Join(d, "cpu.cfs_period_us"))
		if len(quota) > 0 && strings.TrimSpace(string(quota))+" "+strings.TrimSpace(string(period)) != "10000 10000" {
			t.Errorf("%s: cpu.cfs_quota_us %s, cpu.cfs_period_us %s; want 10000 and 10000 (one core)", d, quota, period)
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpu.max")); err == nil && strings.TrimSpace(string(b)) != "10000 10000" {
			t.Errorf("%s/cpu.max = %s, want 10000 10000 (one core)", d, b)
		}
	}
	w.Close()
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s outlived the browser", d)
		}
	}
}
