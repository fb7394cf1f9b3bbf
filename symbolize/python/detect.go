package python

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/procfs"
)

// nameVersion finds the version in "libpython3.12.so.1.0", "python3.9",
// "libpython3.13t.so" (t: free-threaded).
var nameVersion = regexp.MustCompile(`python(\d+)\.(\d+)(t?)`)

// Detect finds the CPython interpreter of process pid and returns the
// walk_python configuration for it and an Interpreter to name its frames.
// It reads /proc/PID/maps, the ELF symbols of the interpreter's file and a
// few words of the target's memory; the target is not stopped.
//
// Errors: ErrNotPython when no mapped object defines _PyRuntime;
// ErrUnknownLayout (wrapped, with the version and file in the message)
// for versions other than 3.9–3.13, free-threaded or otherwise unusual
// builds, and interpreters whose memory does not look as expected; an
// error wrapping os.ErrNotExist when the process is gone.
func Detect(pid int) (*Config, *Interpreter, error) {
	return DetectCache(pid, nil)
}

// DetectCache is Detect with ELF files opened through c (nil: a private
// cache).
func DetectCache(pid int, c *objfile.Cache) (*Config, *Interpreter, error) {
	if c == nil {
		c = objfile.NewCache(16)
	}
	maps, err := objfile.ReadMaps(pid)
	if err != nil {
		return nil, nil, err
	}
	objs := objfile.ObjectFiles(maps)
	exe, _ := procfs.Exe(pid)

	// libpython first: a python executable linked against it has no
	// _PyRuntime of its own, and an embedding program is not called python.
	var cands []objfile.ObjectFile
	for _, o := range objs {
		if strings.HasPrefix(path.Base(o.Path), "libpython") {
			cands = append(cands, o)
		}
	}
	for _, o := range objs {
		b := path.Base(o.Path)
		if !strings.HasPrefix(b, "libpython") && (strings.Contains(b, "python") || o.Path == exe) {
			cands = append(cands, o)
		}
	}
	for _, o := range cands {
		f, err := c.Open(o.OpenPath(pid))
		if err != nil {
			continue
		}
		rt, ok := f.LookupDynamic("_PyRuntime")
		if !ok {
			if rt, ok = f.Lookup("_PyRuntime"); !ok {
				continue
			}
		}
		bias, ok := o.Bias(f)
		if !ok {
			continue
		}
		in, err := newInterpreter(pid, o, f, rt.Value+bias, bias)
		if err != nil {
			return nil, nil, err
		}
		in.pthreadTIDOff = pthreadTIDOffset(pid, objs, c)
		err = in.validate()
		if err != nil && !errors.Is(err, errNotStarted) {
			return nil, nil, err
		}
		in.started = err == nil
		cfg := in.cfg
		return &cfg, in, nil
	}
	return nil, nil, fmt.Errorf("process %d: %w", pid, ErrNotPython)
}

func newInterpreter(pid int, o objfile.ObjectFile, f *objfile.File, runtime, bias uint64) (*Interpreter, error) {
	in := &Interpreter{pid: pid, mem: mem{pid}, path: o.Path}
	addr := func(name string) uint64 {
		if s, ok := f.LookupDynamic(name); ok {
			return s.Value + bias
		}
		if s, ok := f.Lookup(name); ok {
			return s.Value + bias
		}
		return 0
	}
	unknown := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrUnknownLayout, o.Path, fmt.Sprintf(format, args...))
	}

	// The version: Py_Version (3.11+) is PY_VERSION_HEX in the target;
	// before that the file name has to do.
	major, minor, free := 0, 0, false
	m := nameVersion.FindStringSubmatch(path.Base(o.Path))
	if m != nil {
		major, _ = strconv.Atoi(m[1])
		minor, _ = strconv.Atoi(m[2])
		free = m[3] == "t"
	}
	if a := addr("Py_Version"); a != 0 {
		hex, err := in.mem.u32(a)
		if err != nil {
			return nil, fmt.Errorf("read Py_Version: %w", err)
		}
		major, minor = int(hex>>24), int(hex>>16&0xff)
		in.version = versionString(hex)
	} else if m != nil {
		in.version = fmt.Sprintf("%d.%d", major, minor)
	} else {
		return nil, unknown("cannot tell the Python version (no Py_Version, file name without one)")
	}
	if free {
		return nil, unknown("Python %s is a free-threaded build (only the default build is supported)", in.version)
	}
	l, ok := layouts[minor]
	if major != 3 || !ok {
		return nil, unknown("Python %s: interpreter layout unknown (supported: 3.9 to 3.13)", in.version)
	}
	in.l = *l
	if minor >= 13 {
		if err := in.readDebugOffsets(runtime); err != nil {
			return nil, unknown("Python %s: %v", in.version, err)
		}
	}
	in.cfg = in.l.config(runtime)
	in.codeType = addr("PyCode_Type")
	in.unicodeType = addr("PyUnicode_Type")
	in.bytesType = addr("PyBytes_Type")
	return in, nil
}

// versionString formats PY_VERSION_HEX: 0x030c01f0 is "3.12.1",
// 0x030d00c1 "3.13.0rc1".
func versionString(hex uint32) string {
	s := fmt.Sprintf("%d.%d.%d", hex>>24, hex>>16&0xff, hex>>8&0xff)
	level, serial := hex>>4&0xf, hex&0xf
	switch level {
	case 0xa:
		s += fmt.Sprintf("a%d", serial)
	case 0xb:
		s += fmt.Sprintf("b%d", serial)
	case 0xc:
		s += fmt.Sprintf("rc%d", serial)
	}
	return s
}

// readDebugOffsets takes the 3.13 layout from the target's
// _PyRuntime.debug_offsets (struct _Py_DebugOffsets, all uint64_t, at the
// start of _PyRuntime; Include/internal/pycore_runtime.h of 3.13, word
// indexes checked with offsetof against the 3.13.0 headers): the
// interpreter tells out-of-process tools where its fields are.
func (in *Interpreter) readDebugOffsets(runtime uint64) error {
	// Field indexes (in uint64 words) of the 3.13 struct.
	const (
		wVersion           = 1
		wFreeThreaded      = 2
		wRuntimeInterpHead = 5  // runtime_state.interpreters_head
		wInterpThreadsHead = 9  // interpreter_state.threads_head
		wTstateNext        = 21 // thread_state.next
		wTstateInterp      = 22
		wTstateFrame       = 23 // current_frame
		wTstateThreadID    = 24
		wTstateNativeTID   = 25
		wFramePrevious     = 29 // interpreter_frame.previous
		wFrameExecutable   = 30
		wFrameInstrPtr     = 31
		wFrameOwner        = 33
		wCodeFilename      = 35 // code_object.filename
		wCodeName          = 36
		wCodeQualname      = 37
		wCodeLinetable     = 38
		wCodeFirstLineno   = 39
		wCodeAdaptive      = 43 // code_object.co_code_adaptive
		nWords             = 44
	)
	buf := make([]byte, 8*nWords)
	if err := in.mem.read(runtime, buf); err != nil {
		return fmt.Errorf("read _PyRuntime.debug_offsets: %w", err)
	}
	if !bytes.Equal(buf[:8], []byte("xdebugpy")) {
		return fmt.Errorf("_PyRuntime does not start with debug offsets (cookie %q)", buf[:8])
	}
	w := func(i int) uint64 { return binary.LittleEndian.Uint64(buf[8*i:]) }
	if v := w(wVersion); v>>16 != 0x030d {
		return fmt.Errorf("debug offsets are for version %#x", v)
	}
	if w(wFreeThreaded) != 0 {
		return errors.New("free-threaded build (only the default build is supported)")
	}
	u32 := func(i int) (uint32, error) {
		v := w(i)
		if v >= 1<<20 {
			return 0, fmt.Errorf("debug offset %d is implausible (%d)", i, v)
		}
		return uint32(v), nil
	}
	l := &in.l
	for _, f := range []struct {
		dst *uint32
		i   int
	}{
		{&l.runtimeInterpHead, wRuntimeInterpHead}, {&l.interpThreadsHead, wInterpThreadsHead},
		{&l.tstateNext, wTstateNext}, {&l.tstateInterp, wTstateInterp}, {&l.tstateFrame, wTstateFrame},
		{&l.tstateThreadID, wTstateThreadID}, {&l.tstateNativeTID, wTstateNativeTID},
		{&l.frameBack, wFramePrevious}, {&l.frameCode, wFrameExecutable},
		{&l.frameInstr, wFrameInstrPtr}, {&l.frameOwner, wFrameOwner},
	} {
		v, err := u32(f.i)
		if err != nil {
			return err
		}
		*f.dst = v
	}
	for _, f := range []struct {
		dst *uint64
		i   int
	}{
		{&l.codeFilename, wCodeFilename}, {&l.codeName, wCodeName}, {&l.codeQualname, wCodeQualname},
		{&l.codeLineTable, wCodeLinetable}, {&l.codeFirstLineno, wCodeFirstLineno}, {&l.codeAdaptive, wCodeAdaptive},
	} {
		v, err := u32(f.i)
		if err != nil {
			return err
		}
		*f.dst = uint64(v)
	}
	return nil
}

// errNotStarted: _PyRuntime has no interpreter yet (the process has not
// run Py_Initialize, or has finalized); nothing can be checked.
var errNotStarted = errors.New("the interpreter is not initialized")

// validate checks the layout against the live process: every thread state
// in the main interpreter's list must point back at that interpreter, and
// the code objects of the frames found must be code objects.
func (in *Interpreter) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: Python %s: %s", ErrUnknownLayout, in.path, in.version, fmt.Sprintf(format, args...))
	}
	c := &in.cfg
	interp, err := in.mem.u64(c.RuntimeAddr + uint64(c.OffRuntimeInterpHead))
	if err != nil {
		return bad("read _PyRuntime: %v", err)
	}
	if interp == 0 {
		return errNotStarted
	}
	ts, err := in.mem.u64(interp + uint64(c.OffInterpThreadsHead))
	if err != nil {
		return bad("read the interpreter state at %#x: %v", interp, err)
	}
	frames := 0
	for i := 0; ts != 0 && i < maxThreads; i++ {
		back, err := in.mem.u64(ts + uint64(in.l.tstateInterp))
		if err != nil {
			return bad("read thread state %#x: %v", ts, err)
		}
		if back != interp {
			return bad("thread state %#x points to interpreter %#x, not %#x", ts, back, interp)
		}
		if frames < 4 {
			raw, _, err := in.walkFrom(ts, 1)
			if err != nil {
				return bad("thread state %#x: %v", ts, err)
			}
			for _, r := range raw {
				if _, err := in.code(r.Code); err != nil {
					return bad("frame of thread state %#x: %v", ts, err)
				}
				frames++
			}
		}
		if ts, err = in.mem.u64(ts + uint64(c.OffTstateNext)); err != nil {
			return bad("read thread state list: %v", err)
		}
	}
	return nil
}

// pthreadTIDOffset returns offsetof(struct pthread, tid) from glibc's
// libthread_db descriptor _thread_db_pthread_tid ({bits, count, offset}),
// or 0x2d0 (the x86-64 value for years of glibc) when libc does not say.
func pthreadTIDOffset(pid int, objs []objfile.ObjectFile, c *objfile.Cache) uint64 {
	const fallback = 0x2d0
	for _, o := range objs {
		if b := path.Base(o.Path); !strings.HasPrefix(b, "libc.so") && !strings.HasPrefix(b, "libc-") {
			continue
		}
		f, err := c.Open(o.OpenPath(pid))
		if err != nil {
			continue
		}
		s, ok := f.LookupDynamic("_thread_db_pthread_tid")
		bias, ok2 := o.Bias(f)
		if !ok || !ok2 {
			continue
		}
		var d [12]byte
		if err := (mem{pid}).read(s.Value+bias, d[:]); err != nil {
			continue
		}
		if binary.LittleEndian.Uint32(d[:]) == 32 {
			return uint64(binary.LittleEndian.Uint32(d[8:]))
		}
	}
	return fallback
}
