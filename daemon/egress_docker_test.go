package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// TestEgressDockerRuntime is issue 34's done-when under docker: from
// choir.exec in the real agent's container, a direct connection to the
// bridge gateway, a LAN address, the cloud metadata address, another
// container and a public-looking test address all fail (the container has
// no network), as do a DNS lookup and a UDP datagram; through the tools'
// proxy the same are refused by the agent's egress policy and audited in
// choir_audit.egress; and a host the policy allows answers through the
// proxy. The model itself is reached through the gateway too: the run
// would not get past its first step otherwise.
func TestEgressDockerRuntime(t *testing.T) {
	t.Parallel()
	probe := runtimetest.BuildStatic(t, "github.com/choirhq/choir/daemon/runtime/runtimetest/egressprobe")
	setup := dockerReachSetup(t, nil)
	gw, _, _ := strings.Cut(setup.listen, ":")
	// The allowed host: a server on the host's bridge address, which the
	// gateway (on the host) reaches and the container alone cannot.
	ln, err := net.Listen("tcp", gw+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "allowed host answers %s", r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	allowed := ln.Addr().String()
	other := otherContainer(t)
	setup.edit = func(c *config.Config, _ config.Secrets) {
		a := c.Agents["assistant"]
		a.Egress = config.Egress{Allow: []string{allowed}, Unknown: config.EgressRefuse}
		a.Web.AllowHosts = []string{allowed}
		c.Agents["assistant"] = a
	}
	refusedAddrs := []string{gw + ":9", "192.168.1.1:80", "169.254.169.254:80", other, "203.0.113.10:80"}
	var refusedURLs []string
	for _, a := range refusedAddrs {
		refusedURLs = append(refusedURLs, "http://"+a+"/latest/meta-data/")
	}
	cmd := fmt.Sprintf("./egressprobe -direct %s -proxy %s -connect %s -dns example.com,choir.test -udp 8.8.8.8:53,%s 2>&1",
		strings.Join(append(refusedAddrs, allowed), ","), strings.Join(append(refusedURLs, "http://"+allowed+"/ok"), ","),
		"203.0.113.10:443,"+allowed, gw+":53")
	args, _ := json.Marshal(map[string]any{"command": cmd, "timeout_ms": 120000})
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	run := runToolCalls(t, setup, map[string][]byte{"egressprobe": bin},
		llmtest.Call{ID: "1", Name: "choir.exec", Arguments: string(args)})
	report := choirdtest.ProbeReport(t, run.results["1"], run.ws)
	t.Logf("probe report:\n%s", report)

	if !regexp.MustCompile(`(?m)^env HTTP_PROXY=http://127\.0\.0\.1:\d+$`).MatchString(report) {
		t.Errorf("the tool's environment has no HTTP_PROXY on the loopback")
	}
	line := func(prefix string) string {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(prefix) + `: (.*)$`).FindStringSubmatch(report)
		if m == nil {
			t.Errorf("no line %q in the report", prefix)
			return ""
		}
		return m[1]
	}
	for _, a := range append(refusedAddrs, allowed) {
		if got := line("direct " + a); !strings.HasPrefix(got, "error") {
			t.Errorf("direct %s: %s, want an error: the container has no route", a, got)
		}
	}
	// Addresses netguard refuses are refused as such, before the policy
	// on names is asked; a public one by the policy.
	for _, u := range refusedURLs {
		want := "off limits"
		if strings.Contains(u, "203.0.113.10") {
			want = "egress.allow"
		}
		if got := line("proxy " + u); !strings.HasPrefix(got, "403 ") || !strings.Contains(got, want) {
			t.Errorf("proxy %s: %s, want a 403 saying %q", u, got, want)
		}
	}
	if got := line("proxy http://" + allowed + "/ok"); got != "200 allowed host answers /ok" {
		t.Errorf("the allowed host through the proxy: %s", got)
	}
	if got := line("connect 203.0.113.10:443"); !strings.HasPrefix(got, "403 ") {
		t.Errorf("CONNECT to a refused host: %s, want 403", got)
	}
	if got := line("connect " + allowed); !strings.HasPrefix(got, "200") {
		t.Errorf("CONNECT to the allowed host: %s, want 200", got)
	}
	for _, n := range []string{"dns example.com", "dns choir.test", "udp 8.8.8.8:53", "udp " + gw + ":53"} {
		if got := line(n); !strings.HasPrefix(got, "error") {
			t.Errorf("%s: %s, want an error: no name resolves and no datagram leaves", n, got)
		}
	}

	// The audit holds every attempt through the proxy, refused, and the
	// allowed one with its bytes.
	rows, err := run.pool.Query(context.Background(), `SELECT host || ':' || port, decision, origin, bytes_down, lane
		FROM choir_audit.egress WHERE agent_id = 'assistant' AND session_id = $1::uuid`, run.sessionID)
	if err != nil {
		t.Fatal(err)
	}
	audit := map[string]string{}
	var allowedDown int64
	for rows.Next() {
		var hp, decision, origin, lane string
		var down int64
		if err := rows.Scan(&hp, &decision, &origin, &down, &lane); err != nil {
			t.Fatal(err)
		}
		if origin == "proxy" {
			audit[hp] = decision
			if lane == "" {
				t.Errorf("audit of %s through the proxy names no lane", hp)
			}
		}
		if hp == allowed && decision == "allowed" {
			allowedDown += down
		}
	}
	for _, a := range refusedAddrs {
		if audit[a] != "refused" {
			t.Errorf("audit of %s through the proxy: %q, want refused (audit %v)", a, audit[a], audit)
		}
	}
	if audit[allowed] != "allowed" {
		t.Errorf("audit of the allowed host: %q (audit %v)", audit[allowed], audit)
	}
	// The model was reached through the gateway by the agent itself: its
	// calls go to the gateway's service route, which records each in the
	// spend ledger (the route is no tunnel, so choir_audit.egress has no
	// row for it).
	var calls int
	if err := run.pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.spend
		WHERE session_id = $1::uuid AND kind = 'llm'`, run.sessionID).Scan(&calls); err != nil || calls == 0 {
		t.Errorf("the model's calls through the gateway's service route: %d (%v)", calls, err)
	}
}

// otherContainer runs a container on the default bridge with a web server
// (as an agent had before issue 34, or any other container on the host)
// and returns its address.
func otherContainer(t *testing.T) string {
	t.Helper()
	cli := runtimetest.RequireDocker(t)
	image := runtimetest.BusyboxImage(t, cli)
	out, err := exec.Command("docker", "run", "-d", "--rm", "--network", "bridge", "--label", "choir.test=egress", image,
		"/bin/busybox", "httpd", "-f", "-p", "8080").Output()
	if err != nil {
		t.Fatalf("docker run: %v", err)
	}
	id := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("docker", "rm", "-f", id).Run() })
	ip, err := exec.Command("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", id).Output()
	if err != nil || strings.TrimSpace(string(ip)) == "" {
		t.Fatalf("docker inspect %s: %q %v", id, ip, err)
	}
	return strings.TrimSpace(string(ip)) + ":8080"
}
