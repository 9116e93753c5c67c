package runtime

import (
	"fmt"
	"syscall"
)

// SetNonDumpable makes the calling process non-dumpable (prctl
// PR_SET_DUMPABLE 0): its /proc/<pid>/environ, mem, maps and fd entries
// then belong to root, and reading them or attaching to the process needs
// CAP_SYS_PTRACE, even for processes of the same user. choird calls it
// when its agents' tools run as its own user (the process runtime).
func SetNonDumpable() error {
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("prctl PR_SET_DUMPABLE 0: %w", errno)
	}
	return nil
}
