package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
)

// TestClientDropsResentPushes serves a crafted event stream that repeats
// pushes, across a reconnect and an epoch change: the client must deliver
// each (epoch, seq) once and resume with the right Last-Event-ID.
func TestClientDropsResentPushes(t *testing.T) {
	t.Parallel()
	cfg := func(epoch string, seq uint64) string {
		p := rpc.Push{Epoch: epoch, Seq: seq, Kind: rpc.PushConfigChanged, ConfigChanged: &rpc.ConfigChanged{ConfigVersion: int64(seq)}}
		b, _ := json.Marshal(p)
		return fmt.Sprintf("id: %s-%d\nevent: config_changed\ndata: %s\n\n", epoch, seq, b)
	}
	var mu sync.Mutex
	var lastIDs []string
	conn := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conn++
		n := conn
		lastIDs = append(lastIDs, r.Header.Get(rpc.HeaderLastEventID))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1:
			io.WriteString(w, cfg("aa", 1)+cfg("aa", 2)+cfg("aa", 2)+cfg("aa", 1)+cfg("aa", 3))
		case 2:
			io.WriteString(w, cfg("aa", 3)+cfg("aa", 4)+"id: aa-5\nevent: config_changed\ndata: {\"bogus\":1}\n\n")
		case 3:
			io.WriteString(w, cfg("bb", 1)+cfg("bb", 1)+cfg("bb", 2))
		default:
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	token, _ := rpc.NewLeaseToken()
	c, err := client.New(client.Options{ControlPlane: client.TransportHTTP, Endpoint: srv.URL, SessionID: "00000000-0000-0000-0000-000000000001", LeaseToken: token, ReconnectMin: time.Millisecond, ReconnectMax: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	err = c.ReceivePushes(ctx, func(p rpc.Push) {
		got = append(got, fmt.Sprintf("%s-%d", p.Epoch, p.Seq))
		if len(got) == 6 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("ReceivePushes: %v", err)
	}
	if want := "[aa-1 aa-2 aa-3 aa-4 bb-1 bb-2]"; fmt.Sprint(got) != want {
		t.Errorf("delivered %v, want %s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	// The malformed aa-5 is skipped, and not asked for again.
	if want := "[ aa-3 aa-5]"; fmt.Sprint(lastIDs[:3]) != want {
		t.Errorf("Last-Event-IDs %q, want %s", lastIDs[:3], want)
	}
}
