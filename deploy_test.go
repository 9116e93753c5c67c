package choir_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/choirhq/choir/config/atrest"
)

const unitPath = "deploy/choird.service"

// unitDirectives reads a systemd unit into its directives, each with every
// value it is given, in order; comments and section headers are left out.
func unitDirectives(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not a directive", path, line)
		}
		out[k] = append(out[k], v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// systemdAnalyze is the path of systemd-analyze. CI has it; elsewhere the
// test skips without it.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is missing: install systemd (apt-get install systemd) to check deploy/choird.service")
		}
		t.Skip("systemd-analyze is missing; CI runs this test")
	}
	return p
}

func TestServiceUnitHardening(t *testing.T) {
	t.Parallel()
	d := unitDirectives(t, unitPath)
	want := map[string]string{
		"Type":                    "simple",
		"User":                    "choir",
		"SupplementaryGroups":     "docker",
		"StateDirectory":          "choir",
		"Restart":                 "on-failure",
		"UMask":                   "0077",
		"NoNewPrivileges":         "yes",
		"CapabilityBoundingSet":   "",
		"AmbientCapabilities":     "",
		"ProtectSystem":           "strict",
		"ReadWritePaths":          "/var/lib/choir",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectKernelLogs":       "yes",
		"ProtectControlGroups":    "no",
		"Delegate":                "memory cpu",
		"ProtectClock":            "yes",
		"ProtectHostname":         "yes",
		"RestrictNamespaces":      "user pid net",
		"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
		"LockPersonality":         "yes",
		"RestrictRealtime":        "yes",
		"RestrictSUIDSGID":        "yes",
		"SystemCallArchitectures": "native",
		"MemoryDenyWriteExecute":  "no",
	}
	for k, v := range want {
		got, ok := d[k]
		if !ok {
			t.Errorf("%s: %s= is missing; want %s=%s", unitPath, k, k, v)
			continue
		}
		if got[len(got)-1] != v {
			t.Errorf("%s: %s=%s, want %s=%s", unitPath, k, got[len(got)-1], k, v)
		}
	}
	execStart := d["ExecStart"]
	if len(execStart) != 1 {
		t.Fatalf("%s: want one ExecStart, got %q", unitPath, execStart)
	}
	args := strings.Fields(execStart[0])
	if args[0] != "/usr/local/bin/choird" {
		t.Errorf("%s: ExecStart runs %s, want /usr/local/bin/choird (where the README installs it)", unitPath, args[0])
	}
	if !strings.Contains(execStart[0], "--home /var/lib/choir/.choir.d") {
		t.Errorf("%s: ExecStart %q does not pass --home /var/lib/choir/.choir.d, the home inside StateDirectory", unitPath, execStart[0])
	}
}

// TestServiceUnitVerifies runs systemd-analyze on the unit, with ExecStart
// pointing at a freshly built choird (verify insists the binary exists) and
// the age key's LoadCredentialEncrypted= line uncommented, and checks that
// every flag ExecStart passes is one choird has.
func TestServiceUnitVerifies(t *testing.T) {
	t.Parallel()
	analyze := systemdAnalyze(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "choird")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/choird").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/choird: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	for _, a := range strings.Fields(unitDirectives(t, unitPath)["ExecStart"][0])[1:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !strings.Contains(string(help), "-"+name+" ") {
				t.Errorf("%s: ExecStart passes --%s, which choird does not have:\n%s", unitPath, name, help)
			}
		}
	}
	src, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	// The age key's credential line (secrets.json at rest) is commented
	// out, since a missing credential keeps the unit from starting: it is
	// verified as an operator uncomments it, naming the credential choird
	// reads.
	credential := "\n#LoadCredentialEncrypted=" + atrest.CredentialName + ":/etc/credstore.encrypted/" + atrest.CredentialName + "\n"
	if !strings.Contains(string(src), credential) {
		t.Errorf("%s: no commented line %q for the age key of an encrypted secrets.json", unitPath, strings.TrimSpace(credential))
	}
	text := strings.NewReplacer("/usr/local/bin/choird", bin, credential, strings.Replace(credential, "#", "", 1)).Replace(string(src))
	unit := filepath.Join(dir, "choird.service")
	if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", unit).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
	out, err := exec.Command(analyze, "security", "--offline=yes", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security --offline=yes %s: %v\n%s", unitPath, err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for choird\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in systemd-analyze security's output:\n%s", out)
	}
	// 1.4 when written, 2.3 once the browser (choir.web.browse) could run
	// under the unit with its sandbox on: user, PID and network namespaces
	// (0.5), chroot and capset (0.4), writable executable memory for V8's
	// JIT (0.1) and a delegated, writable cgroup for the browser's limits
	// (0.3). systemd still calls 2.3 "OK". A change that opens the sandbox
	// past that fails here.
	if score, _ := strconv.ParseFloat(string(m[1]), 64); score > 2.3 {
		t.Errorf("%s: exposure %.1f, want at most 2.3 (OK):\n%s", unitPath, score, out)
	}
}

// TestServiceUnitLetsChromiumSandboxRun checks the unit's settings that
// decide whether choird's browser (Chromium, sandbox on) can start under
// it: V8's JIT needs writable-then-executable memory, the namespace
// sandbox needs user, PID and network namespaces and the chroot and capset
// calls, and the browser's cgroup needs a delegated, writable hierarchy.
// It then runs choird's own browser worker, as an unprivileged user with
// the unit's sandbox properties, under a real systemd (systemdBox), and
// loads a page a script renders.
func TestServiceUnitLetsChromiumSandboxRun(t *testing.T) {
	t.Parallel()
	d := unitDirectives(t, unitPath)
	last := func(k string) string {
		if v := d[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	if v := last("MemoryDenyWriteExecute"); v == "yes" || v == "true" || v == "1" {
		t.Errorf("%s: MemoryDenyWriteExecute=%s kills every page: V8 compiles code into memory it then makes executable", unitPath, v)
	}
	if v := last("RestrictNamespaces"); v != "" && v != "no" && v != "false" {
		allowed := strings.Fields(v)
		for _, ns := range []string{"user", "pid", "net"} {
			if strings.HasPrefix(v, "~") || !slices.Contains(allowed, ns) {
				t.Errorf("%s: RestrictNamespaces=%s forbids the %s namespace Chromium's sandbox puts each renderer in", unitPath, v, ns)
			}
		}
	}
	// The filter's entries apply in order: a later positive list allows
	// again what ~@privileged denied.
	allowed := map[string]bool{}
	for _, f := range d["SystemCallFilter"] {
		deny := strings.HasPrefix(f, "~")
		for _, c := range strings.Fields(strings.TrimPrefix(f, "~")) {
			switch {
			case c == "@privileged" && deny:
				allowed["chroot"], allowed["capset"] = false, false
			case c == "@system-service" && !deny:
				allowed["capset"] = true
			case !deny:
				allowed[c] = true
			case deny:
				allowed[c] = false
			}
		}
	}
	if len(d["SystemCallFilter"]) > 0 && (!allowed["chroot"] || !allowed["capset"]) {
		t.Errorf("%s: SystemCallFilter=%q denies chroot or capset, which Chromium's sandbox calls in each renderer", unitPath, d["SystemCallFilter"])
	}
	if v := last("ProtectControlGroups"); v == "yes" || !strings.Contains(last("Delegate"), "memory") || !strings.Contains(last("Delegate"), "cpu") {
		t.Errorf("%s: ProtectControlGroups=%s, Delegate=%s: choird cannot make the browser's cgroup (want Delegate=memory cpu and a writable hierarchy)",
			unitPath, v, last("Delegate"))
	}
	box := bootSystemd(t)
	browseUnderUnit(t, box, d)
}
