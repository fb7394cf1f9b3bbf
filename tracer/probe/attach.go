package probe

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/tracer/event"
)

// Attachment is the set of probes on one library of one process.
type Attachment struct {
	PID     int
	Library Library
	Hooked  []string    // exact symbols with a probe
	Missing []string    // symbols this build of the library does not have (older CUDA)
	links   []link.Link // entry links first, then return links (Close relies on it)
}

// Close removes the probes, return probes first: closing a link takes the
// kernel milliseconds (one per symbol on the per-symbol path), and a call
// entered after its entry probe was gone but while its return probe still
// stood would come back as a return without its entry. Return probes go
// first, so a call in that window is simply not seen.
func (a *Attachment) Close() error {
	var errs []error
	for i := len(a.links) - 1; i >= 0; i-- {
		errs = append(errs, a.links[i].Close())
	}
	a.links = nil
	return errors.Join(errs...)
}

type probeSet struct {
	addrs, cookies []uint64
	names          []string
}

func (p *probeSet) add(off, cookie uint64, name string) {
	for _, a := range p.addrs {
		if a == off {
			return // an alias of a symbol already hooked: one probe, one event
		}
	}
	p.addrs = append(p.addrs, off)
	p.cookies = append(p.cookies, cookie)
	p.names = append(p.names, name)
}

// symbolOffset is the file offset of sym in lib, where a uprobe goes: an
// exported symbol, or for a statically linked runtime a .symtab one.
func (lib *Library) symbolOffset(sym string) (uint64, bool) {
	s, ok := lib.file.LookupDynamic(sym)
	if !ok && lib.Static {
		s, ok = lib.file.Lookup(sym)
	}
	if !ok {
		return 0, false
	}
	return lib.file.FileOffset(s.Value)
}

// Attach puts entry (and where needed return) probes on the APIs of lib
// that want selects (all when nil), scoped to pid. A symbol the library
// lacks is listed in Missing, not an error. On failure nothing stays attached.
func (t *Tracer) Attach(pid int, lib *Library, want func(*event.Spec) bool) (*Attachment, error) {
	return t.attach(pid, lib, want, nil)
}

// Filter says which processes a shared probe's hits count for.
type Filter uint8

const (
	AllProcesses    Filter = iota
	CgroupProcesses        // those in a cgroup given to AllowCgroup (--container)
	TreeProcesses          // those of the followed tree (AddToTree, and what they start)
)

func (f Filter) cookie() uint64 {
	switch f {
	case CgroupProcesses:
		return event.CookieCgroup
	case TreeProcesses:
		return event.CookieTree
	}
	return 0
}

// AttachShared puts probes on lib for every process that maps the file
// (one link set per file, not per process): the APIs want selects, each
// with the extra cookie bits of bits (event.CookieShadowed, ...), which
// the BPF side applies per process, for the processes filter selects.
func (t *Tracer) AttachShared(lib *Library, want func(*event.Spec) bool, bits func(*event.Spec) uint64, filter Filter) (*Attachment, error) {
	return t.attach(0, lib, want, func(s *event.Spec) uint64 {
		return uint64(event.CookieShared) | bits(s) | filter.cookie()
	})
}

func (t *Tracer) attach(pid int, lib *Library, want func(*event.Spec) bool, bits func(*event.Spec) uint64) (*Attachment, error) {
	a := &Attachment{PID: pid, Library: *lib}
	var entry, ret probeSet
	for _, spec := range event.Specs(lib.Layer) {
		if want != nil && !want(spec) {
			continue
		}
		for i, sym := range spec.Symbols {
			off, ok := lib.symbolOffset(sym)
			if !ok {
				a.Missing = append(a.Missing, sym)
				continue
			}
			cookie := spec.Cookie(i) | t.kernelArgs(spec)
			if bits != nil {
				cookie |= bits(spec)
			}
			// A call whose record carries a string (a kernel name, an NVTX
			// message) takes no stack: both would go into its copy[].
			stacks := t.cfg.Stacks == StacksAll || (t.cfg.Stacks == StacksSync && spec.Return)
			if stacks && spec.Class != event.ClassFuncName && spec.Class != event.ClassAnnotation {
				cookie |= event.CookieStack
			} else if t.cfg.Stacks != StacksNone && spec.Enqueues() {
				cookie |= event.CookieCaptureStack // a graph node's capture site
			}
			entry.add(off, cookie, sym)
			if spec.Return || cookie&event.CookieAggregateTime != 0 {
				ret.add(off, cookie, sym)
			}
		}
	}
	if len(entry.addrs) == 0 {
		return nil, fmt.Errorf("%s exports none of the hooked %s symbols", lib.Path, lib.Layer)
	}
	if err := t.attachSet(a, lib.OpenPath, pid, &entry, t.progs.entry, false); err != nil {
		a.Close()
		return nil, err
	}
	if len(ret.addrs) > 0 {
		if err := t.attachSet(a, lib.OpenPath, pid, &ret, t.progs.ret, true); err != nil {
			a.Close()
			return nil, err
		}
	}
	a.Hooked = entry.names
	return a, nil
}

// kernelArgs is the cookie bits that make a launch probe copy the
// kernel's parameter values, when the config asks for them.
func (t *Tracer) kernelArgs(spec *event.Spec) uint64 {
	if !t.cfg.KernelArgs {
		return 0
	}
	return spec.KernelArgsCookie()
}

// AttachRuntimeLaunches hooks the runtime's launch symbols of lib. Each
// probe hands its kernel stub to the driver launch it makes underneath (so
// that CUfunctions created before cudatap attached get names) and emits the
// launch itself only while the process's driver launches are not hooked
// (libcudart loads libcuda lazily). Close it once the driver is hooked and
// the names are learned: it costs a second trap per launch.
func (t *Tracer) AttachRuntimeLaunches(pid int, lib *Library) (*Attachment, error) {
	a := &Attachment{PID: pid, Library: *lib}
	var set probeSet
	for _, spec := range event.Specs(event.Runtime) {
		if spec.Class != event.ClassLaunch {
			continue
		}
		for i, sym := range spec.Symbols {
			off, ok := lib.symbolOffset(sym)
			if !ok {
				a.Missing = append(a.Missing, sym)
				continue
			}
			cookie := spec.PairCookie(i) | t.kernelArgs(spec)
			if t.cfg.Stacks == StacksAll {
				cookie |= event.CookieStack
			}
			set.add(off, cookie, sym)
		}
	}
	if len(set.addrs) == 0 {
		return nil, fmt.Errorf("%s exports no launch symbol", lib.Path)
	}
	if err := t.attachSet(a, lib.OpenPath, pid, &set, t.progs.entry, false); err != nil {
		a.Close()
		return nil, err
	}
	a.Hooked = set.names
	return a, nil
}

// AttachLoader hooks the dynamic linker's _dl_debug_state so that libraries
// loaded later (dlopen, lazy CUDA init) are found at once: in pid, or with
// pid 0 in every process using the file that filter selects. With stop,
// the process stops at each load until it is continued (SIGCONT).
func (t *Tracer) AttachLoader(pid int, ldso *Library, stop bool, filter Filter) (*Attachment, error) {
	off, ok := ldso.symbolOffset("_dl_debug_state")
	if !ok {
		return nil, fmt.Errorf("%s exports no _dl_debug_state: library loads are found by the /proc sweep only", ldso.Path)
	}
	cookie := uint64(event.LibraryLoad) | filter.cookie()
	if stop {
		cookie |= event.CookieStop
	}
	a := &Attachment{PID: pid, Library: *ldso}
	set := probeSet{addrs: []uint64{off}, cookies: []uint64{cookie}, names: []string{"_dl_debug_state"}}
	if err := t.attachSet(a, ldso.OpenPath, pid, &set, t.progs.ldso, false); err != nil {
		return nil, err
	}
	a.Hooked = set.names
	return a, nil
}

// AttachCUPTIWatch watches pid's libcupti (openPath: how cudatap opens
// it, path: how pid names it) while cudatap's collector holds CUPTI there:
// a thread entering cuptiSubscribe or cuptiActivityRegisterCallbacks (a
// profiler starting) stops the process right there, reported as
// event.CUPTIClient, until it is continued; a return from cuptiFinalize
// is reported as event.CUPTIReleased. It uses the library-load program,
// which does nothing else. On failure nothing stays attached.
func (t *Tracer) AttachCUPTIWatch(pid int, openPath, path string, cache *objfile.Cache) (*Attachment, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(openPath, &st); err != nil {
		return nil, err
	}
	f, err := cache.Open(openPath)
	if err != nil {
		return nil, err
	}
	lib := &Library{Path: path, OpenPath: openPath, Dev: fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev)),
		Inode: st.Ino, file: f}
	a := &Attachment{PID: pid, Library: *lib}
	var enter, exit probeSet
	for _, sym := range []string{"cuptiSubscribe", "cuptiActivityRegisterCallbacks"} {
		if off, ok := lib.symbolOffset(sym); ok {
			enter.add(off, uint64(event.CUPTIClient)|event.CookieStop, sym)
		}
	}
	if off, ok := lib.symbolOffset("cuptiFinalize"); ok {
		exit.add(off, uint64(event.CUPTIReleased), "cuptiFinalize")
	}
	if len(enter.addrs) < 2 || len(exit.addrs) == 0 {
		return nil, fmt.Errorf("%s lacks cuptiSubscribe, cuptiActivityRegisterCallbacks or cuptiFinalize", path)
	}
	if err := t.attachSet(a, openPath, pid, &enter, t.progs.ldso, false); err != nil {
		return nil, err
	}
	if err := t.attachSet(a, openPath, pid, &exit, t.progs.ldso, true); err != nil {
		a.Close()
		return nil, err
	}
	a.Hooked = append(enter.names, exit.names...)
	return a, nil
}

func (t *Tracer) attachSet(a *Attachment, path string, pid int, set *probeSet, prog *ebpf.Program, ret bool) error {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		if errors.Is(err, syscall.ESRCH) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("open %s in process %d: %w (the process exited)", a.Library.Path, pid, ErrNoProcess)
		}
		return fmt.Errorf("open %s: %w", a.Library.Path, err)
	}
	if t.multi {
		opts := &link.UprobeMultiOptions{Addresses: set.addrs, Cookies: set.cookies, PID: uint32(pid)}
		var l link.Link
		if ret {
			l, err = ex.UretprobeMulti(nil, prog, opts)
		} else {
			l, err = ex.UprobeMulti(nil, prog, opts)
		}
		if err != nil {
			return attachError(pid, a.Library.Path, err)
		}
		a.links = append(a.links, l)
		return nil
	}
	for i, addr := range set.addrs {
		opts := &link.UprobeOptions{Address: addr, PID: pid, Cookie: set.cookies[i]}
		var l link.Link
		if ret {
			l, err = ex.Uretprobe("", prog, opts)
		} else {
			l, err = ex.Uprobe("", prog, opts)
		}
		if err != nil {
			return attachError(pid, fmt.Sprintf("%s:%s", a.Library.Path, set.names[i]), err)
		}
		a.links = append(a.links, l)
	}
	return nil
}

func attachError(pid int, what string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("attach uprobes to %s in process %d: %w (the process exited)", what, pid, ErrNoProcess)
	}
	return fmt.Errorf("attach uprobes to %s in process %d: %w", what, pid, err)
}
