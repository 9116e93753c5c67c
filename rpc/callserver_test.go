package rpc_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
)

// rawConn is one connection to a test server, spoken to byte by byte.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, b *testBundle) *rawConn {
	t.Helper()
	nc, err := b.dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// callText renders a call of verb with body, as net/http's client would,
// with extra header lines (each ending in \r\n) and the protocol named.
func callText(b *testBundle, proto string, verb rpc.Verb, body, extra string) string {
	return fmt.Sprintf("POST %s%s %s\r\nHost: choird\r\nContent-Type: application/json\r\n%s: %s\r\n%s: %s\r\nAuthorization: Bearer %s\r\n%sContent-Length: %d\r\n\r\n%s",
		rpc.PathRPCPrefix, verb, proto, rpc.HeaderRequestID, uuid.NewString(), rpc.HeaderSessionID, b.sessionID, b.token, extra, len(body), body)
}

func (c *rawConn) write(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatal(err)
	}
}

// read reads one response.
func (c *rawConn) read() rawResponse {
	c.t.Helper()
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return rawResponse{status: res.StatusCode, body: body, header: res.Header, close: res.Close}
}

// closed reports whether the server closed the connection.
func (c *rawConn) closed() bool {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.br.ReadByte()
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && strings.Contains(err.Error(), "reset"))
}

const validStatus = `{"lane":"edge","state":"IDLE","budget_remaining":{}}`

// TestCallLoop covers what the server's own call loop does with the HTTP
// around a call, over each transport, on raw connections.
func TestCallLoop(t *testing.T) {
	t.Parallel()
	for _, tr := range conformanceTransports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tr, setupOpts{limits: rpc.Limits{MaxPayloadBytes: 4096}})

			t.Run("PipelinedCallsAreAnsweredInOrder", func(t *testing.T) {
				c := dialRaw(t, b)
				c.write(callText(b, "HTTP/1.1", rpc.VerbReportStatus, validStatus, "") +
					callText(b, "HTTP/1.1", rpc.VerbExecuteHostTool, `{"tool_name":"echo","call_id":"c9","input":{"n":9}}`, ""))
				if r := c.read(); r.status != 200 || r.header.Get("Date") == "" || r.header.Get(rpc.HeaderRequestID) == "" {
					t.Errorf("first: %d %v %s", r.status, r.header, r.body)
				}
				r := c.read()
				var out rpc.ExecuteHostToolResponse
				if r.status != 200 || json.Unmarshal(r.body, &out) != nil || out.CallID != "c9" {
					t.Errorf("second: %d %s", r.status, r.body)
				}
			})

			t.Run("ChunkedBodyIsRead", func(t *testing.T) {
				c := dialRaw(t, b)
				text := callText(b, "HTTP/1.1", rpc.VerbReportStatus, "", "Transfer-Encoding: chunked\r\n")
				text = strings.Replace(text, "Content-Length: 0\r\n", "", 1)
				c.write(text + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(validStatus), validStatus))
				if r := c.read(); r.status != 200 {
					t.Fatalf("chunked: %d %s", r.status, r.body)
				}
				c.write(callText(b, "HTTP/1.1", rpc.VerbReportStatus, validStatus, ""))
				if r := c.read(); r.status != 200 {
					t.Errorf("next call: %d %s", r.status, r.body)
				}
			})

			t.Run("HTTP10CallIsAnsweredThenClosed", func(t *testing.T) {
				c := dialRaw(t, b)
				c.write(callText(b, "HTTP/1.0", rpc.VerbReportStatus, validStatus, ""))
				if r := c.read(); r.status != 200 || !r.close {
					t.Errorf("HTTP/1.0: %d %v %s", r.status, r.header, r.body)
				}
				if !c.closed() {
					t.Error("connection left open after an HTTP/1.0 call")
				}
			})

			t.Run("ConnectionCloseIsHonoured", func(t *testing.T) {
				c := dialRaw(t, b)
				c.write(callText(b, "HTTP/1.1", rpc.VerbReportStatus, validStatus, "Connection: close\r\n"))
				if r := c.read(); r.status != 200 || !r.close {
					t.Errorf("%d %v", r.status, r.header)
				}
				if !c.closed() {
					t.Error("connection left open")
				}
			})

			for _, bad := range []struct {
				name, text string
				status     int
				want       string
			}{
				{"MalformedHeader", "POST /rpc/REPORT_STATUS HTTP/1.1\r\nHost: choird\r\nno colon here\r\n\r\n", 400, "malformed HTTP request"},
				{"BadContentLength", "POST /rpc/REPORT_STATUS HTTP/1.1\r\nHost: choird\r\nContent-Length: -7\r\n\r\n", 400, "malformed HTTP request"},
				{"HeaderTooLarge", "POST /rpc/REPORT_STATUS HTTP/1.1\r\nHost: choird\r\nX-Pad: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", 431, "request header over"},
				{"MissingHost", strings.Replace(callText(b, "HTTP/1.1", rpc.VerbReportStatus, validStatus, ""), "Host: choird\r\n", "", 1), 400, "Host"},
				{"ExpectContinue", callText(b, "HTTP/1.1", rpc.VerbReportStatus, validStatus, "Expect: 100-continue\r\n"), 417, "Expect"},
			} {
				t.Run(bad.name, func(t *testing.T) {
					c := dialRaw(t, b)
					c.write(bad.text)
					r := c.read()
					wantError(t, r, bad.status, wire.CodeBadRequest, bad.want)
					if !c.closed() {
						t.Error("connection left open after a request the server could not frame")
					}
				})
			}

			t.Run("EventStreamAfterCallsOnOneConnection", func(t *testing.T) {
				c := dialRaw(t, b)
				c.write(callText(b, "HTTP/1.1", rpc.VerbReportStatus, validStatus, ""))
				if r := c.read(); r.status != 200 {
					t.Fatalf("call: %d %s", r.status, r.body)
				}
				c.write(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: choird\r\n%s: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n",
					rpc.PathEvents, rpc.HeaderSessionID, b.sessionID, b.token))
				res, err := http.ReadResponse(c.br, nil)
				if err != nil || res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
					t.Fatalf("events: %v %+v", err, res)
				}
				// The stream never ends: closing its body would read it to the
				// connection's deadline, so the connection is closed instead.
				defer c.nc.Close()
				if _, err := b.srv.Push(b.sessionID, rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelAll}}); err != nil {
					t.Fatal(err)
				}
				sc := bufio.NewScanner(res.Body)
				for sc.Scan() {
					if sc.Text() == "event: cancel" {
						return
					}
				}
				t.Fatalf("no cancel event on the stream: %v", sc.Err())
			})
		})
	}
}

// TestCallLoopShutdown checks that shutting down closes idle connections at
// once and lets a call in flight finish and be answered.
func TestCallLoopShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t, transportUDS, setupOpts{})
	idle := dialRaw(t, b)
	idle.write(callText(b, "HTTP/1.1", rpc.VerbReportStatus, validStatus, ""))
	if r := idle.read(); r.status != 200 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	busy := dialRaw(t, b)
	busy.write(callText(b, "HTTP/1.1", rpc.VerbExecuteHostTool, `{"tool_name":"test.block","call_id":"c1","input":{}}`, ""))
	<-b.h.entered
	stopped := make(chan error, 1)
	go func() { stopped <- b.stopServer() }()
	if !idle.closed() {
		t.Error("an idle connection stayed open during shutdown")
	}
	select {
	case err := <-stopped:
		t.Fatalf("Serve returned with a call in flight: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(b.h.release)
	if r := busy.read(); r.status != 200 || !r.close {
		t.Errorf("call in flight: %d %v %s", r.status, r.header, r.body)
	}
	if err := <-stopped; err != nil {
		t.Errorf("serve: %v", err)
	}
}
