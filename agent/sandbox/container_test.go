package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	dmount "github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
)

// requireDocker returns a client for the local engine. Without an engine
// the test skips, unless CHOIR_REQUIRE_DOCKER=1 (CI) makes it fail.
func requireDocker(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
		if err != nil {
			cli.Close()
		}
	}
	if err != nil {
		if os.Getenv("CHOIR_REQUIRE_DOCKER") == "1" {
			t.Fatalf("CHOIR_REQUIRE_DOCKER=1 but the Docker engine is not reachable: %v", err)
		}
		t.Skipf("no Docker engine (%v); set CHOIR_REQUIRE_DOCKER=1 to make this a failure", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// checkImage builds the sandboxcheck program statically and imports it as
// a FROM-scratch image, removed when the test ends.
func checkImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "check")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/sandboxcheck")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sandboxcheck: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "check", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Close()

	suffix := make([]byte, 4)
	rand.Read(suffix)
	ref := "choir-test-sandbox:" + hex.EncodeToString(suffix)
	res, err := cli.ImageImport(t.Context(), client.ImageImportSource{Source: &buf, SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{`ENTRYPOINT ["/check"]`, "LABEL choir.test=sandbox"}})
	if err != nil {
		t.Fatalf("import image: %v", err)
	}
	res.Close()
	t.Cleanup(func() {
		if _, err := cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("remove image %s: %v", ref, err)
		}
	})
	return ref
}

// runCheck runs the image as user with hc and returns the exit code and
// report.
func runCheck(t *testing.T, cli *client.Client, image, user string, hc *container.HostConfig) (int64, Report, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, User: user, Labels: map[string]string{"choir.test": "sandbox"}},
		HostConfig: hc,
	})
	if err != nil {
		t.Fatalf("create container: %v", err)
	}
	defer cli.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	wait := cli.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start container: %v", err)
	}
	var code int64
	select {
	case r := <-wait.Result:
		code = r.StatusCode
	case err := <-wait.Error:
		t.Fatalf("wait for container: %v", err)
	}
	logs, err := cli.ContainerLogs(ctx, created.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("container logs: %v", err)
	}
	defer logs.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, logs); err != nil {
		t.Fatalf("read logs: %v", err)
	}
	var r Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("decode report %q (stderr %q): %v", stdout.String(), stderr.String(), err)
	}
	return code, r, stderr.String()
}

// hardenedHostConfig mirrors the docker runtime's security profile
// (daemon/runtime/docker), which its own tests check with this package.
func hardenedHostConfig() *container.HostConfig {
	pids := int64(64)
	return &container.HostConfig{
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=16m", "/run": "rw,nosuid,nodev,size=1m"},
		Resources:      container.Resources{PidsLimit: &pids, Memory: 64 << 20},
	}
}

// TestInContainer runs the check inside real containers: with the full
// profile it passes; each weakening is named.
func TestInContainer(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	image := checkImage(t, cli)

	// The docker runtime's default user when choird is root.
	const unprivileged = "65532:65532"
	tests := []struct {
		name   string
		hc     func() *container.HostConfig
		user   string // empty: unprivileged
		failed []string
		detail string
	}{
		{name: "HardenedProfilePasses", hc: hardenedHostConfig},
		{
			name:   "EngineDefaultsRefused",
			hc:     func() *container.HostConfig { return &container.HostConfig{} },
			user:   "0",
			failed: []string{CheckCapEff, CheckCapBnd, CheckNoNewPrivs, CheckReadOnlyRoot, CheckPidsLimit, CheckNotHostRoot},
			detail: "CapEff=00000000a80425fb, want 0",
		},
		{
			// This engine does not remap user namespaces: uid 0 in the
			// container is root on the host, capabilities or not.
			name:   "HostRootRefused",
			hc:     hardenedHostConfig,
			user:   "0:0",
			failed: []string{CheckNotHostRoot},
			detail: "uid 0 is root on the host",
		},
		{
			name: "SeccompUnconfinedRefused",
			hc: func() *container.HostConfig {
				hc := hardenedHostConfig()
				hc.SecurityOpt = append(hc.SecurityOpt, "seccomp=unconfined")
				return hc
			},
			failed: []string{CheckSeccomp},
			detail: "Seccomp=0, want 2",
		},
		{
			name: "OneCapabilityRefused",
			hc: func() *container.HostConfig {
				hc := hardenedHostConfig()
				hc.CapAdd = []string{"CHOWN"}
				return hc
			},
			user:   "0",
			failed: []string{CheckCapEff, CheckCapBnd, CheckNotHostRoot},
			detail: "CapEff=0000000000000001",
		},
		{
			name: "DockerSocketMountRefused",
			hc: func() *container.HostConfig {
				hc := hardenedHostConfig()
				hc.Mounts = []dmount.Mount{{Type: dmount.TypeBind, Source: hostDockerSocket(t), Target: "/var/run/docker.sock", ReadOnly: true}}
				return hc
			},
			failed: []string{CheckEngineSocket},
			detail: "/var/run/docker.sock",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			user := tt.user
			if user == "" {
				user = unprivileged
			}
			code, r, stderr := runCheck(t, cli, image, user, tt.hc())
			if got := failedNames(r); !slices.Equal(got, tt.failed) {
				t.Fatalf("failed checks = %v, want %v\n%+v", got, tt.failed, r.Checks)
			}
			if tt.failed == nil {
				if code != 0 {
					t.Fatalf("exit code %d, stderr %q", code, stderr)
				}
				return
			}
			if code != 3 {
				t.Errorf("exit code %d, want 3 (refused)", code)
			}
			for _, n := range tt.failed {
				if !strings.Contains(stderr, n+": ") {
					t.Errorf("refusal %q does not name %s", stderr, n)
				}
			}
			if !strings.Contains(stderr, tt.detail) {
				t.Errorf("refusal %q does not contain %q", stderr, tt.detail)
			}
		})
	}
}

// hostDockerSocket is the engine's Unix socket on this host.
func hostDockerSocket(t *testing.T) string {
	h := os.Getenv("DOCKER_HOST")
	if h == "" {
		h = client.DefaultDockerHost
	}
	p, ok := strings.CutPrefix(h, "unix://")
	if !ok {
		t.Skipf("DOCKER_HOST %s is not a Unix socket", h)
	}
	return p
}
