package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/internal/netguard"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ip, want string }{
		{"127.0.0.1", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"192.168.1.1", "private"},
		{"fd00::1", "private"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"100.64.0.1", "carrier-grade NAT (private)"},
		{"239.1.2.3", "multicast"},
		{"100.100.100.200", "cloud metadata"},
		{"8.8.8.8", ""},
		{"2606:4700::1111", ""},
	} {
		if got := netguard.Classify(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("Classify(%s) = %q, want %q", tc.ip, got, tc.want)
		}
	}
}

// TestClassifyEmbeddedIPv4 covers the IPv6 forms that carry an IPv4
// address a NAT64 gateway, a 6to4 relay or a dual-stack kernel would
// reach: each must be refused as its IPv4 address would be.
func TestClassifyEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ip, want string }{
		{"64:ff9b::7f00:1", "loopback"},
		{"64:ff9b::127.0.0.1", "loopback"},
		{"64:ff9b::a9fe:a9fe", "cloud metadata"},
		{"64:ff9b::10.0.0.1", "private"},
		{"64:ff9b::192.168.1.1", "private"},
		{"64:ff9b::a9fe:101", "link-local"},
		{"64:ff9b::0.0.0.0", "unspecified"},
		{"64:ff9b::100.64.0.1", "carrier-grade NAT (private)"},
		{"64:ff9b::8.8.8.8", ""},
		{"2002:7f00:1::", "loopback"},
		{"2002:7f00:1::1", "loopback"},
		{"2002:a00:1::", "private"},
		{"2002:a9fe:a9fe::", "cloud metadata"},
		{"2002:c0a8:101::5", "private"},
		{"2002:808:808::1", ""},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:169.254.169.254", "cloud metadata"},
		{"::127.0.0.1", "loopback"},
		{"::10.0.0.1", "private"},
		{"::8.8.8.8", "IPv4-compatible (reserved)"},
		{"::ffff:0:127.0.0.1", "loopback"},
		{"::ffff:0:a9fe:a9fe", "cloud metadata"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"}, // Teredo, client 127.0.0.1 obfuscated
	} {
		got := netguard.Classify(netip.MustParseAddr(tc.ip))
		if tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("Classify(%s) = %q, want %q", tc.ip, got, tc.want)
		}
	}
	g, _ := netguard.New(nil)
	for _, u := range []string{"http://[64:ff9b::7f00:1]/", "http://[2002:7f00:1::]/", "http://[64:ff9b::a9fe:a9fe]/latest/meta-data"} {
		if _, err := g.CheckURL(u); !errors.Is(err, netguard.ErrAddress) {
			t.Errorf("CheckURL(%s) = %v, want ErrAddress", u, err)
		}
		host := strings.TrimSuffix(strings.TrimPrefix(u, "http://["), "]/")
		host, _, _ = strings.Cut(host, "]")
		if err := g.Control("tcp6", net.JoinHostPort(host, "80"), nil); !errors.Is(err, netguard.ErrAddress) {
			t.Errorf("Control(%s) = %v, want ErrAddress", host, err)
		}
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	g, err := netguard.New([]string{"127.0.0.1:8081", "intranet.example"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url  string
		want error
	}{
		{"https://example.com/a", nil},
		{"file:///etc/passwd", netguard.ErrScheme},
		{"javascript:alert(1)", netguard.ErrScheme},
		{"data:text/html,hi", netguard.ErrScheme},
		{"ftp://example.com/", netguard.ErrScheme},
		{"example.com", netguard.ErrScheme},
		{"http://127.0.0.1/", netguard.ErrAddress},
		{"http://127.0.0.1:8081/", nil},
		{"http://[::1]:8081/", netguard.ErrAddress},
		{"http://localhost/", netguard.ErrAddress},
		{"http://169.254.169.254/latest/meta-data", netguard.ErrAddress},
		{"http://intranet.example/x", nil},
		{"http://10.0.0.1:8081/", netguard.ErrAddress},
	} {
		_, err := g.CheckURL(tc.url)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("CheckURL(%q) = %v, want %v", tc.url, err, tc.want)
		}
	}
}

func TestNewRejectsBadEntries(t *testing.T) {
	t.Parallel()
	_, err := netguard.New([]string{"ok.example", "http://x/", "h:99999", ""})
	if err == nil {
		t.Fatal("New accepted bad entries")
	}
	for _, want := range []string{`allow[1] "http://x/"`, `allow[2] "h:99999"`, `allow[3] ""`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// TestDialRefusesResolvedLoopback dials a name that resolves to loopback:
// the URL check passes (it is a name), the dialler refuses the address.
func TestDialRefusesResolvedLoopback(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	g, _ := netguard.New(nil)
	dial := g.DialContext(10 * time.Second)
	_, err := dial(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	if !errors.Is(err, netguard.ErrAddress) {
		t.Fatalf("dial localhost: %v, want ErrAddress", err)
	}

	open, _ := netguard.New([]string{"127.0.0.1:" + port})
	c, err := open.DialContext(10*time.Second)(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatalf("dial allowlisted port: %v", err)
	}
	c.Close()
}

func TestCheckResolved(t *testing.T) {
	t.Parallel()
	g, _ := netguard.New(nil)
	lookup := func(host string) ([]netip.Addr, error) {
		if host == "evil.example" {
			return []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.7")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}
	if err := g.CheckResolved("https://evil.example/", lookup); !errors.Is(err, netguard.ErrAddress) ||
		!strings.Contains(err.Error(), "10.0.0.7") {
		t.Errorf("evil.example: %v, want a refusal naming 10.0.0.7", err)
	}
	if err := g.CheckResolved("https://good.example/", lookup); err != nil {
		t.Errorf("good.example: %v", err)
	}
}
