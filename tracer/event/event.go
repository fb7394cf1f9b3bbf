package event

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Raw record layout written by bpf/cudatap.bpf.c (struct event). A size test
// in package tracer checks it against the bpf2go-generated struct.
const (
	NArgs      = 9
	NExt       = 6
	MaxStack   = 32
	MaxPy      = 24
	StackCopy  = 8192
	HeaderSize = 8*3 + 4*2 + 8*2 + 8*NArgs + 8*NExt + 8 + 4*4 // bytes before stack[]
	// Records with a stack go on: stack[], rip, rsp, rbp, npy, copy_len, py[], copy[].
	offRegs    = HeaderSize + 8*MaxStack
	offPy      = offRegs + 8*3 + 4*2
	CopyOffset = offPy + 16*MaxPy // bytes before copy[]
	RecordSize = CopyOffset + StackCopy
	// A launch record whose cookie asks for its kernel's parameter values
	// (CookieHasKernelArgs) ends with them (struct kernel_args), after the
	// header or after copy[].
	KernelParams     = 16  // kernelParams entries looked at
	KernelWindow     = 512 // bytes of parameter values copied
	KernelArgsSize   = 8*2 + 4*2 + 2*KernelParams + KernelWindow
	offKernelOffsets = 8*2 + 4*2
)

// Flags set by the BPF side.
const (
	FlagStackArgFault   = 0x1  // a stack argument could not be read
	FlagDerefFault      = 0x2  // the config struct behind argument 0 could not be read
	FlagOutFault        = 0x4  // the out pointer could not be read at return
	FlagHasRet          = 0x8  // the record was written at return
	FlagPyTruncated     = 0x10 // the thread had more Python frames than MaxPy
	FlagKernelArgsFault = 0x20 // kernelParams or the parameter values behind it could not be read
	// Set by the tracer, not BPF: a driver launch whose caller is the CUDA
	// runtime (the program called cudaLaunchKernel...). Recorded with the
	// event.
	FlagViaRuntime = 0x10000
)

// offFlags is where struct event keeps its flags, and offNStack its stack
// frame count.
const (
	offFlags  = 48 + 8*NArgs + 8*NExt + 12
	offNStack = offFlags + 4
)

// Regs are the user registers where a stack was taken: on arm64 records
// (CookieARM64) pc, sp and the frame pointer x29.
type Regs struct{ RIP, RSP, RBP uint64 }

// Event is one decoded CUDA call. It is a plain value; the decoder fills it
// in place so the per-event path does not allocate.
type Event struct {
	Start, End uint64 // CLOCK_MONOTONIC ns; End is 0 for entry-only probes
	Cookie     uint64
	PID, TID   uint32
	Ret        int64
	Out        uint64 // value read through the out pointer at return
	Args       [NArgs]uint64
	Ext        [NExt]uint64
	Caller     uint64 // driver launches: the return address (which library called)
	CPU        uint32
	Flags      uint32
	NStack     int
	Stack      [MaxStack]uint64 // frame-pointer walk, or the unwound stack once resolved
	HasStack   bool             // the record carries the stack fields below
	Regs       Regs
	NPy        int
	Py         [MaxPy][2]uint64 // (code object, instruction) pairs, innermost first
	// Copy is the top of the user stack from Regs.RSP, for .eh_frame
	// unwinding (x86-64 records only). It aliases the decoded buffer:
	// valid until the next Decode.
	Copy []byte
	// KernelArgs: a launch's parameter values, when its cookie asked for
	// them (its Window aliases the decoded buffer, as Copy does).
	KernelArgs KernelArgs

	// The arguments by name (Named), decoded once: by Decode, or for an
	// Event built by hand at the first Named.
	named        Args
	namedDecoded bool
}

// Named is the call's arguments by name, as its API passes them (Args and
// Ext read by the Spec): decoded once, by Decode.
func (e *Event) Named() *Args {
	if !e.namedDecoded {
		e.Decode(&e.named)
		e.namedDecoded = true
	}
	return &e.named
}

// KernelArgs is what a launch record holds of its kernel's parameters:
// kernelParams (an array of pointers to the values), where its leading
// entries pointed, and a window of memory from the lowest of them. How
// many parameters there are and their sizes only the driver knows, so the
// BPF side reads a bounded, fixed amount (bpf/cudatap.h, struct
// kernel_args): a pointer the kernel takes is an aligned word of the
// window, in a parameter or a struct passed by value.
type KernelArgs struct {
	Params  uint64 // kernelParams; 0: none (or not read)
	Base    uint64 // the address Window[0] was copied from
	NParams int    // leading kernelParams entries taken for parameters
	// Offsets: where parameter i starts in Window (0xffff: past it).
	Offsets [KernelParams]uint16
	Window  []byte
}

// Words yields each 8-byte-aligned word of the window (by the address it
// was copied from) with its value: the candidates for pointers the kernel
// was given.
func (k *KernelArgs) Words(yield func(addr, value uint64) bool) {
	skip := (8 - k.Base%8) % 8
	for off := skip; off+8 <= uint64(len(k.Window)); off += 8 {
		if !yield(k.Base+off, binary.LittleEndian.Uint64(k.Window[off:])) {
			return
		}
	}
}

// Param is the parameter the window byte at addr lies in (the one that
// starts last at or before it), -1 when none does.
func (k *KernelArgs) Param(addr uint64) int {
	best, start := -1, uint64(0)
	for i := 0; i < min(k.NParams, KernelParams); i++ {
		if o := k.Offsets[i]; o != 0xffff && k.Base+uint64(o) <= addr && (best < 0 || k.Base+uint64(o) >= start) {
			best, start = i, k.Base+uint64(o)
		}
	}
	return best
}

// API of the event.
func (e *Event) API() API { return CookieAPI(e.Cookie) }

// ABI its arguments were read by.
func (e *Event) ABI() ABI { return CookieABI(e.Cookie) }

// Spec of the event's API, nil for an unknown id.
func (e *Event) Spec() *Spec { return Lookup(e.API()) }

// SymbolIndex is the index of the exact symbol that was hit.
func (e *Event) SymbolIndex() int { return CookieSymbol(e.Cookie) }

// HasReturn reports whether the call's return was observed.
func (e *Event) HasReturn() bool { return e.Flags&FlagHasRet != 0 }

// Duration in ns of the call on the host, 0 when only the entry was probed.
func (e *Event) Duration() uint64 {
	if e.End > e.Start {
		return e.End - e.Start
	}
	return 0
}

// ErrShortRecord is returned for records shorter than the fixed header.
var ErrShortRecord = errors.New("event: short record")

// Decode parses one raw ring-buffer record into e, its arguments by name
// too (Named). It never allocates.
func Decode(b []byte, e *Event) error {
	e.namedDecoded = false
	if len(b) < HeaderSize {
		return fmt.Errorf("%w: %d bytes, want at least %d", ErrShortRecord, len(b), HeaderSize)
	}
	le := binary.LittleEndian
	e.Start = le.Uint64(b[0:])
	e.End = le.Uint64(b[8:])
	e.Cookie = le.Uint64(b[16:])
	e.PID = le.Uint32(b[24:])
	e.TID = le.Uint32(b[28:])
	e.Ret = int64(le.Uint64(b[32:]))
	e.Out = le.Uint64(b[40:])
	off := 48
	for i := range e.Args {
		e.Args[i] = le.Uint64(b[off:])
		off += 8
	}
	for i := range e.Ext {
		e.Ext[i] = le.Uint64(b[off:])
		off += 8
	}
	e.Caller = le.Uint64(b[off:])
	e.CPU = le.Uint32(b[off+8:])
	e.Flags = le.Uint32(b[off+12:])
	n := int(le.Uint32(b[off+16:]))
	e.KernelArgs = KernelArgs{}
	if CookieHasKernelArgs(e.Cookie) && len(b) >= HeaderSize+KernelArgsSize {
		// The parameter values end the record, whatever comes before.
		decodeKernelArgs(b[len(b)-KernelArgsSize:], &e.KernelArgs)
		b = b[:len(b)-KernelArgsSize]
	}
	off = HeaderSize
	if n > MaxStack || HeaderSize+8*n > len(b) {
		n = min(MaxStack, (len(b)-HeaderSize)/8)
	}
	e.NStack = n
	for i := 0; i < n; i++ {
		e.Stack[i] = le.Uint64(b[off:])
		off += 8
	}
	e.HasStack = len(b) >= CopyOffset
	e.NPy, e.Copy = 0, nil
	if !e.HasStack {
		e.Named()
		return nil
	}
	e.Regs = Regs{RIP: le.Uint64(b[offRegs:]), RSP: le.Uint64(b[offRegs+8:]), RBP: le.Uint64(b[offRegs+16:])}
	e.NPy = min(int(le.Uint32(b[offRegs+24:])), MaxPy)
	for i := 0; i < e.NPy; i++ {
		e.Py[i][0] = le.Uint64(b[offPy+16*i:])
		e.Py[i][1] = le.Uint64(b[offPy+16*i+8:])
	}
	copyLen := min(int(le.Uint32(b[offRegs+28:])), StackCopy, len(b)-CopyOffset)
	e.Copy = b[CopyOffset : CopyOffset+copyLen]
	e.Named() // after Copy: an NVTX message is named by its bytes
	return nil
}

func decodeKernelArgs(b []byte, k *KernelArgs) {
	le := binary.LittleEndian
	k.Params, k.Base = le.Uint64(b[0:]), le.Uint64(b[8:])
	k.NParams = min(int(le.Uint32(b[16:])), KernelParams)
	n := min(int(le.Uint32(b[20:])), KernelWindow)
	for i := range k.Offsets {
		k.Offsets[i] = le.Uint16(b[offKernelOffsets+2*i:])
	}
	if n > 0 {
		w := b[offKernelOffsets+2*KernelParams:]
		k.Window = w[:n:n]
	}
}

func appendKernelArgs(dst []byte, k *KernelArgs) []byte {
	le := binary.LittleEndian
	dst = le.AppendUint64(dst, k.Params)
	dst = le.AppendUint64(dst, k.Base)
	dst = le.AppendUint32(dst, uint32(min(max(k.NParams, 0), KernelParams)))
	n := min(len(k.Window), KernelWindow)
	dst = le.AppendUint32(dst, uint32(n))
	for _, o := range k.Offsets {
		dst = le.AppendUint16(dst, o)
	}
	dst = append(dst, k.Window[:n]...)
	var zero [KernelWindow]byte
	return append(dst, zero[:KernelWindow-n]...)
}

// AppendRecord appends e as a recording keeps it, given raw, the record
// it was decoded from: raw with what the tracer worked out since from the
// live process (its Flags, such as FlagViaRuntime, and a stack cut short),
// and without the stack copy, which served its purpose while the process
// lived (unwinding: a copy that failed still left its 8 KiB in the
// record). A string (a kernel name, an NVTX message) keeps its bytes, not
// the rest of the 4 KiB its record reserved.
func AppendRecord(dst, raw []byte, e *Event) []byte {
	if cookieHasString(e.Cookie) && len(raw) > CopyOffset {
		return Encode(dst, e)
	}
	if CookieHasStack(e.Cookie) && len(raw) > CopyOffset {
		c := e.Copy
		e.Copy = nil
		dst = Encode(dst, e)
		e.Copy = c
		return dst
	}
	n := len(dst)
	dst = append(dst, raw...)
	if len(raw) >= HeaderSize {
		rec := dst[n:]
		binary.LittleEndian.PutUint32(rec[offFlags:], e.Flags)
		if k := int(binary.LittleEndian.Uint32(rec[offNStack:])); e.NStack < k {
			binary.LittleEndian.PutUint32(rec[offNStack:], uint32(max(e.NStack, 0)))
		}
	}
	return dst
}

// Encode writes e in the raw record layout (used by recordings and tests).
// Stack frames are written only when present, as the BPF side does; a
// launch whose cookie asks for its parameter values ends with them.
func Encode(dst []byte, e *Event) []byte {
	le := binary.LittleEndian
	var hdr [HeaderSize]byte
	le.PutUint64(hdr[0:], e.Start)
	le.PutUint64(hdr[8:], e.End)
	le.PutUint64(hdr[16:], e.Cookie)
	le.PutUint32(hdr[24:], e.PID)
	le.PutUint32(hdr[28:], e.TID)
	le.PutUint64(hdr[32:], uint64(e.Ret))
	le.PutUint64(hdr[40:], e.Out)
	off := 48
	for _, a := range e.Args {
		le.PutUint64(hdr[off:], a)
		off += 8
	}
	for _, a := range e.Ext {
		le.PutUint64(hdr[off:], a)
		off += 8
	}
	le.PutUint64(hdr[off:], e.Caller)
	le.PutUint32(hdr[off+8:], e.CPU)
	le.PutUint32(hdr[off+12:], e.Flags)
	n := min(max(e.NStack, 0), MaxStack)
	le.PutUint32(hdr[off+16:], uint32(n))
	dst = append(dst, hdr[:]...)
	if e.HasStack {
		dst = appendStack(dst, e, n)
	}
	if CookieHasKernelArgs(e.Cookie) {
		dst = appendKernelArgs(dst, &e.KernelArgs)
	}
	return dst
}

// appendStack writes the stack fields: n frames, the registers, the Python
// frames and the stack copy.
func appendStack(dst []byte, e *Event, n int) []byte {
	le := binary.LittleEndian
	for i := 0; i < MaxStack; i++ {
		var v uint64
		if i < n {
			v = e.Stack[i]
		}
		dst = le.AppendUint64(dst, v)
	}
	dst = le.AppendUint64(dst, e.Regs.RIP)
	dst = le.AppendUint64(dst, e.Regs.RSP)
	dst = le.AppendUint64(dst, e.Regs.RBP)
	npy := min(max(e.NPy, 0), MaxPy)
	copyLen := min(len(e.Copy), StackCopy)
	dst = le.AppendUint32(dst, uint32(npy))
	dst = le.AppendUint32(dst, uint32(copyLen))
	for i := 0; i < MaxPy; i++ {
		var code, instr uint64
		if i < npy {
			code, instr = e.Py[i][0], e.Py[i][1]
		}
		dst = le.AppendUint64(dst, code)
		dst = le.AppendUint64(dst, instr)
	}
	return append(dst, e.Copy[:copyLen]...)
}
