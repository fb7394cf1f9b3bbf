package inject

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/internal/procfs"
)

// Which thread to borrow.
//
// The borrowed thread runs dlopen, which takes the loader's lock, calls
// malloc, and runs the library's constructors, which take more locks. A
// thread stopped at an arbitrary instruction may hold one of these itself,
// in the middle of a malloc or of its own dlopen, and our dlopen on that
// same thread would wait for it forever: glibc's malloc locks are not
// recursive. So we prefer a thread asleep in one of the system calls below:
// the ones a thread parks in while it waits for work (reads, polls, sleeps,
// joins, condition variables and lock waits). Malloc and the loader do not
// sleep in them while holding their own locks; a thread blocked there sits
// in a libc wrapper, at a well-defined point. The main thread is preferred
// among those (it lives as long as the process), then the oldest thread.
// When no thread is asleep in one, we take the main thread wherever it is:
// it is seldom in malloc or dlopen, and there is no better choice.
//
// Each call below, interrupted by our stop, restarts transparently when the
// thread is put back (see tracee.release) — with one exception: the epoll
// waits return EINTR on any stop (signal(7): the same happens after
// SIGSTOP and SIGCONT), which programs must, and do, retry. So a thread in
// epoll_wait is taken only when no other is eligible.

// Syscall numbers (x86-64).
const (
	sysRead           = 0
	sysPoll           = 7
	sysSelect         = 23
	sysNanosleep      = 35
	sysWait4          = 61
	sysRtSigsuspend   = 130
	sysFutex          = 202
	sysRestartSyscall = 219 // the rest of a sleep or wait with a timeout, after a stop
	sysClockNanosleep = 230
	sysEpollWait      = 232
	sysPselect6       = 270
	sysPpoll          = 271
	sysEpollPwait     = 281
	sysIoPgetevents   = 333
	sysIoUringEnter   = 426
	sysEpollPwait2    = 441
)

// How a thread is parked.
const (
	notParked     = iota
	restartsEINTR // interrupted, its system call returns EINTR
	restartsOK    // interrupted, its system call restarts transparently
)

// parked classifies a thread in system call nr with arguments args.
func parked(nr int64, args [6]uint64) int {
	if tempMask(nr, args) {
		return notParked
	}
	switch nr {
	case sysRead, sysPoll, sysSelect, sysNanosleep, sysWait4, sysFutex, sysRestartSyscall, sysClockNanosleep, sysPselect6, sysPpoll:
		return restartsOK
	case sysEpollWait, sysEpollPwait, sysEpollPwait2:
		return restartsEINTR
	}
	return notParked
}

// tempMask reports whether system call nr, with arguments args, runs with
// a temporary signal mask (ppoll's, pselect6's, ... sigmask argument). The
// kernel keeps the thread's own mask aside until the call returns, and a
// ptrace request that sets the mask (PTRACE_SETSIGMASK) drops the one put
// aside: we could not give the thread its own mask back. Such a thread is
// not borrowed.
func tempMask(nr int64, args [6]uint64) bool {
	switch nr {
	case sysRtSigsuspend:
		return true
	case sysPpoll:
		return args[3] != 0
	case sysEpollPwait, sysEpollPwait2, sysIoUringEnter:
		return args[4] != 0
	case sysPselect6, sysIoPgetevents:
		return args[5] != 0 // a pointer to {sigmask, size}; glibc's select passes NULL
	}
	return false
}

// pickThread chooses the thread of pid to borrow, and reports whether it is
// parked in a system call (false: the fallback, see liveThread).
func pickThread(pid int) (tid int, isParked bool, err error) {
	tids, err := threads(pid)
	if err != nil {
		return 0, false, err
	}
	best, bestTier := 0, notParked
	for _, tid := range tids {
		nr, args, ok := threadSyscall(pid, tid)
		if !ok {
			continue
		}
		tier := parked(nr, args)
		if tier > bestTier || tier == bestTier && tier != notParked && tid == pid {
			best, bestTier = tid, tier
		}
	}
	if bestTier != notParked {
		return best, true, nil
	}
	tid, err = liveThread(pid)
	return tid, false, err
}

// threads lists the threads of pid, oldest first (barring wrap-around of
// thread ids).
func threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	slices.Sort(tids)
	return tids, nil
}

// liveThread returns the main thread of pid, unless it has exited: then
// the oldest live thread. A process whose main thread called pthread_exit
// runs on, but that thread, a zombie, cannot be stopped, and its /proc
// entries show no memory.
func liveThread(pid int) (int, error) {
	if st, err := procfs.Stat(pid); err != nil || st.State != 'Z' {
		return pid, nil // or gone: let the caller find out
	}
	tids, err := threads(pid)
	if err != nil {
		return 0, err
	}
	for _, tid := range tids {
		if st, err := procfs.Stat(tid); err == nil && st.State != 'Z' && st.State != 'X' {
			return tid, nil
		}
	}
	return 0, fmt.Errorf("process %d: %w (all its threads exited)", pid, ErrNoProcess)
}

// threadSyscall reads /proc/PID/task/TID/syscall: the number and arguments
// of the system call the thread is blocked in. ok is false when it is
// running (in user space, or on a CPU), or gone.
func threadSyscall(pid, tid int) (nr int64, args [6]uint64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/syscall", pid, tid))
	if err != nil {
		return 0, args, false
	}
	// "202 0x7f.. 0x80 0x0 0x0 0x0 0x0 0x7ffd..(sp) 0x7f..(pc)", or
	// "running", or "-1 sp pc" when blocked outside a system call.
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return 0, args, false
	}
	if nr, err = strconv.ParseInt(f[0], 10, 64); err != nil || nr < 0 {
		return 0, args, false
	}
	for i := range args {
		if args[i], err = strconv.ParseUint(strings.TrimPrefix(f[1+i], "0x"), 16, 64); err != nil {
			return 0, args, false
		}
	}
	return nr, args, true
}

// whyNotPermitted explains an EPERM from PTRACE_SEIZE of thread tid.
func whyNotPermitted(tid int) string {
	if tracer := statusField(tid, "TracerPid"); tracer != "" && tracer != "0" {
		return fmt.Sprintf("thread %d is already traced by process %s (a debugger?), and a thread has one tracer at most", tid, tracer)
	}
	scope := "absent (no Yama)"
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		scope = strings.TrimSpace(string(b))
	}
	return "run cudatap as root, with CAP_SYS_PTRACE (in a container: --cap-add SYS_PTRACE); " +
		"kernel.yama.ptrace_scope is " + scope + " (0: the same user may ptrace; 1: only descendants, " +
		"or with CAP_SYS_PTRACE; 2: only with CAP_SYS_PTRACE; 3: nobody, until reboot)"
}

func statusField(tid int, key string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
