package inject

// Calls that need no tracer to finish. The borrowed thread does not jump
// straight into the function with our registers, which would leave it
// lost were we (and the guardian that runs us) killed mid-call: it runs
// the stub (stub/stub_amd64.S), written into the unused tail of an
// executable page of the target, which saves the vector state, blocks
// asynchronous signals, makes the call, and, if no tracer took the thread
// back by then, restores every register, the mask and the vector state
// and jumps back to where the thread was, restarting its interrupted
// system call as the kernel would have. While we live, we follow it with
// PTRACE_SYSCALL and take it back ourselves at the stub's last system
// call (see call), so the stub's tail never runs and its page is put back.

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/procfs"
)

//go:generate ./stub/build.sh

//go:embed stub_amd64.bin
var stubCode []byte

// The stub's slots, in the order of stub_amd64.S.
const (
	slotFn = iota
	slotArg0
	_ // arguments 1 to 5
	_
	_
	_
	_
	slotErrFn
	slotRFBM // two 32-bit halves
	slotCallMask
	slotOwnMask
	slotFlags
	slotRAX
	slotRBX
	slotRCX
	slotRDX
	slotRSI
	slotRDI
	slotRBP
	slotR8
	slotR9
	slotR10
	slotR11
	slotR12
	slotR13
	slotR14
	slotR15
	slotRSP
	slotRIP
	numSlots
)

// The stub saves and restores these XSAVE components: x87, SSE, AVX, MPX,
// AVX-512 and PKRU, not AMX's tiles (large, and off limits to a process
// that did not ask for them: XRSTOR would fault).
const stubRFBM = 0x2ff

// fxsave64/fxrstor64 (%r15): the stub's xsave64/xrstor64 (%r15) on a CPU
// without XSAVE (same length, another ModRM byte).
var (
	xsave64R15   = []byte{0x49, 0x0f, 0xae, 0x27}
	xrstor64R15  = []byte{0x49, 0x0f, 0xae, 0x2f}
	fxsave64R15  = []byte{0x49, 0x0f, 0xae, 0x07}
	fxrstor64R15 = []byte{0x49, 0x0f, 0xae, 0x0f}
)

// Restart codes a system call leaves in rax when a stop interrupts it
// (include/linux/errno.h), and what the kernel then does.
const (
	errRestartSys         = 512
	errRestartNoIntr      = 513
	errRestartNoHand      = 514
	errRestartRestartBlck = 516
)

// resumeAt is where and with which rax the thread goes on when nothing
// stands between it and user space (no handler to run): an interrupted
// system call starts again, or goes on through restart_syscall (the
// kernel's arch_do_signal_or_restart).
func resumeAt(r *unix.PtraceRegs) (rip, rax uint64) {
	rip, rax = r.Rip, r.Rax
	if int64(r.Orig_rax) < 0 {
		return
	}
	switch -int64(r.Rax) {
	case errRestartSys, errRestartNoIntr, errRestartNoHand:
		return rip - 2, r.Orig_rax
	case errRestartRestartBlck:
		return rip - 2, sysRestartSyscall
	}
	return
}

// codeRoom finds where in pid the stub can go: 16-byte aligned bytes, all
// zero, past the end of an executable segment in its last page (mapped
// executable with the segment, used by nothing). libc first, then the
// other objects. Among the places in one object it picks one at random,
// so that two injectors do not meet in one.
func codeRoom(pid int, size int) (uint64, []byte, error) {
	objs, tid, err := objects(pid)
	if err != nil {
		return 0, nil, err
	}
	page := uint64(os.Getpagesize())
	for _, libcFirst := range []bool{true, false} {
		for _, o := range objs {
			if isLibc(o.Path) != libcFirst {
				continue
			}
			if addr, orig, ok := roomIn(tid, o, page, size); ok {
				return addr, orig, nil
			}
		}
	}
	return 0, nil, errors.New("no room for the call's code: no executable segment ends with enough unused bytes in its page")
}

func isLibc(path string) bool {
	_, base := splitPath(path)
	return len(base) >= 9 && base[:9] == "libc.so.6"
}

func splitPath(p string) (string, string) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i], p[i+1:]
		}
	}
	return "", p
}

// roomIn looks for room for size bytes in the object o of thread tid.
func roomIn(tid int, o objfile.ObjectFile, page uint64, size int) (uint64, []byte, bool) {
	f, err := objfile.Open(o.OpenPath(tid))
	if err != nil {
		return 0, nil, false
	}
	defer f.Close()
	bias, ok := o.Bias(f)
	if !ok {
		return 0, nil, false
	}
	for _, end := range f.ExecEnds() {
		start := (end + bias + 15) &^ 15
		stop := (end + bias + page - 1) &^ (page - 1)
		if m, ok := o.Mapping(start); !ok || !m.Exec() || stop > m.End || start+uint64(size) > stop {
			continue
		}
		buf := make([]byte, stop-start)
		if procfs.ReadMem(tid, start, buf) != nil {
			continue
		}
		// Aligned windows of zeros: a stub left by an injector that died
		// is not zero, and not overwritten.
		var free []uint64
		for off := uint64(0); off+uint64(size) <= uint64(len(buf)); off += 16 {
			if allZero(buf[off : off+uint64(size)]) {
				free = append(free, off)
			}
		}
		if len(free) == 0 {
			continue
		}
		off := free[rand.IntN(len(free))]
		return start + off, buf[off : off+uint64(size)], true
	}
	return 0, nil, false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// poke writes b at addr in the target through /proc/PID/mem, which writes
// into read-only (code) pages as a debugger's breakpoints do: the page is
// copied for this process, the file and other processes untouched.
func (t *tracee) poke(addr uint64, b []byte) error {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(t.tid)+"/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(addr)); err != nil {
		return fmt.Errorf("write %d bytes at %#x: %w", len(b), addr, err)
	}
	return nil
}

// placeStub writes the stub's code into the target, once per borrow.
func (t *tracee) placeStub() error {
	if t.code != 0 {
		return nil
	}
	addr, orig, err := codeRoom(t.tid, len(stubCode))
	if err != nil {
		return err
	}
	code := append([]byte(nil), stubCode...)
	if t.fpSet != unix.NT_X86_XSTATE {
		copy(code[stubSave:], fxsave64R15)
		copy(code[stubRestore:], fxrstor64R15)
	}
	if err := t.poke(addr, code); err != nil {
		return err
	}
	t.code, t.codeOrig = addr, orig
	t.at("placed")
	return nil
}

// unplaceStub puts back the bytes the stub replaced; only once the thread
// cannot run it any more (its registers are its own again).
func (t *tracee) unplaceStub() error {
	if t.code == 0 {
		return nil
	}
	err := t.poke(t.code, t.codeOrig)
	t.code, t.codeOrig = 0, nil
	return err
}

// call calls fn(args...) on the thread and returns what it returned; with
// errfn set (dlerror), a zero result is followed by errfn(), whose result
// is returned as errmsg.
func (t *tracee) call(fn, errfn uint64, args ...uint64) (ret, errmsg uint64, err error) {
	if len(args) > 6 {
		return 0, 0, fmt.Errorf("call %#x: %d arguments, at most 6 go in registers", fn, len(args))
	}
	if err := t.placeStub(); err != nil {
		return 0, 0, err
	}
	// Scratch stack, below what the thread uses and what we pushed: the
	// XSAVE area (64-byte aligned, as large as the kernel's copy of the
	// state), and below it the call's stack.
	area := (t.stack - uint64(len(t.fp))) &^ 63
	top := (area - 64) &^ 15
	// Zeros: XSAVE writes the header's XSTATE_BV but not the rest of
	// it, which XRSTOR wants zero (and the write proves the stack there).
	if err := t.write(top, make([]byte, area+uint64(len(t.fp))-top)); err != nil {
		return 0, 0, err
	}
	slots := make([]byte, 8*numSlots)
	put := func(i int, v uint64) { binary.LittleEndian.PutUint64(slots[8*i:], v) }
	put(slotFn, fn)
	for i, a := range args {
		put(slotArg0+i, a)
	}
	put(slotErrFn, errfn)
	put(slotRFBM, stubRFBM)
	put(slotCallMask, ^uint64(syncSignals))
	put(slotOwnMask, t.mask)
	r := &t.regs
	rip, rax := resumeAt(r)
	put(slotFlags, r.Eflags)
	for i, v := range []uint64{rax, r.Rbx, r.Rcx, r.Rdx, r.Rsi, r.Rdi, r.Rbp, r.R8, r.R9, r.R10, r.R11, r.R12, r.R13, r.R14, r.R15, r.Rsp, rip} {
		put(slotRAX+i, v)
	}
	if err := t.poke(t.code+stubSlots, slots); err != nil {
		return 0, 0, err
	}
	t.at("slots")
	if err := unix.PtraceSetOptions(t.tid, unix.PTRACE_O_TRACESYSGOOD); err != nil {
		return 0, 0, t.lost(err)
	}
	regs := t.regs
	regs.Rip, regs.Rsp, regs.R15 = t.code, top, area
	// Not in a system call any more: the kernel must not restart one on
	// the way out (the stub does it, if it has to finish alone).
	regs.Orig_rax = ^uint64(0)
	t.changed = true
	if err := unix.PtraceSetRegs(t.tid, &regs); err != nil {
		return 0, 0, t.lost(err)
	}
	// From here the thread can finish on its own.
	t.at("set")
	marker := t.code + stubMarker
	sig := 0
	first := true
	for {
		if err := unix.PtraceSyscall(t.tid, sig); err != nil {
			return 0, 0, t.lost(err)
		}
		ws, err := t.wait()
		if err != nil {
			return 0, 0, err
		}
		sig = 0
		switch {
		case event(ws) == unix.PTRACE_EVENT_STOP:
			// A group-stop: the process got SIGSTOP. Finish the
			// call; the thread joins the stop when we detach.
			continue
		case ws.StopSignal() == unix.SIGTRAP|0x80: // a system call
			if first {
				t.at("syscall")
				first = false
			}
			if !t.atSyscallEntry(marker) {
				continue
			}
			t.at("marker")
			var now unix.PtraceRegs
			if err := unix.PtraceGetRegs(t.tid, &now); err != nil {
				return 0, 0, t.lost(err)
			}
			// Let the stub's last system call (the thread's own mask)
			// run, and stop before user space: in get_signal, where
			// release can put the thread back through the kernel's
			// own restart logic.
			if err := t.stopAfterSyscall(marker); err != nil {
				return 0, 0, err
			}
			t.at("returned")
			return now.R12, now.R13, nil
		}
		sig = int(ws.StopSignal())
		var info unix.Siginfo
		if err := ptracePtr(unix.PTRACE_GETSIGINFO, t.tid, 0, unsafe.Pointer(&info)); err != nil {
			return 0, 0, t.lost(err)
		}
		if uint64(1)<<(sig-1)&syncSignals == 0 || info.Code <= 0 {
			// Sent, not raised by the CPU (si_code <= 0 is kill,
			// tgkill, sigqueue): deliver it.
			continue
		}
		var now unix.PtraceRegs
		if err := unix.PtraceGetRegs(t.tid, &now); err != nil {
			return 0, 0, t.lost(err)
		}
		// fn faulted. Delivering the signal would most likely kill the
		// process, for a fault of ours; putting the thread back as it
		// was lets the process live on. (release discards the signal.)
		return 0, 0, fmt.Errorf("%w: %s at %#x in call %#x (stub %#x rsp %#x r15 %#x)", ErrCrashed, unix.SignalName(unix.Signal(sig)), now.Rip, fn, t.code, now.Rsp, now.R15)
	}
}

// atSyscallEntry reports whether the thread stopped entering the system
// call whose instruction ends at ip.
func (t *tracee) atSyscallEntry(ip uint64) bool {
	var info struct {
		op   uint8
		_    [3]uint8
		arch uint32
		ip   uint64
	}
	n, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GET_SYSCALL_INFO, uintptr(t.tid), unsafe.Sizeof(info), uintptr(unsafe.Pointer(&info)), 0, 0)
	return errno == 0 && n > 0 && info.op == unix.PTRACE_SYSCALL_INFO_ENTRY && info.ip == ip
}

// stopAfterSyscall lets the system call the thread is entering at the
// stub's marker run, and stops the thread before it returns to user space
// (PTRACE_INTERRUPT: the trap is taken in get_signal, ahead of any
// signal), where release puts it back.
func (t *tracee) stopAfterSyscall(marker uint64) error {
	if err := unix.PtraceInterrupt(t.tid); err != nil {
		return t.lost(err)
	}
	if err := unix.PtraceCont(t.tid, 0); err != nil {
		return t.lost(err)
	}
	ws, err := t.wait()
	if err != nil {
		return err
	}
	var now unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &now); err != nil {
		return t.lost(err)
	}
	if event(ws) == unix.PTRACE_EVENT_STOP && now.Rip == marker {
		return nil
	}
	// Not what the kernel does (the trap comes before any signal). The
	// thread is still the stub's: rather than rewind it, let the stub's
	// tail give it back, with what stopped it.
	t.changed, t.code = false, 0
	if event(ws) == 0 {
		t.detachSig = int(ws.StopSignal())
	}
	return fmt.Errorf("thread %d stopped at %#x after the call, not at its end (%v): left to finish alone", t.tid, now.Rip, ws.StopSignal())
}

// The slots must end where the stub's code ends.
var _ [stubEnd - stubSlots - 8*numSlots]struct{}
var _ [8*numSlots - (stubEnd - stubSlots)]struct{}
