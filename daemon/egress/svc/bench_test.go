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
// settled after the answer), side by side: each iteration makes one call
// of each, so that both see the same machine. Its sub-benchmarks are the
// plain and the streamed call. It reports each one's p50 and p99 and,
// streamed, the time to the first event (ttft), and what the gateway
// adds at each.
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
		name, body string
		stream     bool
	}{
		{"Plain", plain, false},
		{"Stream", stream, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			direct := &caller{url: tb.llm.BaseURL() + "/chat/completions", body: []byte(tc.body), stream: tc.stream}
			through := &caller{url: gw.URL + "/svc/llm/fast/chat/completions", body: []byte(tc.body), stream: tc.stream}
			i := 0
			for b.Loop() {
				// Alternate which goes first, so that neither always
				// finds the other's leftovers (the settlement) running.
				if i++; i%2 == 0 {
					direct.call(b)
					through.call(b)
				} else {
					through.call(b)
					direct.call(b)
				}
			}
			b.StopTimer()
			tb.h.Wait()
			direct.close()
			through.close()
			report(b, "direct", direct.total, "gateway", through.total)
			if tc.stream {
				report(b, "direct-ttft", direct.first, "gateway-ttft", through.first)
			}
		})
	}
}

// caller makes one kind of call and keeps its latencies.
type caller struct {
	url          string
	body         []byte
	stream       bool
	client       *http.Client
	total, first []time.Duration
}

func (c *caller) call(b *testing.B) {
	if c.client == nil {
		c.client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	start := time.Now()
	res, err := c.client.Post(c.url, "application/json", bytes.NewReader(c.body))
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(res.Body)
		b.Fatalf("status %d: %s", res.StatusCode, msg)
	}
	if c.stream {
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
		c.first = append(c.first, time.Since(start))
		io.Copy(io.Discard, r)
	} else {
		io.Copy(io.Discard, res.Body)
	}
	c.total = append(c.total, time.Since(start))
}

func (c *caller) close() {
	if c.client != nil {
		c.client.CloseIdleConnections()
	}
}

// report gives the p50 and p99 of a and g, in microseconds, and what g
// adds to a at each.
func report(b *testing.B, an string, a []time.Duration, gn string, g []time.Duration) {
	if len(a) == 0 || len(g) == 0 {
		return
	}
	at := func(d []time.Duration, q float64) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds())
	}
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.50}, {"p99", 0.99}} {
		b.ReportMetric(at(a, q.q), an+"-"+q.name+"-µs")
		b.ReportMetric(at(g, q.q), gn+"-"+q.name+"-µs")
		b.ReportMetric(at(g, q.q)-at(a, q.q), "added-"+strings.TrimPrefix(strings.TrimPrefix(gn, "gateway"), "-")+sep(gn)+q.name+"-µs")
	}
}

func sep(name string) string {
	if strings.Contains(name, "-") {
		return "-"
	}
	return ""
}
