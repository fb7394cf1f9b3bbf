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
	// header or after copy[]: kernelParams, its first entries, where each
	// one's value lies in the bytes copied and how long it is, the bytes,
	// then how many bytes are used and the struct's own size (a recording
	// keeps only the bytes used).
	KernelParams   = 16   // kernelParams entries followed
	KernelValueMax = 1024 // bytes of one parameter value copied, at most
	// bytes of each parameter's value promised before an earlier one's
	// guessed length takes the rest (bpf/cudatap.h KARG_FLOOR)
	KernelValueFloor = 64
	kernelStart      = 1024 // values start within the first kernelStart bytes
	KernelBytes      = kernelStart + KernelValueMax
	KernelArgsSize   = kargsFixed + KernelBytes + 8
	kargsFixed       = 8 + 8*KernelParams + 2*2*KernelParams
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
// kernelParams (an array of pointers, one per parameter, to its value),
// its first entries, and each one's value, copied from where it points up
// to the nearest entry above it (bpf/cudatap.h, struct kernel_args). How
// many parameters there are and their sizes only the driver knows: past
// the last parameter the array holds what the stack held, so which
// entries were parameters is left to the reader (Params).
type KernelArgs struct {
	Params  uint64               // kernelParams; 0: none (or not read)
	Entries [KernelParams]uint64 // its first entries (0: past its readable end)
	Offsets [KernelParams]uint16 // where entry i's value starts in Bytes
	Lens    [KernelParams]uint16 // bytes of entry i's value copied (0: none)
	Bytes   []byte               // the values copied, one after the other
}

// Value is entry i's value as copied: the address it was copied from and
// its bytes (none when it was not copied).
func (k *KernelArgs) Value(i int) (addr uint64, b []byte) {
	if i < 0 || i >= KernelParams || k.Entries[i] == 0 {
		return 0, nil
	}
	off, n := int(k.Offsets[i]), int(k.Lens[i])
	if n == 0 || off+n > len(k.Bytes) {
		return k.Entries[i], nil
	}
	return k.Entries[i], k.Bytes[off : off+n]
}

// Copied is how many leading entries had a value copied: the entries
// taken for the kernel's parameters when nothing says how many it has.
// An entry past the last parameter points wherever the stack did; most
// often at nothing readable, where the count stops.
func (k *KernelArgs) Copied() int {
	n := 0
	for n < KernelParams && k.Entries[n] != 0 && k.Lens[n] > 0 {
		n++
	}
	return n
}

// Words yields each 8-byte-aligned word (by the address it was copied
// from) of the values of the first n entries, with its value: the
// candidates for pointers the kernel was given.
func (k *KernelArgs) Words(n int) func(yield func(addr, value uint64) bool) {
	return func(yield func(addr, value uint64) bool) {
		for i := range min(n, KernelParams) {
			at, b := k.Value(i)
			for off := (8 - at%8) % 8; off+8 <= uint64(len(b)); off += 8 {
				if !yield(at+off, binary.LittleEndian.Uint64(b[off:])) {
					return
				}
			}
		}
	}
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
	if CookieHasKernelArgs(e.Cookie) {
		// The parameter values end the record, whatever comes before.
		if n := kernelArgsLen(b[HeaderSize:]); n > 0 {
			decodeKernelArgs(b[len(b)-n:], &e.KernelArgs)
			b = b[:len(b)-n]
		}
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

// kernelArgsLen is the length of the parameter values that end body (a
// record past its header), from the size they end with; 0 when they do
// not fit.
func kernelArgsLen(body []byte) int {
	if len(body) < kargsFixed+8 {
		return 0
	}
	le := binary.LittleEndian
	size, used := int(le.Uint32(body[len(body)-4:])), int(le.Uint32(body[len(body)-8:]))
	if size < kargsFixed+8 || size > KernelArgsSize || size > len(body) || used > size-kargsFixed-8 {
		return 0
	}
	return size
}

func decodeKernelArgs(b []byte, k *KernelArgs) {
	le := binary.LittleEndian
	k.Params = le.Uint64(b[0:])
	for i := range KernelParams {
		k.Entries[i] = le.Uint64(b[8+8*i:])
		k.Offsets[i] = le.Uint16(b[8+8*KernelParams+2*i:])
		k.Lens[i] = le.Uint16(b[8+8*KernelParams+2*KernelParams+2*i:])
	}
	if used := int(le.Uint32(b[len(b)-8:])); used > 0 {
		k.Bytes = b[kargsFixed : kargsFixed+used : kargsFixed+used]
	}
}

// appendKernelArgs writes k as a recording keeps it: the bytes used only.
func appendKernelArgs(dst []byte, k *KernelArgs) []byte {
	le := binary.LittleEndian
	dst = le.AppendUint64(dst, k.Params)
	for _, e := range k.Entries {
		dst = le.AppendUint64(dst, e)
	}
	for _, o := range k.Offsets {
		dst = le.AppendUint16(dst, o)
	}
	for _, n := range k.Lens {
		dst = le.AppendUint16(dst, n)
	}
	n := min(len(k.Bytes), KernelBytes)
	dst = append(dst, k.Bytes[:n]...)
	dst = le.AppendUint32(dst, uint32(n))
	return le.AppendUint32(dst, uint32(kargsFixed+n+8))
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
	kargs := 0 // the parameter values: the bytes used only
	if CookieHasKernelArgs(e.Cookie) && len(raw) >= HeaderSize {
		kargs = kernelArgsLen(raw[HeaderSize:])
	}
	n := len(dst)
	dst = append(dst, raw[:len(raw)-kargs]...)
	if len(raw) >= HeaderSize {
		rec := dst[n:]
		binary.LittleEndian.PutUint32(rec[offFlags:], e.Flags)
		if k := int(binary.LittleEndian.Uint32(rec[offNStack:])); e.NStack < k {
			binary.LittleEndian.PutUint32(rec[offNStack:], uint32(max(e.NStack, 0)))
		}
	}
	if kargs > 0 {
		dst = appendKernelArgs(dst, &e.KernelArgs)
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
