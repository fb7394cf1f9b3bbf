package python

// layout is everything this package needs to know about one CPython
// minor version on x86-64 (LP64, default build: no Py_TRACE_REFS, no free
// threading).
//
// Where the numbers come from: each is offsetof() in the internal headers
// of that version (Include/internal/pycore_runtime.h, pycore_interp.h,
// pycore_frame.h, Include/cpython/pystate.h, code.h, unicodeobject.h,
// frameobject.h), printed by testdata/offsets.c compiled with
// -DPy_BUILD_CORE against the headers of CPython 3.9.18, 3.10.13, 3.11.7,
// 3.12.1 and 3.13.0; the tests re-check them against the headers of every
// interpreter found on the machine and against live processes. The 3.12
// numbers agree with py-spy's bindgen output for 3.12.0
// (src/python_bindings/v3_12_0.rs), the _PyRuntime ones with py-spy's
// get_interp_head_offset (32 for 3.9/3.10, 40 for 3.11/3.12). For 3.13 the
// target's own _PyRuntime.debug_offsets are preferred (see Detect).
type layout struct {
	minor int

	// walk_python (Config); NoOffset where a field does not exist.
	runtimeInterpHead uint32 // _PyRuntimeState.interpreters.head
	interpThreadsHead uint32 // PyInterpreterState.threads.head / tstate_head
	tstateNext        uint32 // PyThreadState.next
	tstateInterp      uint32 // PyThreadState.interp (checked by Detect)
	tstateThreadID    uint32 // PyThreadState.thread_id (unsigned long)
	tstateNativeTID   uint32 // PyThreadState.native_thread_id (3.11+)
	tstateFrame       uint32 // ->frame / ->cframe / ->current_frame
	cframeCurrent     uint32 // _PyCFrame.current_frame (3.11/3.12)
	frameBack         uint32 // f_back / previous
	frameCode         uint32 // f_code / f_executable
	frameInstr        uint32 // f_lasti / prev_instr / instr_ptr
	frameOwner        uint32 // _PyInterpreterFrame.owner (3.12+)
	frameIsEntry      uint32 // _PyInterpreterFrame.is_entry (3.11)
	instrIsPtr        bool

	// Code objects (user space only).
	codeFilename    uint64 // co_filename
	codeName        uint64 // co_name
	codeQualname    uint64 // co_qualname (3.11+); 0 before
	codeFirstLineno uint64 // co_firstlineno (int)
	codeLineTable   uint64 // co_lnotab (3.9) / co_linetable (3.10+)
	codeAdaptive    uint64 // co_code_adaptive (3.11+): the first instruction

	// Strings: sizeof(PyASCIIObject) and sizeof(PyCompactUnicodeObject),
	// where the characters of compact strings start. 3.12 dropped wstr.
	asciiSize, compactSize uint64
}

// Offsets shared by every supported version.
const (
	offObType    = 8  // PyObject.ob_type
	offVarSize   = 16 // PyVarObject.ob_size
	offBytesData = 32 // PyBytesObject.ob_sval
	offStrLength = 16 // PyASCIIObject.length
	offStrState  = 32 // PyASCIIObject.state (bit field in an unsigned int)
	// PyUnicodeObject.data.any (legacy, non-compact strings) sits right
	// after PyCompactUnicodeObject.
)

var layouts = map[int]*layout{
	9: {
		minor:             9,
		runtimeInterpHead: 32, interpThreadsHead: 8, // tstate_head
		tstateNext: 8, tstateInterp: 16, tstateThreadID: 176, tstateNativeTID: NoOffset,
		tstateFrame: 24, cframeCurrent: NoOffset, // PyThreadState.frame
		frameBack: 24, frameCode: 32, frameInstr: 104, frameOwner: NoOffset, frameIsEntry: NoOffset, // PyFrameObject, f_lasti
		codeFilename: 104, codeName: 112, codeFirstLineno: 40, codeLineTable: 120, // co_lnotab
		asciiSize: 48, compactSize: 72,
	},
	10: {
		minor:             10,
		runtimeInterpHead: 32, interpThreadsHead: 8,
		tstateNext: 8, tstateInterp: 16, tstateThreadID: 176, tstateNativeTID: NoOffset,
		tstateFrame: 24, cframeCurrent: NoOffset,
		frameBack: 24, frameCode: 32, frameInstr: 96, frameOwner: NoOffset, frameIsEntry: NoOffset,
		codeFilename: 104, codeName: 112, codeFirstLineno: 40, codeLineTable: 120, // co_linetable
		asciiSize: 48, compactSize: 72,
	},
	11: {
		minor:             11,
		runtimeInterpHead: 40, interpThreadsHead: 16,
		tstateNext: 8, tstateInterp: 16, tstateThreadID: 152, tstateNativeTID: 160,
		tstateFrame: 56, cframeCurrent: 8, // tstate->cframe->current_frame
		// _PyInterpreterFrame; 3.11 has no C-stack shim frames: it marks
		// the first frame of an evaluation (is_entry).
		frameBack: 48, frameCode: 32, frameInstr: 56, frameOwner: NoOffset, frameIsEntry: 68, instrIsPtr: true,
		codeFilename: 112, codeName: 120, codeQualname: 128, codeFirstLineno: 72, codeLineTable: 136, codeAdaptive: 184,
		asciiSize: 48, compactSize: 72,
	},
	12: {
		minor:             12,
		runtimeInterpHead: 40, interpThreadsHead: 72,
		tstateNext: 8, tstateInterp: 16, tstateThreadID: 136, tstateNativeTID: 144,
		tstateFrame: 56, cframeCurrent: 0,
		frameBack: 8, frameCode: 0, frameInstr: 56, frameOwner: 70, frameIsEntry: NoOffset, instrIsPtr: true,
		codeFilename: 112, codeName: 120, codeQualname: 128, codeFirstLineno: 68, codeLineTable: 136, codeAdaptive: 192,
		asciiSize: 40, compactSize: 56,
	},
	13: {
		minor:             13,
		runtimeInterpHead: 632, interpThreadsHead: 7344,
		tstateNext: 8, tstateInterp: 16, tstateThreadID: 152, tstateNativeTID: 160,
		tstateFrame: 72, cframeCurrent: NoOffset, // tstate->current_frame
		frameBack: 8, frameCode: 0, frameInstr: 56, frameOwner: 70, frameIsEntry: NoOffset, instrIsPtr: true, // instr_ptr
		codeFilename: 112, codeName: 120, codeQualname: 128, codeFirstLineno: 68, codeLineTable: 136, codeAdaptive: 200,
		asciiSize: 40, compactSize: 56,
	},
}

// config returns the walk_python configuration for a layout.
func (l *layout) config(runtimeAddr uint64) Config {
	c := Config{
		RuntimeAddr:          runtimeAddr,
		Version:              3<<8 | uint32(l.minor),
		OffRuntimeInterpHead: l.runtimeInterpHead,
		OffInterpThreadsHead: l.interpThreadsHead,
		OffTstateNext:        l.tstateNext,
		OffTstateNativeTID:   l.tstateNativeTID,
		OffTstateFrame:       l.tstateFrame,
		OffCFrameCurrent:     l.cframeCurrent,
		OffFrameBack:         l.frameBack,
		OffFrameCode:         l.frameCode,
		OffFrameInstr:        l.frameInstr,
		OffFrameOwner:        l.frameOwner,
		OffFrameIsEntry:      l.frameIsEntry,
		OffTstateThreadID:    l.tstateThreadID,
		OffCodeFilename:      uint32(l.codeFilename),
		OffCodeName:          uint32(l.codeName),
		OffCodeLineTable:     uint32(l.codeLineTable),
	}
	if l.codeQualname != 0 {
		c.OffCodeName = uint32(l.codeQualname)
	}
	if l.instrIsPtr {
		c.InstrIsPtr = 1
	}
	return c
}
