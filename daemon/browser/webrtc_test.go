package browser_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/choirhq/choir/config"
)

// TestWebRTCGathersNoUDPCandidates has a page gather ICE candidates, with
// a STUN server on the host's loopback: a UDP candidate (host or srflx)
// would be a path around the guarded proxy.
func TestWebRTCGathersNoUDPCandidates(t *testing.T) {
	t.Parallel()
	stun, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stunHits atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := stun.ReadFrom(buf); err != nil {
				return
			}
			stunHits.Add(1)
		}
	}()
	t.Cleanup(func() { stun.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><body><pre id="c"></pre><script>
var pc = new RTCPeerConnection({iceServers: [{urls: "stun:%s"}]}), out = document.getElementById("c");
pc.createDataChannel("x");
pc.onicecandidate = function(e) {
  if (e.candidate) { out.textContent += "CANDIDATE " + e.candidate.candidate + "\n"; return; }
  done();
};
// Gathering against a STUN server that never answers can take long.
function done() { if (!document.getElementById("done")) { var d = document.createElement("div"); d.id = "done"; document.body.appendChild(d); } }
setTimeout(done, 4000);
pc.createOffer().then(function(o) { return pc.setLocalDescription(o); });
</script></body></html>`, stun.LocalAddr())
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	w := newWorkerLogging(t, config.Web{BrowseNavigationTimeoutMS: 20_000}, nil, "127.0.0.1:"+port)
	out := mustBrowse(t, w, "webrtc", "", `{"url": "`+srv.URL+`/", "actions": [{"action": "wait", "selector": "#done", "timeout_ms": 15000}], "mode": "html"}`)
	for line := range strings.Lines(out.HTML) {
		if strings.Contains(line, "CANDIDATE") && (strings.Contains(strings.ToLower(line), " udp ") || strings.Contains(line, "typ srflx") ||
			strings.Contains(line, "typ host")) {
			t.Errorf("the page gathered a candidate around the proxy: %s", strings.TrimSpace(line))
		}
	}
	if n := stunHits.Load(); n > 0 {
		t.Errorf("the page sent %d UDP packets to a STUN server on the host", n)
	}
}
