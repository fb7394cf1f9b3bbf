package objfile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Symbol is one ELF symbol.
type Symbol struct {
	Name    string // without any "@VER"/"@@VER" suffix
	Value   uint64 // ELF virtual address (st_value)
	Size    uint64 // st_size; may be 0
	Dynamic bool   // from .dynsym (exported / imported by the dynamic linker)
	Version string // symbol version, e.g. "libcudart.so.13"; "" if unversioned
	Global  bool   // externally visible binding: STB_GLOBAL or STB_WEAK
	Func    bool   // STT_FUNC or STT_GNU_IFUNC (else STT_OBJECT)
}

// statKey identifies file contents by where the file lives and when it
// last changed.
type statKey struct {
	dev, inode  uint64
	size, mtime int64
}

// segment is a PT_LOAD program header.
type segment struct {
	off, vaddr, filesz, memsz uint64
	exec                      bool // PF_X
}

// section is the part of a section header we need after Open.
type section struct {
	typ       elf.SectionType
	off, size uint64
	addr      uint64
	link      uint32
}

// File is one ELF object. Headers are parsed by Open; symbol tables are
// read and indexed lazily on the first lookup, and a symbol's name is read
// from the file when an address is named. A File is safe for concurrent
// use.
type File struct {
	path      string
	key       statKey
	typ       elf.Type
	class     elf.Class
	order     binary.ByteOrder
	buildID   string
	loads     []segment
	sections  []section
	symtab    int // section index of .symtab, -1 if none
	dynsym    int // section index of .dynsym, -1 if none
	versym    int // section index of .gnu.version, -1 if none
	verdef    int // section index of .gnu.version_d, -1 if none
	hasSymtab bool

	mu     sync.Mutex // guards fd, reopen, err, index construction and reads
	fd     *os.File   // nil once released; reopened if needed
	reopen string     // path to reopen the file by
	err    error      // why the last index build failed
	dyn    atomic.Pointer[symIndex]
	full   atomic.Pointer[symIndex]
}

// Open opens the ELF file at path and parses its headers. Paths of the
// form /proc/PID/root/... are resolved inside the target's root.
func Open(path string) (*File, error) {
	fd, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	fi, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, err
	}
	f, err := newFile(fd, path, statKeyOf(fi))
	if err != nil {
		fd.Close()
		return nil, err
	}
	return f, nil
}

// newFile parses the headers of the ELF file open as fd. On success, the
// File owns fd.
func newFile(fd *os.File, path string, key statKey) (f *File, err error) {
	defer func() {
		// debug/elf is robust against malformed input, but a tracer
		// must never crash on a weird file in some container.
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("%s: malformed ELF: %v", path, r)
		}
	}()
	ef, err := elf.NewFile(fd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f = &File{
		path: path, key: key, fd: fd, reopen: path,
		typ: ef.Type, class: ef.Class, order: ef.ByteOrder,
		symtab: -1, dynsym: -1, versym: -1, verdef: -1,
	}
	if f.class != elf.ELFCLASS32 && f.class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("%s: unsupported ELF class %v", path, f.class)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			f.loads = append(f.loads, segment{off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz, memsz: p.Memsz, exec: p.Flags&elf.PF_X != 0})
		}
	}
	f.sections = make([]section, len(ef.Sections))
	for i, s := range ef.Sections {
		f.sections[i] = section{typ: s.Type, off: s.Offset, size: s.FileSize, addr: s.Addr, link: s.Link}
		switch s.Type {
		case elf.SHT_SYMTAB:
			f.symtab, f.hasSymtab = i, true
		case elf.SHT_DYNSYM:
			f.dynsym = i
		case elf.SHT_GNU_VERSYM:
			f.versym = i
		case elf.SHT_GNU_VERDEF:
			f.verdef = i
		}
	}
	f.buildID = readBuildID(ef)
	return f, nil
}

// readBuildID returns the hex GNU build-id from the note sections, or from
// the PT_NOTE segments if the section headers are gone.
func readBuildID(ef *elf.File) string {
	const maxNote = 1 << 16
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > maxNote {
			continue
		}
		if data, err := s.Data(); err == nil {
			if id := parseBuildIDNote(data, ef.ByteOrder); id != "" {
				return id
			}
		}
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNote {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := io.ReadFull(p.Open(), data); err == nil {
			if id := parseBuildIDNote(data, ef.ByteOrder); id != "" {
				return id
			}
		}
	}
	return ""
}

// parseBuildIDNote scans a sequence of ELF notes for NT_GNU_BUILD_ID.
func parseBuildIDNote(data []byte, order binary.ByteOrder) string {
	const ntGNUBuildID = 3
	align4 := func(n uint64) uint64 { return (n + 3) &^ 3 }
	for len(data) >= 12 {
		namesz := uint64(order.Uint32(data[0:]))
		descsz := uint64(order.Uint32(data[4:]))
		typ := order.Uint32(data[8:])
		data = data[12:]
		if align4(namesz) > uint64(len(data)) {
			return ""
		}
		name := data[:namesz]
		data = data[align4(namesz):]
		if descsz > uint64(len(data)) {
			return ""
		}
		desc := data[:descsz]
		data = data[min(align4(descsz), uint64(len(data))):]
		if typ == ntGNUBuildID && bytes.Equal(name, []byte("GNU\x00")) && len(desc) > 0 {
			return hex.EncodeToString(desc)
		}
	}
	return ""
}

// Path returns the path the file was opened with.
func (f *File) Path() string { return f.path }

// Type returns the ELF type: ET_EXEC (non-PIE executable), ET_DYN (shared
// object or PIE), ET_REL, ...
func (f *File) Type() elf.Type { return f.typ }

// BuildID returns the hex GNU build-id, or "" if the file has none.
func (f *File) BuildID() string { return f.buildID }

// HasSymtab reports whether the file has a .symtab (is not stripped).
func (f *File) HasSymtab() bool { return f.hasSymtab }

// FileOffset converts an ELF virtual address to a file offset through the
// PT_LOAD segments. This is the offset a uprobe is attached at.
func (f *File) FileOffset(vaddr uint64) (uint64, bool) {
	for _, s := range f.loads {
		if vaddr >= s.vaddr && vaddr-s.vaddr < s.filesz {
			return s.off + (vaddr - s.vaddr), true
		}
	}
	return 0, false
}

// ExecEnds lists where each executable PT_LOAD segment ends (ELF virtual
// addresses): the rest of its last page is mapped with it, executable, and
// holds nothing the program uses.
func (f *File) ExecEnds() []uint64 {
	var ends []uint64
	for _, s := range f.loads {
		if s.exec {
			ends = append(ends, s.vaddr+s.memsz)
		}
	}
	return ends
}

// VAddr converts a file offset to an ELF virtual address: the reverse of
// [File.FileOffset].
func (f *File) VAddr(fileOffset uint64) (uint64, bool) {
	for _, s := range f.loads {
		if fileOffset >= s.off && fileOffset-s.off < s.filesz {
			return s.vaddr + (fileOffset - s.off), true
		}
	}
	return 0, false
}

// Lookup finds a defined function (or, failing that, data object) by exact
// name in .dynsym, then .symtab. name may carry a version, "name@VER" or
// "name@@VER", to pick one of several versions; without one, the default
// version wins. The first call indexes all symbol tables of the file; see
// [File.LookupDynamic] for a cheaper check of exported symbols only.
func (f *File) Lookup(name string) (Symbol, bool) {
	return f.index(true).lookup(name)
}

// LookupDynamic is [File.Lookup] restricted to .dynsym, the symbols the
// object exports. It indexes only .dynsym (unless the full index exists
// already), which makes it the cheap way to ask every library of a process
// whether it defines a symbol.
func (f *File) LookupDynamic(name string) (Symbol, bool) {
	if ix := f.full.Load(); ix != nil {
		// The full index gives .dynsym entries precedence, so a hit
		// from .symtab means there is no .dynsym definition.
		s, ok := ix.lookup(name)
		return s, ok && s.Dynamic
	}
	return f.index(false).lookup(name)
}

// SymbolFileOffset looks name up with [File.Lookup] and returns the file
// offset of its address: what a uprobe on the symbol attaches to.
func (f *File) SymbolFileOffset(name string) (uint64, error) {
	s, ok := f.Lookup(name)
	if !ok {
		return 0, fmt.Errorf("%s: symbol %q not found", f.path, name)
	}
	off, ok := f.FileOffset(s.Value)
	if !ok {
		return 0, fmt.Errorf("%s: symbol %q at %#x is not in a loadable segment", f.path, name, s.Value)
	}
	return off, nil
}

// Symbolize finds the function symbol containing the ELF virtual address
// vaddr (or, if none, the data object containing it) and returns it with
// vaddr's offset into it. Symbols of size 0 extend to the next symbol. The
// name is read from the file: if that fails, or the name is no longer the
// one indexed (the file was overwritten in place), the address is unknown.
func (f *File) Symbolize(vaddr uint64) (Symbol, uint64, bool) {
	ix := f.index(true)
	i, ok := ix.symbolize(vaddr)
	if !ok {
		return Symbol{}, 0, false
	}
	e := &ix.ents[i]
	name := make([]byte, e.nameLen)
	if err := f.readAt(name, ix.nameAt(e)); err != nil || maphash.Bytes(hashSeed, name) != e.hash {
		return Symbol{}, 0, false
	}
	return ix.symbol(i, string(name)), vaddr - e.value, true
}

// readAt reads len(b) bytes at off, reopening the file if it was released.
func (f *File) readAt(b []byte, off int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fd, err := f.handleLocked()
	if err != nil {
		return err
	}
	_, err = fd.ReadAt(b, off)
	return err
}

// Index builds the full symbol index now instead of on first use and
// reports whether reading the symbol tables failed. Lookups on a File whose
// index failed find nothing.
func (f *File) Index() error {
	f.index(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Close releases the file descriptor. Everything indexed so far stays
// usable; should a lookup need an index that was not built yet, or a
// symbol's name, the file is reopened by path (and checked to be the same
// file).
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.releaseLocked()
}

func (f *File) releaseLocked() error {
	if f.fd == nil {
		return nil
	}
	err := f.fd.Close()
	f.fd = nil
	return err
}

var errFileChanged = errors.New("file changed since it was opened")

// handleLocked returns an open descriptor of the file, reopening it if it
// was released.
func (f *File) handleLocked() (*os.File, error) {
	if f.fd != nil {
		return f.fd, nil
	}
	fd, err := OpenFile(f.reopen)
	if err != nil {
		return nil, err
	}
	fi, err := fd.Stat()
	if err == nil && statKeyOf(fi) != f.key {
		err = fmt.Errorf("%s: %w", f.reopen, errFileChanged)
	}
	if err != nil {
		fd.Close()
		return nil, err
	}
	f.fd = fd
	return fd, nil
}

// adopt hands the File a fresh descriptor of the same file, opened through
// path, if the File released its own (its first path may be gone with the
// process that mapped it). Otherwise it closes fd.
func (f *File) adopt(fd *os.File, path string, key statKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if key == f.key && f.fd == nil {
		f.fd, f.reopen = fd, path
		return
	}
	fd.Close()
}

// index returns the full index (all symbol tables) or the .dynsym-only
// index, building it on first use.
func (f *File) index(full bool) *symIndex {
	p := &f.dyn
	if full {
		p = &f.full
	}
	if ix := p.Load(); ix != nil {
		return ix
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ix := p.Load(); ix != nil {
		return ix
	}
	ix, err := f.buildLocked(full)
	if err != nil {
		f.err = err
		ix = &symIndex{}
	}
	p.Store(ix)
	if full {
		// The full index answers dynamic lookups too. The descriptor
		// stays open: names are read through it.
		f.dyn.Store(nil)
	}
	return ix
}

func (f *File) buildLocked(full bool) (*symIndex, error) {
	var tabs []int
	if f.dynsym >= 0 {
		tabs = append(tabs, f.dynsym)
	}
	if full && f.symtab >= 0 {
		tabs = append(tabs, f.symtab)
	}
	if len(tabs) == 0 {
		return &symIndex{}, nil
	}
	fd, err := f.handleLocked()
	if err != nil {
		return nil, err
	}
	ix, err := buildIndex(f, fd, tabs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.path, err)
	}
	return ix, nil
}

// readSection reads the contents of section i, refusing sizes that cannot
// be right (a corrupt header must not make us allocate gigabytes).
func (f *File) readSection(r io.ReaderAt, i int) ([]byte, error) {
	if i < 0 || i >= len(f.sections) {
		return nil, fmt.Errorf("section index %d out of range", i)
	}
	s := f.sections[i]
	if s.typ == elf.SHT_NOBITS || s.typ == elf.SHT_NULL {
		return nil, nil
	}
	if s.off > uint64(f.key.size) || s.size > uint64(f.key.size)-s.off {
		return nil, fmt.Errorf("section %d [%#x, +%#x) beyond end of file", i, s.off, s.size)
	}
	data := make([]byte, s.size)
	if _, err := r.ReadAt(data, int64(s.off)); err != nil {
		return nil, fmt.Errorf("reading section %d: %w", i, err)
	}
	return data, nil
}

// splitVersion splits "name@VER" or "name@@VER" into its parts. C++ and C
// identifiers cannot contain '@', so the first '@' starts the version.
func splitVersion(name string) (base, ver string) {
	i := strings.IndexByte(name, '@')
	if i <= 0 {
		return name, ""
	}
	return name[:i], strings.TrimLeft(name[i:], "@")
}
