package inject

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/procfs"
)

// Dlopen loads path into process pid with dlopen(path, RTLD_NOW), called
// on one of its threads, and returns the handle. path is as the target sees
// it, inside its mount namespace. When dlopen fails, the error holds
// dlerror()'s message.
//
// Dlopen blocks until dlopen returns in the target: a library constructor
// that never returns keeps it (and the borrowed thread) waiting. The
// borrowed thread runs dlopen with all asynchronous signals blocked; those
// that arrive meanwhile are delivered once it is put back. Threads the
// constructors create inherit that mask. A constructor that sleeps
// (nanosleep) resets the thread's restart block: a thread found in a timed
// wait (restart_syscall) then sees that wait end with EINTR, which the
// C library's waits retry.
//
// The call needs no tracer to finish: were this process killed at any
// instant, the thread completes it and returns to what it was doing
// (call_linux_amd64.go). Do not inject into a child of this process that
// another goroutine is waiting for (os/exec's Wait): wait(2) reports ptrace
// stops to every thread of the tracer, and one taken by that goroutine
// would be lost.
func Dlopen(pid int, path string) (uint64, error) {
	d, err := findDl(pid, dlEntries)
	if err != nil {
		return 0, err
	}
	return dlopen(pid, d, path, nil)
}

func dlopen(pid int, d dl, path string, hook func(string)) (handle uint64, err error) {
	if strings.IndexByte(path, 0) >= 0 {
		return 0, fmt.Errorf("dlopen %q: path contains a NUL byte", path)
	}
	err = borrow(pid, hook, func(t *tracee) error {
		arg, err := t.push(append([]byte(path), 0))
		if err != nil {
			return err
		}
		var msg uint64
		if handle, msg, err = t.call(d.open, d.errmsg, arg, d.mode); err != nil || handle != 0 {
			return err
		}
		if d.errmsg == 0 {
			return fmt.Errorf("dlopen %s failed (this glibc's __libc_dlopen_mode does not say why)", path)
		}
		if msg == 0 {
			return fmt.Errorf("dlopen %s failed, and dlerror has no message", path)
		}
		s, err := t.readString(msg)
		if err != nil {
			return fmt.Errorf("dlopen %s failed; read dlerror's message: %w", path, err)
		}
		return fmt.Errorf("dlopen: %s", s)
	})
	return handle, err
}

// Dlclose calls dlclose(handle) in process pid.
func Dlclose(pid int, handle uint64) error {
	d, err := findDl(pid, dlEntries)
	if err != nil {
		return err
	}
	return borrow(pid, nil, func(t *tracee) error {
		rc, _, err := t.call(d.close, 0, handle)
		if err == nil && int32(rc) != 0 {
			err = fmt.Errorf("dlclose(%#x) returned %d", handle, int32(rc))
		}
		return err
	})
}

// Call calls the function at addr in process pid with up to six integer
// or pointer arguments (System V ABI) on one of its threads, and returns
// what it returns in rax. The caveats of [Dlopen] apply.
func Call(pid int, addr uint64, args ...uint64) (uint64, error) {
	var rax uint64
	err := borrow(pid, nil, func(t *tracee) (err error) {
		rax, _, err = t.call(addr, 0, args...)
		return err
	})
	return rax, err
}

// borrow stops a thread of pid, lets fn make calls on it, and puts it back.
// hook, if set, runs at each phase of a call (tests).
func borrow(pid int, hook func(string), fn func(*tracee) error) error {
	// ptrace accepts requests for a tracee only from the thread that
	// attached to it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t, err := attach(pid)
	if err != nil {
		return fmt.Errorf("inject into process %d: %w", pid, err)
	}
	t.hook = hook
	err = fn(t)
	if rerr := t.release(); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("inject into process %d, thread %d: %w", pid, t.tid, err)
	}
	return nil
}

// tracee is a thread of the target, stopped by us, and what it was doing
// when we stopped it.
type tracee struct {
	tid     int
	regs    unix.PtraceRegs // as found: release puts them back
	fp      []byte          // the floating-point and vector state, as found
	fpSet   uintptr         // the regset fp is: NT_X86_XSTATE or NT_PRFPREG
	mask    uint64          // the signal mask, as found
	stack   uint64          // the lowest stack address our data uses
	changed bool            // registers and mask differ from what was found
	exited  bool

	code      uint64 // where the stub is (call_linux_amd64.go), 0 if not placed
	codeOrig  []byte // the bytes it replaced
	detachSig int    // a signal to deliver as we let go

	hook func(phase string) // tests: runs at each phase of a call (at)
}

// at marks a phase of a call, for the tests that kill the injector there.
func (t *tracee) at(phase string) {
	if t.hook != nil {
		t.hook(phase)
	}
}

// redZone is the stack space below rsp the target may be using: the ABI's
// 128-byte red zone, doubled for margin.
const redZone = 256

// syncSignals are the signals the CPU raises for the instruction that
// faulted. They stay unblocked while we call into the target: the kernel
// forces a fault signal that is blocked (or ignored), by resetting its
// handler to SIG_DFL for the whole process (force_sig_info_to_task), and a
// fault of ours must not do that.
const syncSignals = 1<<(unix.SIGSEGV-1) | 1<<(unix.SIGBUS-1) | 1<<(unix.SIGILL-1) |
	1<<(unix.SIGFPE-1) | 1<<(unix.SIGTRAP-1) | 1<<(unix.SIGSYS-1)

// attach stops a thread of pid (see pickThread) and saves its state.
func attach(pid int) (*tracee, error) {
	for try := 1; ; try++ {
		tid, isParked, err := pickThread(pid)
		if err != nil {
			return nil, err
		}
		t, err := seize(pid, tid)
		if errors.Is(err, ErrNoProcess) && tid != pid && try < 3 {
			continue // that thread exited: choose again
		}
		if err != nil {
			return nil, err
		}
		nr, args := t.syscall()
		if tempMask(nr, args) {
			// Picked as the fallback, or it moved there since we looked.
			t.release()
			return nil, fmt.Errorf("thread %d waits in system call %d with a temporary signal mask, which ptrace cannot preserve: try again", tid, nr)
		}
		inSyscall := parked(nr, args) != notParked
		switch {
		case !inSyscall && t.inRseq():
			// A few instructions on, it will be out of it.
			if err := t.release(); err != nil {
				return nil, err
			}
			if try == 3 {
				return nil, fmt.Errorf("thread %d: %w", tid, errInRseq)
			}
		case inSyscall || !isParked || try == 3:
			return t, nil
		default:
			// It woke up between our look and the stop, and may be
			// anywhere now, in malloc too: let it go and choose again.
			if err := t.release(); err != nil {
				return nil, err
			}
		}
	}
}

var errInRseq = errors.New("found inside a restartable sequence three times: try again")

// inRseq reports whether the thread stopped inside a restartable sequence
// (rseq(2): tcmalloc's per-CPU caches use them), which we must not borrow.
// The kernel aborts a sequence whose thread was preempted, seeing rip in it
// on the way back to user space. With rip in our call instead, it would
// drop the sequence (clear rseq_cs), and once we put rip back, the thread
// would commit a sequence interrupted without knowing. (A thread parked in
// a system call cannot be inside one.)
func (t *tracee) inRseq() bool {
	var conf struct {
		abi              uint64 // the thread's struct rseq
		size, sig, flags uint32
		_                uint32
	}
	if ptracePtr(unix.PTRACE_GET_RSEQ_CONFIGURATION, t.tid, unsafe.Sizeof(conf), unsafe.Pointer(&conf)) != nil || conf.abi == 0 {
		return false // before Linux 5.13, or no rseq registered
	}
	// struct rseq { u32 cpu_id_start, cpu_id; u64 rseq_cs; ... } points at
	// struct rseq_cs { u32 version, flags; u64 start_ip, post_commit_offset, abort_ip }.
	var b [24]byte
	if procfs.ReadMem(t.tid, conf.abi+8, b[:8]) != nil {
		return false
	}
	cs := binary.LittleEndian.Uint64(b[:8])
	if cs == 0 || procfs.ReadMem(t.tid, cs, b[:]) != nil {
		return false
	}
	start, length := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	return t.regs.Rip-start < length
}

// seize attaches to thread tid, stops it, and saves its state.
func seize(pid, tid int) (*tracee, error) {
	switch err := unix.PtraceSeize(tid); {
	case errors.Is(err, unix.EPERM):
		return nil, fmt.Errorf("%w on process %d: %s", ErrNotPermitted, pid, whyNotPermitted(tid))
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("thread %d: %w", tid, ErrNoProcess)
	case err != nil:
		return nil, fmt.Errorf("ptrace seize thread %d: %w", tid, err)
	}
	t := &tracee{tid: tid}
	if err := t.stop(); err != nil {
		return nil, err // it exited: nothing to release
	}
	err := unix.PtraceGetRegs(tid, &t.regs)
	if err == nil {
		t.fp, t.fpSet, err = getFP(tid)
	}
	if err == nil {
		err = ptracePtr(unix.PTRACE_GETSIGMASK, tid, 8, unsafe.Pointer(&t.mask))
	}
	if err != nil {
		t.release()
		return nil, t.lost(fmt.Errorf("save the state of thread %d: %w", tid, err))
	}
	t.stack = t.regs.Rsp - redZone
	return t, nil
}

// stop stops the seized thread with PTRACE_INTERRUPT.
func (t *tracee) stop() error {
	if err := unix.PtraceInterrupt(t.tid); err != nil {
		return t.lost(err)
	}
	for {
		ws, err := t.wait()
		if err != nil {
			return err
		}
		if event(ws) == unix.PTRACE_EVENT_STOP {
			// Our interrupt, or a group-stop (SIGSTOP) that was
			// there first: either way a stop with nothing pending.
			return nil
		}
		// A signal arrived first. Its stop used up our interrupt ("any
		// trap clears a pending STOP trap", kernel/signal.c): let the
		// thread have its signal as if we were not here, and ask again.
		if err := unix.PtraceCont(t.tid, int(ws.StopSignal())); err != nil {
			return t.lost(err)
		}
		if err := unix.PtraceInterrupt(t.tid); err != nil {
			return t.lost(err)
		}
	}
}

// syscall is the system call the thread was stopped in (nr -1: none).
func (t *tracee) syscall() (int64, [6]uint64) {
	r := &t.regs
	return int64(r.Orig_rax), [6]uint64{r.Rdi, r.Rsi, r.Rdx, r.R10, r.R8, r.R9}
}

// push copies b onto the target's stack, below what the thread uses and
// what we pushed before, and returns its address. That memory is free by
// the ABI (signal delivery would overwrite it just as well).
func (t *tracee) push(b []byte) (uint64, error) {
	addr := (t.stack - uint64(len(b))) &^ 15
	if err := t.write(addr, b); err != nil {
		return 0, err
	}
	t.stack = addr
	return addr, nil
}

// release puts the thread back as it was found and detaches.
//
// When the thread was stopped in a system call, the call had returned to
// the kernel's exit path with rax = -ERESTARTSYS (or another restart code)
// and orig_rax = its number, and stopped there, in get_signal(). Every stop
// release is called in is there too: the interrupt's, the one that ends a
// call (stopAfterSyscall), and a fault's. Once detached, the thread leaves
// get_signal() with no signal to deliver (PTRACE_DETACH with signal 0
// discards a fault of the callee's), and the kernel's restart logic
// (arch_do_signal_or_restart) reads the registers we put back: rax a
// restart code and orig_rax >= 0 make it back rip up over the syscall
// instruction and reload rax with orig_rax, and the system call starts
// again, in the state the thread left it; -ERESTART_RESTARTBLOCK resumes
// through restart_syscall with the remaining timeout instead.
func (t *tracee) release() error {
	if t.exited {
		return nil
	}
	var err error
	if t.changed {
		err = errors.Join(
			unix.PtraceSetRegs(t.tid, &t.regs),
			setFP(t.tid, t.fpSet, t.fp),
			ptracePtr(unix.PTRACE_SETSIGMASK, t.tid, 8, unsafe.Pointer(&t.mask)))
	}
	if err == nil {
		t.at("restored")
		// The thread cannot run the stub any more: its page back.
		err = t.unplaceStub()
	}
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(t.tid), 0, uintptr(t.detachSig), 0, 0); errno != 0 {
		derr := error(errno)
		err = errors.Join(err, derr)
	}
	if err != nil {
		return t.lost(fmt.Errorf("put thread %d back: %w", t.tid, err))
	}
	return nil
}

// wait waits for the next stop of the thread.
func (t *tracee) wait() (unix.WaitStatus, error) {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(t.tid, &ws, unix.WALL, nil)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil: // ECHILD: someone else reaped it
			t.exited = true
			return ws, fmt.Errorf("thread %d: %w (wait: %w)", t.tid, ErrNoProcess, err)
		case ws.Exited() || ws.Signaled():
			t.exited = true
			return ws, fmt.Errorf("thread %d exited: %w", t.tid, ErrNoProcess)
		}
		return ws, nil
	}
}

// lost turns err into ErrNoProcess if the thread is gone. A ptrace request
// fails with ESRCH for a tracee that is not in a stop, and ours is always
// in one but when killed: wait for (and reap) its exit, which must come.
func (t *tracee) lost(err error) error {
	if !errors.Is(err, unix.ESRCH) || t.exited {
		return err
	}
	if _, werr := t.wait(); werr != nil {
		return werr
	}
	return err
}

// event is the PTRACE_EVENT_* of a stop, 0 for a signal-delivery-stop.
func event(ws unix.WaitStatus) int { return int(ws) >> 16 }

// getFP reads the thread's whole floating-point and vector state: with
// XSAVE (NT_X86_XSTATE), the AVX, AVX-512 and AMX registers and PKRU as
// well as the x87 and SSE state that PTRACE_GETFPREGS reads. glibc's string
// functions, which dlopen uses, run on AVX2 or AVX-512 registers and end
// with vzeroupper: with the SSE state alone, a thread stopped in vector
// code would lose the upper halves of its registers.
func getFP(tid int) ([]byte, uintptr, error) {
	buf := make([]byte, 64<<10) // more than any XSAVE area; the kernel says how much it used
	for _, set := range []uintptr{unix.NT_X86_XSTATE, unix.NT_PRFPREG} {
		iov := unix.Iovec{Base: &buf[0]}
		iov.SetLen(len(buf))
		err := ptracePtr(unix.PTRACE_GETREGSET, tid, set, unsafe.Pointer(&iov))
		if err == nil {
			return buf[:iov.Len], set, nil
		}
		if !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.EINVAL) {
			return nil, 0, err
		}
		// No XSAVE on this CPU: the FXSAVE area is all there is.
	}
	return nil, 0, errors.New("cannot read the floating-point registers")
}

func setFP(tid int, set uintptr, fp []byte) error {
	iov := unix.Iovec{Base: &fp[0]}
	iov.SetLen(len(fp))
	return ptracePtr(unix.PTRACE_SETREGSET, tid, set, unsafe.Pointer(&iov))
}

func ptracePtr(req int, tid int, addr uintptr, data unsafe.Pointer) error {
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, uintptr(data), 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// write copies b to addr in the target. process_vm_writev writes through
// the target's page protections like a store of its own would: fine for
// the stack. (It goes by the borrowed thread: the main thread may have
// exited, and taken its view of the memory with it.)
func (t *tracee) write(addr uint64, b []byte) error {
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
	n, err := unix.ProcessVMWritev(t.tid, local, remote, 0)
	if err == nil && n != len(b) {
		err = unix.EFAULT
	}
	if err != nil {
		return fmt.Errorf("write %d bytes at %#x: %w", len(b), addr, err)
	}
	return nil
}

// readString reads the NUL-terminated string at addr in the target, up to
// 4 KiB of it, a page at most at a time so as not to read past its end
// into an unmapped page.
func (t *tracee) readString(addr uint64) (string, error) {
	const page, limit = 4096, 4096
	var s []byte
	for len(s) < limit {
		buf := make([]byte, page-addr%page)
		if err := procfs.ReadMem(t.tid, addr, buf); err != nil {
			return "", err
		}
		if i := strings.IndexByte(string(buf), 0); i >= 0 {
			return string(append(s, buf[:i]...)), nil
		}
		s = append(s, buf...)
		addr += uint64(len(buf))
	}
	return string(s[:limit]) + "...", nil
}

// Held is a thread HoldThread keeps stopped.
type Held struct{ t *tracee }

// HoldThread keeps thread tid of process pid stopped, and the rest of the
// process running. pid must have been stopped as a whole (a group-stop, as
// a probe's SIGSTOP stops a process at a call): tid stays where it was,
// the other threads are continued (SIGCONT). Release lets tid go on from
// there, untouched. HoldThread and Release must be called from one OS
// thread (runtime.LockOSThread); if the calling process ends first, the
// kernel lets tid go. When tid cannot be held, the process is continued
// all the same. Not for a child of this process another goroutine waits
// for (see Dlopen).
func HoldThread(pid, tid int) (*Held, error) {
	// The stop may still be on its way (a probe's signal can come after
	// its record): once it is in, the SIGCONT below ends it, not the
	// other way round.
	WaitStopped(tid, time.Second)
	t, err := seize(pid, tid)
	kerr := unix.Kill(pid, unix.SIGCONT)
	if err != nil {
		return nil, fmt.Errorf("hold thread %d of process %d: %w", tid, pid, err)
	}
	if kerr != nil {
		t.release()
		return nil, fmt.Errorf("continue process %d: %w", pid, kerr)
	}
	return &Held{t}, nil
}

// WaitStopped waits until thread tid is stopped (a group-stop, or a ptrace
// stop), at most timeout; it reports whether it is.
func WaitStopped(tid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Microsecond) {
		st, err := procfs.Stat(tid)
		if err != nil {
			return false // gone
		}
		if st.State == 'T' || st.State == 't' {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Release lets the held thread go on.
func (h *Held) Release() error { return h.t.release() }
