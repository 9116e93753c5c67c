package sandbox

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"
)

// Landlock's system calls and flags (include/uapi/linux/landlock.h); the
// numbers are the same on every architecture since Linux 5.13.
const (
	sysLandlockCreateRuleset = 444
	sysLandlockRestrictSelf  = 446

	landlockCreateRulesetVersion = 1 << 0
	landlockAccessFSMakeBlock    = 1 << 11

	prSetNoNewPrivs = 38
)

// landlockRulesetAttr is struct landlock_ruleset_attr (ABI 6); the
// kernel reads as much of it as the size passed says.
type landlockRulesetAttr struct {
	handledAccessFS  uint64
	handledAccessNet uint64
	scoped           uint64
}

// ErrNoLandlock is returned by [StartConfined] and [Domain.Start] when the
// kernel (or a seccomp filter) does not offer Landlock: the command is
// then not started, and the caller may start it unconfined (saying so).
var ErrNoLandlock = errors.New("landlock is not available")

// confine makes the calling thread, and every process it starts from now
// on, no-new-privileges and a member of a new Landlock domain. A Landlock
// domain is what closes the agent's other processes to the command: a
// process in a domain may not ptrace, nor open the /proc entries that
// need ptrace access (fd/, mem, environ, maps), of a process outside it
// or in a sibling domain. The domain restricts nothing else: its only
// handled access is making block devices.
func confine() error {
	abi, _, errno := syscall.RawSyscall(sysLandlockCreateRuleset, 0, 0, landlockCreateRulesetVersion)
	if errno != 0 {
		return fmt.Errorf("%w: %w", ErrNoLandlock, errno)
	}
	if abi < 1 {
		return fmt.Errorf("%w: ABI %d", ErrNoLandlock, abi)
	}
	// Only the first field, which every ABI knows: no scoping of signals
	// or abstract sockets, so that a command may still signal what an
	// earlier one left running (each command has a domain of its own).
	attr := landlockRulesetAttr{handledAccessFS: landlockAccessFSMakeBlock}
	fd, _, errno := syscall.RawSyscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.handledAccessFS), 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	defer syscall.Close(int(fd))
	if err := prctl(prSetNoNewPrivs, 1); err != nil {
		return fmt.Errorf("prctl PR_SET_NO_NEW_PRIVS: %w", err)
	}
	if _, _, errno := syscall.RawSyscall(sysLandlockRestrictSelf, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// StartConfined starts cmd in a Landlock domain of its own, so that no
// other process the agent starts (a command of choir.exec above all) can
// read its descriptors, memory or environment through /proc, or attach
// to it; and it none of theirs, nor the agent's. External tools and the
// commands of choir.exec start this way: a tool's secrets arrive on fd 3.
//
// Landlock applies to the thread that asks for it and to what that thread
// starts, so the command is started from a thread of its own, which dies
// with its goroutine (it stays locked to it), never to run Go code again.
func StartConfined(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the confined thread exits with the goroutine
		if err := confine(); err != nil {
			errc <- err
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}
