package svc_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
)

// BenchmarkModelCallThroughGateway makes the same chat completion
// directly to the model fake and through the gateway's route (key added,
// worst case reserved against the agent's and the host's day caps,
// settled after the answer), side by side, plain and streamed. It
// reports the latency's p50 and p99 and, streamed, the time to the first
// event (ttft): the gateway's cost is the difference between the
// sub-benchmarks of one run.
func BenchmarkModelCallThroughGateway(b *testing.B) {
	tb := setup(b)
	tb.setConfig(func(c *config.Config) {
		c.Agents["ada"] = config.Agent{Budgets: config.Budgets{Caps: config.Caps{PerDayCostUSD: 1e6, PerDayTokens: 1e15}}}
		c.Caps = config.HostCaps{HostPerDayUSD: 1e6, HostPerDayTokens: 1e15}
	})
	gw := tb.gateway(b, "ada")
	plain := `{"model":"` + llmtest.DefaultModel + `","max_tokens":1000,"messages":[{"role":"system","content":"` +
		strings.Repeat("You are a helpful agent. ", 200) + `"},{"role":"user","content":"hi"}]}`
	stream := strings.Replace(plain, `"max_tokens"`, `"stream":true,"stream_options":{"include_usage":true},"max_tokens"`, 1)
	for _, tc := range []struct {
		name, url, body string
		stream          bool
	}{
		{"Plain/Direct", tb.llm.BaseURL() + "/chat/completions", plain, false},
		{"Plain/Gateway", gw.URL + "/svc/llm/fast/chat/completions", plain, false},
		{"Stream/Direct", tb.llm.BaseURL() + "/chat/completions", stream, true},
		{"Stream/Gateway", gw.URL + "/svc/llm/fast/chat/completions", stream, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
			defer client.CloseIdleConnections()
			var total, first []time.Duration
			body := []byte(tc.body)
			for b.Loop() {
				start := time.Now()
				res, err := client.Post(tc.url, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				if res.StatusCode != http.StatusOK {
					msg, _ := io.ReadAll(res.Body)
					b.Fatalf("status %d: %s", res.StatusCode, msg)
				}
				if tc.stream {
					r := bufio.NewReader(res.Body)
					for {
						line, err := r.ReadString('\n')
						if err != nil {
							b.Fatalf("stream ended before its first event: %v", err)
						}
						if strings.HasPrefix(line, "data: ") {
							break
						}
					}
					first = append(first, time.Since(start))
					io.Copy(io.Discard, r)
				} else {
					io.Copy(io.Discard, res.Body)
				}
				res.Body.Close()
				total = append(total, time.Since(start))
			}
			b.StopTimer()
			tb.h.Wait()
			report(b, "p50", "p99", total)
			if tc.stream {
				report(b, "ttft-p50", "ttft-p99", first)
			}
		})
	}
}

func report(b *testing.B, p50, p99 string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q float64) float64 { return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds()) }
	b.ReportMetric(at(0.50), p50+"-µs")
	b.ReportMetric(at(0.99), p99+"-µs")
}
