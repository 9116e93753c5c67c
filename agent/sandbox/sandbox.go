// Package sandbox lets choir-agent verify, from the inside, that it runs in
// the hardened container the docker runtime promises (spec 15.3): no
// capabilities, no-new-privileges, a seccomp filter, a read-only root, no
// reachable container-engine socket, a pids limit, and a uid that is not
// root on the host (uid 0 passes only in a user namespace that maps it to
// an unprivileged host uid). The agent calls
// [Check] before anything else when started by the docker runtime and
// refuses to run if any check fails; the error names every failed check,
// so an operator who started the container by hand learns what is missing.
// [Harden] closes the agent's own process to what it starts, and
// [StartConfined] starts a tool's process in a Landlock domain of its own.
//
// The checks read the kernel's own view (/proc/self/status,
// /proc/self/mountinfo, /proc/self/cgroup, /proc/self/uid_map and the
// cgroup filesystem), never
// anything the image or the environment could simply claim. [Run] takes a
// [Probe] naming those files, so tests can feed it fixtures.
package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Names of the checks, as they appear in a [Result] and in errors.
const (
	CheckCapEff       = "cap_eff"
	CheckCapBnd       = "cap_bnd"
	CheckCapAmb       = "cap_amb"
	CheckNoNewPrivs   = "no_new_privs"
	CheckSeccomp      = "seccomp"
	CheckReadOnlyRoot = "read_only_root"
	CheckEngineSocket = "no_engine_socket"
	CheckPidsLimit    = "pids_limit"
	CheckNotHostRoot  = "not_host_root"
)

// DefaultSocketPaths are the container-engine sockets that must not be
// reachable from inside the container.
var DefaultSocketPaths = []string{
	"/var/run/docker.sock",
	"/run/docker.sock",
	"/run/containerd/containerd.sock",
	"/var/run/containerd/containerd.sock",
	"/run/podman/podman.sock",
}

// engineSocketNames are the base names of engine sockets looked for among
// the mount points, wherever they were mounted.
var engineSocketNames = []string{"docker.sock", "containerd.sock", "podman.sock"}

// Probe says where the checks read the kernel's view. [DefaultProbe]
// reads the running process's own files; tests point it at fixtures.
type Probe struct {
	// Status is /proc/self/status.
	Status string
	// MountInfo is /proc/self/mountinfo.
	MountInfo string
	// Cgroup is /proc/self/cgroup.
	Cgroup string
	// UIDMap is /proc/self/uid_map: how the process's uids map to the
	// host's (the parent user namespace's).
	UIDMap string
	// CgroupRoot is where the cgroup filesystem is mounted (/sys/fs/cgroup).
	CgroupRoot string
	// SocketPaths must not exist.
	SocketPaths []string
	// Getenv reads the environment; DOCKER_HOST must be unset.
	Getenv func(string) string
	// RootReadOnlyFunc, when set, asks the kernel whether / is mounted
	// read-only (statfs); it confirms what the mount table says.
	RootReadOnlyFunc func() (bool, error)
}

// DefaultProbe reads the calling process's own view.
func DefaultProbe() Probe {
	return Probe{
		Status:           "/proc/self/status",
		MountInfo:        "/proc/self/mountinfo",
		Cgroup:           "/proc/self/cgroup",
		UIDMap:           "/proc/self/uid_map",
		CgroupRoot:       "/sys/fs/cgroup",
		SocketPaths:      DefaultSocketPaths,
		Getenv:           os.Getenv,
		RootReadOnlyFunc: statfsReadOnly,
	}
}

// Result is the outcome of one check.
type Result struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says what was found, and for a failure what was expected.
	Detail string `json:"detail"`
}

// Report holds the outcome of every check, in a fixed order.
type Report struct {
	Checks []Result `json:"checks"`
}

// Failed returns the checks that did not pass.
func (r Report) Failed() []Result {
	var out []Result
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Err returns nil when every check passed, else an [*Error].
func (r Report) Err() error {
	if f := r.Failed(); len(f) > 0 {
		return &Error{Failed: f, Total: len(r.Checks)}
	}
	return nil
}

// Error reports a sandbox that is weaker than the docker runtime's profile.
type Error struct {
	Failed []Result
	Total  int
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandbox check failed (%d of %d checks): ", len(e.Failed), e.Total)
	for i, c := range e.Failed {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.Name + ": " + c.Detail)
	}
	b.WriteString("; start the agent through choird's docker runtime (cap-drop ALL, no-new-privileges, read-only root, default seccomp, pids limit, no engine socket)")
	return b.String()
}

// FailedNames lists the names of the failed checks.
func (e *Error) FailedNames() []string {
	names := make([]string, len(e.Failed))
	for i, c := range e.Failed {
		names[i] = c.Name
	}
	return names
}

// Check runs every check against the calling process and returns nil only
// if all of them pass.
func Check() error { return Run(DefaultProbe()).Err() }

// Run runs every check against p. A file that cannot be read fails the
// checks that need it, never passes them.
func Run(p Probe) Report {
	var r Report
	add := func(name string, ok bool, format string, args ...any) {
		r.Checks = append(r.Checks, Result{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}

	status, err := readStatus(p.Status)
	for _, f := range []struct{ check, field string }{
		{CheckCapEff, "CapEff"}, {CheckCapBnd, "CapBnd"}, {CheckCapAmb, "CapAmb"},
	} {
		switch v, ok := status[f.field]; {
		case err != nil:
			add(f.check, false, "%v", err)
		case !ok:
			add(f.check, false, "%s missing from %s", f.field, p.Status)
		default:
			n, perr := strconv.ParseUint(v, 16, 64)
			if perr != nil {
				add(f.check, false, "%s=%q is not a hexadecimal capability set", f.field, v)
			} else {
				add(f.check, n == 0, "%s=%s, want 0", f.field, v)
			}
		}
	}
	for _, f := range []struct{ check, field, want string }{
		{CheckNoNewPrivs, "NoNewPrivs", "1"}, {CheckSeccomp, "Seccomp", "2"},
	} {
		switch v, ok := status[f.field]; {
		case err != nil:
			add(f.check, false, "%v", err)
		case !ok:
			add(f.check, false, "%s missing from %s", f.field, p.Status)
		default:
			add(f.check, v == f.want, "%s=%s, want %s", f.field, v, f.want)
		}
	}

	mounts, merr := readMountInfo(p.MountInfo)
	ok, detail := rootReadOnly(mounts, merr, p.RootReadOnlyFunc)
	add(CheckReadOnlyRoot, ok, "%s", detail)

	ok, detail = noEngineSocket(p, mounts)
	add(CheckEngineSocket, ok, "%s", detail)

	ok, detail = pidsLimit(p)
	add(CheckPidsLimit, ok, "%s", detail)

	ok, detail = notHostRoot(status, err, p)
	add(CheckNotHostRoot, ok, "%s", detail)
	return r
}

// notHostRoot maps each of the process's uids (real, effective, saved,
// filesystem) through uid_map and fails if any is root on the host: a
// root agent could leave a setuid-root file in the bind-mounted workspace.
func notHostRoot(status map[string]string, statusErr error, p Probe) (bool, string) {
	if statusErr != nil {
		return false, statusErr.Error()
	}
	f := strings.Fields(status["Uid"])
	if len(f) == 0 {
		return false, fmt.Sprintf("Uid missing from %s", p.Status)
	}
	if p.UIDMap == "" {
		return false, "no uid_map to read"
	}
	data, err := os.ReadFile(p.UIDMap)
	if err != nil {
		return false, fmt.Sprintf("read %s: %v", p.UIDMap, err)
	}
	type extent struct{ inside, outside, count uint64 }
	var extents []extent
	for line := range strings.Lines(string(data)) {
		var e extent
		if n, _ := fmt.Sscan(line, &e.inside, &e.outside, &e.count); n == 3 {
			extents = append(extents, e)
		}
	}
	var hosts []string
	for _, s := range f {
		uid, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return false, fmt.Sprintf("Uid=%q is not a list of uids", status["Uid"])
		}
		for _, e := range extents {
			if uid >= e.inside && uid-e.inside < e.count {
				host := e.outside + uid - e.inside
				if host == 0 {
					return false, fmt.Sprintf("uid %d is root on the host (uid_map %q); run the agent as an unprivileged uid, or on an engine that remaps user namespaces",
						uid, strings.Join(strings.Fields(string(data)), " "))
				}
				hosts = append(hosts, strconv.FormatUint(host, 10))
				break
			}
		}
	}
	return true, fmt.Sprintf("uids %s are %s on the host", strings.Join(f, " "), strings.Join(hosts, " "))
}

// readStatus parses "Key:\tvalue" lines.
func readStatus(file string) (map[string]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	out := map[string]string{}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	point     string
	options   []string // per-mount options
	fstype    string
	superOpts []string
}

// readMountInfo parses mountinfo (proc(5)): ID parent major:minor root
// mount-point options [optional fields...] - fstype source super-options.
func readMountInfo(file string) ([]mount, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 {
			continue
		}
		m := mount{point: unescapeMount(f[4]), options: strings.Split(f[5], ",")}
		if sep+1 < len(f) {
			m.fstype = f[sep+1]
		}
		if sep+3 < len(f) {
			m.superOpts = strings.Split(f[sep+3], ",")
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return out, nil
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// rootReadOnly decides from the last mount on "/" (the visible one) and,
// when given, statfs.
func rootReadOnly(mounts []mount, err error, statfs func() (bool, error)) (bool, string) {
	if err != nil {
		return false, err.Error()
	}
	var root *mount
	for i := range mounts {
		if mounts[i].point == "/" {
			root = &mounts[i]
		}
	}
	if root == nil {
		return false, "no mount on / in the mount table"
	}
	ro := slices.Contains(root.options, "ro") || slices.Contains(root.superOpts, "ro")
	if !ro {
		return false, fmt.Sprintf("/ (%s) is mounted %s, want ro", root.fstype, strings.Join(root.options, ","))
	}
	if statfs != nil {
		kernelRO, serr := statfs()
		if serr != nil {
			return false, fmt.Sprintf("statfs /: %v", serr)
		}
		if !kernelRO {
			return false, "the mount table says / is read-only but statfs does not"
		}
	}
	return true, fmt.Sprintf("/ (%s) is mounted read-only", root.fstype)
}

func statfsReadOnly() (bool, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/", &st); err != nil {
		return false, err
	}
	const stRdonly = 0x1 // ST_RDONLY
	return st.Flags&stRdonly != 0, nil
}

func noEngineSocket(p Probe, mounts []mount) (bool, string) {
	var found []string
	if p.Getenv != nil {
		if h := p.Getenv("DOCKER_HOST"); h != "" {
			found = append(found, "DOCKER_HOST="+h)
		}
	}
	for _, s := range p.SocketPaths {
		if _, err := os.Lstat(s); err == nil {
			found = append(found, s)
		} else if !errors.Is(err, fs.ErrNotExist) {
			// A path we cannot even stat (permission) may still be a socket.
			found = append(found, fmt.Sprintf("%s (%v)", s, err))
		}
	}
	for _, m := range mounts {
		if slices.Contains(engineSocketNames, path.Base(m.point)) && !slices.Contains(found, m.point) {
			found = append(found, "mount "+m.point)
		}
	}
	if len(found) > 0 {
		return false, "container engine reachable: " + strings.Join(found, ", ")
	}
	return true, "no engine socket and DOCKER_HOST unset"
}

// pidsLimit finds the pids controller of the process's cgroup, cgroup v1
// first (a hybrid host lists both), then v2, and reads pids.max.
func pidsLimit(p Probe) (bool, string) {
	data, err := os.ReadFile(p.Cgroup)
	if err != nil {
		return false, fmt.Sprintf("read %s: %v", p.Cgroup, err)
	}
	var v1, v2 string
	haveV1, haveV2 := false, false
	for line := range strings.Lines(string(data)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2, haveV2 = f[2], true
		} else if slices.Contains(strings.Split(f[1], ","), "pids") {
			v1, haveV1 = f[2], true
		}
	}
	// Inside a container the cgroup filesystem is usually mounted with the
	// container's own cgroup as its root, while /proc/self/cgroup may still
	// show the host path (cgroup v1 without a cgroup namespace): try both.
	var candidates []string
	if haveV1 {
		candidates = append(candidates,
			path.Join(p.CgroupRoot, "pids", v1, "pids.max"),
			path.Join(p.CgroupRoot, "pids", "pids.max"))
	}
	if haveV2 {
		candidates = append(candidates,
			path.Join(p.CgroupRoot, v2, "pids.max"),
			path.Join(p.CgroupRoot, "pids.max"))
	}
	if len(candidates) == 0 {
		return false, fmt.Sprintf("no pids controller in %s", p.Cgroup)
	}
	candidates = slices.Compact(candidates)
	for _, c := range candidates {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return false, fmt.Sprintf("%s is max, want a limit", c)
		}
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
			return false, fmt.Sprintf("%s holds %q, want a positive limit", c, v)
		}
		return true, fmt.Sprintf("%s = %s", c, v)
	}
	return false, fmt.Sprintf("no readable pids.max (tried %s)", strings.Join(candidates, ", "))
}
