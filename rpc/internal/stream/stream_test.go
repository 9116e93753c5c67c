package stream

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestSSEReader(t *testing.T) {
	t.Parallel()
	in := ": connected\n\nid: ab-1\nevent: cancel\ndata: {\"a\":\ndata: 1}\n\n\r\nid: ab-2\r\ndata: x\r\nretry: 5\r\nfoo\r\n\r\n: ping\n\n"
	r := NewReader(strings.NewReader(in), 1<<10)
	var got []string
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%v|%s|%s|%s", ev.Comment, ev.ID, ev.Event, ev.Data))
	}
	want := []string{"true|||", "false|ab-1|cancel|{\"a\":\n1}", "false|ab-2||x", "true|||"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q\nwant %q", got, want)
	}

	t.Run("OverlongLineIsRefused", func(t *testing.T) {
		t.Parallel()
		r := NewReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 50)
		if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "over 50 bytes") {
			t.Errorf("got %v", err)
		}
	})
}

func TestParseEventID(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{
		"ab12-1": true, "ab12-18446744073709551615": true,
		"ab12-0": false, "AB-1": false, "-1": false, "ab": false, "ab-x": false, "ab-1-2": false, "ab-18446744073709551616": false,
	} {
		if _, _, got := ParseEventID(id); got != ok {
			t.Errorf("%q: ok %v, want %v", id, got, ok)
		}
	}
}

// FuzzSSEReader fuzzes the agent's event-stream parser.
func FuzzSSEReader(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), 1<<10)
		for range 1 << 12 {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if len(ev.Data) > 1<<10 {
				t.Fatalf("event of %d bytes passed a 1 KiB limit", len(ev.Data))
			}
		}
	})
}
