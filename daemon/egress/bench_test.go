package egress_test

import (
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/egress"
)

// downloadBytes is the size of the proxied download (issue 34: 50 MB).
const downloadBytes = 50 << 20

// BenchmarkProxiedDownload fetches the same 50 MB over HTTPS from a local
// server directly and through the tools' proxy (the agent's loopback
// proxy, a CONNECT tunnel over the Unix socket to the gateway, which
// checks the policy, dials and splices), side by side: each iteration
// makes one download of each, alternating which goes first. It reports
// each one's throughput in MB/s and the proxied share of the direct one
// (issue 34's target: at least 80%).
func BenchmarkProxiedDownload(b *testing.B) {
	tb := setup(b, nil)
	body := make([]byte, downloadBytes)
	rand.Read(body)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body)
	}))
	b.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")
	tb.policy.Store(&egress.Policy{Egress: config.Egress{Allow: []string{host}}, AllowHosts: []string{host}})
	direct := srv.Client().Transport.(*http.Transport).Clone()
	proxied := direct.Clone()
	proxied.Proxy = http.ProxyURL(tb.localProxy(b))
	var dt, pt time.Duration
	fetch := func(tr *http.Transport) time.Duration {
		start := time.Now()
		res, err := (&http.Client{Transport: tr}).Get(srv.URL + "/blob")
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil || n != downloadBytes {
			b.Fatalf("read %d of %d bytes: %v", n, downloadBytes, err)
		}
		return time.Since(start)
	}
	i := 0
	b.SetBytes(2 * downloadBytes)
	for b.Loop() {
		if i++; i%2 == 0 {
			dt += fetch(direct)
			pt += fetch(proxied)
		} else {
			pt += fetch(proxied)
			dt += fetch(direct)
		}
	}
	mbps := func(d time.Duration) float64 { return float64(i) * downloadBytes / (1 << 20) / d.Seconds() }
	b.ReportMetric(mbps(dt), "direct-MB/s")
	b.ReportMetric(mbps(pt), "proxied-MB/s")
	b.ReportMetric(100*mbps(pt)/mbps(dt), "proxied-%-of-direct")
}
