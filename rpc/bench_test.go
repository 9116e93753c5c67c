package rpc_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/choirhq/choir/rpc"
)

// benchPayloadBytes sizes the heartbeat: one event whose JSON body makes
// the request payload about 1 KiB.
const benchPayloadBytes = 1024

func benchHeartbeat(b *testing.B) rpc.HeartbeatRequest {
	req := heartbeatReq(b, 0, 1, 0)
	over := len(jsonOf(b, req))
	req = heartbeatReq(b, 0, 1, benchPayloadBytes-over+40)
	if n := len(jsonOf(b, req)); n < benchPayloadBytes-8 || n > benchPayloadBytes+8 {
		b.Fatalf("heartbeat payload is %d bytes", n)
	}
	return req
}

var benchTransports = []string{transportUDS, transportHTTPS, transportHTTP}

func benchSetup(b *testing.B, tr string) *testBundle {
	return setup(b, tr, setupOpts{limits: rpc.Limits{RequestsPerSecond: math.Inf(1), Burst: 1}})
}

// BenchmarkRoundTrip measures one HEARTBEAT of about 1 KiB at a time, from
// the client call to its decoded response: envelope, authentication, rate
// limit, strict decoding, hash-chain validation, the replay store, and a
// handler that does nothing but count. It reports p50 and p99 latency and
// requests per second.
func BenchmarkRoundTrip(b *testing.B) {
	for _, tr := range benchTransports {
		b.Run(tr, func(b *testing.B) {
			bb := benchSetup(b, tr)
			req := benchHeartbeat(b)
			ctx := context.Background()
			if _, err := bb.client.Heartbeat(ctx, req); err != nil { // Warm the connection.
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(len(jsonOf(b, req))))
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				t0 := time.Now()
				if _, err := bb.client.Heartbeat(ctx, req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat, time.Since(start))
		})
	}
}

// BenchmarkThroughput runs heartbeats from parallel goroutines over one
// client and reports requests per second.
func BenchmarkThroughput(b *testing.B) {
	for _, tr := range benchTransports {
		b.Run(tr, func(b *testing.B) {
			bb := benchSetup(b, tr)
			req := benchHeartbeat(b)
			b.SetParallelism(4)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := bb.client.Heartbeat(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

func reportLatency(b *testing.B, lat []time.Duration, total time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(int(float64(len(lat))*p), len(lat)-1)].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(len(lat))/total.Seconds(), "req/s")
}

// BenchmarkHeartbeatDecode isolates the server's cost of reading a 1 KiB
// heartbeat payload: strict decoding plus validation (hash chain
// included), against plain encoding/json for reference.
func BenchmarkHeartbeatDecode(b *testing.B) {
	data := jsonOf(b, benchHeartbeat(b))
	b.Run("Strict", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := rpc.Decode[rpc.HeartbeatRequest](data, 1<<20, 64); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EncodingJSONNoValidation", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var v rpc.HeartbeatRequest
			if err := json.Unmarshal(data, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
