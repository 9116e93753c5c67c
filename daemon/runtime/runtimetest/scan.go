package runtimetest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/moby/client"
)

// ScanContainer looks, from the host, for each needle (a secret's value,
// by its name) everywhere the processes of the container labelled
// label=value could find it: every process's environment, command line and
// readable memory (/proc/<pid>/mem over the readable regions of its
// maps), and every regular file of the container's root, tmpfs mounts and
// bind-mounted workspace included (/proc/<pid>/root, /proc, /sys and /dev
// left out). It returns a line per find, "<name> in <where>", and fails
// the test when the container has no process (a scan of nothing proves
// nothing). The host must be able to read other processes' memory: the
// tests run as root.
func ScanContainer(t testing.TB, cli *client.Client, label, value string, needles map[string]string) []string {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		Filters: make(client.Filters).Add("label", label+"="+value)})
	if err != nil || len(res.Items) != 1 {
		t.Fatalf("running containers labelled %s=%s: %d, %v", label, value, len(res.Items), err)
	}
	pids := containerPIDs(res.Items[0].ID)
	if len(pids) == 0 {
		t.Fatalf("container %s has no process to scan", res.Items[0].ID[:12])
	}
	var finds []string
	look := func(where string, b []byte) {
		for name, v := range needles {
			if bytes.Contains(b, []byte(v)) {
				finds = append(finds, name+" in "+where)
			}
		}
	}
	var memBytes int64
	for _, pid := range pids {
		p := "/proc/" + strconv.Itoa(pid)
		comm, _ := os.ReadFile(p + "/comm")
		who := fmt.Sprintf("process %d (%s)", pid, strings.TrimSpace(string(comm)))
		for _, f := range []string{"environ", "cmdline"} {
			b, _ := os.ReadFile(p + "/" + f)
			look(who+" "+f, b)
		}
		n, err := scanMemory(p, func(b []byte) { look(who+" memory", b) })
		if err != nil {
			t.Fatalf("read the memory of %s: %v", who, err)
		}
		memBytes += n
	}
	if memBytes == 0 {
		t.Fatalf("no memory of the container's %d processes could be read", len(pids))
	}
	root := "/proc/" + strconv.Itoa(pids[0]) + "/root"
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		rel := strings.TrimPrefix(path, root)
		if err != nil {
			return nil
		}
		if d.IsDir() && (rel == "/proc" || rel == "/sys" || rel == "/dev") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 64<<20 {
			return nil
		}
		b, _ := os.ReadFile(path)
		look("file "+rel, b)
		return nil
	})
	t.Logf("scanned %d processes (%d MiB of memory) and the files of container %s", len(pids), memBytes>>20, res.Items[0].ID[:12])
	return finds
}

// containerPIDs lists the host pids whose cgroup names the container.
func containerPIDs(id string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err == nil && bytes.Contains(cg, []byte(id)) {
			out = append(out, pid)
		}
	}
	return out
}

// scanMemory hands f every readable region of the process at p, in
// chunks that overlap by a few kilobytes so that no needle is cut in
// two, and returns how many bytes it read.
func scanMemory(p string, f func([]byte)) (int64, error) {
	maps, err := os.Open(p + "/maps")
	if err != nil {
		return 0, err
	}
	defer maps.Close()
	mem, err := os.Open(p + "/mem")
	if err != nil {
		return 0, err
	}
	defer mem.Close()
	const chunk, overlap = 1 << 20, 4 << 10
	buf := make([]byte, chunk+overlap)
	var total int64
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[1][0] != 'r' {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		for off := start; off < end; off += chunk {
			n := min(uint64(len(buf)), end-off)
			got, _ := mem.ReadAt(buf[:n], int64(off))
			if got > 0 {
				f(buf[:got])
				total += int64(min(got, chunk))
			}
		}
	}
	return total, sc.Err()
}
