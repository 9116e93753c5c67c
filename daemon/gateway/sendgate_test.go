package gateway_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/outbox/message"
)

// TestSendGate: a message the delivery worker sends passes its send gate
// exactly once, when the request is complete but for its end, so the Bot
// API has no complete request before the gate (the fake records nothing);
// a failing gate abandons the request, and nothing is sent. Both for a
// text (a body of known length) and for a file (multipart, streamed).
func TestSendGate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g, err := gateway.New(b.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".choirtmp", "send"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".choirtmp", "send", "notes.txt"), []byte(strings.Repeat("a line of notes\n", 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	parts := map[string]message.Part{
		"Text": {Gateway: "tg", ChatID: "100", Kind: message.Text, Text: "gated hello"},
		"File": {Gateway: "tg", ChatID: "100", Kind: message.Document, Text: "gated file",
			File: message.File{Dir: dir, Path: ".choirtmp/send/notes.txt"}},
	}
	for name, part := range parts {
		t.Run(name+"PassesTheGateOnceBeforeItIsSent", func(t *testing.T) {
			before := len(b.tg.SentTo(100))
			var calls atomic.Int32
			gate := func(context.Context) error {
				calls.Add(1)
				if n := len(b.tg.SentTo(100)); n != before {
					t.Errorf("the Bot API had the message (%d sent, %d before) when the gate was called", n, before)
				}
				return nil
			}
			if _, err := g.Send(message.WithSendGate(context.Background(), gate), part); err != nil {
				t.Fatal(err)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("gate called %d times, want once", n)
			}
			if n := len(b.tg.SentTo(100)); n != before+1 {
				t.Errorf("%d messages sent, want %d", n, before+1)
			}
		})
		t.Run(name+"IsNotSentWhenTheGateFails", func(t *testing.T) {
			before := len(b.tg.SentTo(100))
			refused := errors.New("claimed by another run")
			_, err := g.Send(message.WithSendGate(context.Background(), func(context.Context) error { return refused }), part)
			if err == nil {
				t.Fatal("Send succeeded past a failing gate")
			}
			if n := len(b.tg.SentTo(100)); n != before {
				t.Errorf("%d messages sent past a failing gate", n-before)
			}
		})
	}
}
