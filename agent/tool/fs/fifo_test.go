package fs_test

import (
	"context"
	"encoding/json"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

// TestReadRefusesFIFO plants a FIFO with no writer, directly and behind a
// symbolic link, and reads it with choir.fs.read: the call must come back
// refusing it, not wait for a writer and hold the arbiter (and its lock on
// the path) for good.
func TestReadRefusesFIFO(t *testing.T) {
	t.Parallel()
	b := tooltest.Setup(t, builtin.Config{})
	fifo := filepath.Join(b.WS, "pipe.txt")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("pipe.txt", filepath.Join(b.WS, "innocent.txt")); err != nil {
		t.Fatal(err)
	}
	// Should the read block, a writer opened at cleanup releases it, so
	// the test fails instead of leaving a goroutine behind.
	t.Cleanup(func() {
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	for _, p := range []string{"pipe.txt", "innocent.txt"} {
		t.Run(p, func(t *testing.T) {
			done := make(chan struct{})
			var r tool.Result
			var err error
			go func() {
				defer close(done)
				d, _ := b.Reg.Lookup(tool.NameFSRead)
				r, err = d.Execute(context.Background(), b.Env, json.RawMessage(`{"path": `+quote(p)+`}`))
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				// A liveness bound, not a timing: the refusal takes no
				// waiting at all, the hang lasts forever.
				t.Fatalf("choir.fs.read of a FIFO (%s) did not return", p)
			}
			if err != nil || r.Status != tool.StatusError || !strings.Contains(r.Summary, "not a regular file") {
				t.Errorf("read %s: %+v %v", p, r, err)
			}
		})
	}
}
