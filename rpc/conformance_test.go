package rpc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// heartbeatReq returns a heartbeat replicating n events after base, with a
// payload of about payloadBytes per event.
func heartbeatReq(t testing.TB, base int64, n, payloadBytes int) rpc.HeartbeatRequest {
	t.Helper()
	req := rpc.HeartbeatRequest{BaseRev: base, NewRev: base + int64(n), ConfigVersion: 3, Timestamp: time.Now().UTC()}
	prev := rpc.Genesis
	req.HashPrev = prev
	for i := range n {
		text := strings.Repeat("x", max(payloadBytes-40, 0))
		e := rpc.Event{
			Rev: base + 1 + int64(i), Type: rpc.EventToolResultCommitted, Lane: "core:refactor-auth",
			Payload: json.RawMessage(`{"call_id":"c-` + fmt.Sprint(i) + `","output":"` + text + `"}`), CreatedAt: time.Now(),
		}
		if err := e.Seal(prev); err != nil {
			t.Fatal(err)
		}
		prev = e.Hash
		req.Patches = append(req.Patches, e)
	}
	req.HashNew = prev
	return req
}

// verbCase calls one verb through the Client, as agent code would, and
// checks the response.
type verbCase struct {
	verb  rpc.Verb
	call  func(ctx context.Context, cp *client.Client) (any, error)
	check func(t *testing.T, b *testBundle, resp any)
}

func verbCases(t testing.TB, b *testBundle) []verbCase {
	hb := heartbeatReq(t, 0, 2, 200)
	return []verbCase{
		{rpc.VerbInitHello, func(ctx context.Context, cp *client.Client) (any, error) {
			return cp.InitHello(ctx, rpc.InitHelloRequest{AgentID: b.agentID, SessionID: b.sessionID, ImageVersion: "v1", ToolManifestHash: "t1", SkillManifestHash: "s1"})
		}, func(t *testing.T, b *testBundle, resp any) {
			r := resp.(rpc.InitHelloResponse)
			if r.Status != rpc.HelloFresh || r.ResourceBindings.Workspace != "ws-alice" || r.ConfigVersion != 3 {
				t.Errorf("got %+v", r)
			}
		}},
		{rpc.VerbGetSecrets, func(ctx context.Context, cp *client.Client) (any, error) {
			return cp.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"git-token", "llm-key"}})
		}, func(t *testing.T, b *testBundle, resp any) {
			r := resp.(rpc.GetSecretsResponse)
			if r.Secrets["git-token"] != "s3cret-git" || r.Secrets["llm-key"] != "s3cret-llm" || len(r.Secrets) != 2 {
				t.Errorf("got %d secrets", len(r.Secrets))
			}
			if s := fmt.Sprint(r.Secrets); strings.Contains(s, "s3cret") {
				t.Errorf("secrets print their values: %s", s)
			}
		}},
		{rpc.VerbHeartbeat, func(ctx context.Context, cp *client.Client) (any, error) {
			return cp.Heartbeat(ctx, hb)
		}, func(t *testing.T, b *testBundle, resp any) {
			if r := resp.(rpc.HeartbeatResponse); r.AckRev != 2 || r.ConfigVersionLatest != 3 {
				t.Errorf("got %+v", r)
			}
		}},
		{rpc.VerbRequestApproval, func(ctx context.Context, cp *client.Client) (any, error) {
			return cp.RequestApproval(ctx, rpc.ApprovalRequest{RequestType: "tool:choir.exec", Summary: "run rm -rf build/?", Payload: json.RawMessage(`{"cmd":"rm -rf build/"}`)})
		}, func(t *testing.T, b *testBundle, resp any) {
			if r := resp.(rpc.ApprovalResponse); r.Status != rpc.ApprovalPending || uuid.Validate(r.ApprovalID) != nil {
				t.Errorf("got %+v", r)
			}
		}},
		{rpc.VerbReportStatus, func(ctx context.Context, cp *client.Client) (any, error) {
			tokens := int64(1200)
			return cp.ReportStatus(ctx, rpc.ReportStatusRequest{Lane: "edge", State: "IDLE", BudgetRemaining: wire.Budget{Tokens: &tokens}})
		}, func(t *testing.T, b *testBundle, resp any) {
			if !resp.(rpc.Ack).Ack {
				t.Error("not acknowledged")
			}
		}},
		{rpc.VerbTerminateSelf, func(ctx context.Context, cp *client.Client) (any, error) {
			return cp.TerminateSelf(ctx, rpc.TerminateSelfRequest{Reason: "user asked to stop"})
		}, func(t *testing.T, b *testBundle, resp any) {
			if !resp.(rpc.Ack).Ack {
				t.Error("not acknowledged")
			}
		}},
		{rpc.VerbFetchDynamicConfig, func(ctx context.Context, cp *client.Client) (any, error) {
			return cp.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: 1})
		}, func(t *testing.T, b *testBundle, resp any) {
			if r := resp.(rpc.FetchDynamicConfigResponse); r.ConfigVersion != 3 || string(r.Config) != `{"heartbeat_interval_ms":5000}` {
				t.Errorf("got %+v", r)
			}
		}},
		{rpc.VerbExecuteHostTool, func(ctx context.Context, cp *client.Client) (any, error) {
			return cp.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.web.browse", CallID: "call-1", Input: json.RawMessage(`{"url":"https://example.org","mode":"text"}`)})
		}, func(t *testing.T, b *testBundle, resp any) {
			r := resp.(rpc.ExecuteHostToolResponse)
			if r.CallID != "call-1" || r.Status != rpc.ToolSuccess || string(r.Output) != `{"url":"https://example.org","mode":"text"}` {
				t.Errorf("got %+v", r)
			}
		}},
		{rpc.VerbSendOutbound, func(ctx context.Context, cp *client.Client) (any, error) {
			return cp.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: "m-1", Kind: rpc.OutboundDocument, Text: "the report", FilePath: "report.pdf"})
		}, func(t *testing.T, b *testBundle, resp any) {
			if r := resp.(rpc.SendOutboundResponse); r.MessageID != "m-1" || r.OutboxID != 1 || r.Duplicate {
				t.Errorf("got %+v", r)
			}
		}},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, tr := range conformanceTransports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			conformance(t, tr)
		})
	}
}

func conformance(t *testing.T, tr string) {
	t.Run("EveryVerbRoundTrips", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		cases := verbCases(t, b)
		if len(cases) != len(rpc.Verbs) {
			t.Fatalf("%d cases for %d verbs", len(cases), len(rpc.Verbs))
		}
		for _, c := range cases {
			t.Run(string(c.verb), func(t *testing.T) {
				resp, err := c.call(t.Context(), b.client)
				if err != nil {
					t.Fatal(err)
				}
				c.check(t, b, resp)
				if n := b.h.count(c.verb); n != 1 {
					t.Errorf("handler ran %d times", n)
				}
				call := b.h.lastCall(c.verb)
				if call.Session.ID != b.sessionID || call.Session.AgentID != b.agentID || call.Verb != c.verb || uuid.Validate(call.RequestID) != nil {
					t.Errorf("handler got call %+v", call)
				}
			})
		}
	})

	t.Run("SendOutboundIsIdempotentByMessageID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		req := rpc.SendOutboundRequest{MessageID: "m-7", Kind: rpc.OutboundText, Text: "done"}
		first, err := b.client.SendOutbound(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := b.client.SendOutbound(t.Context(), req) // a fresh request ID
		if err != nil {
			t.Fatal(err)
		}
		if again.OutboxID != first.OutboxID || !again.Duplicate || first.Duplicate {
			t.Errorf("first %+v, again %+v", first, again)
		}
	})

	t.Run("EveryPushKindIsDeliveredInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		pushes := samplePushes()
		got := receive(t, b.client)
		for _, p := range pushes {
			if _, err := b.srv.Push(b.sessionID, p); err != nil {
				t.Fatal(err)
			}
		}
		for i, want := range pushes {
			p := got.next(t)
			if p.Seq != uint64(i+1) || p.Kind != want.Kind || p.Epoch == "" {
				t.Fatalf("push %d: got %v, want %s #%d", i, p, want.Kind, i+1)
			}
			p.Seq, p.Epoch = 0, ""
			if !reflect.DeepEqual(jsonOf(t, p), jsonOf(t, want)) {
				t.Errorf("push %d: got %s, want %s", i, jsonOf(t, p), jsonOf(t, want))
			}
		}
		if len(pushes) != len(rpc.PushKinds) {
			t.Errorf("%d samples for %d kinds", len(pushes), len(rpc.PushKinds))
		}
		if !b.srv.StreamAttached(b.sessionID) {
			t.Error("StreamAttached is false while the agent listens")
		}
	})

	t.Run("PushesQueuedBeforeConnectArrive", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		for i := range 3 {
			if _, err := b.srv.Push(b.sessionID, configChanged(int64(i+1))); err != nil {
				t.Fatal(err)
			}
		}
		got := receive(t, b.client)
		for i := range 3 {
			if p := got.next(t); p.ConfigChanged.ConfigVersion != int64(i+1) {
				t.Fatalf("push %d: got %v", i, p)
			}
		}
	})

	t.Run("ReconnectResumesWithoutLossOrDuplication", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		got := receive(t, b.client)
		var pushed, seen uint64
		push := func(n int) {
			for range n {
				pushed++
				if _, err := b.srv.Push(b.sessionID, configChanged(int64(pushed))); err != nil {
					t.Fatal(err)
				}
			}
		}
		expectAll := func() {
			for seen < pushed {
				p := got.next(t)
				seen++
				if p.Seq != seen || p.ConfigChanged.ConfigVersion != int64(seen) {
					t.Fatalf("got %v (config %d), want seq and config %d", p, p.ConfigChanged.ConfigVersion, seen)
				}
			}
		}
		push(5)
		b.ln.dropAll() // Cut the stream, likely before the agent read everything.
		push(5)        // Pushed while the agent is away.
		expectAll()
		b.ln.dropAll() // Cut an idle stream.
		push(5)
		expectAll()
		got.none(t, 100*time.Millisecond)
		if n := b.ln.accepts.Load(); n < 2 {
			t.Errorf("%d connections: the stream never reconnected", n)
		}
	})

	t.Run("SilentStreamIsReplaced", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{ping: time.Hour})
		opts := b.opts
		opts.StreamIdleTimeout = 50 * time.Millisecond
		got := receive(t, b.newClient(t, opts))
		deadline := time.Now().Add(5 * time.Second)
		for b.ln.accepts.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := b.srv.Push(b.sessionID, configChanged(9)); err != nil {
			t.Fatal(err)
		}
		if p := got.next(t); p.Seq != 1 {
			t.Errorf("got %v", p)
		}
		if n := b.ln.accepts.Load(); n < 3 {
			t.Errorf("%d connections: a silent stream was kept", n)
		}
	})

	t.Run("FullPushBufferRefusesNewPushes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{limits: rpc.Limits{PushBuffer: 4}})
		for i := range 4 {
			if _, err := b.srv.Push(b.sessionID, configChanged(int64(i+1))); err != nil {
				t.Fatal(err)
			}
		}
		_, err := b.srv.Push(b.sessionID, configChanged(5))
		if !errors.Is(err, rpc.ErrPushBufferFull) {
			t.Fatalf("got %v, want ErrPushBufferFull", err)
		}
		got := receive(t, b.client)
		for i := range 4 {
			if p := got.next(t); p.Seq != uint64(i+1) {
				t.Fatalf("got %v", p)
			}
		}
		// Delivered pushes make room again, once the server has seen its
		// write complete (which may be just after the agent read them).
		waitFor(t, func() bool {
			_, err := b.srv.Push(b.sessionID, configChanged(10))
			return err == nil
		})
		for i := range 4 {
			if p := got.next(t); p.Seq != uint64(5+i) {
				t.Fatalf("got %v", p)
			}
			if _, err := b.srv.Push(b.sessionID, configChanged(int64(11+i))); err != nil {
				t.Fatalf("push after delivery: %v", err)
			}
		}
	})

	t.Run("InvalidPushIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		_, err := b.srv.Push(b.sessionID, rpc.Push{Kind: rpc.PushCancel, Shutdown: &rpc.Shutdown{Reason: "x"}})
		if !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("got %v", err)
		}
	})

	t.Run("RevokedSessionEndsItsStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		errc := make(chan error, 1)
		go func() { errc <- b.client.ReceivePushes(t.Context(), func(rpc.Push) {}) }()
		waitFor(t, func() bool { return b.srv.StreamAttached(b.sessionID) })
		b.auth.revoke(b.sessionID)
		if err := b.srv.CloseSession(t.Context(), b.sessionID); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, wire.ErrUnauthenticated) {
				t.Errorf("got %v, want unauthenticated", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("ReceivePushes kept running after the session was revoked")
		}
	})

	t.Run("AuthFailuresExecuteNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		otherSession, otherToken := b.auth.add("bob")
		revokedSession, revokedToken := b.auth.add("carol")
		b.auth.revoke(revokedSession)
		wrongToken, _ := rpc.NewLeaseToken()
		for _, c := range []struct {
			name             string
			session, token   string
			wantUnauthorized bool
		}{
			{"WrongToken", b.sessionID, wrongToken, true},
			{"OtherSessionsToken", b.sessionID, otherToken, true},
			{"TokenForUnknownSession", uuid.NewString(), b.token, true},
			{"RevokedToken", revokedSession, revokedToken, true},
			{"MalformedToken", b.sessionID, "not-a-token", true},
			{"OtherSessionUsesItsOwn", otherSession, otherToken, false},
		} {
			t.Run(c.name, func(t *testing.T) {
				opts := b.opts
				opts.SessionID, opts.LeaseToken = c.session, c.token
				cl := b.newClient(t, opts)
				for _, vc := range verbCases(t, b) {
					if vc.verb == rpc.VerbInitHello {
						continue // Its payload names b's session.
					}
					_, err := vc.call(t.Context(), cl)
					if c.wantUnauthorized != errors.Is(err, wire.ErrUnauthenticated) {
						t.Errorf("%s: got %v", vc.verb, err)
					}
				}
				if c.wantUnauthorized {
					err := cl.ReceivePushes(t.Context(), func(rpc.Push) { t.Error("push delivered") })
					if !errors.Is(err, wire.ErrUnauthenticated) {
						t.Errorf("ReceivePushes: got %v", err)
					}
				}
			})
		}
		if n := b.h.total(); n != len(rpc.Verbs)-1 {
			t.Errorf("handler ran %d times, want %d (only the valid session's calls)", n, len(rpc.Verbs)-1)
		}
		t.Run("MissingToken", func(t *testing.T) {
			hc, _ := b.rawClient(t)
			res := rawPost(t, hc, b, rpc.VerbReportStatus, `{"lane":"edge","state":"IDLE","budget_remaining":{}}`, func(h http.Header) { h.Del("Authorization") })
			wantError(t, res, http.StatusUnauthorized, wire.CodeUnauthenticated, "Authorization")
		})
	})

	t.Run("RateLimitNamesTheLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{limits: rpc.Limits{RequestsPerSecond: 0.5, Burst: 3}})
		status := rpc.ReportStatusRequest{Lane: "edge", State: "IDLE"}
		for i := range 3 {
			if _, err := b.client.ReportStatus(t.Context(), status); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		_, err := b.client.ReportStatus(t.Context(), status)
		var e *wire.Error
		if !errors.Is(err, wire.ErrRateLimited) || !errors.As(err, &e) {
			t.Fatalf("got %v, want rate_limited", err)
		}
		if !strings.Contains(e.Message, "0.5 requests/s") || !strings.Contains(e.Message, "bursts of 3") || e.RetryAfter <= 0 {
			t.Errorf("message %q, retry after %s", e.Message, e.RetryAfter)
		}
		if n := b.h.count(rpc.VerbReportStatus); n != 3 {
			t.Errorf("handler ran %d times", n)
		}
	})

	t.Run("PayloadOverCapIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{limits: rpc.Limits{MaxPayloadBytes: 2048}})
		big := rpc.ExecuteHostToolRequest{ToolName: "test.echo", CallID: "c1", Input: json.RawMessage(`{"x":"` + strings.Repeat("a", 3000) + `"}`)}
		_, err := b.client.ExecuteHostTool(t.Context(), big)
		if !errors.Is(err, wire.ErrPayloadTooLarge) || !strings.Contains(err.Error(), "limit of 2048 bytes") {
			t.Fatalf("got %v", err)
		}
		if n := b.h.total(); n != 0 {
			t.Errorf("handler ran %d times", n)
		}
		big.Input = json.RawMessage(`{"x":"small"}`)
		if _, err := b.client.ExecuteHostTool(t.Context(), big); err != nil {
			t.Errorf("next call: %v", err)
		}
	})

	t.Run("StrictDecodingRejects", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{limits: rpc.Limits{MaxDepth: 8}})
		hc, _ := b.rawClient(t)
		deep := strings.Repeat(`{"a":`, 10) + "1" + strings.Repeat("}", 10)
		for _, c := range []struct {
			name, verb, body, want string
		}{
			{"UnknownField", "REPORT_STATUS", `{"lane":"edge","state":"IDLE","budget_remaining":{},"mood":"good"}`, "$.mood: unknown field"},
			{"DuplicateKey", "REPORT_STATUS", `{"lane":"edge","lane":"edge","state":"IDLE","budget_remaining":{}}`, "$.lane: duplicate key"},
			{"TrailingData", "REPORT_STATUS", `{"lane":"edge","state":"IDLE","budget_remaining":{}} {}`, "$"},
			{"OverDeep", "REQUEST_APPROVAL", `{"request_type":"t","summary":"s","payload":` + deep + `}`, "deep"},
			{"WrongType", "HEARTBEAT", `{"base_rev":"0","new_rev":0,"patches":[],"config_version":0,"hash_prev":"` + rpc.Genesis.String() + `","hash_new":"` + rpc.Genesis.String() + `","timestamp":"2026-11-21T10:00:00Z"}`, "$.base_rev"},
			{"EmptyBody", "TERMINATE_SELF", ``, "empty"},
			{"NotJSON", "TERMINATE_SELF", `reason=bye`, "syntax error"},
			{"PayloadOfAnotherVerb", "REPORT_STATUS", `{"reason":"bye"}`, "$.reason: unknown field"},
			{"FailsValidation", "REPORT_STATUS", `{"lane":"kitchen","state":"IDLE","budget_remaining":{}}`, "$.lane"},
			{"BrokenHashChain", "HEARTBEAT", brokenHeartbeat(t), "$.patches[1]"},
		} {
			t.Run(c.name, func(t *testing.T) {
				res := rawPost(t, hc, b, rpc.Verb(c.verb), c.body, nil)
				wantError(t, res, http.StatusBadRequest, wire.CodeBadRequest, c.want)
			})
		}
		if n := b.h.total(); n != 0 {
			t.Errorf("handler ran %d times", n)
		}
	})

	t.Run("ReplayReturnsTheFirstResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		for _, c := range verbCases(t, b) {
			t.Run(string(c.verb), func(t *testing.T) {
				ctx := client.WithRequestID(t.Context(), "replay-"+string(c.verb))
				first, err := c.call(ctx, b.client)
				if err != nil {
					t.Fatal(err)
				}
				again, err := c.call(ctx, b.client)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(jsonOf(t, first), jsonOf(t, again)) {
					t.Errorf("first %s, replay %s", jsonOf(t, first), jsonOf(t, again))
				}
				want := 1
				if !c.verb.Mutating() {
					want = 2 // Reads run again; their responses are not stored.
				}
				if n := b.h.count(c.verb); n != want {
					t.Errorf("handler ran %d times, want %d", n, want)
				}
			})
		}
	})

	t.Run("ReplayIsMarkedOnTheWire", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		hc, _ := b.rawClient(t)
		body := `{"lane":"edge","state":"IDLE","budget_remaining":{}}`
		sameID := func(h http.Header) { h.Set(rpc.HeaderRequestID, "r-wire") }
		first := rawPost(t, hc, b, rpc.VerbReportStatus, body, sameID)
		again := rawPost(t, hc, b, rpc.VerbReportStatus, body, sameID)
		if first.status != 200 || again.status != 200 || string(first.body) != string(again.body) {
			t.Fatalf("first %d %s, again %d %s", first.status, first.body, again.status, again.body)
		}
		if first.header.Get(rpc.HeaderReplayed) != "" || again.header.Get(rpc.HeaderReplayed) != "true" {
			t.Errorf("%s: first %q, again %q", rpc.HeaderReplayed, first.header.Get(rpc.HeaderReplayed), again.header.Get(rpc.HeaderReplayed))
		}
		if got := again.header.Get(rpc.HeaderRequestID); got != "r-wire" {
			t.Errorf("request ID echoed as %q", got)
		}
	})

	t.Run("ReplayedErrorIsTheFirstError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		ctx := client.WithRequestID(t.Context(), "r-missing")
		req := rpc.ExecuteHostToolRequest{ToolName: "test.missing", CallID: "c1", Input: json.RawMessage(`{}`)}
		for range 2 {
			if _, err := b.client.ExecuteHostTool(ctx, req); !errors.Is(err, wire.ErrNotFound) {
				t.Fatalf("got %v", err)
			}
		}
		if n := b.h.count(rpc.VerbExecuteHostTool); n != 1 {
			t.Errorf("handler ran %d times", n)
		}
	})

	t.Run("ReplayWithAnotherPayloadConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		ctx := client.WithRequestID(t.Context(), "r-1")
		if _, err := b.client.ReportStatus(ctx, rpc.ReportStatusRequest{Lane: "edge", State: "IDLE"}); err != nil {
			t.Fatal(err)
		}
		_, err := b.client.ReportStatus(ctx, rpc.ReportStatusRequest{Lane: "edge", State: "BUSY"})
		if !errors.Is(err, wire.ErrConflict) {
			t.Fatalf("got %v", err)
		}
		_, err = b.client.TerminateSelf(ctx, rpc.TerminateSelfRequest{Reason: "bye"})
		if !errors.Is(err, wire.ErrConflict) {
			t.Fatalf("other verb: got %v", err)
		}
		if n := b.h.total(); n != 1 {
			t.Errorf("handler ran %d times", n)
		}
	})

	t.Run("ConcurrentDuplicatesRunOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		ctx := client.WithRequestID(t.Context(), "r-dup")
		req := rpc.ExecuteHostToolRequest{ToolName: "test.block", CallID: "c1", Input: json.RawMessage(`{}`)}
		const n = 8
		var wg sync.WaitGroup
		outs := make([]rpc.ExecuteHostToolResponse, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { outs[i], errs[i] = b.client.ExecuteHostTool(ctx, req) })
		}
		<-b.h.entered
		time.Sleep(50 * time.Millisecond) // Let the duplicates arrive and wait.
		close(b.h.release)
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("call %d: %v", i, errs[i])
			}
			if string(outs[i].Output) != string(outs[0].Output) {
				t.Errorf("call %d got %s, call 0 got %s", i, outs[i].Output, outs[0].Output)
			}
		}
		if got := b.h.blockers.Load(); got != 1 {
			t.Errorf("handler ran %d times", got)
		}
	})

	t.Run("LostResponseIsRetriedAndNotRunTwice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		out, err := b.client.ExecuteHostTool(t.Context(), rpc.ExecuteHostToolRequest{ToolName: "test.cut", CallID: "c1", Input: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatalf("the client did not retry: %v", err)
		}
		if n := b.h.count(rpc.VerbExecuteHostTool); n != 1 || len(out.Output) == 0 {
			t.Errorf("handler ran %d times, output %s", n, out.Output)
		}
		if n := b.ln.accepts.Load(); n != 2 {
			t.Errorf("%d connections, want 2", n)
		}
	})

	t.Run("ShutdownEndsStreams", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		ctx, cancel := context.WithCancel(t.Context())
		rdone := make(chan error, 1)
		go func() { rdone <- b.client.ReceivePushes(ctx, func(rpc.Push) {}) }()
		waitFor(t, func() bool { return b.srv.StreamAttached(b.sessionID) })
		t0 := time.Now()
		if err := b.stopServer(); err != nil {
			t.Errorf("serve: %v", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("shutdown took %s with a stream open", d)
		}
		cancel()
		if err := <-rdone; !errors.Is(err, context.Canceled) {
			t.Errorf("ReceivePushes: %v", err)
		}
	})

	t.Run("ConnectionSurvivesBadRequests", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{limits: rpc.Limits{MaxPayloadBytes: 4096}})
		hc, dials := b.rawClient(t)
		valid := `{"lane":"edge","state":"IDLE","budget_remaining":{}}`
		for _, c := range []struct {
			name   string
			verb   string
			body   string
			edit   func(http.Header)
			status int
			code   wire.Code
		}{
			{"MalformedRequestID", "REPORT_STATUS", valid, func(h http.Header) { h.Set(rpc.HeaderRequestID, "bad id!") }, 400, wire.CodeBadRequest},
			{"MissingRequestID", "REPORT_STATUS", valid, func(h http.Header) { h.Del(rpc.HeaderRequestID) }, 400, wire.CodeBadRequest},
			{"MalformedSessionID", "REPORT_STATUS", valid, func(h http.Header) { h.Set(rpc.HeaderSessionID, "alice") }, 400, wire.CodeBadRequest},
			{"RepeatedHeader", "REPORT_STATUS", valid, func(h http.Header) { h.Add(rpc.HeaderSessionID, b.sessionID) }, 400, wire.CodeBadRequest},
			{"WrongContentType", "REPORT_STATUS", valid, func(h http.Header) { h.Set("Content-Type", "text/plain") }, 400, wire.CodeBadRequest},
			{"UnknownVerb", "SELF_DESTRUCT", valid, nil, 404, wire.CodeUnknownVerb},
			{"OversizePayload", "REPORT_STATUS", `{"lane":"edge","state":"` + strings.Repeat("A", 5000) + `"}`, nil, 413, wire.CodePayloadTooLarge},
			{"OversizeUnauthenticated", "REPORT_STATUS", strings.Repeat(" ", 6000), func(h http.Header) { h.Del("Authorization") }, 401, wire.CodeUnauthenticated},
			{"MismatchedPayload", "REPORT_STATUS", `{"base_rev":0}`, nil, 400, wire.CodeBadRequest},
			{"BadJSON", "REPORT_STATUS", `{"lane":`, nil, 400, wire.CodeBadRequest},
			{"HandlerPanic", "EXECUTE_HOST_TOOL", `{"tool_name":"test.panic","call_id":"c1","input":{}}`, nil, 500, wire.CodeInternal},
			{"Valid", "REPORT_STATUS", valid, nil, 200, ""},
		} {
			res := rawPost(t, hc, b, rpc.Verb(c.verb), c.body, c.edit)
			if c.status == 200 {
				if res.status != 200 {
					t.Errorf("%s: status %d: %s", c.name, res.status, res.body)
				}
				continue
			}
			wantError(t, res, c.status, c.code, "")
		}
		if n := dials.Load(); n != 1 {
			t.Errorf("%d connections for the sequence; bad requests must not cost the connection", n)
		}
	})

	t.Run("HandlerErrorsKeepTheirCodeButNotInternals", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		call := func(tool string) error {
			_, err := b.client.ExecuteHostTool(t.Context(), rpc.ExecuteHostToolRequest{ToolName: tool, CallID: "c1", Input: json.RawMessage(`{}`)})
			return err
		}
		if err := call("test.missing"); !errors.Is(err, wire.ErrNotFound) || !strings.Contains(err.Error(), "memory document 42") {
			t.Errorf("not found: %v", err)
		}
		for _, tool := range []string{"test.fail", "test.panic", "test.invalid"} {
			err := call(tool)
			if !errors.Is(err, wire.ErrInternal) || !strings.Contains(err.Error(), "ref ") ||
				strings.Contains(err.Error(), "postgres") || strings.Contains(err.Error(), "exploded") {
				t.Errorf("%s: %v", tool, err)
			}
		}
		if _, err := b.client.GetSecrets(t.Context(), rpc.GetSecretsRequest{Resources: []string{"root-password"}}); !errors.Is(err, wire.ErrPermissionDenied) {
			t.Errorf("unbound secret: %v", err)
		}
	})

	t.Run("InitHelloMustNameItsOwnSession", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		req := rpc.InitHelloRequest{AgentID: b.agentID, SessionID: uuid.NewString(), ImageVersion: "v1", ToolManifestHash: "t", SkillManifestHash: "s"}
		if _, err := b.client.InitHello(t.Context(), req); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("other session: %v", err)
		}
		req.SessionID, req.AgentID = b.sessionID, "mallory"
		if _, err := b.client.InitHello(t.Context(), req); !errors.Is(err, wire.ErrPermissionDenied) {
			t.Errorf("other agent: %v", err)
		}
		if n := b.h.total(); n != 0 {
			t.Errorf("handler ran %d times", n)
		}
	})

	t.Run("TamperedEventIsRefusedByTheServer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		req := heartbeatReq(t, 0, 2, 50)
		req.Patches[0].Payload = json.RawMessage(`{"call_id":"forged"}`) // Links intact, hash stale.
		_, err := b.client.Heartbeat(t.Context(), req)
		if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "does not match its contents") {
			t.Errorf("got %v", err)
		}
		if n := b.h.total(); n != 0 {
			t.Errorf("handler ran %d times", n)
		}
	})

	t.Run("InvalidRequestIsNeverSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, tr, setupOpts{})
		_, err := b.client.SendOutbound(t.Context(), rpc.SendOutboundRequest{MessageID: "m1", Kind: rpc.OutboundPhoto, FilePath: "../../etc/passwd"})
		if !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("got %v", err)
		}
		if n := b.ln.accepts.Load(); n != 0 {
			t.Errorf("%d connections", n)
		}
	})
}

// brokenHeartbeat returns a heartbeat body whose second event does not
// chain to the first.
func brokenHeartbeat(t testing.TB) string {
	req := heartbeatReq(t, 0, 3, 10)
	req.Patches[1].HashPrev[0] ^= 1
	return string(jsonOf(t, req))
}

func samplePushes() []rpc.Push {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	return []rpc.Push{
		{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: 7, Gateway: "telegram-main", ChatID: "42", UserID: "42", Text: "hello", ReceivedAt: at,
			Attachments: []rpc.Attachment{{Kind: "photo", FilePath: "7/cat.jpg", MimeType: "image/jpeg", Size: 1234}}}},
		{Kind: rpc.PushInjection, Injection: &rpc.Injection{InboxID: 8, Text: "use tabs", ReceivedAt: at}},
		{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelCore, JobName: "refactor-auth", Reason: "user said stop"}},
		{Kind: rpc.PushApprovalResolved, ApprovalResolved: &rpc.ApprovalResolved{ApprovalID: uuid.NewString(), Status: rpc.ApprovalApproved, ResolvedBy: "telegram:dm-1", ResolvedAt: at}},
		configChanged(42),
		{Kind: rpc.PushShutdown, Shutdown: &rpc.Shutdown{Reason: "choirctl agent stop", GraceMS: 30000}},
		{Kind: rpc.PushCompact, Compact: &rpc.Compact{Reason: "/compact"}},
	}
}

func configChanged(v int64) rpc.Push {
	return rpc.Push{Kind: rpc.PushConfigChanged, ConfigChanged: &rpc.ConfigChanged{ConfigVersion: v}}
}

// pushes collects what ReceivePushes delivers.
type pushes struct{ ch chan rpc.Push }

func receive(t *testing.T, c *client.Client) *pushes {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &pushes{ch: make(chan rpc.Push, 1024)}
	done := make(chan error, 1)
	go func() { done <- c.ReceivePushes(ctx, func(x rpc.Push) { p.ch <- x }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("ReceivePushes: %v", err)
		}
	})
	return p
}

func (p *pushes) next(t *testing.T) rpc.Push {
	t.Helper()
	select {
	case x := <-p.ch:
		return x
	case <-time.After(10 * time.Second):
		t.Fatal("no push within 10s")
		return rpc.Push{}
	}
}

func (p *pushes) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case x := <-p.ch:
		t.Errorf("unexpected push %v", x)
	case <-time.After(d):
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func jsonOf(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type rawResponse struct {
	status int
	body   []byte
	header http.Header
	close  bool // the response said Connection: close
}

// rawPost sends a hand-made call on hc, with valid envelope headers that
// edit may change.
func rawPost(t *testing.T, hc *http.Client, b *testBundle, verb rpc.Verb, body string, edit func(http.Header)) rawResponse {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.base+rpc.PathRPCPrefix+string(verb), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(rpc.HeaderRequestID, uuid.NewString())
	req.Header.Set(rpc.HeaderSessionID, b.sessionID)
	req.Header.Set("Authorization", "Bearer "+b.token)
	if edit != nil {
		edit(req.Header)
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rb, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rawResponse{status: res.StatusCode, body: rb, header: res.Header}
}

// wantError checks an error response: status, the {"error","code"} form,
// and that the message contains want.
func wantError(t *testing.T, res rawResponse, status int, code wire.Code, want string) {
	t.Helper()
	var eb map[string]any
	dec := json.NewDecoder(bytes.NewReader(res.body))
	if err := dec.Decode(&eb); err != nil {
		t.Fatalf("error body %q: %v", res.body, err)
	}
	if res.status != status || eb["code"] != string(code) || !strings.Contains(fmt.Sprint(eb["error"]), want) {
		t.Errorf("got %d %s, want %d %s containing %q", res.status, res.body, status, code, want)
	}
	if ct := res.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
}
