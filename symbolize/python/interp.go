package python

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// Limits on what is read from the target for one code object.
const (
	maxString    = 4096    // characters of a file or function name
	maxLineTable = 1 << 20 // bytes of a line table
	maxCodes     = 1 << 16 // code objects cached per process before the cache is reset
	maxLineMemo  = 256     // instructions whose line is remembered per code object
)

// Interpreter reads the code objects of one CPython process. It is safe
// for concurrent use.
type Interpreter struct {
	pid     int
	mem     mem
	l       layout
	cfg     Config
	version string // "3.12.1"
	path    string // the object holding the interpreter, as the target sees it

	// Addresses of PyCode_Type, PyUnicode_Type and PyBytes_Type in the
	// target, to check what is read; 0 when unknown (not checked).
	codeType, unicodeType, bytesType uint64

	// For the Go walker before 3.11 (no native_thread_id): where glibc's
	// struct pthread keeps the tid, 0 if unknown.
	pthreadTIDOff uint64

	// started: the interpreter was running and its layout checked against
	// the live process when detected.
	started bool

	mu    sync.Mutex
	codes map[uint64]*codeInfo
}

type codeInfo struct {
	file, name string
	first      int
	table      []byte

	mu   sync.Mutex
	memo map[uint64]int // instruction -> line
}

// Pid returns the process id.
func (in *Interpreter) Pid() int { return in.pid }

// Started reports whether the interpreter was initialized, and its layout
// checked against the live process, when it was detected. Detect again
// later when it was not.
func (in *Interpreter) Started() bool { return in.started }

// Version returns the interpreter's version, e.g. "3.12.1".
func (in *Interpreter) Version() string { return in.version }

// Path returns the file holding the interpreter (libpython or the python
// executable) as the target sees it.
func (in *Interpreter) Path() string { return in.path }

// Config returns the walk_python configuration for the process.
func (in *Interpreter) Config() Config { return in.cfg }

// Frame names the frame walk_python recorded as (code, instr): code is
// the code object's address, instr the frame's instruction (prev_instr or
// instr_ptr for 3.11+, f_lasti for 3.9/3.10; its InstrFlags are ignored).
// Code objects are read once and cached by address; they normally live as
// long as the process.
func (in *Interpreter) Frame(code, instr uint64) (Frame, error) {
	instr &^= InstrFlags
	ci, err := in.code(code)
	if err != nil {
		return Frame{}, err
	}
	line := ci.line(in, code, instr)
	if line < 0 {
		line = 0
	}
	return Frame{File: ci.file, Line: line, Function: ci.name}, nil
}

// Frames names a walk, innermost first. A frame that cannot be read is
// named "?" (with its code object's address as the function) rather than
// dropped, so that the stack keeps its shape.
func (in *Interpreter) Frames(raw []RawFrame) []Frame {
	out := make([]Frame, len(raw))
	for i, r := range raw {
		f, err := in.Frame(r.Code, r.Instr)
		if err != nil {
			f = Frame{File: "?", Function: fmt.Sprintf("<code %#x>", r.Code)}
		}
		out[i] = f
	}
	return out
}

// Forget drops the cached code objects (e.g. after the process exec'd).
func (in *Interpreter) Forget() {
	in.mu.Lock()
	in.codes = nil
	in.mu.Unlock()
}

func (in *Interpreter) code(addr uint64) (*codeInfo, error) {
	in.mu.Lock()
	ci := in.codes[addr]
	in.mu.Unlock()
	if ci != nil {
		return ci, nil
	}
	ci, err := in.readCode(in.mem, addr)
	if err != nil {
		return nil, err
	}
	in.keep(addr, ci)
	return ci, nil
}

// keep caches ci as the code object at addr and returns the one it replaces.
func (in *Interpreter) keep(addr uint64, ci *codeInfo) *codeInfo {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.codes == nil || len(in.codes) >= maxCodes {
		in.codes = make(map[uint64]*codeInfo)
	}
	old := in.codes[addr]
	in.codes[addr] = ci
	return old
}

// AddCopy takes the copy the BPF side made of the code object at code
// (bpf/pycode.h): head holds its first bytes, data[i] the bytes at addr[i]
// (file name, function name and line table objects). The code object is
// then named from the copy, also once it or the process is gone; what the
// copy lacks is read from the live process. replaced says that a
// different code object was known at that address before (it was freed
// and the address reused): names given to its frames are stale.
func (in *Interpreter) AddCopy(code uint64, head []byte, addr [3]uint64, data [3][]byte) (replaced bool, err error) {
	m := copied{regions: []region{{code, head}}, live: in.mem}
	for i := range addr {
		if addr[i] != 0 && len(data[i]) > 0 {
			m.regions = append(m.regions, region{addr[i], data[i]})
		}
	}
	ci, err := in.readCode(m, code)
	if err != nil {
		return false, err
	}
	old := in.keep(code, ci)
	return old != nil && !old.same(ci), nil
}

func (ci *codeInfo) same(o *codeInfo) bool {
	return ci.file == o.file && ci.name == o.name && ci.first == o.first && bytes.Equal(ci.table, o.table)
}

func (in *Interpreter) readCode(m memory, addr uint64) (*codeInfo, error) {
	if addr == 0 {
		return nil, errors.New("null code object")
	}
	l := &in.l
	end := max(l.codeFilename, l.codeName, l.codeQualname, l.codeLineTable, offObType) + 8
	end = max(end, l.codeFirstLineno+4)
	buf := make([]byte, end)
	if err := m.read(addr, buf); err != nil {
		return nil, fmt.Errorf("code object: %w", err)
	}
	ptr := func(off uint64) uint64 { return binary.LittleEndian.Uint64(buf[off:]) }
	if in.codeType != 0 && ptr(offObType) != in.codeType {
		return nil, fmt.Errorf("%#x is not a code object (type %#x, PyCode_Type %#x)", addr, ptr(offObType), in.codeType)
	}
	ci := &codeInfo{first: int(int32(binary.LittleEndian.Uint32(buf[l.codeFirstLineno:])))}
	var err error
	if ci.file, err = in.readString(m, ptr(l.codeFilename)); err != nil {
		return nil, fmt.Errorf("co_filename: %w", err)
	}
	nameOff := l.codeName
	if l.codeQualname != 0 {
		nameOff = l.codeQualname
	}
	if ci.name, err = in.readString(m, ptr(nameOff)); err != nil {
		return nil, fmt.Errorf("code name: %w", err)
	}
	if ci.table, err = in.readBytes(m, ptr(l.codeLineTable)); err != nil {
		return nil, fmt.Errorf("line table: %w", err)
	}
	return ci, nil
}

// line computes the line of instr, as PyFrame_GetLineNumber would.
func (ci *codeInfo) line(in *Interpreter, code, instr uint64) int {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if line, ok := ci.memo[instr]; ok {
		return line
	}
	var line int
	switch l := &in.l; {
	case l.minor == 9:
		line = line39(ci.table, ci.first, int(int32(uint32(instr))))
	case l.minor == 10:
		line = line310(ci.table, ci.first, 2*int(int32(uint32(instr))))
	default:
		// _PyInterpreterFrame_LASTI: prev_instr (3.11/3.12) or instr_ptr
		// (3.13) minus the first instruction, in code units. For a
		// frame inside a call both point at the CALL instruction.
		unit := (int64(instr) - int64(code+l.codeAdaptive)) / 2
		if instr < code+l.codeAdaptive {
			unit = -1
		}
		if unit > 1<<30 {
			return -1
		}
		line = line311(ci.table, ci.first, int(unit))
	}
	if ci.memo == nil || len(ci.memo) >= maxLineMemo {
		ci.memo = make(map[uint64]int)
	}
	ci.memo[instr] = line
	return line
}

// readString reads a str object.
func (in *Interpreter) readString(m memory, addr uint64) (string, error) {
	if addr == 0 {
		return "", errors.New("null string")
	}
	l := &in.l
	hdr := make([]byte, l.compactSize+8)
	if err := m.read(addr, hdr); err != nil {
		return "", err
	}
	if in.unicodeType != 0 {
		if t := binary.LittleEndian.Uint64(hdr[offObType:]); t != in.unicodeType {
			return "", fmt.Errorf("%#x is not a str (type %#x)", addr, t)
		}
	}
	n := binary.LittleEndian.Uint64(hdr[offStrLength:])
	state := binary.LittleEndian.Uint32(hdr[offStrState:])
	kind := uint64(state>>2) & 7
	compact := state&(1<<5) != 0
	ascii := state&(1<<6) != 0
	if kind != 1 && kind != 2 && kind != 4 {
		return "", fmt.Errorf("str at %#x: bad kind %d", addr, kind)
	}
	truncated := n > maxString
	n = min(n, maxString)
	var data uint64
	switch {
	case compact && ascii:
		data = addr + l.asciiSize
	case compact:
		data = addr + l.compactSize
	default: // legacy string: PyUnicodeObject.data.any
		data = binary.LittleEndian.Uint64(hdr[l.compactSize:])
	}
	raw := make([]byte, n*kind)
	if len(raw) > 0 {
		if err := m.read(data, raw); err != nil {
			return "", err
		}
	}
	var sb strings.Builder
	for i := uint64(0); i < n; i++ {
		var r rune
		switch kind {
		case 1:
			r = rune(raw[i])
		case 2:
			r = rune(binary.LittleEndian.Uint16(raw[2*i:]))
		case 4:
			r = rune(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		if !utf8.ValidRune(r) {
			r = utf8.RuneError
		}
		sb.WriteRune(r)
	}
	if truncated {
		sb.WriteString("...")
	}
	return sb.String(), nil
}

// readBytes reads a bytes object.
func (in *Interpreter) readBytes(m memory, addr uint64) ([]byte, error) {
	if addr == 0 {
		return nil, errors.New("null bytes")
	}
	var hdr [offBytesData]byte
	if err := m.read(addr, hdr[:]); err != nil {
		return nil, err
	}
	if in.bytesType != 0 {
		if t := binary.LittleEndian.Uint64(hdr[offObType:]); t != in.bytesType {
			return nil, fmt.Errorf("%#x is not a bytes object (type %#x)", addr, t)
		}
	}
	n := binary.LittleEndian.Uint64(hdr[offVarSize:])
	if n > maxLineTable {
		return nil, fmt.Errorf("bytes at %#x: size %d too large", addr, n)
	}
	b := make([]byte, n)
	if n > 0 {
		if err := m.read(addr+offBytesData, b); err != nil {
			return nil, err
		}
	}
	return b, nil
}
