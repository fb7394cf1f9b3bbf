// Package resolve names the raw keys of each event (process, thread,
// kernel stub, stack addresses, Python frames) while the process lives,
// once per key: into name tables (model.Names) and, as it names them, a
// NameWriter (the recording). It asks about live processes through a
// Lookup (tracer/targets) and never sees the session. It runs on the
// reader goroutine, outside the model lock; the model never waits for it.
//
// Files: resolve.go the names, stack.go what a stack needs while the
// process lives, kernels.go kernel names decoded from code, caller.go the
// call before a return address, procinfo.go names from /proc.
package resolve

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/symbolize/python"
	"github.com/cudatap/cudatap/symbolize/unwind"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Lookup is what the resolver asks about the live processes
// (targets.Set), from the reader goroutine.
type Lookup interface {
	// Process is the symbolizer of a traced process (its mappings from
	// when it was first needed), nil if unknown or gone.
	Process(pid uint32) *symbolize.Process
	// IsRuntimeFile reports whether the file a mapping of pid names is
	// its CUDA runtime.
	IsRuntimeFile(pid uint32, dev string, inode uint64, path string) bool
	// Libraries lists the CUDA libraries hooked in pid.
	Libraries(pid uint32) []string
	// AttachedLate reports whether pid ran before cudatap attached.
	AttachedLate(pid uint32) bool
	// Python is pid's CPython interpreter, nil if none; with again, one
	// found before it started is looked at anew first.
	Python(pid uint32, again bool) *python.Interpreter
	// Parent is pid's parent in the followed tree (0: none known).
	Parent(pid uint32) uint32
}

// NameWriter receives each name as the resolver gives it (the recording:
// recording.Writer).
type NameWriter interface {
	Process(pid uint32, info model.ProcessInfo)
	Thread(pid, tid uint32, name string)
	Kernel(pid uint32, addr uint64, name string)
	Frame(pid uint32, addr uint64, name string)
	PyFrame(pid uint32, code, instr uint64, name string)
	Mapping(pid uint32, m model.Mapping)
}

// pyRetry is what the resolver remembers of a Python frame that did not
// resolve: how often it was seen, and the process's resolution count at
// its last try.
type pyRetry struct {
	seen     uint32
	resolved uint32
}

// Resolver is the naming stage (reader goroutine only, but for
// PollKernels' decoders, which run beside it).
type Resolver struct {
	look   Lookup
	out    NameWriter
	log    *slog.Logger
	unwind *unwind.Unwinder
	names  *model.Names
	procs  map[uint32]bool
	// early: processes named before their first call (those running when
	// the session went live): named again at their first call, once,
	// since a launched command may not have exec'd yet when first named
	// (it showed as cudatap).
	early map[uint32]bool
	// Python frames that did not resolve yet, and per process how many
	// did: a launched interpreter is readable only once it runs, so a
	// frame that failed is asked again as soon as another one of its
	// process resolved, and otherwise at its 2nd, 4th, 8th... sighting.
	pyFailed   map[model.PyNameKey]pyRetry
	pyResolved map[uint32]uint32
	// Process names from library-load records, for processes not named
	// yet: one gone before /proc is read keeps its name.
	comms map[uint32]string
	// Whether a driver launch's return address lies in the CUDA runtime,
	// by process and address (launches come from a handful of call sites).
	callers map[model.NameKey]bool
	// unsure counts the launches whose caller lay in no mapping read
	// (maxUnsure at most, then judged not the runtime's and remembered):
	// each try reads /proc, which a launch must not do for ever.
	unsure map[model.NameKey]uint8
	// Kernel names from the code of the files (kernels.go).
	kernels kernelDecoder
	// Mappings recorded per process (names.Mappings holds them).
	nmaps map[uint32]int
}

// maxComms bounds the remembered process names: library loads come from
// every process on the host under --all, most of which never use CUDA.
const maxComms = 1 << 14

// maxMappings bounds the mappings recorded per process. Stack frames lie in
// a few dozen files (the program, libc, the interpreter, the CUDA and
// framework libraries); a process that loads and unloads code without end
// stops getting new ones.
const maxMappings = 4096

// New returns a resolver that asks look about live processes, names into
// names (nil: tables of its own) and hands each name to out (nil: names
// are only kept in Names).
func New(look Lookup, out NameWriter, names *model.Names, log *slog.Logger) *Resolver {
	if out == nil {
		out = discard{}
	}
	if names == nil {
		names = model.NewNames()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Resolver{look: look, out: out, log: log, unwind: unwind.New(), names: names, procs: map[uint32]bool{},
		early: map[uint32]bool{}, pyFailed: map[model.PyNameKey]pyRetry{}, pyResolved: map[uint32]uint32{}, comms: map[uint32]string{},
		callers: map[model.NameKey]bool{}, unsure: map[model.NameKey]uint8{}, kernels: newKernelDecoder(), nmaps: map[uint32]int{}}
}

// Names are the name tables so far: read on the reader goroutine, or
// once it ended.
func (r *Resolver) Names() *model.Names { return r.names }

// discard is a NameWriter that writes nothing.
type discard struct{}

func (discard) Process(uint32, model.ProcessInfo)      {}
func (discard) Thread(uint32, uint32, string)          {}
func (discard) Kernel(uint32, uint64, string)          {}
func (discard) Frame(uint32, uint64, string)           {}
func (discard) PyFrame(uint32, uint64, uint64, string) {}
func (discard) Mapping(uint32, model.Mapping)          {}

// Forked names a process the followed tree started, with its parent
// (Lookup.Parent): every process of the tree shows, with or without CUDA
// calls (a recording's replay shows it the same way).
func (r *Resolver) Forked(ev *event.Event) {
	r.commAt(ev.PID, ev.Args[1], ev.Args[2])
	r.ProcessEarly(ev.PID)
}

// Executed names a process of the tree again: it runs another program now
// (it is stopped there: /proc shows the new one).
func (r *Resolver) Executed(ev *event.Event) {
	r.commAt(ev.PID, ev.Args[0], ev.Args[1])
	r.early[ev.PID] = true // named again, and again at its first call
	r.process(ev.PID)
}

// viaRuntime reports whether driver launch ev was made by the CUDA runtime
// (the program called cudaLaunchKernel, ...): its return address lies in
// the process's runtime library (or an executable the runtime is linked
// into), or right after the program's call to a runtime function that
// tail-called the driver.
func (r *Resolver) viaRuntime(ev *event.Event) bool {
	k := model.NameKey{PID: ev.PID, Key: ev.Caller}
	if v, ok := r.callers[k]; ok {
		return v
	}
	p := r.look.Process(ev.PID)
	if p == nil {
		// Not judged: the process is not (yet) one the targets know.
		// Asked again at its next launch (a map lookup, no /proc read).
		return false
	}
	m, known := p.MappingAt(ev.Caller)
	if !known {
		// Not judged: a caller in no mapping read (each try re-reads
		// /proc/PID/maps); asked again at its next launches, a few times.
		if n := r.unsure[k] + 1; n < maxUnsure {
			if len(r.unsure) >= maxComms {
				clear(r.unsure)
			}
			r.unsure[k] = n
			return false
		}
		delete(r.unsure, k)
		r.remember(k, false)
		return false
	}
	inRuntime := func(m objfile.Mapping) bool { return r.look.IsRuntimeFile(ev.PID, m.Dev, m.Inode, m.Path) }
	v := inRuntime(m)
	if !v {
		// The runtime may have tail-called the driver: then the
		// program called a runtime function right before ev.Caller.
		if target, ok := callTarget(int(ev.PID), ev.Caller); ok {
			if tm, ok := p.MappingAt(target); ok {
				v = inRuntime(tm)
			}
		}
	}
	r.remember(k, v)
	return v
}

// maxUnsure bounds the tries at judging one launch caller.
const maxUnsure = 4

// remember keeps whether the launch caller k is the runtime's (bounded).
func (r *Resolver) remember(k model.NameKey, v bool) {
	if len(r.callers) >= maxComms {
		clear(r.callers)
	}
	r.callers[k] = v
}

// Comm remembers the process name a library-load record carries (in its
// first two argument words) until the process is named.
func (r *Resolver) Comm(ev *event.Event) {
	if r.procs[ev.PID] {
		return
	}
	r.commAt(ev.PID, ev.Args[0], ev.Args[1])
}

// commAt remembers the comm held in two argument words for pid.
func (r *Resolver) commAt(pid uint32, a, b uint64) {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:], a)
	binary.LittleEndian.PutUint64(buf[8:], b)
	name, _, _ := bytes.Cut(buf[:], []byte{0})
	if len(name) == 0 {
		return
	}
	if len(r.comms) >= maxComms {
		clear(r.comms)
	}
	r.comms[pid] = string(name)
}

// Resolve finishes ev while its process lives and names what it refers
// to, before the model handles it: a driver launch the CUDA runtime made
// is marked so (FlagViaRuntime), its stack completed (prepareStack), and
// each of its keys named.
func (r *Resolver) Resolve(ev *event.Event) {
	if ev.Caller != 0 && r.viaRuntime(ev) {
		ev.Flags |= event.FlagViaRuntime
	}
	if ev.NStack > 0 || len(ev.Copy) > 0 {
		r.prepareStack(ev)
	}
	if ev.Spec() != nil {
		r.name(ev)
	}
}

// name names what ev refers to.
func (r *Resolver) name(ev *event.Event) {
	r.process(ev.PID)
	if k := (model.NameKey{PID: ev.PID, Key: uint64(ev.TID)}); !hasKey(r.names.Threads, k) {
		r.thread(k)
	}
	if spec := ev.Spec(); spec.Class == event.ClassLaunch || spec.Class == event.ClassGraph {
		// A runtime launch names its host stub; a driver launch made by a
		// runtime launch carries that stub (see model.Process.KernelSymbol).
		// A driver launch made without a stub hand-over is named by its
		// function argument: a CUfunction from a kernel load (named by
		// that call, this finds no file), or with CUDA 13's runtime the
		// host stub itself. So is a kernel node added to a graph, or set
		// in an exec (Func 0 for other graph calls).
		addr := ev.Named().Func
		if spec.Class == event.ClassLaunch && spec.Layer == event.Driver && ev.Out != 0 {
			addr = ev.Out
		}
		if addr != 0 {
			if k := (model.NameKey{PID: ev.PID, Key: addr}); !hasKey(r.names.Kernels, k) {
				r.kernel(k)
			}
		}
	}
	for i, pc := range ev.Stack[:ev.NStack] {
		if k := (model.NameKey{PID: ev.PID, Key: pc}); !hasKey(r.names.Frames, k) {
			r.frame(k, i > 0 || ev.HasReturn())
		}
	}
	for _, py := range ev.Py[:ev.NPy] {
		// Named by site: the same line entered from C or not is one name.
		k := model.PyNameKey{PID: ev.PID, PyKey: model.PyKey{Code: py[0], Instr: py[1]}.Site()}
		if r.names.Py[k] != "" {
			continue
		}
		f, failed := r.pyFailed[k]
		f.seen++
		if !failed || f.resolved != r.pyResolved[k.PID] || f.seen&(f.seen-1) == 0 {
			if r.pyFrame(k) {
				delete(r.pyFailed, k)
				continue
			}
			f.resolved = r.pyResolved[k.PID]
		}
		r.pyFailed[k] = f
	}
}

// ProcessEarly names pid before its first call; its first call names it
// again.
func (r *Resolver) ProcessEarly(pid uint32) {
	if r.procs[pid] {
		return
	}
	r.process(pid)
	if len(r.early) < maxComms {
		r.early[pid] = true
	}
}

func hasKey(m map[model.NameKey]string, k model.NameKey) bool {
	_, ok := m[k]
	return ok
}

// process names pid the first time it is seen: from /proc, with the CUDA
// libraries hooked in it.
func (r *Resolver) process(pid uint32) {
	if r.procs[pid] && !r.early[pid] {
		return
	}
	again := r.procs[pid]
	delete(r.early, pid)
	r.procs[pid] = true
	info := readProcessInfo(pid)
	if info.Comm == "" {
		info.Comm = r.comms[pid] // gone already: the name it loaded libraries under
	}
	info.Parent = r.look.Parent(pid)
	if again {
		old := r.names.Procs[pid]
		if info.Comm == "" || (info.Comm == old.Comm && info.Cmdline == old.Cmdline) {
			return
		}
	}
	delete(r.comms, pid)
	info.Libraries = r.look.Libraries(pid)
	r.names.Procs[pid] = info
	r.out.Process(pid, info)
}

func (r *Resolver) thread(k model.NameKey) {
	name := readThreadName(k.PID, uint32(k.Key))
	r.names.Threads[k] = name
	r.out.Thread(k.PID, uint32(k.Key), name)
}

func (r *Resolver) kernel(k model.NameKey) {
	f := r.symbolizeAddr(k.PID, k.Key)
	name := f.Raw
	if name == "" {
		name = r.decodedKernel(k)
	}
	if name == "" {
		r.log.Debug("kernel not named (yet)", "pid", k.PID, "addr", fmt.Sprintf("%#x", k.Key), "object", f.Object)
	}
	r.names.Kernels[k] = name
	r.out.Kernel(k.PID, k.Key, name)
}

// frame names stack address k.Key, and records the mapping it lies in. A
// return address (every frame but the first of a stack taken at a probed
// function's entry) lies after its call: the call, which may be the last
// instruction of its function, is at the address before.
func (r *Resolver) frame(k model.NameKey, ret bool) {
	addr := k.Key
	if ret && addr > 0 {
		addr--
	}
	f := r.symbolizeAddr(k.PID, addr)
	name := ""
	if f.Raw != "" {
		name = f.Function
		if f.Object != "" {
			name += " (" + filepath.Base(f.Object) + ")"
		}
	}
	r.names.Frames[k] = name
	r.out.Frame(k.PID, k.Key, name)
	if f.Object != "" {
		r.mapping(k.PID, addr)
	}
}

// mapping records the mapping that holds addr in pid, the first time a
// frame lies in it: its file as the process sees it, the file's build ID,
// its range and file offset. Anonymous memory (JIT code) has none.
func (r *Resolver) mapping(pid uint32, addr uint64) {
	p := r.look.Process(pid)
	if p == nil {
		return
	}
	m, ok := p.MappingAt(addr)
	if !ok || m.Path == "" {
		return
	}
	k := model.NameKey{PID: pid, Key: m.Start}
	if old, ok := r.names.Mappings[k]; ok && old.Limit == m.End && old.Offset == m.Offset && old.File == m.Path {
		return
	}
	if r.nmaps[pid] >= maxMappings {
		return
	}
	r.nmaps[pid]++
	mp := model.Mapping{File: m.Path, Start: m.Start, Limit: m.End, Offset: m.Offset}
	if m.IsFile() {
		if f, err := p.File(m); err == nil {
			mp.BuildID = f.BuildID()
		}
	}
	r.names.Mappings[k] = mp
	r.out.Mapping(pid, mp)
}

// PyCode takes the copy the BPF side made of a Python code object: it
// follows the first stack record of the process that refers to it. Frames
// of it that the live process could not name (the code object or the
// process was gone already) are named from the copy now; if the copy shows
// that another code object had lived at that address before, the names
// given to frames of the old one are given anew.
func (r *Resolver) PyCode(raw []byte) {
	c, err := event.DecodePyCode(raw)
	if err != nil {
		r.log.Debug("python code copy", "err", err)
		return
	}
	in := r.interpreter(c.PID)
	if in == nil {
		return
	}
	replaced, err := in.AddCopy(c.Code, c.Head, c.Addr, c.Data)
	if err != nil {
		r.log.Debug("python code copy", "pid", c.PID, "code", c.Code, "err", err)
		return
	}
	for k := range r.pyFailed {
		if k.PID == c.PID && k.Code == c.Code && r.pyFrame(k) {
			delete(r.pyFailed, k)
		}
	}
	if replaced {
		for k := range r.names.Py {
			if k.PID == c.PID && k.Code == c.Code {
				r.pyFrame(k)
			}
		}
	}
}

func (r *Resolver) interpreter(pid uint32) *python.Interpreter {
	return r.look.Python(pid, false)
}

// pyFrame names a Python frame from the live interpreter, or from the copy
// of its code object; false when it could not (yet).
func (r *Resolver) pyFrame(k model.PyNameKey) bool {
	in := r.look.Python(k.PID, false)
	if in == nil {
		return false
	}
	f, err := in.Frame(k.Code, k.Instr)
	if err != nil && !in.Started() && r.pyResolved[k.PID] == 0 {
		// Found before it ran and nothing resolved yet: look again now
		// that it runs.
		f, err = r.look.Python(k.PID, true).Frame(k.Code, k.Instr)
	}
	if err != nil {
		r.log.Debug("python frame", "pid", k.PID, "err", err)
		return false
	}
	r.pyResolved[k.PID]++
	name := f.String()
	r.names.Py[k] = name
	r.out.PyFrame(k.PID, k.Code, k.Instr, name)
	return true
}

// Forget drops what the resolver and the name tables hold of the processes
// in pids (retired: see cut.go).
func (r *Resolver) Forget(pids map[uint32]bool) {
	n := r.names
	for pid := range pids {
		delete(n.Procs, pid)
		delete(r.procs, pid)
		delete(r.early, pid)
		delete(r.pyResolved, pid)
		delete(r.comms, pid)
		delete(r.nmaps, pid)
		delete(r.kernels.handles, pid)
	}
	maps.DeleteFunc(n.Threads, func(k model.NameKey, _ string) bool { return pids[k.PID] })
	maps.DeleteFunc(n.Kernels, func(k model.NameKey, _ string) bool { return pids[k.PID] })
	maps.DeleteFunc(n.Frames, func(k model.NameKey, _ string) bool { return pids[k.PID] })
	maps.DeleteFunc(n.Mappings, func(k model.NameKey, _ model.Mapping) bool { return pids[k.PID] })
	maps.DeleteFunc(n.Py, func(k model.PyNameKey, _ string) bool { return pids[k.PID] })
	maps.DeleteFunc(r.pyFailed, func(k model.PyNameKey, _ pyRetry) bool { return pids[k.PID] })
	maps.DeleteFunc(r.callers, func(k model.NameKey, _ bool) bool { return pids[k.PID] })
	maps.DeleteFunc(r.unsure, func(k model.NameKey, _ uint8) bool { return pids[k.PID] })
}
