// Package python names the Python code a thread of a CPython 3.9–3.13
// process is running, from outside the process and without stopping it.
//
// The BPF side (bpf/python.h, walk_python) records, at a uprobe, the
// calling thread's Python frames as (code object, instruction) pairs. This
// package provides what that needs and what comes after it:
//
//   - [Detect] finds the interpreter of a process (libpython3.X.so or a
//     python executable with the interpreter linked in), tells its exact
//     version and returns the layout for walk_python ([Config], whose
//     MarshalBinary gives the bytes of struct py_config) and an
//     [Interpreter] for that process;
//   - [Interpreter.Frame] turns a recorded pair into file, line and
//     function by reading the code object from the target's memory
//     (process_vm_readv), cached per code object;
//   - [Interpreter.Walk] and [WalkThread] do in Go what walk_python does
//     in BPF, for tests and debugging.
//
// Only x86-64 Linux targets with the default (GIL) build are supported.
// Anything else, or a version whose layout is not known, gives
// [ErrUnknownLayout]; the tracer then keeps going with native stacks.
package python

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// NoOffset marks a Config offset that does not apply to the version
// (NO_OFFSET in bpf/python.h).
const NoOffset = 0xffffffff

var (
	// ErrNotPython means the process has no CPython interpreter mapped.
	ErrNotPython = errors.New("no CPython interpreter in the process")
	// ErrUnknownLayout means an interpreter was found but its version or
	// build is one whose memory layout this package does not know.
	ErrUnknownLayout = errors.New("unknown CPython interpreter layout")
)

// Config is the layout of one process's interpreter that walk_python
// needs: struct py_config of bpf/python.h, field for field, in the same
// order (the Go struct has the C struct's memory layout too: 80 bytes).
// See bpf/python.h for what each offset is.
type Config struct {
	RuntimeAddr          uint64 // address of _PyRuntime in the target
	Version              uint32 // major<<8 | minor, e.g. 0x030c
	OffRuntimeInterpHead uint32
	OffInterpThreadsHead uint32
	OffTstateNext        uint32
	OffTstateNativeTID   uint32 // NoOffset before 3.11
	OffTstateFrame       uint32
	OffCFrameCurrent     uint32 // NoOffset unless 3.11/3.12
	OffFrameBack         uint32
	OffFrameCode         uint32
	OffFrameInstr        uint32
	OffFrameOwner        uint32 // NoOffset before 3.12
	InstrIsPtr           uint32 // 1: OffFrameInstr is a pointer, 0: a C int (f_lasti)
	// OffTstateThreadID is PyThreadState.thread_id (pthread_self of the
	// thread), which walk_python compares with the task's fs base; when
	// NoOffset it compares native_thread_id with the host tid instead.
	OffTstateThreadID uint32
	// Where the code object keeps what naming a frame needs: pycode.h
	// copies those objects the first time a record refers to the code.
	OffCodeFilename  uint32 // co_filename
	OffCodeName      uint32 // co_qualname (3.11+), else co_name
	OffCodeLineTable uint32 // co_lnotab (3.9) / co_linetable
	// OffFrameIsEntry is _PyInterpreterFrame.is_entry (3.11 only), where
	// 3.11 marks a frame entered from C; NoOffset otherwise.
	OffFrameIsEntry uint32
}

// ConfigSize is the size of struct py_config (with 4 bytes of padding at
// its end).
const ConfigSize = 80

// MarshalBinary returns the bytes of struct py_config (little endian, as
// on x86-64). It implements encoding.BinaryMarshaler, so a Config can be
// passed as a map value to cilium/ebpf directly.
func (c Config) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, ConfigSize)
	b = binary.LittleEndian.AppendUint64(b, c.RuntimeAddr)
	for _, v := range []uint32{
		c.Version, c.OffRuntimeInterpHead, c.OffInterpThreadsHead, c.OffTstateNext,
		c.OffTstateNativeTID, c.OffTstateFrame, c.OffCFrameCurrent, c.OffFrameBack,
		c.OffFrameCode, c.OffFrameInstr, c.OffFrameOwner, c.InstrIsPtr, c.OffTstateThreadID,
		c.OffCodeFilename, c.OffCodeName, c.OffCodeLineTable, c.OffFrameIsEntry,
	} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return append(b, make([]byte, ConfigSize-len(b))...), nil
}

// Frame is one Python frame.
type Frame struct {
	File     string // co_filename
	Line     int    // 0 when the instruction has no line
	Function string // co_qualname (3.11+), else co_name
}

// String returns "file:line function".
func (f Frame) String() string {
	return fmt.Sprintf("%s:%d %s", f.File, f.Line, f.Function)
}

// Flags walk_python sets in the top bits of a frame's instruction word,
// above any user-space pointer and any f_lasti (PY_INSTR_* in
// bpf/python.h).
const (
	// InstrEntry marks a frame entered from C: the first frame of one
	// activation of the evaluation loop (_PyEval_EvalFrameDefault), which
	// runs it and the Python functions it calls from Python, as py-spy's
	// "entry" frames. Up to 3.10 every frame is one.
	InstrEntry = 1 << 63
	// InstrEntryKnown says InstrEntry is set as it applies; a walk cut
	// short may leave its last frame without it.
	InstrEntryKnown = 1 << 62
	// InstrFlags are the flag bits; the instruction is Instr &^ InstrFlags.
	InstrFlags = InstrEntry | InstrEntryKnown
)

// RawFrame is what walk_python stores per frame: the code object and the
// instruction (a pointer for 3.11+, f_lasti for 3.9/3.10) with the flags
// InstrEntry and InstrEntryKnown in its top bits.
type RawFrame struct {
	Code, Instr uint64
}

// Entry reports whether the frame was entered from C (see InstrEntry), and
// whether that is known.
func (r RawFrame) Entry() (entry, known bool) {
	return r.Instr&InstrEntry != 0, r.Instr&InstrEntryKnown != 0
}
