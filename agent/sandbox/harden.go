package sandbox

import (
	"errors"
	"fmt"
	"syscall"
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
// may (the agent runs as root under the process runtime), it drops those
// three from its bounding set, so that no process it starts can ever hold
// them. In a container with every capability dropped the second step has
// nothing to drop.
//
// The agent calls it first thing, before it reads its lease token.
func Harden() error {
	if err := prctl(syscall.PR_SET_DUMPABLE, 0); err != nil {
		return fmt.Errorf("prctl PR_SET_DUMPABLE 0: %w", err)
	}
	for _, c := range procAccessCaps {
		// EPERM: no CAP_SETPCAP, so no capability to give away either;
		// EINVAL: the capability is unknown to this kernel.
		// The bounding set belongs to each thread, and a child is forked
		// from whichever thread runs the goroutine: drop it on all of them.
		_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, syscall.PR_CAPBSET_DROP, c, 0)
		var err error
		if errno != 0 {
			err = errno
		}
		if errors.Is(err, syscall.ENOTSUP) { // a cgo binary: this thread only
			err = prctl(syscall.PR_CAPBSET_DROP, c)
		}
		if err != nil && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("prctl PR_CAPBSET_DROP %d: %w", c, err)
		}
	}
	return nil
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
