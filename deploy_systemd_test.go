package choir_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/starter"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// checkDir is where a systemdBox sees the binaries a test built.
const checkDir = "/opt/choir-check"

// systemdBox is a container whose PID 1 is systemd, over the host's own
// /usr and /etc (read-only), on the host's network: these machines' PID 1
// is not systemd, and only systemd enforces a unit's properties. Its
// checkDir holds the binaries choirdtest.Binary built.
type systemdBox struct{ name string }

// bootSystemd starts a systemdBox and waits for systemd to finish
// booting. It needs Docker (CI has it) and systemd's package on the host.
func bootSystemd(t *testing.T) *systemdBox {
	t.Helper()
	if _, err := os.Stat("/lib/systemd/systemd"); err != nil {
		t.Fatal("systemd is not installed: apt-get install systemd (the unit's properties need a systemd to enforce them)")
	}
	cli := runtimetest.RequireDocker(t)
	image := runtimetest.ImportImage(t, cli, "choir-systemd-box", map[string]runtimetest.File{
		"bin": {Link: "usr/bin"}, "sbin": {Link: "usr/sbin"}, "lib": {Link: "usr/lib"}, "lib64": {Link: "usr/lib64"},
	}, `ENTRYPOINT ["/lib/systemd/systemd"]`)
	bins := filepath.Dir(choirdtest.Binary(t, "deploy/testdata/unitbrowse"))
	// The units' users are not root: they must reach the binaries.
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	choirdtest.Binary(t, "cmd/choird")
	choirdtest.Binary(t, "cmd/choirctl")
	b := &systemdBox{name: "choir-systemd-" + runtimetest.RandomHex(4)}
	// systemd needs CAP_SYS_ADMIN (mounts for the units' sandboxes) and
	// the cgroup file system; it runs no unit of its own beyond booting.
	out, err := exec.Command("docker", "run", "-d", "--name", b.name, "--network", "host", "-e", "container=docker",
		"--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
		"-v", "/usr:/usr:ro", "-v", "/etc:/etc:ro", "-v", bins+":"+checkDir+":ro",
		"-v", "/var/run/docker.sock:/run/docker.sock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp", "--tmpfs", "/var", image).CombinedOutput()
	if err != nil {
		t.Fatalf("start a container with systemd as PID 1: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", b.name).Run() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// is-system-running --wait returns once booting is over: "running", or
	// "degraded" where a unit that needs real hardware failed.
	// Until its bus is up, systemctl cannot ask.
	for {
		out, _ = b.exec(ctx, "systemctl", "is-system-running", "--wait")
		state := strings.TrimSpace(string(out))
		if state == "running" || state == "degraded" {
			return b
		}
		if ctx.Err() != nil {
			logs, _ := exec.Command("docker", "logs", b.name).CombinedOutput()
			t.Fatalf("systemd in the container did not boot: %q\n%s", state, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs a command in the box, outside every unit.
func (b *systemdBox) exec(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "docker", append([]string{"exec", b.name}, args...)...).CombinedOutput()
}

// unitProperties are the unit's sandbox directives as systemd-run's -p
// arguments, with DynamicUser standing in for its User (the box has no
// user choir).
func unitProperties(d map[string][]string) []string {
	args := []string{"-p", "DynamicUser=yes"}
	for _, k := range []string{"NoNewPrivileges", "CapabilityBoundingSet", "AmbientCapabilities", "ProtectSystem",
		"ProtectHome", "PrivateTmp", "PrivateMounts", "PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules",
		"ProtectKernelLogs", "Delegate", "ProtectControlGroups", "ProtectClock", "ProtectHostname", "ProtectProc",
		"ProcSubset", "RestrictAddressFamilies", "RestrictNamespaces", "LockPersonality", "RestrictRealtime",
		"RestrictSUIDSGID", "RemoveIPC", "MemoryDenyWriteExecute", "SystemCallArchitectures", "SystemCallFilter",
		"SystemCallErrorNumber", "UMask"} {
		for _, v := range d[k] {
			args = append(args, "-p", k+"="+v)
		}
	}
	return args
}

// browseUnderUnit runs choird's browser worker (deploy/testdata/unitbrowse)
// as a transient unit with the unit's sandbox properties: Chromium starts
// as choird starts it, its sandbox on, and renders a page.
func browseUnderUnit(t *testing.T, b *systemdBox, d map[string][]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"systemd-run", "--wait", "--pipe", "--quiet", "--collect"}, unitProperties(d)...)
	out, err := b.exec(ctx, append(args, checkDir+"/unitbrowse")...)
	var res struct {
		Text       string   `json:"text"`
		UID        int      `json:"uid"`
		ExecPath   string   `json:"exec_path"`
		Renderers  int      `json:"renderers"`
		Sandboxed  int      `json:"renderers_in_own_user_namespace"`
		Unconfined bool     `json:"unconfined"`
		Log        []string `json:"log"`
	}
	if err != nil || json.Unmarshal(lastLine(out), &res) != nil {
		t.Fatalf("choird's browser under %s's properties: %v\n%s", unitPath, err, out)
	}
	if res.Text != "rendered 2" {
		t.Errorf("the page under the unit: text %q, want %q (the script ran)", res.Text, "rendered 2")
	}
	if res.UID == 0 {
		t.Errorf("the browser ran as root under DynamicUser: its sandbox would be off")
	}
	// The namespace sandbox puts every renderer in a user namespace of
	// its own; without it (--no-sandbox) they share the browser's.
	if res.Renderers == 0 || res.Sandboxed != res.Renderers {
		t.Errorf("%d of %d renderers in a user namespace of their own: Chromium's sandbox is off", res.Sandboxed, res.Renderers)
	}
	// Delegate= hands a service memory and cpu only on the unified
	// hierarchy; on a hybrid one (cgroup v1 controllers, as on some of
	// these machines) systemd delegates neither, and choird says so.
	v2, _ := b.exec(ctx, "stat", "-fc", "%T", "/sys/fs/cgroup")
	if strings.TrimSpace(string(v2)) == "cgroup2fs" && res.Unconfined {
		t.Errorf("the browser ran without its cgroup limits under Delegate=%q:\n%s", d["Delegate"], strings.Join(res.Log, "\n"))
	} else if res.Unconfined {
		t.Logf("cgroup v1 here: systemd delegates no memory or cpu controller, and choird logs that the browser runs without limits")
	}
	t.Logf("browser %s as uid %d: %d renderers sandboxed", res.ExecPath, res.UID, res.Sandboxed)
}

// lastLine is out's last non-empty line.
func lastLine(out []byte) []byte {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return []byte(lines[len(lines)-1])
}

// TestServiceUnitStartsChoird installs deploy/choird.service itself in a
// box whose PID 1 is systemd, changed only where the box differs from a
// host (DynamicUser for the user choir, the freshly built choird for
// /usr/local/bin/choird), starts it with systemctl, and waits for choird
// to say it is ready and to answer choirctl status on its admin socket.
func TestServiceUnitStartsChoird(t *testing.T) {
	t.Parallel()
	box := bootSystemd(t)
	src, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.NewReplacer("User=choir\n", "DynamicUser=yes\n", "Group=choir\n", "",
		"/usr/local/bin/choird", checkDir+"/choird").Replace(string(src))
	home := "/var/lib/choir/.choir.d"
	state := seedState(t, home)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The state directory, as `choirctl init` and `db migrate` leave it
	// (README, "Installing the service"); systemd hands it to the unit's
	// dynamic user at start.
	setup := "install -d -m 0700 /var/lib/private && cp -a " + checkDir + "/" + filepath.Base(state) + " /var/lib/private/choir && " +
		"cat > /run/systemd/system/choird.service && systemctl daemon-reload && systemctl start choird"
	c := exec.CommandContext(ctx, "docker", "exec", "-i", box.name, "sh", "-c", setup)
	c.Stdin = strings.NewReader(unit)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("install and start the unit in the box: %v\n%s", err, out)
	}
	for {
		logs, _ := box.exec(ctx, "journalctl", "-u", "choird", "-o", "cat", "--no-pager")
		if strings.Contains(string(logs), "choird ready") {
			break
		}
		if out, _ := box.exec(ctx, "systemctl", "is-failed", "choird"); strings.TrimSpace(string(out)) == "failed" || ctx.Err() != nil {
			t.Fatalf("choird did not start under %s:\n%s", unitPath, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := box.exec(ctx, checkDir+"/choirctl", "--home", home, "status")
	if err != nil || !strings.Contains(string(out), "choird") {
		t.Fatalf("choirctl status against choird under the unit: %v\n%s", err, out)
	}
	t.Logf("choirctl status:\n%s", out)
}

// seedState writes, next to the binaries a systemdBox sees, a state
// directory for the unit: a local configuration whose home is home, on a
// fresh migrated database, with its workspace beside the home.
func seedState(t *testing.T, home string) string {
	t.Helper()
	url := dbtest.NewDatabase(t)
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg, secrets := starter.Local(home, config.Postgres{Host: pc.Host, Port: int(pc.Port), Database: pc.Database})
	cfg.Workspaces["main"] = config.Workspace{Path: filepath.Join(filepath.Dir(home), "workspaces", "main")}
	bins := filepath.Dir(choirdtest.Binary(t, "cmd/choird"))
	state, err := os.MkdirTemp(bins, "state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	if err := config.WriteFiles(filepath.Join(state, filepath.Base(home)), cfg, secrets, false); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "workspaces", "main"), 0o755); err != nil {
		t.Fatal(err)
	}
	return state
}
