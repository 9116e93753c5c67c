package runtime_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/daemon/runtime"
)

func validSpec(t *testing.T) runtime.Spec {
	t.Helper()
	dir, err := os.MkdirTemp("", "crs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return runtime.Spec{
		AgentID: "agent-1", SessionID: "0b7e6f1c-55aa-4e0e-9d1e-2c1f1d3a9e10", LeaseToken: "tok",
		Workspace: dir, ControlSocket: sock,
		Env:    map[string]string{"CHOIR_EXTRA": "x"},
		Labels: map[string]string{"choir.extra": "x"},
	}
}

func TestSpecValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*runtime.Spec)
		want   []string // substrings; nil: valid
	}{
		{name: "Valid", modify: func(*runtime.Spec) {}},
		{name: "NoSocketIsFine", modify: func(s *runtime.Spec) { s.ControlSocket = "" }},
		{name: "BadAgentID", modify: func(s *runtime.Spec) { s.AgentID = "Agent 1" }, want: []string{`agent id "Agent 1"`}},
		{name: "BadSessionID", modify: func(s *runtime.Spec) { s.SessionID = "../x" }, want: []string{`session id "../x"`}},
		{name: "NoToken", modify: func(s *runtime.Spec) { s.LeaseToken = "" }, want: []string{"no lease token"}},
		{name: "NoWorkspace", modify: func(s *runtime.Spec) { s.Workspace = "" }, want: []string{"no workspace path"}},
		{name: "RelativeWorkspace", modify: func(s *runtime.Spec) { s.Workspace = "ws" }, want: []string{"not an absolute path"}},
		{name: "MissingWorkspace", modify: func(s *runtime.Spec) { s.Workspace += "/missing" }, want: []string{"no such file or directory", "workspaces.<name>.path"}},
		{name: "WorkspaceIsAFile", modify: func(s *runtime.Spec) { s.Workspace = s.ControlSocket }, want: []string{"not a directory"}},
		{name: "SocketIsAFile", modify: func(s *runtime.Spec) {
			p := filepath.Join(s.Workspace, "f")
			os.WriteFile(p, nil, 0o600)
			s.ControlSocket = p
		}, want: []string{"not a Unix socket"}},
		{name: "MissingSocket", modify: func(s *runtime.Spec) { s.ControlSocket += ".gone" }, want: []string{"is choird's agent listener up?"}},
		{name: "ReservedEnv", modify: func(s *runtime.Spec) { s.Env[runtime.EnvLeaseToken] = "x"; s.Env["HOME"] = "/" }, want: []string{"CHOIR_LEASE_TOKEN: set by the runtime", "HOME: set by the runtime"}},
		{name: "HTTPIsFine", modify: func(s *runtime.Spec) {
			s.ControlSocket, s.ControlAddr, s.ControlCACert = "", "127.0.0.1:9400", filepath.Join(s.Workspace, "ca.pem")
			os.WriteFile(s.ControlCACert, []byte("pem"), 0o644)
		}},
		{name: "SocketAndHTTP", modify: func(s *runtime.Spec) { s.ControlAddr = "127.0.0.1:9400" }, want: []string{"give one transport, not both", "no certificate file"}},
		{name: "HTTPPortUnknown", modify: func(s *runtime.Spec) { s.ControlSocket, s.ControlAddr = "", "127.0.0.1:0" }, want: []string{`control address "127.0.0.1:0"`}},
		{name: "ReservedTransportEnv", modify: func(s *runtime.Spec) { s.Env[runtime.EnvEndpoint] = "https://evil" }, want: []string{"CHOIR_ENDPOINT: set by the runtime"}},
		{name: "BadEnvName", modify: func(s *runtime.Spec) { s.Env["lower"] = "x" }, want: []string{`"lower": name must match`}},
		{name: "NULInEnv", modify: func(s *runtime.Spec) { s.Env["X"] = "a\x00b" }, want: []string{"NUL"}},
		{name: "ReservedLabel", modify: func(s *runtime.Spec) { s.Labels[runtime.LabelManaged] = "false" }, want: []string{"label choir.managed: set by the runtime"}},
		{name: "NegativeLimits", modify: func(s *runtime.Spec) { s.Limits.PIDs = -1 }, want: []string{"must not be negative"}},
		{name: "AllProblemsAtOnce", modify: func(s *runtime.Spec) { s.AgentID = ""; s.LeaseToken = "" }, want: []string{"agent id", "no lease token"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := validSpec(t)
			tt.modify(&s)
			err := s.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if !errors.Is(err, runtime.ErrInvalidSpec) {
				t.Fatalf("Validate() = %v, want ErrInvalidSpec", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestEnvAndLabels(t *testing.T) {
	t.Parallel()
	s := validSpec(t)
	env := runtime.Env("docker", s, "/workspace", "/tmp", runtime.Reach{Socket: "/run/choir.sock"})
	want := []string{
		"CHOIR_AGENT_ID=agent-1", "CHOIR_CONTROL_PLANE=uds", "CHOIR_EXTRA=x", "CHOIR_LEASE_TOKEN_FD=0", "CHOIR_RUNTIME=docker",
		"CHOIR_SESSION_ID=" + s.SessionID, "CHOIR_SOCKET=/run/choir.sock", "CHOIR_WORKSPACE=/workspace", "HOME=/tmp",
	}
	if !slices.Equal(env, want) {
		t.Errorf("Env =\n%q\nwant\n%q", env, want)
	}
	// The token reaches the agent on its standard input, never in its
	// environment, where what the agent starts could read it.
	s.LeaseToken = "lease-token-never-in-the-environment"
	for _, kv := range runtime.Env("process", s, "/w", "/h", runtime.Reach{Socket: "/s"}) {
		if strings.Contains(kv, s.LeaseToken) {
			t.Errorf("the lease token is in the environment: %s", kv)
		}
	}
	if env := runtime.Env("process", s, "/w", "/h", runtime.Reach{}); slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "CHOIR_SOCKET=") }) {
		t.Errorf("CHOIR_SOCKET set without a socket: %q", env)
	}
	// Over HTTP the agent learns the endpoint and the certificate file,
	// and no socket.
	env = runtime.Env("docker", s, "/workspace", "/tmp", runtime.Reach{Endpoint: "https://host.docker.internal:9400", CACert: "/run/choir-ca.pem"})
	for _, kv := range []string{"CHOIR_CONTROL_PLANE=http", "CHOIR_ENDPOINT=https://host.docker.internal:9400", "CHOIR_CA_CERT=/run/choir-ca.pem"} {
		if !slices.Contains(env, kv) {
			t.Errorf("HTTP environment lacks %s: %q", kv, env)
		}
	}
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "CHOIR_SOCKET=") }) {
		t.Errorf("CHOIR_SOCKET set over HTTP: %q", env)
	}
	l := runtime.Labels("process", s)
	if l[runtime.LabelManaged] != "true" || l[runtime.LabelAgentID] != "agent-1" || l[runtime.LabelSessionID] != s.SessionID ||
		l[runtime.LabelRuntime] != "process" || l["choir.extra"] != "x" {
		t.Errorf("labels %v", l)
	}
	if _, ok := s.Labels[runtime.LabelManaged]; ok {
		t.Error("Labels changed the spec's map")
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	t.Parallel()
	if got := (runtime.Limits{}).WithDefaults(); got != runtime.DefaultLimits {
		t.Errorf("zero limits -> %+v", got)
	}
	if got := (runtime.Limits{PIDs: 7}).WithDefaults(); got.PIDs != 7 || got.CPUs != runtime.DefaultLimits.CPUs {
		t.Errorf("partial limits -> %+v", got)
	}
}

// fakeRuntime lists fixed instances and records removals; RemoveOrphans is
// otherwise tested against both real runtimes.
type fakeRuntime struct {
	runtime.Runtime
	list    []runtime.Instance
	removed []string
	fail    string
}

func (f *fakeRuntime) Name() string { return "fake" }
func (f *fakeRuntime) List(context.Context) ([]runtime.Instance, error) {
	return f.list, nil
}
func (f *fakeRuntime) Remove(_ context.Context, id string) error {
	switch id {
	case f.fail:
		return errors.New("engine said no")
	case "gone":
		return runtime.ErrNotFound
	}
	f.removed = append(f.removed, id)
	return nil
}

func TestRemoveOrphans(t *testing.T) {
	t.Parallel()
	f := &fakeRuntime{
		list: []runtime.Instance{{ID: "a", AgentID: "x"}, {ID: "keep", AgentID: "y"}, {ID: "gone"}, {ID: "bad", AgentID: "z", SessionID: "s"}},
		fail: "bad",
	}
	removed, err := runtime.RemoveOrphans(t.Context(), f, func(i runtime.Instance) bool { return i.ID == "keep" })
	if err == nil || !strings.Contains(err.Error(), "remove orphan bad (agent z, session s): engine said no") {
		t.Errorf("err = %v", err)
	}
	var ids []string
	for _, i := range removed {
		ids = append(ids, i.ID)
	}
	if !slices.Equal(ids, []string{"a", "gone"}) || !slices.Equal(f.removed, []string{"a"}) {
		t.Errorf("removed %v (runtime saw %v)", ids, f.removed)
	}
}

func TestHostEndpoint(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1:9400":  "https://127.0.0.1:9400",
		"0.0.0.0:9400":    "https://127.0.0.1:9400",
		"[::]:9400":       "https://127.0.0.1:9400",
		"[::1]:9400":      "https://[::1]:9400",
		"172.17.0.1:9400": "https://172.17.0.1:9400",
	} {
		if got := runtime.HostEndpoint(addr); got != want {
			t.Errorf("HostEndpoint(%s) = %s, want %s", addr, got, want)
		}
	}
}
