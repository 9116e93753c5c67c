package browser

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Default limits of each agent's browser cgroup: what every page of that
// agent shares. A page past them is killed by the kernel (the worker
// restarts that agent's browser only), and it never slows choird or the
// host's agents past them. The limits are per agent: n agents' browsers
// may use n times them together.
const (
	DefaultMemoryMax = 2 << 30 // bytes
	DefaultCPUMax    = 1.0     // cores
)

// cpuPeriod is the CFS period of a browser's CPU limit, in µs. A short
// one keeps the browser's bursts short: with the kernel's default of
// 100 ms, a browser limited to one core runs its threads on both cores of
// a two-core host for 50 ms and starves every neighbour meanwhile; at
// 10 ms it stalls them for 5 ms at most. BenchmarkHostilePageNeighbour
// measures it.
const cpuPeriod = 10_000

// cpuQuota is the CFS quota, in µs per cpuPeriod, for cores; never under
// the kernel's 1 ms minimum.
func cpuQuota(cores float64) int { return max(int(cores*cpuPeriod), 1000) }

// cgroupRoot is where cgroup file systems are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroup is the set of cgroup directories one browser process tree runs
// in: one directory on cgroup v2, one per controller on v1.
type cgroup struct {
	dirs []string
}

// confine creates a cgroup below choird's own with memory and CPU limits,
// and moves the process pid and its descendants into it (processes they
// start later inherit it). It prefers cgroup v2 and falls back to v1's
// memory and cpu controllers. The error says why the browser runs
// unconfined (no writable cgroup, a controller not delegated).
func confine(pid int, memMax int64, cpuMax float64) (*cgroup, error) {
	name := "choir-browser-" + strconv.Itoa(pid)
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	paths := map[string]string{} // controller (or "" for v2) to choird's cgroup path
	for line := range strings.Lines(string(own)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			paths[""] = f[2]
		}
		for c := range strings.SplitSeq(f[1], ",") {
			paths[c] = f[2]
		}
	}
	v2err := errors.New("no cgroup v2 hierarchy")
	if p, ok := paths[""]; ok {
		cg, err := confineV2(p, name, pid, memMax, cpuMax)
		if err == nil {
			return cg, nil
		}
		v2err = err
	}
	mem, okm := paths["memory"]
	cpu, okc := paths["cpu"]
	if !okm || !okc {
		return nil, fmt.Errorf("cgroup v2: %w; cgroup v1 has no memory and cpu controllers for choird", v2err)
	}
	cg, err := confineV1(mem, cpu, name, pid, memMax, cpuMax)
	if err != nil {
		return nil, fmt.Errorf("cgroup v2: %w; cgroup v1: %w", v2err, err)
	}
	return cg, nil
}

// confineV2 makes the cgroup in the unified hierarchy, which needs the
// memory and cpu controllers enabled for choird's cgroup's children
// (systemd's Delegate=yes gives a service that right).
func confineV2(own, name string, pid int, memMax int64, cpuMax float64) (*cgroup, error) {
	mount := cgroupRoot
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err != nil {
		mount = filepath.Join(cgroupRoot, "unified") // a hybrid host
	}
	parent := filepath.Join(mount, own)
	ctrl, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("read choird's cgroup: %w", err)
	}
	for _, c := range []string{"memory", "cpu"} {
		if !strings.Contains(" "+strings.TrimSpace(string(ctrl))+" ", " "+c+" ") {
			return nil, fmt.Errorf("controller %s is not delegated to choird's cgroup %s (run choird under systemd with Delegate=yes)", c, own)
		}
	}
	if err := enableControllers(parent); err != nil {
		return nil, fmt.Errorf("enable memory and cpu below %s: %w", own, err)
	}
	dir := filepath.Join(parent, name)
	cg := &cgroup{dirs: []string{dir}}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	files := map[string]string{filepath.Join(dir, "memory.max"): strconv.FormatInt(memMax, 10),
		filepath.Join(dir, "memory.swap.max"): "0",
		filepath.Join(dir, "cpu.max"):         fmt.Sprintf("%d %d", cpuQuota(cpuMax), cpuPeriod)}
	if err := cg.setup(files, pid); err != nil {
		cg.remove()
		return nil, err
	}
	return cg, nil
}

// enableControllers enables memory and cpu for parent's children. cgroup
// v2 refuses that (EBUSY) while parent itself holds processes, which it
// does when parent is choird's own delegated service cgroup: choird then
// moves itself into a leaf, "choird", first.
func enableControllers(parent string) error {
	ctl := filepath.Join(parent, "cgroup.subtree_control")
	err := os.WriteFile(ctl, []byte("+memory +cpu"), 0)
	if !errors.Is(err, syscall.EBUSY) {
		return err
	}
	leaf := filepath.Join(parent, "choird")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create a leaf for choird: %w", err)
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return fmt.Errorf("move choird into %s: %w", leaf, err)
	}
	return os.WriteFile(ctl, []byte("+memory +cpu"), 0)
}

// confineV1 makes one cgroup under each of v1's memory and cpu
// hierarchies.
func confineV1(memOwn, cpuOwn, name string, pid int, memMax int64, cpuMax float64) (*cgroup, error) {
	mem := filepath.Join(cgroupRoot, "memory", memOwn, name)
	cpu := filepath.Join(cgroupRoot, "cpu", cpuOwn, name)
	cg := &cgroup{}
	for _, d := range []string{mem, cpu} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			cg.remove()
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		cg.dirs = append(cg.dirs, d)
	}
	files := map[string]string{filepath.Join(mem, "memory.limit_in_bytes"): strconv.FormatInt(memMax, 10),
		filepath.Join(cpu, "cpu.cfs_period_us"): strconv.Itoa(cpuPeriod),
		filepath.Join(cpu, "cpu.cfs_quota_us"):  strconv.Itoa(cpuQuota(cpuMax))}
	if err := cg.setup(files, pid); err != nil {
		cg.remove()
		return nil, err
	}
	return cg, nil
}

// setup writes the limit files (absolute paths) and moves the tree into
// every directory.
func (cg *cgroup) setup(files map[string]string, pid int) error {
	for f, v := range files {
		if err := os.WriteFile(f, []byte(v), 0); err != nil {
			if filepath.Base(f) == "memory.swap.max" && errors.Is(err, os.ErrNotExist) {
				continue // no swap accounting on this kernel
			}
			return fmt.Errorf("set %s: %w", f, err)
		}
	}
	for _, d := range cg.dirs {
		if err := moveTree(d, pid); err != nil {
			return err
		}
	}
	return nil
}

// moveTree moves pid and its descendants into the cgroup directory dir.
// It walks twice, so that a child forked during the first walk moves too.
func moveTree(dir string, pid int) error {
	for range 2 {
		for _, p := range descendants(pid) {
			err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(p)), 0)
			if err != nil && p == pid {
				return fmt.Errorf("move the browser into %s: %w", dir, err)
			}
		}
	}
	return nil
}

// descendants lists pid and every process below it, from /proc.
func descendants(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name may hold spaces and parentheses: the fields
		// after the last ')' are state, then ppid.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
				parent[p], _ = strconv.Atoi(f[1])
			}
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		for p, pp := range parent {
			if pp == out[i] {
				out = append(out, p)
			}
		}
	}
	return out
}

// remove deletes the cgroup's directories; the kernel refuses while a
// process is still in one, so call it once the browser is gone.
func (cg *cgroup) remove() {
	if cg == nil {
		return
	}
	for _, d := range cg.dirs {
		_ = os.Remove(d)
	}
}
