package logfile_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/logfile"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
)

// readGzip returns the lines of a gzip file, failing on a corrupt one.
func readGzip(t *testing.T, path string) []string {
	t.Helper()
	return splitLines(runtimetest.ReadGzip(t, path))
}

func splitLines(s string) []string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestConcurrentWritersLoseAndDuplicateNoLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const threshold, writers, perWriter = 37, 8, 400
	var errs []error
	var errMu sync.Mutex
	w, err := logfile.Open(filepath.Join(dir, "choird.log"), filepath.Join(dir, "archive", "choird"), logfile.Options{
		Threshold: threshold, ErrorFunc: func(err error) { errMu.Lock(); errs = append(errs, err); errMu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				fmt.Fprintf(w, "{\"writer\":%d,\"seq\":%d}\n", g, i)
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(errs) > 0 {
		t.Fatalf("archiving failed: %v", errs)
	}
	archives, err := filepath.Glob(filepath.Join(dir, "archive", "choird", "*"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(archives)
	if want := writers * perWriter / threshold; len(archives) != want {
		t.Fatalf("%d archives, want %d: %v", len(archives), want, archives)
	}
	var all []string
	for _, a := range archives {
		if !strings.HasSuffix(a, ".log.gz") {
			t.Fatalf("archive %s is not a .log.gz", a)
		}
		lines := readGzip(t, a)
		if len(lines) != threshold {
			t.Errorf("%s holds %d lines, want exactly %d", filepath.Base(a), len(lines), threshold)
		}
		all = append(all, lines...)
	}
	cur, err := os.ReadFile(filepath.Join(dir, "choird.log"))
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, splitLines(string(cur))...)
	if len(all) != writers*perWriter {
		t.Fatalf("%d lines in archives and active file, want %d", len(all), writers*perWriter)
	}
	next := make([]int, writers)
	for _, l := range all {
		var g, seq int
		if _, err := fmt.Sscanf(l, "{\"writer\":%d,\"seq\":%d}", &g, &seq); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if seq != next[g] {
			t.Fatalf("writer %d: line %d where %d was next (lost, duplicated or out of order)", g, seq, next[g])
		}
		next[g]++
	}
}

func TestOpenCountsTheLinesAlreadyThere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "choird.log")
	if err := os.WriteFile(path, []byte("a\nb\nc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := logfile.Open(path, filepath.Join(dir, "archive"), logfile.Options{Threshold: 4})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "d\n")
	io.WriteString(w, "e\n")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	archives, _ := filepath.Glob(filepath.Join(dir, "archive", "*.log.gz"))
	if len(archives) != 1 {
		t.Fatalf("archives %v, want one", archives)
	}
	if got := strings.Join(readGzip(t, archives[0]), ","); got != "a,b,c,d" {
		t.Errorf("archive holds %s, want a,b,c,d", got)
	}
	if cur, _ := os.ReadFile(path); string(cur) != "e\n" {
		t.Errorf("active file holds %q, want e", cur)
	}
}

func TestArchiveMovesAnAgentLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "alice.log")
	if err := os.WriteFile(path, []byte("one\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 3, 1, 12, 0, 0, 5, time.UTC)
	got, err := logfile.Archive(path, filepath.Join(dir, "archive", "alice"), at)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "archive", "alice", "20250301T120000.000000005Z.log.gz"); got != want {
		t.Errorf("archive %s, want %s", got, want)
	}
	if l := strings.Join(readGzip(t, got), ","); l != "one,two" {
		t.Errorf("archive holds %s", l)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("active log still there: %v", err)
	}
	// A second session ending in the same nanosecond gets its own name.
	os.WriteFile(path, []byte("three\n"), 0o600)
	second, err := logfile.Archive(path, filepath.Join(dir, "archive", "alice"), at)
	if err != nil || second == got {
		t.Fatalf("second archive %s (%v), first %s", second, err, got)
	}
	// No log, nothing archived.
	if none, err := logfile.Archive(path, filepath.Join(dir, "archive", "alice"), at); none != "" || err != nil {
		t.Errorf("archive of a missing log: %q, %v", none, err)
	}
}
