package pprofout

import (
	"cmp"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/tracer/model"
)

// Module is an object file mapped into a traced process, as the tracer saw
// it while the process lived.
type Module struct {
	PID     uint32
	File    string // path as the process sees it
	BuildID string // hex GNU build ID, "" when the file has none
	// The mapping of its code: [Start, Limit) maps the file from Offset.
	Start, Limit, Offset uint64
}

// splitFrame takes a resolved native frame name, "function (object)",
// apart; ok is false for a name without an object (an unresolved frame).
func splitFrame(s string) (fn, object string, ok bool) {
	if !strings.HasSuffix(s, ")") {
		return "", "", false
	}
	i := strings.LastIndex(s, " (")
	if i <= 0 || i+2 >= len(s)-1 {
		return "", "", false
	}
	return s[:i], s[i+2 : len(s)-1], true
}

// libRx is pprof's own test for a shared library (profile.massageMappings):
// the first mapping that fails it is taken for the main binary.
var libRx = regexp.MustCompile(`([.]so$|[.]so[._][0-9]+)`)

func isExecutable(file string) bool {
	base := path.Base(file)
	return file != "" && !libRx.MatchString(file) && !strings.HasPrefix(base, "[")
}

// frameAddress is the address pprof expects for frame i of a captured
// stack. A stack taken at a probed function's entry starts where the probe
// stopped the thread; every other frame, and the first of a stack taken at
// the return, is a return address, which lies after its call instruction
// (for a call that ends a function, in the next function): minus one it
// lies inside the call, as Go's runtime/pprof writes callers.
func frameAddress(addr uint64, i int, atReturn bool) uint64 {
	if i == 0 && !atReturn || addr == 0 {
		return addr
	}
	return addr - 1
}

const pageSize = 0x1000

// module is one pprof mapping being built: a Module the caller knew, or
// one inferred from the frames that name its object.
type module struct {
	pid     uint32
	file    string
	buildID string
	exact   bool
	// Inferred: the lowest and highest frame address seen.
	lo, hi uint64
	start  uint64
	limit  uint64
	offset uint64
	named  bool // some frame in it has a function name
	order  int  // first seen
	m      *profile.Mapping
}

// modules finds the module of each native frame and makes the mappings.
type modules struct {
	exact    map[uint32][]*module // Options.Modules by process, by Start
	inferred map[modKey]*module
	byPID    map[uint32][]*module // inferred, by start, once built
	all      []*module
	// Files the recording names in full: the CUDA libraries hooked in each
	// process, and its command's absolute argv[0], by basename.
	paths map[modKey]string
}

type modKey struct {
	pid    uint32
	object string
}

func newModules(opts []Module, procs map[uint32]*model.Process) *modules {
	ms := &modules{exact: map[uint32][]*module{}, inferred: map[modKey]*module{}, byPID: map[uint32][]*module{},
		paths: map[modKey]string{}}
	for _, m := range opts {
		if m.Limit <= m.Start {
			continue
		}
		ms.exact[m.PID] = append(ms.exact[m.PID], &module{pid: m.PID, file: m.File,
			buildID: m.BuildID, exact: true, start: m.Start, limit: m.Limit, offset: m.Offset, order: -1})
	}
	for _, l := range ms.exact {
		slices.SortStableFunc(l, func(a, b *module) int { return cmp.Compare(a.start, b.start) })
	}
	for pid, p := range procs {
		for _, lib := range p.Info.Libraries {
			ms.paths[modKey{pid, path.Base(lib)}] = lib
		}
		if arg0, _, _ := strings.Cut(p.Info.Cmdline, " "); strings.HasPrefix(arg0, "/") {
			ms.paths[modKey{pid, path.Base(arg0)}] = arg0
		}
	}
	return ms
}

// exactAt is the Module the caller gave that holds addr in pid, or nil.
func (ms *modules) exactAt(pid uint32, addr uint64) *module {
	l := ms.exact[pid]
	i, _ := slices.BinarySearchFunc(l, addr, func(m *module, a uint64) int {
		if m.start <= a {
			return -1
		}
		return 1
	})
	if i > 0 && addr < l[i-1].limit {
		return l[i-1]
	}
	return nil
}

// see notes a native frame of pid at address addr (as pprof will have it)
// named name: it extends the inferred range of the object it names.
func (ms *modules) see(pid uint32, raw, addr uint64, name string) {
	if m := ms.exactAt(pid, raw); m != nil {
		if _, _, ok := splitFrame(name); ok {
			m.named = true
		}
		ms.first(m)
		return
	}
	_, object, ok := splitFrame(name)
	if !ok {
		return
	}
	k := modKey{pid, object}
	m := ms.inferred[k]
	if m == nil {
		m = &module{pid: pid, file: object, lo: addr, hi: addr, named: true, order: -1}
		if p := ms.paths[k]; p != "" {
			m.file = p
		}
		ms.inferred[k] = m
	}
	m.lo, m.hi = min(m.lo, addr), max(m.hi, addr)
	ms.first(m)
}

func (ms *modules) first(m *module) {
	if m.order < 0 {
		m.order = len(ms.all)
		ms.all = append(ms.all, m)
	}
}

// build makes the pprof mappings, executables first (pprof takes the first
// mapping for the main binary), then in the order the frames came.
func (ms *modules) build(p *profile.Profile) {
	for _, m := range ms.all {
		if !m.exact {
			// The pages the frames span: within the object's mapping, as
			// real mappings are page aligned.
			m.start, m.limit = m.lo&^(pageSize-1), (m.hi+pageSize)&^(pageSize-1)
			ms.byPID[m.pid] = append(ms.byPID[m.pid], m)
		}
	}
	for _, l := range ms.byPID {
		slices.SortFunc(l, func(a, b *module) int { return cmp.Compare(a.start, b.start) })
	}
	order := slices.Clone(ms.all)
	slices.SortStableFunc(order, func(a, b *module) int {
		ea, eb := isExecutable(a.file), isExecutable(b.file)
		switch {
		case ea && !eb:
			return -1
		case eb && !ea:
			return 1
		}
		return 0
	})
	for _, m := range order {
		m.m = &profile.Mapping{ID: uint64(len(p.Mapping) + 1), Start: m.start, Limit: m.limit, Offset: m.offset,
			File: m.file, BuildID: m.buildID, HasFunctions: m.named}
		p.Mapping = append(p.Mapping, m.m)
	}
}

// at is the module of a native frame of pid: the exact one holding it, the
// one its name gives, else the inferred one whose range holds it (a
// function without a symbol in a library whose other frames are named);
// nil when unknown.
func (ms *modules) at(pid uint32, raw, addr uint64, name string) *module {
	if m := ms.exactAt(pid, raw); m != nil {
		return m
	}
	if _, object, ok := splitFrame(name); ok {
		return ms.inferred[modKey{pid, object}]
	}
	for _, m := range ms.byPID[pid] {
		if m.start <= addr && addr < m.limit {
			return m
		}
	}
	return nil
}

// inferredOnly reports whether every mapping was inferred from frame names.
func (ms *modules) inferredOnly() bool {
	for _, m := range ms.all {
		if m.exact {
			return false
		}
	}
	return len(ms.all) > 0
}
