package sandbox

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// cgroupFS builds a fake cgroup filesystem holding pids.max files at the
// given relative paths.
func cgroupFS(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for rel, v := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func fixture(name string) string { return filepath.Join("testdata", name) }

// hardened is a probe of a fully hardened container on cgroup v1.
func hardened(t *testing.T) Probe {
	return Probe{
		Status:      fixture("status_hardened"),
		MountInfo:   fixture("mountinfo_readonly"),
		Cgroup:      fixture("cgroup_v1"),
		UIDMap:      fixture("uid_map_remapped"),
		CgroupRoot:  cgroupFS(t, map[string]string{"pids/pids.max": "512"}),
		SocketPaths: []string{filepath.Join(t.TempDir(), "docker.sock")},
		Getenv:      func(string) string { return "" },
	}
}

func failedNames(r Report) []string {
	var out []string
	for _, c := range r.Failed() {
		out = append(out, c.Name)
	}
	return out
}

func TestRun(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		modify func(t *testing.T, p *Probe)
		failed []string // nil: all pass
		detail string   // substring of the error
	}{
		{name: "HardenedPasses", modify: func(*testing.T, *Probe) {}},
		{
			name:   "HostRootFails",
			modify: func(_ *testing.T, p *Probe) { p.UIDMap = fixture("uid_map_identity") },
			failed: []string{CheckNotHostRoot},
			detail: `uid 0 is root on the host (uid_map "0 0 4294967295")`,
		},
		{
			name: "UnprivilegedUidPasses",
			modify: func(_ *testing.T, p *Probe) {
				p.Status, p.UIDMap = fixture("status_hardened_nonroot"), fixture("uid_map_identity")
			},
		},
		{
			name:   "UnreadableUIDMapFails",
			modify: func(_ *testing.T, p *Probe) { p.UIDMap = fixture("nope") },
			failed: []string{CheckNotHostRoot},
			detail: "read testdata/nope",
		},
		{
			name:   "DockerDefaultsFailCapsAndNoNewPrivs",
			modify: func(_ *testing.T, p *Probe) { p.Status = fixture("status_docker_default") },
			failed: []string{CheckCapEff, CheckCapBnd, CheckNoNewPrivs, CheckNotHostRoot},
			detail: "CapEff=00000000a80425fb, want 0",
		},
		{
			name:   "HostProcessFailsEveryStatusCheck",
			modify: func(_ *testing.T, p *Probe) { p.Status = fixture("status_host") },
			failed: []string{CheckCapEff, CheckCapBnd, CheckCapAmb, CheckNoNewPrivs, CheckSeccomp, CheckNotHostRoot},
			detail: "Seccomp=0, want 2",
		},
		{
			name:   "MissingAndMalformedFieldsFail",
			modify: func(_ *testing.T, p *Probe) { p.Status = fixture("status_truncated") },
			failed: []string{CheckCapBnd, CheckCapAmb, CheckNoNewPrivs, CheckSeccomp, CheckNotHostRoot},
			detail: `CapBnd="zz" is not a hexadecimal capability set`,
		},
		{
			name:   "UnreadableStatusFailsItsChecks",
			modify: func(_ *testing.T, p *Probe) { p.Status = fixture("nope") },
			failed: []string{CheckCapEff, CheckCapBnd, CheckCapAmb, CheckNoNewPrivs, CheckSeccomp, CheckNotHostRoot},
			detail: "read testdata/nope",
		},
		{
			name:   "WritableRootFails",
			modify: func(_ *testing.T, p *Probe) { p.MountInfo = fixture("mountinfo_writable") },
			failed: []string{CheckReadOnlyRoot},
			detail: "/ (overlay) is mounted rw,relatime, want ro",
		},
		{
			name:   "StackedRootUsesTheVisibleMount",
			modify: func(_ *testing.T, p *Probe) { p.MountInfo = fixture("mountinfo_stacked_root") },
			failed: []string{CheckReadOnlyRoot},
		},
		{
			name: "StatfsMustAgree",
			modify: func(_ *testing.T, p *Probe) {
				p.RootReadOnlyFunc = func() (bool, error) { return false, nil }
			},
			failed: []string{CheckReadOnlyRoot},
			detail: "statfs does not",
		},
		{
			name: "StatfsErrorFails",
			modify: func(_ *testing.T, p *Probe) {
				p.RootReadOnlyFunc = func() (bool, error) { return false, errors.New("boom") }
			},
			failed: []string{CheckReadOnlyRoot},
			detail: "statfs /: boom",
		},
		{
			name: "SocketFileFails",
			modify: func(t *testing.T, p *Probe) {
				if err := os.WriteFile(p.SocketPaths[0], nil, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			failed: []string{CheckEngineSocket},
			detail: "docker.sock",
		},
		{
			name:   "DockerHostFails",
			modify: func(_ *testing.T, p *Probe) { p.Getenv = func(string) string { return "tcp://10.0.0.1:2375" } },
			failed: []string{CheckEngineSocket},
			detail: "DOCKER_HOST=tcp://10.0.0.1:2375",
		},
		{
			name:   "SocketMountedElsewhereFails",
			modify: func(_ *testing.T, p *Probe) { p.MountInfo = fixture("mountinfo_docker_sock") },
			failed: []string{CheckEngineSocket},
			detail: "mount /var/lib/engine sock/docker.sock",
		},
		{
			name: "PidsMaxUnlimitedFails",
			modify: func(t *testing.T, p *Probe) {
				p.CgroupRoot = cgroupFS(t, map[string]string{"pids/pids.max": "max"})
			},
			failed: []string{CheckPidsLimit},
			detail: "is max, want a limit",
		},
		{
			name: "PidsV1HostPathIsFound",
			modify: func(t *testing.T, p *Probe) {
				p.CgroupRoot = cgroupFS(t, map[string]string{"pids/docker/4f3c2a/pids.max": "100"})
			},
		},
		{
			name: "PidsV2Namespaced",
			modify: func(t *testing.T, p *Probe) {
				p.Cgroup = fixture("cgroup_v2")
				p.CgroupRoot = cgroupFS(t, map[string]string{"pids.max": "256"})
			},
		},
		{
			name: "PidsV2UnlimitedFails",
			modify: func(t *testing.T, p *Probe) {
				p.Cgroup = fixture("cgroup_v2")
				p.CgroupRoot = cgroupFS(t, map[string]string{"pids.max": "max"})
			},
			failed: []string{CheckPidsLimit},
		},
		{
			name: "NoPidsControllerFails",
			modify: func(_ *testing.T, p *Probe) {
				p.Cgroup = fixture("cgroup_none")
			},
			failed: []string{CheckPidsLimit},
			detail: "no pids controller",
		},
		{
			name: "NoPidsFileFails",
			modify: func(t *testing.T, p *Probe) {
				p.CgroupRoot = cgroupFS(t, map[string]string{"other": "x"})
			},
			failed: []string{CheckPidsLimit},
			detail: "no readable pids.max",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := hardened(t)
			tt.modify(t, &p)
			r := Run(p)
			if len(r.Checks) != 9 {
				t.Fatalf("got %d checks, want 9: %+v", len(r.Checks), r.Checks)
			}
			if got := failedNames(r); !slices.Equal(got, tt.failed) {
				t.Fatalf("failed checks = %v, want %v\n%+v", got, tt.failed, r.Checks)
			}
			err := r.Err()
			if tt.failed == nil {
				if err != nil {
					t.Fatalf("Err() = %v, want nil", err)
				}
				return
			}
			var se *Error
			if !errors.As(err, &se) {
				t.Fatalf("Err() = %v, want *Error", err)
			}
			if !slices.Equal(se.FailedNames(), tt.failed) {
				t.Errorf("FailedNames() = %v", se.FailedNames())
			}
			for _, n := range tt.failed {
				if !strings.Contains(err.Error(), n+": ") {
					t.Errorf("error %q does not name %s", err, n)
				}
			}
			if !strings.Contains(err.Error(), tt.detail) {
				t.Errorf("error %q does not contain %q", err, tt.detail)
			}
		})
	}
}

func TestReportJSON(t *testing.T) {
	t.Parallel()
	r := Run(hardened(t))
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Checks, r.Checks) {
		t.Fatalf("round trip changed the report: %s", b)
	}
}

// TestCheckOnHost runs the real probe in the test process, which is not
// sandboxed: it must refuse, and at least the capability checks must fail.
func TestCheckOnHost(t *testing.T) {
	t.Parallel()
	if os.Getenv("container") != "" {
		t.Skip("running inside a container")
	}
	r := Run(DefaultProbe())
	if r.Err() == nil {
		t.Skip("this test process runs with an empty capability set; nothing to refuse")
	}
	if len(r.Checks) != 9 {
		t.Fatalf("got %d checks", len(r.Checks))
	}
}

func TestUnescapeMount(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`/a\040b`:  "/a b",
		`/plain`:   "/plain",
		`/x\011y`:  "/x\ty",
		`/bad\09`:  `/bad\09`,
		`/end\04`:  `/end\04`,
		`/two\\ab`: `/two\\ab`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
