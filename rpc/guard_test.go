package rpc_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/rpc"
)

// TestMisbehavingAgentCannotStarveAnother: one agent opens 1,000
// connections (over a listener capped at 64) and makes 10,000 calls with
// bad lease tokens; another agent's heartbeats, made all along, are all
// acknowledged, and the bad tokens soon stop reaching the authenticator
// (rate_limited instead of unauthenticated).
func TestMisbehavingAgentCannotStarveAnother(t *testing.T) {
	t.Parallel()
	b := setup(t, transportUDS, setupOpts{maxConns: 64})
	ctx := context.Background()
	mallory, _ := b.auth.add("mallory")

	// The honest agent heartbeats throughout, paced well within its own
	// rate limit, from before the flood: a throttled listener serves only
	// tokens it has seen succeed, so an agent whose first call comes once
	// the budget is spent is refused like mallory.
	stop, started := make(chan struct{}), make(chan struct{})
	var beats, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	wg.Go(func() {
		req := heartbeatReq(t, 0, 1, 10)
		for i := 0; ; i++ {
			if i == 1 {
				close(started)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := b.client.Heartbeat(ctx, req); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
			// A call that is no heartbeat needs the authenticator: a
			// known token still gets it while bad ones are throttled.
			if _, err := b.client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{}); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
			beats.Add(1)
		}
	})

	<-started

	// 1,000 connections, opened and left open (idle).
	var held []net.Conn
	for range 1000 {
		c, err := b.dial(ctx)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()

	// 10,000 calls with well-formed but wrong tokens, 8 at a time.
	var unauth, limited, other atomic.Int64
	calls := make(chan int)
	var bad sync.WaitGroup
	for range 8 {
		bad.Go(func() {
			tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return b.dial(ctx) }}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr}
			for i := range calls {
				wrong, _ := rpc.NewLeaseToken()
				req, _ := http.NewRequest(http.MethodPost, b.base+rpc.PathRPCPrefix+string(rpc.VerbFetchDynamicConfig), bytes.NewReader([]byte(`{}`)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(rpc.HeaderRequestID, fmt.Sprintf("bad-%d", i))
				req.Header.Set(rpc.HeaderSessionID, mallory)
				req.Header.Set("Authorization", "Bearer "+wrong)
				res, err := hc.Do(req)
				if err != nil {
					other.Add(1) // a connection closed by the cap: also refused
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				switch res.StatusCode {
				case http.StatusUnauthorized:
					unauth.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	for i := range 10000 {
		calls <- i
	}
	close(calls)
	bad.Wait()
	// A few more heartbeats once the flood is over, then stop.
	for n := beats.Load(); beats.Load() < n+5; {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	if f := failed.Load(); f > 0 {
		t.Errorf("%d of %d heartbeats and config fetches of the honest agent failed; first: %v", f, 2*beats.Load(), firstErr.Load())
	}
	if limited.Load() == 0 {
		t.Errorf("no bad-token call was throttled (%d unauthenticated, %d other): every one reached the authenticator",
			unauth.Load(), other.Load())
	}
	if unauth.Load() >= limited.Load() {
		t.Errorf("%d bad-token calls reached the authenticator, only %d were throttled", unauth.Load(), limited.Load())
	}
	t.Logf("heartbeats %d; bad calls: %d unauthenticated, %d rate limited, %d other", beats.Load(), unauth.Load(), limited.Load(), other.Load())
}
