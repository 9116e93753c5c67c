package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
)

// TestReceivedFilesCannotStallTheBot plants what an agent can plant in its
// workspace (FIFOs and links at the names choird writes) and makes the Bot
// API hang or fail, and checks each time that the bot's update loop moves
// on: a later message still reaches the inbox.
func TestReceivedFilesCannotStallTheBot(t *testing.T) {
	t.Parallel()

	// recvPath is where a file of the update goes, and oldPart the
	// temporary name choird used to download it to.
	recvPath := func(b *testBundle, updateID int64, name string) (final, oldPart string) {
		stored := fmt.Sprintf("tg-%d-%s", updateID, name)
		return filepath.Join(b.ws.dir, gateway.RecvDir, stored), filepath.Join(b.ws.dir, gateway.RecvDir, "."+stored+".part")
	}
	mkfifo := func(t *testing.T, p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("FIFOsAtTheFileNamesDoNotBlock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.tg.SendFile(ownerID, telegramtest.File{Kind: telegramtest.Document, Name: "report.txt", Data: []byte("report")})
		final, oldPart := recvPath(b, id, "report.txt")
		mkfifo(t, oldPart)
		mkfifo(t, final)
		b.run(t)
		// Should the open of a FIFO block, a reader opened at cleanup
		// (before the gateway is stopped) releases it.
		t.Cleanup(func() {
			for _, p := range []string{oldPart, final} {
				if r, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
					r.Close()
				}
			}
		})
		b.tg.SendText(ownerID, "after")
		rs := b.waitRows(t, 2)
		if len(rs[0].Attachments) != 1 || rs[1].Text != "after" {
			t.Fatalf("rows = %+v", rs)
		}
		got, err := os.ReadFile(final)
		if err != nil || string(got) != "report" {
			t.Errorf("stored file = %q, %v", got, err)
		}
		entries, _ := os.ReadDir(filepath.Join(b.ws.dir, gateway.RecvDir))
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".part-") {
				t.Errorf("temporary file %s left behind", e.Name())
			}
		}
	})

	t.Run("LinksAtTheFileNamesAreNotFollowed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Another workspace's file, which the links point at.
		victim := filepath.Join(t.TempDir(), "notes.txt")
		if err := os.WriteFile(victim, []byte("the other agent's notes"), 0o644); err != nil {
			t.Fatal(err)
		}
		id := b.tg.SendFile(ownerID, telegramtest.File{Kind: telegramtest.Document, Name: "report.txt", Data: []byte("report")})
		final, oldPart := recvPath(b, id, "report.txt")
		if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{final, oldPart} {
			if err := os.Symlink(victim, p); err != nil {
				t.Fatal(err)
			}
		}
		b.run(t)
		rs := b.waitRows(t, 1)
		if len(rs[0].Attachments) != 1 {
			t.Fatalf("rows = %+v", rs)
		}
		if got, _ := os.ReadFile(victim); string(got) != "the other agent's notes" {
			t.Errorf("the other workspace's file became %q", got)
		}
		fi, err := os.Lstat(final)
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("stored file: %v %v", fi, err)
		}
		if got, _ := os.ReadFile(final); string(got) != "report" {
			t.Errorf("stored file = %q", got)
		}
	})

	// hang makes a hook block until the test ends.
	hang := func(t *testing.T) func() {
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		return func() { <-release }
	}

	t.Run("GetFileThatHangsIsDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.FileTimeout = 50 * time.Millisecond
		b.opts.MaxUpdateAttempts = 2
		wait := hang(t)
		var calls atomic.Int32
		b.tg.OnCall("getFile", func(telegramtest.Call) { calls.Add(1); wait() })
		b.run(t)
		b.tg.SendFile(ownerID, telegramtest.File{Kind: telegramtest.Document, Name: "a.txt", Data: []byte("a")})
		b.tg.SendText(ownerID, "after")
		rs := b.waitRows(t, 1)
		if rs[0].Text != "after" {
			t.Errorf("rows = %+v", rs)
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("getFile called %d times, want 2", n)
		}
		wantDeadLettered(t, b)
	})

	t.Run("DownloadThatHangsIsDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.DownloadTimeout = 50 * time.Millisecond
		b.opts.MaxUpdateAttempts = 2
		wait := hang(t)
		b.tg.OnDownload(func(string) { wait() })
		b.run(t)
		b.tg.SendFile(ownerID, telegramtest.File{Kind: telegramtest.Document, Name: "a.txt", Data: []byte("a")})
		b.tg.SendText(ownerID, "after")
		rs := b.waitRows(t, 1)
		if rs[0].Text != "after" {
			t.Errorf("rows = %+v", rs)
		}
		wantDeadLettered(t, b)
		if entries, _ := os.ReadDir(filepath.Join(b.ws.dir, gateway.RecvDir)); len(entries) != 0 {
			t.Errorf("recv holds %v after the failed downloads", entries)
		}
	})

	t.Run("UpdateThatKeepsFailingIsDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.MaxUpdateAttempts = 3
		b.inbox.before = func(_ context.Context, msg gateway.InboundMessage) error {
			if msg.Text == "poison" {
				return errors.New("this message always fails")
			}
			return nil
		}
		b.run(t)
		id := b.tg.SendText(ownerID, "poison")
		b.tg.SendText(ownerID, "after")
		rs := b.waitRows(t, 1)
		if len(rs) != 1 || rs[0].Text != "after" {
			t.Errorf("rows = %+v", rs)
		}
		b.tg.WaitConfirmed(t, id)
		wantDeadLettered(t, b)
		if !strings.Contains(b.logs.String(), "this message always fails") {
			t.Errorf("the log does not say why:\n%s", b.logs.String())
		}
	})
}

// wantDeadLettered checks that an update was given up with a log line and
// the user asked to send it again.
func wantDeadLettered(t *testing.T, b *testBundle) {
	t.Helper()
	sent := b.tg.WaitSent(t, 1)
	if !strings.Contains(sent[0].Text, "could not be processed") || sent[0].ChatID != fmt.Sprint(ownerID) {
		t.Errorf("reply = %+v", sent[0])
	}
	if !strings.Contains(b.logs.String(), "update dead-lettered") || !strings.Contains(b.logs.String(), `"dm":"owner"`) {
		t.Errorf("no dead-letter log line:\n%s", b.logs.String())
	}
}
