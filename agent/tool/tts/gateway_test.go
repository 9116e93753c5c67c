package tts_test

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/tts"
	"github.com/choirhq/choir/rpc/egress"
)

// TestSpeakThroughTheGatewayHoldsNoKey: with its provider behind choird's
// egress gateway's service route (here a local stand-in that adds the key
// and passes the call on to the fake provider, as the route does), the
// tool needs no key: it sends none, labels each request with a spend key
// and its name, and reports a usage record per request under its key.
func TestSpeakThroughTheGatewayHoldsNoKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	var routeURL string
	tb := setup(t, func(c *tts.Config) {
		c.PartChars = 30
		resolve := c.VoiceFunc
		c.VoiceFunc = func() (tts.Voice, error) {
			v, err := resolve()
			v.Endpoint, v.Gateway = routeURL+"/svc/tts/"+v.TTS, true
			return v, err
		}
	})
	provider, _ := url.Parse(tb.fake.Endpoint())
	route := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		mu.Lock()
		defer mu.Unlock()
		if pr.In.Header.Get("xi-api-key") != "" || pr.In.Header.Get(egress.HeaderPurpose) != tts.Name {
			keys = append(keys, "wrong labels")
		}
		keys = append(keys, pr.In.Header.Get(egress.HeaderSpendKey))
		pr.SetURL(provider)
		pr.Out.URL.Path = "/v1/" + strings.TrimPrefix(pr.In.URL.Path, "/svc/tts/eleven/")
		pr.Out.Header.Set("xi-api-key", tb.fake.Key)
	}})
	t.Cleanup(route.Close)
	routeURL = route.URL
	tb.Env.SecretFunc = func(string) (string, bool) { return "", false }

	r := tb.MustCall(t, tts.Name, `{"text": "Your train leaves at nine. The platform is four."}`)
	if r.Status != tool.StatusSuccess {
		t.Fatalf("speak through the gateway: %s %s", r.Summary, r.Output)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[1] == "" || keys[0] == keys[1] {
		t.Fatalf("the route saw spend keys %q, want one of its own per part", keys)
	}
	if len(r.Usage) != 2 || r.Usage[0].SpendKey != keys[0] || r.Usage[1].SpendKey != keys[1] ||
		r.Usage[0].Units+r.Usage[1].Units != int64(len("Your train leaves at nine.")+len("The platform is four.")) {
		t.Errorf("usage %+v, want a record per part under its spend key", r.Usage)
	}
}
