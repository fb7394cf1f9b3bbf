package symbolize

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cudatap/cudatap/internal/objfile"
)

// minAutoRefresh rate-limits the maps re-reads Symbolize does on its own
// when an address lies outside every known mapping (a library dlopen'ed
// after the last Refresh).
const minAutoRefresh = 100 * time.Millisecond

// Process symbolizes addresses of one live process: a snapshot of its
// mappings (see [Process.Refresh]) and the ELF files behind them, shared
// through an [objfile.Cache]. It is safe for concurrent use.
type Process struct {
	pid   int
	cache *objfile.Cache

	mu          sync.Mutex
	maps        []objfile.Mapping // sorted by Start; replaced, never modified
	files       map[fileID]fileResult
	lastRefresh time.Time
}

type fileID struct {
	dev   string
	inode uint64
}

type fileResult struct {
	f   *objfile.File
	err error
}

// Frame is a symbolized address.
type Frame struct {
	Addr     uint64
	Function string // demangled name, or "0x<addr>" if unknown
	Raw      string // symbol name as in the ELF file (mangled); "" if unknown
	Offset   uint64 // Addr's offset into the function
	Object   string // path of the mapped file as the target sees it; "" if unknown
}

// NewProcess reads the mappings of pid. Files are opened through c, or
// through a private cache if c is nil. If the process does not exist, the
// error wraps os.ErrNotExist.
func NewProcess(pid int, c *objfile.Cache) (*Process, error) {
	if c == nil {
		c = objfile.NewCache(256)
	}
	p := &Process{pid: pid, cache: c, files: make(map[fileID]fileResult)}
	if err := p.Refresh(); err != nil {
		return nil, err
	}
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.pid }

// Refresh re-reads the process's mappings. Files still mapped stay open.
func (p *Process) Refresh() error {
	maps, err := objfile.ReadMaps(p.pid)
	if err != nil {
		return err
	}
	slices.SortFunc(maps, func(a, b objfile.Mapping) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	live := make(map[fileID]bool)
	for _, m := range maps {
		live[fileID{m.Dev, m.Inode}] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.maps = maps
	p.lastRefresh = time.Now()
	for id, r := range p.files {
		// Forget unmapped files, and failures, which may have been
		// transient.
		if !live[id] || r.err != nil {
			delete(p.files, id)
		}
	}
	return nil
}

// Mappings returns the current snapshot of the mappings, sorted by
// address. The caller must not modify it.
func (p *Process) Mappings() []objfile.Mapping {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maps
}

// Objects returns the mapped files of the process (see [objfile.ObjectFiles]).
func (p *Process) Objects() []objfile.ObjectFile { return objfile.ObjectFiles(p.Mappings()) }

// MappingAt returns the mapping containing addr, refreshing the snapshot
// once when none does (a library loaded since).
func (p *Process) MappingAt(addr uint64) (objfile.Mapping, bool) {
	if m, ok := p.mapping(addr); ok {
		return m, true
	}
	if p.Refresh() != nil {
		return objfile.Mapping{}, false
	}
	return p.mapping(addr)
}

// mapping finds the mapping containing addr.
func (p *Process) mapping(addr uint64) (objfile.Mapping, bool) {
	p.mu.Lock()
	maps := p.maps
	p.mu.Unlock()
	i, _ := slices.BinarySearchFunc(maps, addr, func(m objfile.Mapping, a uint64) int {
		if m.Start <= a {
			return -1
		}
		return 1
	})
	// maps[i-1] is the last mapping starting at or below addr.
	if i > 0 && maps[i-1].Contains(addr) {
		return maps[i-1], true
	}
	return objfile.Mapping{}, false
}

// File returns the ELF file behind mapping m of the process.
func (p *Process) File(m objfile.Mapping) (*objfile.File, error) {
	if !m.IsFile() {
		return nil, fmt.Errorf("mapping %#x-%#x is not file-backed", m.Start, m.End)
	}
	id := fileID{m.Dev, m.Inode}
	p.mu.Lock()
	r, ok := p.files[id]
	p.mu.Unlock()
	if ok {
		return r.f, r.err
	}
	var f *objfile.File
	path := m.OpenPath(p.pid)
	err := fmt.Errorf("%s was deleted and /proc/%d/map_files is not accessible", m.Path, p.pid)
	if !m.Deleted || strings.Contains(path, "/map_files/") {
		// (A deleted file's old path may name another file by now.)
		f, err = p.cache.Open(path)
	}
	p.mu.Lock()
	p.files[id] = fileResult{f, err}
	p.mu.Unlock()
	return f, err
}

// Symbolize names a runtime address of the process: mapping → file offset
// → ELF vaddr → symbol. If the address lies outside every known mapping,
// the mappings are re-read first (at most every 100ms). An address that
// cannot be named gets Function "0x<addr>", and Object if its mapping is
// known. For return addresses from a stack walk, pass addr-1: a call that
// ends a function returns past its end.
func (p *Process) Symbolize(addr uint64) Frame {
	fr := Frame{Addr: addr, Function: fmt.Sprintf("0x%x", addr)}
	m, ok := p.mapping(addr)
	if !ok {
		p.mu.Lock()
		stale := time.Since(p.lastRefresh) >= minAutoRefresh
		p.mu.Unlock()
		if !stale || p.Refresh() != nil {
			return fr
		}
		if m, ok = p.mapping(addr); !ok {
			return fr
		}
	}
	fr.Object = m.Path
	if !m.IsFile() {
		return fr
	}
	f, err := p.File(m)
	if err != nil {
		return fr
	}
	// For shared objects and PIEs this removes the load bias; for non-PIE
	// executables the vaddr is the address itself. Either way it goes
	// through the file offset, which needs no knowledge of the bias.
	vaddr, ok := f.VAddr(m.FileOffset(addr))
	if !ok {
		return fr
	}
	sym, off, ok := f.Symbolize(vaddr)
	if !ok {
		return fr
	}
	fr.Raw, fr.Function, fr.Offset = sym.Name, Demangle(sym.Name), off
	return fr
}

// SymbolLocation is where a process has a symbol.
type SymbolLocation struct {
	Object     objfile.ObjectFile
	OpenPath   string // path through which to open the object (for uprobes), see [objfile.Mapping.OpenPath]
	Symbol     objfile.Symbol
	FileOffset uint64 // file offset of the symbol: the uprobe offset
	Addr       uint64 // runtime address in the process; 0 if not mapped
}

// FindSymbol returns every object mapped by the process that defines name,
// in address order: discovery by symbol, whatever the library is called.
// By default only exported symbols (.dynsym) are considered, which indexes
// only the small dynamic symbol tables. With all, .symtab definitions count
// too (statically linked runtimes), at the price of fully indexing every
// mapped object that does not export the symbol.
func (p *Process) FindSymbol(name string, all bool) []SymbolLocation {
	var locs []SymbolLocation
	for _, o := range p.Objects() {
		f, err := p.File(o.Mappings[0])
		if err != nil {
			continue
		}
		sym, ok := f.LookupDynamic(name)
		if !ok && all {
			sym, ok = f.Lookup(name)
		}
		if !ok {
			continue
		}
		off, ok := f.FileOffset(sym.Value)
		if !ok {
			continue
		}
		loc := SymbolLocation{Object: o, OpenPath: o.OpenPath(p.pid), Symbol: sym, FileOffset: off}
		for _, m := range o.Mappings {
			if off >= m.Offset && off-m.Offset < m.End-m.Start {
				loc.Addr = m.Start + (off - m.Offset)
				break
			}
		}
		locs = append(locs, loc)
	}
	return locs
}
