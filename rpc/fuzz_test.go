package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/rpc/internal/check"
	"github.com/choirhq/choir/rpc/wire"
)

// The fuzz targets check that no input makes a decoder or the server panic,
// that every refusal is a well-formed *Error, and that whatever a decoder
// accepts survives a round trip unchanged. Their seed corpora live in
// testdata/fuzz; RPC_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds
// regenerates them from the samples below.

const fuzzMaxBytes, fuzzMaxDepth = 1 << 16, 32

var fuzzAt = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func fuzzChain() (events []Event, last Hash) {
	prev := Hash{}
	for i := range 2 {
		e := Event{Rev: int64(i + 1), Type: EventToolCallCommitted, Lane: "core:job", Payload: json.RawMessage(`{"tool":"choir.fs.read","n":[1,2.5]}`), CreatedAt: fuzzAt}
		if err := e.Seal(prev); err != nil {
			panic(err)
		}
		events = append(events, e)
		prev = e.Hash
	}
	return events, prev
}

// fuzzSeeds are valid samples of every payload type, by fuzz target.
func fuzzSeeds() map[string][]any {
	events, last := fuzzChain()
	one := int64(1)
	return map[string][]any{
		"FuzzDecodeInitHelloRequest": {InitHelloRequest{AgentID: "alice", SessionID: "6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11", ImageVersion: "v1", ToolManifestHash: "t", SkillManifestHash: "s"}},
		"FuzzDecodeInitHelloResponse": {
			InitHelloResponse{Status: HelloFresh, ResourceBindings: ResourceBindings{Workspace: "w", Models: map[string]string{"edge": "m"}, Secrets: []string{"k"}}},
			InitHelloResponse{Status: HelloResumed, Snapshot: &Snapshot{Rev: 0, State: json.RawMessage(`{"lane_state":{}}`)}, TailEvents: events, AckedRev: 2, AckedHash: last, ConfigVersion: 4},
		},
		"FuzzDecodeGetSecretsRequest":          {GetSecretsRequest{Resources: []string{"git-dev-token", "openrouter-key"}}},
		"FuzzDecodeGetSecretsResponse":         {GetSecretsResponse{Secrets: Secrets{"git-dev-token": "x"}}},
		"FuzzDecodeHeartbeatRequest":           {HeartbeatRequest{BaseRev: 0, NewRev: 2, Patches: events, ConfigVersion: 41, HashNew: last, Timestamp: fuzzAt}},
		"FuzzDecodeHeartbeatResponse":          {HeartbeatResponse{AckRev: 2, ConfigVersionLatest: 41}},
		"FuzzDecodeApprovalRequest":            {ApprovalRequest{RequestType: "tool:choir.exec", Summary: "run it?", Payload: json.RawMessage(`{"cmd":"make"}`)}},
		"FuzzDecodeApprovalResponse":           {ApprovalResponse{ApprovalID: "6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11", Status: ApprovalPending}},
		"FuzzDecodeReportStatusRequest":        {ReportStatusRequest{Lane: "core:job", State: "CORE_REASONING", Skill: "tdd", Step: "red", BudgetRemaining: wire.Budget{Tokens: &one}}},
		"FuzzDecodeReportStatusResponse":       {Ack{Ack: true}},
		"FuzzDecodeTerminateSelfRequest":       {TerminateSelfRequest{Reason: "done"}},
		"FuzzDecodeTerminateSelfResponse":      {Ack{Ack: true}},
		"FuzzDecodeFetchDynamicConfigRequest":  {FetchDynamicConfigRequest{CurrentConfigVersion: 3}},
		"FuzzDecodeFetchDynamicConfigResponse": {FetchDynamicConfigResponse{ConfigVersion: 4, Config: json.RawMessage(`{"a":{"b":[1]}}`)}},
		"FuzzDecodeExecuteHostToolRequest":     {ExecuteHostToolRequest{ToolName: "choir.web.browse", CallID: "c-1", Input: json.RawMessage(`{"url":"https://example.org"}`)}},
		"FuzzDecodeExecuteHostToolResponse":    {ExecuteHostToolResponse{CallID: "c-1", Status: ToolSuccess, Output: json.RawMessage(`{"text":"hi"}`)}},
		"FuzzDecodeSendOutboundRequest": {
			SendOutboundRequest{MessageID: "m-1", Kind: OutboundText, Text: "hello"},
			SendOutboundRequest{MessageID: "m-2", Kind: OutboundVoice, FilePath: "reply.ogg"},
		},
		"FuzzDecodeSendOutboundResponse": {SendOutboundResponse{MessageID: "m-1", OutboxID: 9, Status: OutboundPending}},
		"FuzzDecodePush": {
			Push{Epoch: "ab", Seq: 1, Kind: PushUserMessage, UserMessage: &UserMessage{InboxID: 1, Gateway: "tg", ChatID: "1", UserID: "1", Text: "hi", ReceivedAt: fuzzAt, Attachments: []Attachment{{Kind: "photo", FilePath: "1/a.jpg", Size: 3}}}},
			Push{Epoch: "ab", Seq: 2, Kind: PushInjection, Injection: &Injection{InboxID: 2, Text: "also", ReceivedAt: fuzzAt}},
			Push{Epoch: "ab", Seq: 3, Kind: PushCancel, Cancel: &Cancel{Scope: CancelCore, JobName: "job"}},
			Push{Epoch: "ab", Seq: 4, Kind: PushApprovalResolved, ApprovalResolved: &ApprovalResolved{ApprovalID: "a", Status: ApprovalRejected, ResolvedBy: "timeout", ResolvedAt: fuzzAt}},
			Push{Epoch: "ab", Seq: 5, Kind: PushConfigChanged, ConfigChanged: &ConfigChanged{ConfigVersion: 5}},
			Push{Epoch: "ab", Seq: 6, Kind: PushShutdown, Shutdown: &Shutdown{Reason: "stop", GraceMS: 1000}},
		},
		"FuzzDecodeErrorBody": {wire.ErrorBody{Error: "slow down", Code: wire.CodeRateLimited, RetryAfterMS: 20}},
	}
}

// fuzzDecode fuzzes Decode[T].
func fuzzDecode[T Payload](f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode[T](data, fuzzMaxBytes, fuzzMaxDepth)
		if err != nil {
			var e *wire.Error
			if !errors.As(err, &e) || (e.Code != wire.CodeBadRequest && e.Code != wire.CodePayloadTooLarge) || e.Message == "" {
				t.Fatalf("refusal is not a bad_request or payload_too_large *Error: %#v", err)
			}
			return
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted value does not encode: %v", err)
		}
		v2, err := Decode[T](b, 4*fuzzMaxBytes, fuzzMaxDepth+1)
		if err != nil {
			t.Fatalf("re-encoded value %s refused: %v", b, err)
		}
		if b2, _ := json.Marshal(v2); !bytes.Equal(b, b2) {
			t.Fatalf("round trip changed the value:\n%s\n%s", b, b2)
		}
	})
}

func FuzzDecodeInitHelloRequest(f *testing.F)   { fuzzDecode[InitHelloRequest](f) }
func FuzzDecodeInitHelloResponse(f *testing.F)  { fuzzDecode[InitHelloResponse](f) }
func FuzzDecodeGetSecretsRequest(f *testing.F)  { fuzzDecode[GetSecretsRequest](f) }
func FuzzDecodeGetSecretsResponse(f *testing.F) { fuzzDecode[GetSecretsResponse](f) }
func FuzzDecodeHeartbeatRequest(f *testing.F)   { fuzzDecode[HeartbeatRequest](f) }
func FuzzDecodeHeartbeatResponse(f *testing.F)  { fuzzDecode[HeartbeatResponse](f) }
func FuzzDecodeApprovalRequest(f *testing.F)    { fuzzDecode[ApprovalRequest](f) }
func FuzzDecodeApprovalResponse(f *testing.F)   { fuzzDecode[ApprovalResponse](f) }
func FuzzDecodeReportStatusRequest(f *testing.F) {
	fuzzDecode[ReportStatusRequest](f)
}
func FuzzDecodeReportStatusResponse(f *testing.F)  { fuzzDecode[ReportStatusResponse](f) }
func FuzzDecodeTerminateSelfRequest(f *testing.F)  { fuzzDecode[TerminateSelfRequest](f) }
func FuzzDecodeTerminateSelfResponse(f *testing.F) { fuzzDecode[TerminateSelfResponse](f) }
func FuzzDecodeFetchDynamicConfigRequest(f *testing.F) {
	fuzzDecode[FetchDynamicConfigRequest](f)
}
func FuzzDecodeFetchDynamicConfigResponse(f *testing.F) {
	fuzzDecode[FetchDynamicConfigResponse](f)
}
func FuzzDecodeExecuteHostToolRequest(f *testing.F) {
	fuzzDecode[ExecuteHostToolRequest](f)
}
func FuzzDecodeExecuteHostToolResponse(f *testing.F) {
	fuzzDecode[ExecuteHostToolResponse](f)
}
func FuzzDecodeSendOutboundRequest(f *testing.F)  { fuzzDecode[SendOutboundRequest](f) }
func FuzzDecodeSendOutboundResponse(f *testing.F) { fuzzDecode[SendOutboundResponse](f) }
func FuzzDecodePush(f *testing.F)                 { fuzzDecode[Push](f) }
func FuzzDecodeErrorBody(f *testing.F)            { fuzzDecode[wire.ErrorBody](f) }

// FuzzParseEnvelope fuzzes the envelope decoder: the path and headers of a
// call.
func FuzzParseEnvelope(f *testing.F) {
	f.Fuzz(func(t *testing.T, method, path, contentType, requestID, sessionID, auth string) {
		h := http.Header{}
		for k, v := range map[string]string{"Content-Type": contentType, HeaderRequestID: requestID, HeaderSessionID: sessionID, HeaderAuthorization: auth} {
			if v != "" {
				h.Set(k, v)
			}
		}
		env, err := ParseEnvelope(method, path, h)
		if err != nil {
			e, ok := err.(*wire.Error)
			if !ok || !e.Code.Valid() || e.Message == "" || strings.Contains(e.Message, auth[min(len(auth), 7):]) && len(auth) > 20 {
				t.Fatalf("bad refusal %#v", err)
			}
			return
		}
		if !env.Verb.Valid() || !ValidID(env.RequestID) || check.SessionID("", env.SessionID) != nil || !ValidLeaseTokenFormat(env.LeaseToken) || method != http.MethodPost {
			t.Fatalf("accepted an invalid envelope %+v", env)
		}
	})
}

// fuzzHandler is a minimal real handler: valid responses for every verb.
type fuzzHandler struct{}

func (fuzzHandler) HandleInitHello(context.Context, Call, InitHelloRequest) (InitHelloResponse, error) {
	return InitHelloResponse{Status: HelloFresh}, nil
}
func (fuzzHandler) HandleGetSecrets(_ context.Context, _ Call, r GetSecretsRequest) (GetSecretsResponse, error) {
	return GetSecretsResponse{}, fmt.Errorf("%d secrets: %w", len(r.Resources), wire.ErrPermissionDenied)
}
func (fuzzHandler) HandleHeartbeat(_ context.Context, _ Call, r HeartbeatRequest) (HeartbeatResponse, error) {
	return HeartbeatResponse{AckRev: r.NewRev}, nil
}
func (fuzzHandler) HandleRequestApproval(context.Context, Call, ApprovalRequest) (ApprovalResponse, error) {
	return ApprovalResponse{ApprovalID: "a", Status: ApprovalPending}, nil
}
func (fuzzHandler) HandleReportStatus(context.Context, Call, ReportStatusRequest) (Ack, error) {
	return Ack{Ack: true}, nil
}
func (fuzzHandler) HandleTerminateSelf(context.Context, Call, TerminateSelfRequest) (Ack, error) {
	return Ack{Ack: true}, nil
}
func (fuzzHandler) HandleFetchDynamicConfig(_ context.Context, _ Call, r FetchDynamicConfigRequest) (FetchDynamicConfigResponse, error) {
	return FetchDynamicConfigResponse{ConfigVersion: r.CurrentConfigVersion}, nil
}
func (fuzzHandler) HandleExecuteHostTool(_ context.Context, _ Call, r ExecuteHostToolRequest) (ExecuteHostToolResponse, error) {
	if r.ToolName == "panic" {
		panic("fuzz")
	}
	return ExecuteHostToolResponse{CallID: r.CallID, Status: ToolSuccess, Output: r.Input}, nil
}
func (fuzzHandler) HandleSendOutbound(_ context.Context, _ Call, r SendOutboundRequest) (SendOutboundResponse, error) {
	return SendOutboundResponse{MessageID: r.MessageID, OutboxID: 1, Status: OutboundPending}, nil
}

const fuzzSession = "6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11"

// FuzzServeCall sends arbitrary calls through the whole server: envelope,
// authentication, limits, strict decoding, replay and handler.
// fuzzAuth returns a fresh lease token and an authenticator that accepts
// it for fuzzSession alone.
func fuzzAuth() (string, Authenticator) {
	token, hash := NewLeaseToken()
	return token, AuthenticatorFunc(func(_ context.Context, id, tok string) (Session, error) {
		if id != fuzzSession || !LeaseTokenMatches(tok, hash) {
			return Session{}, wire.ErrUnauthenticated
		}
		return Session{ID: id, AgentID: "alice"}, nil
	})
}

func FuzzServeCall(f *testing.F) {
	token, auth := fuzzAuth()
	srv, err := NewServer(ServerOptions{Handler: fuzzHandler{}, Authenticator: auth,
		Limits: Limits{RequestsPerSecond: 1e9, MaxPayloadBytes: fuzzMaxBytes, MaxDepth: fuzzMaxDepth}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, verb, requestID string, goodToken bool, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/rpc/x", bytes.NewReader(body))
		req.URL.Path = PathRPCPrefix + verb
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderRequestID, requestID)
		req.Header.Set(HeaderSessionID, fuzzSession)
		tok := token
		if !goodToken {
			tok = strings.Repeat("A", 43)
		}
		req.Header.Set(HeaderAuthorization, "Bearer "+tok)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		res := rec.Result()
		b := rec.Body.Bytes()
		if res.StatusCode == http.StatusOK {
			if !goodToken {
				t.Fatal("served without a valid token")
			}
			if !json.Valid(b) {
				t.Fatalf("200 with invalid JSON %q", b)
			}
			return
		}
		eb, err := Decode[wire.ErrorBody](b, 1<<20, 4)
		if err != nil || !eb.Code.Valid() || eb.Code.HTTPStatus() != res.StatusCode {
			t.Fatalf("status %d with body %q: %v", res.StatusCode, b, err)
		}
		if eb.Code == wire.CodeInternal && verb != string(VerbExecuteHostTool) {
			t.Fatalf("internal error: %s", eb.Error)
		}
	})
}

// TestWriteFuzzSeeds writes the seed corpora of the fuzz targets into
// testdata/fuzz when RPC_WRITE_FUZZ_SEEDS is set.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("RPC_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set RPC_WRITE_FUZZ_SEEDS=1 to regenerate testdata/fuzz")
	}
	write := func(target string, i int, args ...any) {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, a := range args {
			switch v := a.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
			case string:
				fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
			case bool:
				fmt.Fprintf(&b, "bool(%v)\n", v)
			default:
				t.Fatalf("seed type %T", a)
			}
		}
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for target, samples := range fuzzSeeds() {
		for i, s := range samples {
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			write(target, i, b)
		}
		// A near miss of each sample: an unknown field.
		b, _ := json.Marshal(samples[0])
		write(target, len(samples), append(bytes.TrimSuffix(b, []byte("}")), []byte(`,"extra":1}`)...))
	}
	token, _ := NewLeaseToken()
	for i, s := range [][]string{
		{"POST", "/rpc/HEARTBEAT", "application/json", "6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11", fuzzSession, "Bearer " + token},
		{"POST", "/rpc/HEARTBEAT", "application/json; charset=utf-8", "r-1", fuzzSession, "bearer " + token},
		{"GET", "/rpc/NOPE", "text/plain", "", "x", "Basic dXNlcjpwYXNz"},
		{"POST", "/events", "", "r", strings.ToUpper(fuzzSession), "Bearer"},
	} {
		write("FuzzParseEnvelope", i, s[0], s[1], s[2], s[3], s[4], s[5])
	}
	for i, s := range []string{
		": connected\n\nid: ab-1\nevent: cancel\ndata: {}\n\n",
		"id: ab-2\r\ndata: a\r\ndata: b\r\n\r\n: ping\n\n",
		"data: " + strings.Repeat("x", 2000) + "\n\n",
		"event\nid\n\n:\n",
	} {
		write("FuzzSSEReader", i, []byte(s))
	}
	seeds := fuzzSeeds()
	i := 0
	for _, v := range Verbs {
		target := "FuzzDecode" + verbTypeName(v) + "Request"
		for _, s := range seeds[target] {
			b, _ := json.Marshal(s)
			if v == VerbInitHello {
				b = bytes.ReplaceAll(b, []byte(`"6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11"`), []byte(`"`+fuzzSession+`"`))
			}
			write("FuzzServeCall", i, string(v), fmt.Sprintf("req-%d", i), true, b)
			i++
		}
	}
	write("FuzzServeCall", i, "EXECUTE_HOST_TOOL", "req-panic", true, []byte(`{"tool_name":"panic","call_id":"c","input":{}}`))
	write("FuzzServeCall", i+1, "HEARTBEAT", "req-x", false, []byte(`{}`))
}

// verbTypeName returns the type-name stem of a verb's payloads.
func verbTypeName(v Verb) string {
	if v == VerbRequestApproval {
		return "Approval"
	}
	var b strings.Builder
	for _, part := range strings.Split(string(v), "_") {
		b.WriteString(part[:1] + strings.ToLower(part[1:]))
	}
	return b.String()
}

// TestFuzzSeedsCoverEveryPayload keeps the seed table in step with the
// verbs: a new verb needs its fuzz targets.
func TestFuzzSeedsCoverEveryPayload(t *testing.T) {
	t.Parallel()
	seeds := fuzzSeeds()
	for _, v := range Verbs {
		for _, dir := range []string{"Request", "Response"} {
			target := "FuzzDecode" + verbTypeName(v) + dir
			if len(seeds[target]) == 0 {
				t.Errorf("no seeds for %s", target)
			}
			if _, err := os.Stat(filepath.Join("testdata", "fuzz", target)); err != nil {
				t.Errorf("no corpus for %s: %v", target, err)
			}
		}
	}
	for target, samples := range seeds {
		for _, s := range samples {
			if err := s.(Payload).Validate(); err != nil {
				t.Errorf("%s: seed is invalid: %v", target, err)
			}
		}
	}
}

// FuzzCallLoop writes arbitrary bytes to a served connection (the literal
// TOKEN becomes a valid lease token) and checks that the server neither
// panics nor hangs: it answers what it can frame and closes the connection
// once the client has sent everything. Afterwards a valid call on a new
// connection still succeeds.
func FuzzCallLoop(f *testing.F) {
	token, auth := fuzzAuth()
	dir, err := os.MkdirTemp("", "choir")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	// The server logs errors to a file, which is safe to write from its
	// goroutines and to read here.
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { logFile.Close() })
	srv, err := NewServer(ServerOptions{Handler: fuzzHandler{}, Authenticator: auth,
		Limits: Limits{RequestsPerSecond: 1e9, MaxPayloadBytes: fuzzMaxBytes, MaxDepth: fuzzMaxDepth},
		Logger: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		f.Fatal(err)
	}
	sock := filepath.Join(dir, "f.sock")
	ln, err := ListenUnix(context.Background(), sock)
	if err != nil {
		f.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	f.Cleanup(func() { stop(); <-served })

	call := func(verb, body, extra string) string {
		return fmt.Sprintf("POST /rpc/%s HTTP/1.1\r\nHost: choird\r\nContent-Type: application/json\r\n%s: r-%d\r\n%s: %s\r\n%s: Bearer TOKEN\r\n%sContent-Length: %d\r\n\r\n%s",
			verb, HeaderRequestID, len(body), HeaderSessionID, fuzzSession, HeaderAuthorization, extra, len(body), body)
	}
	status := `{"lane":"edge","state":"IDLE","budget_remaining":{}}`
	for _, seed := range []string{
		call("REPORT_STATUS", status, ""),
		call("REPORT_STATUS", status, "") + call("EXECUTE_HOST_TOOL", `{"tool_name":"echo","call_id":"c","input":{}}`, ""),
		call("REPORT_STATUS", status, "Connection: close\r\n"),
		call("REPORT_STATUS", status, "Expect: 100-continue\r\n"),
		strings.Replace(call("REPORT_STATUS", "", "Transfer-Encoding: chunked\r\n"), "Content-Length: 0\r\n", "", 1) + "5\r\n{\"a\":\r\n0\r\n\r\n",
		call("REPORT_STATUS", status[:10], ""),
		call("HEARTBEAT", `{"base_rev":0}`, ""),
		"POST /rpc/REPORT_STATUS HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
		"POST /rpc/ HTTP/1.0\r\n\r\n",
		"GET /events HTTP/1.1\r\nHost: choird\r\n" + HeaderSessionID + ": " + fuzzSession + "\r\nAuthorization: Bearer TOKEN\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /rpc/\x00\r\n\r\n",
		"POST /rp",
	} {
		f.Add([]byte(seed))
	}
	valid := call("REPORT_STATUS", status, "Connection: close\r\n")
	exchange := func(t *testing.T, data []byte) []byte {
		nc, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		werr := make(chan error, 1)
		go func() {
			_, err := nc.Write(bytes.ReplaceAll(data, []byte("TOKEN"), []byte(token)))
			nc.(*net.UnixConn).CloseWrite()
			werr <- err
		}()
		out, err := io.ReadAll(nc)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("reading until the server closes: %v (after %q)", err, out)
		}
		<-werr // The server may close before reading everything; that is fine.
		return out
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exchange(t, data)
		if logs, _ := os.ReadFile(logFile.Name()); bytes.Contains(logs, []byte("panic")) {
			t.Fatalf("the server panicked:\n%s", logs)
		}
		if out := exchange(t, []byte(valid)); !bytes.HasPrefix(out, []byte("HTTP/1.1 200 OK\r\n")) {
			t.Fatalf("a valid call afterwards got %q", out)
		}
	})
}
