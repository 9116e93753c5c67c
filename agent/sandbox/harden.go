package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// The capabilities that open a non-dumpable process's /proc entries
// (capability(7) numbers): CAP_SYS_PTRACE, and, as measured on Linux 6.18,
// CAP_SYS_ADMIN and CAP_PERFMON each on their own too.
var procAccessCaps = []uintptr{19, 21, 38}

// Harden closes the agent's own process to the commands its tools run,
// which share its user: it makes the process non-dumpable (prctl
// PR_SET_DUMPABLE 0), so that its /proc/<pid>/environ, mem, maps and fd
// entries belong to root and opening them, or attaching to the process,
// needs CAP_SYS_PTRACE (or CAP_SYS_ADMIN or CAP_PERFMON); and, where it
// may (the agent runs as root under the process runtime), it takes those
// three out of its bounding and inheritable sets, so that no program it
// executes ever holds them: a program executed by root gets exactly its
// bounding set, plus its inheritable set, as its permitted set. In a
// container with every capability dropped there is nothing to take out.
//
// Capability sets belong to each thread, and a child is forked from
// whichever thread runs the goroutine that starts it. Without cgo the sets
// are changed on every thread at once (syscall.AllThreadsSyscall). A cgo
// binary cannot do that: there Harden changes the sets of the calling
// thread and executes the agent's own binary again from it, so that every
// thread of the new image descends from a thread without them. Harden
// then runs again in the new image, finds nothing to drop and returns.
//
// The agent calls it first thing, before it reads its lease token, which
// is still unread on standard input across the new execution.
func Harden() error {
	if err := prctl(syscall.PR_SET_DUMPABLE, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_DUMPABLE 0: %w", err)
	}
	// In a fresh process every thread has the same sets: the calling
	// thread's say what there is to drop.
	var held []uintptr
	for _, c := range procAccessCaps {
		r, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_CAPBSET_READ, c, 0, 0, 0, 0)
		if errno == 0 && r == 1 { // EINVAL: unknown to this kernel
			held = append(held, c)
		}
	}
	hdr, data, err := capget()
	if err != nil {
		return err
	}
	inheritable := false
	for _, c := range procAccessCaps {
		if data[c/32].inheritable&(1<<(c%32)) != 0 {
			inheritable = true
		}
	}
	if !hasCap(data, capSetPCap) {
		// Not privileged (an ordinary user's bounding set is full): the
		// bounding set cannot change, and a program executed by this user
		// gains nothing from it without file capabilities.
		held = nil
	}
	if len(held) == 0 && !inheritable {
		return nil
	}
	clearInheritable(data)

	// Without cgo: every thread at once.
	allThreads := true
	for _, c := range held {
		if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, syscall.PR_CAPBSET_DROP, c, 0); errno != 0 {
			if errno == syscall.ENOTSUP { // a cgo binary
				allThreads = false
				break
			}
			return fmt.Errorf("prctl PR_CAPBSET_DROP %d on every thread: %w", c, errno)
		}
	}
	if allThreads {
		if _, _, errno := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
			return fmt.Errorf("capset on every thread: %w", errno)
		}
		return nil
	}

	// cgo: this thread, then a new execution from it. The thread stays
	// locked: if the execution fails the agent exits.
	runtime.LockOSThread()
	for _, c := range held {
		if err := prctl(syscall.PR_CAPBSET_DROP, c); err != nil {
			return fmt.Errorf("prctl PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	// By its path, not /proc/self/exe, so that the process keeps its name.
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the agent's binary to execute it again without capabilities %v: %w", held, err)
	}
	err = syscall.Exec(exe, os.Args, os.Environ())
	return fmt.Errorf("execute %s again without capabilities %v: %w", exe, held, err)
}

// capSetPCap is CAP_SETPCAP, which PR_CAPBSET_DROP needs.
const capSetPCap = 8

// capData is struct __user_cap_data_struct.
type capData struct{ effective, permitted, inheritable uint32 }

// capHeader is struct __user_cap_header_struct.
type capHeader struct {
	version uint32
	pid     int32
}

const linuxCapabilityVersion3 = 0x20080522

func capget() (*capHeader, *[2]capData, error) {
	hdr := &capHeader{version: linuxCapabilityVersion3}
	data := new([2]capData)
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return nil, nil, fmt.Errorf("capget: %w", errno)
	}
	return hdr, data, nil
}

func hasCap(data *[2]capData, c uintptr) bool {
	return data[c/32].effective&(1<<(c%32)) != 0
}

// clearInheritable takes procAccessCaps out of data's inheritable set
// (which also empties them from the ambient set when it is applied).
func clearInheritable(data *[2]capData) {
	for _, c := range procAccessCaps {
		data[c/32].inheritable &^= 1 << (c % 32)
	}
}

// Dumpable reports whether the calling process is dumpable.
func Dumpable() (bool, error) {
	r, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_GET_DUMPABLE, 0, 0, 0, 0, 0)
	if errno != 0 {
		return false, errno
	}
	return r != 0, nil
}

func prctl(option, arg uintptr) error {
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, option, arg, 0, 0, 0, 0); errno != 0 {
		return errno
	}
	return nil
}
