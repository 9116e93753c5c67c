// Package fastpath is the agent protocol's speed path, fenced off behind
// package rpc's plain one: a call loop that serves calls in each
// connection's own goroutine and hands every other request to net/http
// (Serve), a client pool that writes each call and reads its answer in the
// caller's goroutine (Pool), the JSON writers that encode a heartbeat
// without reflection, and the scanner that recognises an event payload
// already in canonical form so that hashing it needs no re-encoding. Each
// produces exactly what the plain path (net/http, encoding/json, the
// canonical-JSON reference in rpc/internal/chain) would, which the fuzz
// tests check; the benchmarks in fastpath_test.go, and rpc's
// BenchmarkEncodeHeartbeat, measure what the fast path saves over the plain
// one.
package fastpath
