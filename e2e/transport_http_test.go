package e2e

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc/admin"
)

// TestHTTPTransport runs choird with --transport=http and the real agent
// under each runtime. choird then listens on no Unix socket at all: the
// agent reaches it over HTTPS+SSE with the endpoint and certificate its
// runtime gave it, says hello, answers a message sent with choirctl chat
// (the message pushed down the event stream, the reply back through the
// outbox), and its heartbeats are acknowledged (acked_rev moves, and the
// inbox row is marked delivered by a heartbeat's patch).
func TestHTTPTransport(t *testing.T) {
	t.Parallel()
	t.Run("process", func(t *testing.T) {
		t.Parallel()
		srv := llmtest.NewServer(t, llmtest.Text("pong over https"), summaryStep())
		httpRoundTrip(t, srv.BaseURL(), daemon.Options{Runtime: "process",
			AgentBinary: choirdtest.Binary(t, "cmd/choir-agent"), Listen: "127.0.0.1:0"})
	})
	// On the bridge's gateway, where containers reach the host, and on
	// every address, where they reach it through the engine's
	// host-gateway (a loopback listener is refused: see below).
	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		cli := runtimetest.RequireDocker(t)
		bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
		image := runtimetest.ImportImage(t, cli, "choir-agent-http", map[string]runtimetest.File{
			"choir-agent": {Source: bin, Mode: 0o755},
		}, `ENTRYPOINT ["/choir-agent"]`)
		for name, everyAddress := range map[string]bool{"BridgeGateway": false, "EveryAddress": true} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dockerRoundTrip(t, cli, image, everyAddress)
			})
		}
	})
	t.Run("DockerRefusesLoopbackListener", func(t *testing.T) {
		t.Parallel()
		runtimetest.RequireDocker(t)
		h := choirdtest.WriteHome(t, choirdtest.Options{})
		var logs logbuf.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := daemon.Run(ctx, daemon.Options{Home: h.Dir, Stderr: &logs, Runtime: "docker", Transport: "http",
			Listen: "127.0.0.1:0"})
		if err == nil || !strings.Contains(err.Error(), "loopback, which no container can reach") ||
			!strings.Contains(err.Error(), "--listen") {
			t.Fatalf("choird with docker on a loopback listener: %v, want a refusal naming --listen", err)
		}
	})
}

// dockerRoundTrip is httpRoundTrip under docker, choird listening on the
// bridge's gateway or on every address.
func dockerRoundTrip(t *testing.T, cli *client.Client, image string, everyAddress bool) {
	gw := dockerGateway(t)
	srv := llmtest.NewServer(t, llmtest.Text("pong over https"), summaryStep())
	model, err := url.Parse(srv.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	model.Host = proxy(t, net.JoinHostPort(gw, "0"), model.Host)
	listen := net.JoinHostPort(gw, "0")
	if everyAddress {
		listen = "0.0.0.0:0"
	}
	d := httpRoundTrip(t, model.String(), daemon.Options{Runtime: "docker", AgentImage: image, Listen: listen})
	checkContainerReach(t, cli, d.LatestStatus(context.Background(), "assistant").SessionID)
}

// httpRoundTrip starts choird over HTTP with o, its model at model, starts
// the agent through the runtime, and holds one round of conversation.
func httpRoundTrip(t *testing.T, model string, o daemon.Options) *choirdtest.Choird {
	t.Helper()
	ctx := context.Background()
	o.Transport = daemon.TransportHTTP
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: model, FastHeartbeat: true, Daemon: o})
	if !strings.Contains(d.Logs.String(), `"transport":"http"`) {
		t.Fatalf("choird did not say it serves agents over http:\n%s", d.Logs)
	}
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatalf("start the agent over http: %v\n%s", err, d.Logs)
	}
	st := d.WaitState(t, "assistant", admin.AgentActive)
	d.WaitHello(t, st.SessionID, d.Logs)

	var out, errb bytes.Buffer
	if code := ctl.Run(ctx, []string{"--home", d.Home, "chat", "assistant", "-m", "ping", "--quiet", "500ms"}, &out, &errb); code != 0 {
		t.Fatalf("choirctl chat exit %d: %s\n%s", code, errb.String(), d.Logs)
	}
	if got := strings.TrimSpace(out.String()); got != "assistant: pong over https" {
		t.Errorf("chat printed %q", got)
	}
	choirdtest.WaitFor(t, "heartbeats acknowledged and the inbox row marked delivered", d.Logs, func() bool {
		var acked int64
		var delivered bool
		d.Pool().QueryRow(ctx, `SELECT s.acked_rev, i.delivered_at IS NOT NULL FROM choir_control.sessions s
			JOIN choir_control.inbox i ON i.agent_id = s.agent_id WHERE s.session_id = $1`, st.SessionID).Scan(&acked, &delivered)
		return acked > 0 && delivered
	})
	return d
}

// checkContainerReach checks what the container was given: the endpoint
// and certificate, no socket, and the lease token nowhere in its
// configuration.
func checkContainerReach(t *testing.T, cli *client.Client, sessionID string) {
	t.Helper()
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		Filters: make(client.Filters).Add("label", "choir.session_id="+sessionID)})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the session's container: %+v %v", list, err)
	}
	info, err := cli.ContainerInspect(context.Background(), list.Items[0].ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := info.Container.Config.Env
	for _, want := range []string{"CHOIR_CONTROL_PLANE=http", "CHOIR_CA_CERT=" + runtime.ContainerCACert} {
		if !slices.Contains(env, want) {
			t.Errorf("container environment lacks %s: %q", want, env)
		}
	}
	if !slices.ContainsFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, "CHOIR_ENDPOINT=https://"+runtime.ContainerHostName+":")
	}) {
		t.Errorf("container environment has no endpoint on %s: %q", runtime.ContainerHostName, env)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "CHOIR_SOCKET=") || strings.Contains(kv, "LEASE_TOKEN=") {
			t.Errorf("container environment holds %s", kv)
		}
	}
	for _, m := range info.Container.Mounts {
		if m.Destination == runtime.ContainerSocket {
			t.Errorf("choird's socket is mounted over http: %+v", m)
		}
		if m.Destination == runtime.ContainerCACert && m.RW {
			t.Errorf("the certificate is mounted writable: %+v", m)
		}
	}
}
