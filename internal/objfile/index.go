package objfile

import (
	"bytes"
	"debug/elf"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"math/bits"
	"slices"
)

// symEntry is one indexed symbol. Large libraries (libtorch_cuda.so has
// ~210k symbols) are why it is small and pointer-free: an index costs a few
// allocations, not 210k, and the garbage collector never scans it. The
// name stays in the file: PyTorch's string tables are 165 MB, and a
// symbol's name is read when an address is named, once per address by the
// callers. Its hash answers lookups by name.
type symEntry struct {
	value   uint64
	hash    uint64 // of the name (without version), with hashSeed
	size    uint32 // st_size, or for fSizeless symbols the extent up to the next symbol
	nameOff uint32 // into the string tables as if concatenated, see symIndex.strs
	nameLen uint32
	ver     uint16 // into symIndex.vers; 0 means unversioned
	flags   uint8
}

const (
	fDynamic   = 1 << iota // from .dynsym
	fGlobal                // STB_GLOBAL or STB_GNU_UNIQUE
	fWeak                  // STB_WEAK
	fObject                // STT_OBJECT (else STT_FUNC or STT_GNU_IFUNC)
	fSizeless              // st_size was 0
	fHiddenVer             // a non-default version ("name@VER", not "name@@VER")
	fNoName                // the name could not be read while indexing; dropped
)

// aliasRank orders symbols at the same address: the one with the lowest
// rank names the address. Global beats weak beats local (the public name
// over an internal alias), .dynsym beats .symtab, default versions beat old
// ones, and a real size beats none.
func (e *symEntry) aliasRank() uint8 {
	var r uint8
	switch {
	case e.flags&fGlobal != 0:
	case e.flags&fWeak != 0:
		r = 1 << 3
	default:
		r = 2 << 3
	}
	if e.flags&fDynamic == 0 {
		r |= 1 << 2
	}
	if e.flags&fHiddenVer != 0 {
		r |= 1 << 1
	}
	if e.flags&fSizeless != 0 {
		r |= 1
	}
	return r
}

// lookupRank orders symbols of the same name for Lookup: functions before
// data, .dynsym before .symtab, default version before old versions, then
// by binding.
func (e *symEntry) lookupRank() uint8 {
	var r uint8
	if e.flags&fObject != 0 {
		r |= 1 << 5
	}
	if e.flags&fDynamic == 0 {
		r |= 1 << 4
	}
	if e.flags&fHiddenVer != 0 {
		r |= 1 << 3
	}
	return r | e.aliasRank()>>3
}

// symIndex is the searchable form of one or more symbol tables.
type symIndex struct {
	ents   []symEntry // functions sorted by address, then objects sorted by address
	nfunc  int        // ents[:nfunc] are functions
	strs   []strTable // where names are in the file, by nameOff
	vers   []string   // version names; vers[0] == ""
	table  []uint32   // open-addressing hash of names, see tableIdxBits
	tagged bool       // table slots carry hash tags
}

// Hash table slots hold index+1 into ents in the low tableIdxBits bits (0
// means empty) and the top 8 bits of the name's hash above them, so that
// probing rarely visits an entry whose name differs.
const (
	tableIdxBits = 24
	tableIdxMask = 1<<tableIdxBits - 1
)

// tag returns the hash tag of a slot for hash h; with more than 2^24
// symbols there are no bits to spare for it, and every probe visits its
// entry.
func (ix *symIndex) tag(h uint64) uint32 {
	if !ix.tagged {
		return 0
	}
	return uint32(h>>56) << tableIdxBits
}

// slotEntry returns the index into ents a non-empty slot refers to, and
// whether the slot's tag can match tag.
func (ix *symIndex) slotEntry(slot, tag uint32) (int, bool) {
	if !ix.tagged {
		return int(slot - 1), true
	}
	return int(slot&tableIdxMask) - 1, slot&^tableIdxMask == tag
}

// strTable places one string table in the file and in the nameOff space.
type strTable struct {
	base, size uint32 // its names' nameOff range is [base, base+size)
	off        int64  // its offset in the file
}

// hashSeed is shared by all indexes: names are hashed once at build time.
// Names are equal when their lengths and hashes are: the seed is random per
// process, so a file cannot be crafted to collide, and two names collide by
// chance with probability 2^-64.
var hashSeed = maphash.MakeSeed()

// maxNameLen bounds the names indexed: the longest C++ names seen are a few
// KiB (libLLVM's 950 bytes, librustc_driver's 1222), and a corrupt string
// table without terminators must not make us read it whole per symbol.
// Longer names are not indexed.
const maxNameLen = 1 << 20

// symtabInput is one symbol table being indexed.
type symtabInput struct {
	syms     []byte
	str      int    // section index of its string table
	strBase  uint32 // nameOff of the table's first byte
	strLen   uint32
	dynamic  bool
	versym   []byte            // .gnu.version, for .dynsym
	verSlots map[uint16]uint16 // version index in .gnu.version → slot in vers
}

// buildIndex reads the symbol tables tabs (section indices) of f through r
// and indexes their defined function and object symbols. The string tables
// are read once, in bounded pieces, in the order of the names' offsets: to
// hash each name and find its version; none is kept.
func buildIndex(f *File, r io.ReaderAt, tabs []int) (*symIndex, error) {
	ix := &symIndex{vers: []string{""}}
	in := make([]symtabInput, len(tabs))
	var total uint64
	for k, t := range tabs {
		str := int(f.sections[t].link)
		if str <= 0 || str >= len(f.sections) {
			return nil, fmt.Errorf("symbol table %d: bad string table link %d", t, str)
		}
		s := f.sections[str]
		size := s.size
		if s.typ == elf.SHT_NOBITS {
			size = 0 // no names: nothing to index
		} else if s.off > uint64(f.key.size) || size > uint64(f.key.size)-s.off {
			return nil, fmt.Errorf("string table %d [%#x, +%#x) beyond end of file", str, s.off, size)
		}
		if total+size > math.MaxUint32 {
			return nil, fmt.Errorf("string tables too large (%d bytes)", total+size)
		}
		syms, err := f.readSection(r, t)
		if err != nil {
			return nil, err
		}
		in[k] = symtabInput{syms: syms, str: str, strBase: uint32(total), strLen: uint32(size), dynamic: f.sections[t].typ == elf.SHT_DYNSYM}
		ix.strs = append(ix.strs, strTable{base: uint32(total), size: uint32(size), off: int64(s.off)})
		total += size
		if in[k].dynamic && f.versym >= 0 && f.verdef >= 0 {
			// Versions are optional: a broken version section only loses
			// the version names.
			in[k].versym, _ = f.readSection(r, f.versym)
			in[k].verSlots = ix.readVerdef(f, r, in[k])
		}
	}

	entSize := 24
	if f.class == elf.ELFCLASS32 {
		entSize = 16
	}
	// First pass: count, so that ents is allocated exactly once.
	n := 0
	for _, t := range in {
		for off := entSize; off+entSize <= len(t.syms); off += entSize {
			if s := f.parseSym(t.syms[off:]); s.keep() {
				n++
			}
		}
	}
	ix.ents = make([]symEntry, 0, n)
	for _, t := range in {
		for i, off := 1, entSize; off+entSize <= len(t.syms); i, off = i+1, off+entSize {
			s := f.parseSym(t.syms[off:])
			if !s.keep() || s.name >= t.strLen {
				continue
			}
			e := symEntry{value: s.value, nameOff: t.strBase + s.name}
			if t.dynamic {
				e.flags |= fDynamic
				if 2*i+2 <= len(t.versym) {
					v := f.order.Uint16(t.versym[2*i:])
					if v&0x8000 != 0 {
						e.flags |= fHiddenVer
					}
					if slot, ok := t.verSlots[v&0x7fff]; ok {
						e.ver = slot
					}
				}
			}
			switch s.bind {
			case elf.STB_GLOBAL, stbGNUUnique:
				e.flags |= fGlobal
			case elf.STB_WEAK:
				e.flags |= fWeak
			}
			if s.typ == elf.STT_OBJECT {
				e.flags |= fObject
			}
			if s.size == 0 {
				// Extend a sizeless symbol to the end of its section at
				// most; sortAndSize trims it to the next symbol.
				e.flags |= fSizeless
				if int(s.shndx) < len(f.sections) && s.shndx < elf.SHN_LORESERVE {
					sec := f.sections[s.shndx]
					if s.value >= sec.addr && s.value-sec.addr < sec.size {
						e.size = uint32(min(sec.addr+sec.size-s.value, math.MaxUint32))
					}
				}
			} else {
				e.size = uint32(min(s.size, math.MaxUint32))
			}
			ix.ents = append(ix.ents, e)
		}
	}
	if err := ix.readNames(f, r, in); err != nil {
		return nil, err
	}
	ix.sortAndSize()
	ix.buildTable()
	return ix, nil
}

// readNames hashes the name of every entry, splitting off "@VER" and
// "@@VER", as .symtab spells versioned symbols, and drops the entries whose
// name cannot be read. It reads each string table once, in order.
func (ix *symIndex) readNames(f *File, r io.ReaderAt, in []symtabInput) error {
	// Entries by name offset (which orders them by table too), as
	// nameOff<<32 | index: sorting integers is several times faster than
	// sorting entries.
	order := make([]uint64, len(ix.ents))
	for i := range ix.ents {
		order[i] = uint64(ix.ents[i].nameOff)<<32 | uint64(i)
	}
	slices.Sort(order)
	verByName := make(map[string]uint16)
	dropped := 0
	k := 0
	for _, t := range in {
		w := newStrWindow(r, f.sections[t.str].off, uint64(t.strLen), maxNameLen)
		for ; k < len(order) && uint32(order[k]>>32) < t.strBase+t.strLen; k++ {
			e := &ix.ents[uint32(order[k])]
			name, err := w.name(uint64(e.nameOff - t.strBase))
			if err != nil {
				return err
			}
			if name == nil {
				e.flags |= fNoName
				dropped++
				continue
			}
			if at := bytes.IndexByte(name, '@'); at > 0 && !t.dynamic {
				ver := name[at:]
				if len(ver) < 2 || ver[1] != '@' {
					e.flags |= fHiddenVer
				}
				ver = bytes.TrimLeft(ver, "@")
				slot, ok := verByName[string(ver)]
				if !ok && len(ix.vers) < math.MaxUint16 {
					slot = uint16(len(ix.vers))
					ix.vers = append(ix.vers, string(ver))
					verByName[string(ver)] = slot
				}
				e.ver = slot
				name = name[:at]
			}
			e.nameLen = uint32(len(name))
			e.hash = maphash.Bytes(hashSeed, name)
		}
	}
	if dropped > 0 {
		ix.ents = slices.DeleteFunc(ix.ents, func(e symEntry) bool { return e.flags&fNoName != 0 })
	}
	return nil
}

// strWindow reads NUL-terminated names from one string table of a file
// through a buffer of bounded size. Names asked for in increasing offsets
// read the table about once (twice at worst) and scan each byte once.
type strWindow struct {
	r      io.ReaderAt
	off    uint64 // the table's offset in the file
	size   uint64 // and its size
	maxLen uint64 // longest name read
	buf    []byte // the table's bytes [start, start+len(buf))
	start  uint64
	// [cur, scan) holds no NUL; a NUL is at scan if term (or the
	// table ends there).
	cur, scan uint64
	term      bool
}

func newStrWindow(r io.ReaderAt, off, size, maxLen uint64) *strWindow {
	return &strWindow{r: r, off: off, size: size, maxLen: maxLen}
}

// name returns the name at offset i of the table, up to its NUL or the
// table's end; nil if it is longer than maxLen or i is past the end. The
// slice is valid until the next call. An error is a failed read: the file
// shrank or cannot be read.
func (w *strWindow) name(i uint64) ([]byte, error) {
	if i >= w.size {
		return nil, nil
	}
	if i < w.cur || i > w.scan {
		w.scan, w.term = i, false // not what is known: scan afresh
	}
	w.cur = i
	for !w.term {
		if w.scan-i > w.maxLen {
			return nil, nil
		}
		end := w.start + uint64(len(w.buf))
		if i < w.start || w.scan >= end {
			// Read from the name's start, as much as the longest name
			// and as much again: each read moves on by at least maxLen.
			n := min(2*w.maxLen+1, w.size-i)
			if uint64(cap(w.buf)) < n {
				w.buf = make([]byte, n)
			}
			w.buf, w.start = w.buf[:n], i
			if _, err := w.r.ReadAt(w.buf, int64(w.off+i)); err != nil {
				w.buf = w.buf[:0]
				return nil, fmt.Errorf("reading string table at %#x: %w", w.off+i, err)
			}
			end = i + n
		}
		if z := bytes.IndexByte(w.buf[w.scan-w.start:], 0); z >= 0 {
			w.scan, w.term = w.scan+uint64(z), true
		} else {
			w.scan, w.term = end, end == w.size
		}
	}
	if w.scan-i > w.maxLen {
		return nil, nil
	}
	return w.buf[i-w.start : w.scan-w.start], nil
}

// readVerdef reads .gnu.version_d and returns, for each version index it
// defines, the slot of its name in ix.vers.
func (ix *symIndex) readVerdef(f *File, r io.ReaderAt, t symtabInput) map[uint16]uint16 {
	data, err := f.readSection(r, f.verdef)
	if err != nil {
		return nil
	}
	const maxVersionLen = 256
	strs := newStrWindow(r, f.sections[t.str].off, uint64(t.strLen), maxVersionLen)
	slots := make(map[uint16]uint16)
	// Elf{32,64}_Verdef: vd_version u16, vd_flags u16, vd_ndx u16,
	// vd_cnt u16, vd_hash u32, vd_aux u32, vd_next u32; the first
	// Elf_Verdaux (vda_name u32, vda_next u32) names the version.
	const verFlgBase = 1 // the file's own soname, not a version
	off := uint64(0)
	for range 1 << 16 { // bound the walk: vd_next may loop
		if off+20 > uint64(len(data)) {
			break
		}
		d := data[off:]
		flags, ndx := f.order.Uint16(d[2:]), f.order.Uint16(d[4:])
		aux, next := uint64(f.order.Uint32(d[12:])), uint64(f.order.Uint32(d[16:]))
		if flags&verFlgBase == 0 && off+aux+8 <= uint64(len(data)) {
			s, err := strs.name(uint64(f.order.Uint32(data[off+aux:])))
			if err != nil {
				return nil
			}
			if s != nil {
				if len(ix.vers) < math.MaxUint16 {
					slots[ndx&0x7fff] = uint16(len(ix.vers))
					ix.vers = append(ix.vers, string(s))
				}
			}
		}
		if next == 0 {
			break
		}
		off += next
	}
	return slots
}

// stbGNUUnique is STB_GNU_UNIQUE (STB_LOOS), which debug/elf does not name:
// a global binding that the dynamic linker keeps unique process-wide.
const stbGNUUnique elf.SymBind = 10

// rawSym is a decoded Elf32_Sym / Elf64_Sym.
type rawSym struct {
	name        uint32
	value, size uint64
	typ         elf.SymType
	bind        elf.SymBind
	shndx       elf.SectionIndex
}

// parseSym decodes the symbol at the start of b by hand: debug/elf's
// Symbols() allocates a string per symbol, which for 200k symbols is most
// of the cost of indexing.
func (f *File) parseSym(b []byte) rawSym {
	var s rawSym
	var info byte
	if f.class == elf.ELFCLASS64 {
		s.name = f.order.Uint32(b)
		info = b[4]
		s.shndx = elf.SectionIndex(f.order.Uint16(b[6:]))
		s.value = f.order.Uint64(b[8:])
		s.size = f.order.Uint64(b[16:])
	} else {
		s.name = f.order.Uint32(b)
		s.value = uint64(f.order.Uint32(b[4:]))
		s.size = uint64(f.order.Uint32(b[8:]))
		info = b[12]
		s.shndx = elf.SectionIndex(f.order.Uint16(b[14:]))
	}
	s.typ, s.bind = elf.ST_TYPE(info), elf.ST_BIND(info)
	return s
}

// keep reports whether s is a named function or data object defined in the
// file.
func (s rawSym) keep() bool {
	switch s.typ {
	case elf.STT_FUNC, elf.STT_GNU_IFUNC, elf.STT_OBJECT:
	default:
		return false
	}
	// Absolute symbols are not code or data in the file: among them are
	// the version-definition symbols of shared libraries ("LIBT_1.0").
	return s.name != 0 && s.shndx != elf.SHN_UNDEF && s.shndx != elf.SHN_COMMON && s.shndx != elf.SHN_ABS
}

// nameAt returns where e's name is in the file.
func (ix *symIndex) nameAt(e *symEntry) int64 {
	for _, t := range ix.strs {
		if e.nameOff-t.base < t.size {
			return t.off + int64(e.nameOff-t.base)
		}
	}
	return -1 // not reached: every entry's name is in a table
}

// sameName reports whether a and b have the same name (see hashSeed).
func sameName(a, b *symEntry) bool {
	return a.hash == b.hash && a.nameLen == b.nameLen
}

// sortAndSize sorts the entries (functions first, by address, best alias
// first), drops duplicates (a symbol in both .dynsym and .symtab) and
// extends sizeless symbols to the next symbol.
func (ix *symIndex) sortAndSize() {
	// A comparison sort (slices.SortFunc) of 300k entries took ~100ms, most
	// of the indexing time; a stable partition by kind plus a radix sort by
	// address is an order of magnitude faster. Both are stable, so entries
	// at one address stay in table order (.dynsym first, then position in
	// the table), and only the short runs of aliases need ordering by rank.
	scratch := make([]symEntry, len(ix.ents))
	nfunc := 0
	for _, e := range ix.ents {
		if e.flags&fObject == 0 {
			nfunc++
		}
	}
	fi, oi := 0, nfunc
	for _, e := range ix.ents {
		if e.flags&fObject == 0 {
			scratch[fi] = e
			fi++
		} else {
			scratch[oi] = e
			oi++
		}
	}
	ix.ents, scratch = scratch, ix.ents
	radixSortByValue(ix.ents[:nfunc], scratch[:nfunc])
	radixSortByValue(ix.ents[nfunc:], scratch[nfunc:])
	for i := 0; i < len(ix.ents); {
		j := i + 1
		for j < len(ix.ents) && ix.ents[j].value == ix.ents[i].value && ix.ents[j].flags&fObject == ix.ents[i].flags&fObject {
			j++
		}
		if j-i > 1 {
			slices.SortStableFunc(ix.ents[i:j], func(a, b symEntry) int {
				return int(a.aliasRank()) - int(b.aliasRank())
			})
		}
		i = j
	}

	// Drop duplicates: within a run of the same kind and address, a name
	// seen already (with a better rank) is redundant. Runs are short, except
	// where identical code folding put many functions at one address; past
	// maxRun, leave the (harmless) duplicates rather than go quadratic.
	const maxRun = 64
	out := ix.ents[:0]
	run := 0 // start of the current run in out
	for _, e := range ix.ents {
		if len(out) > run && (out[run].value != e.value || out[run].flags&fObject != e.flags&fObject) {
			run = len(out)
		}
		dup := false
		for k := run; k < len(out) && k-run < maxRun; k++ {
			if sameName(&out[k], &e) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, e)
		}
	}
	ix.ents = out
	if cap(out)-len(out) > len(out)/8 {
		ix.ents = slices.Clone(out) // give the duplicates' room back
	}
	ix.nfunc, _ = slices.BinarySearchFunc(ix.ents, true, func(e symEntry, _ bool) int {
		if e.flags&fObject != 0 {
			return 0
		}
		return -1
	})
	extendSizeless(ix.ents[:ix.nfunc])
	extendSizeless(ix.ents[ix.nfunc:])
}

// radixSortByValue sorts ents by value, stably, using tmp (of the same
// length) as scratch space. It is an LSD radix sort over the bytes of
// value - min, skipping the bytes in which all entries agree (a library's
// addresses span a few MB, so typically 3 passes).
func radixSortByValue(ents, tmp []symEntry) {
	if len(ents) < 2 {
		return
	}
	lo, hi := ents[0].value, ents[0].value
	for i := range ents {
		lo, hi = min(lo, ents[i].value), max(hi, ents[i].value)
	}
	src, dst := ents, tmp
	for shift := uint(0); shift < 64 && (hi-lo)>>shift != 0; shift += 8 {
		var count [256]int
		for i := range src {
			count[byte((src[i].value-lo)>>shift)]++
		}
		if count[byte((src[0].value-lo)>>shift)] == len(src) {
			continue // all entries share this byte
		}
		pos := 0
		for b, c := range count {
			count[b] = pos
			pos += c
		}
		for i := range src {
			d := byte((src[i].value - lo) >> shift)
			dst[count[d]] = src[i]
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &ents[0] {
		copy(ents, src)
	}
}

// extendSizeless makes every sizeless symbol of ents (sorted by address)
// end where the next symbol at a higher address starts.
func extendSizeless(ents []symEntry) {
	var next uint64
	haveNext := false
	for i := len(ents) - 1; i >= 0; i-- {
		e := &ents[i]
		if e.flags&fSizeless != 0 && haveNext && next > e.value {
			gap := min(next-e.value, math.MaxUint32)
			if e.size == 0 || uint64(e.size) > gap {
				e.size = uint32(gap)
			}
		}
		if !haveNext || e.value < next {
			next, haveNext = e.value, true
		}
	}
}

// buildTable builds the name hash table. Of several symbols with one name,
// it keeps the one with the best lookupRank.
func (ix *symIndex) buildTable() {
	if len(ix.ents) == 0 {
		return
	}
	size := 1 << bits.Len(uint(2*len(ix.ents)-1)) // load factor <= 1/2
	ix.table = make([]uint32, size)
	mask := uint64(size - 1)
	ix.tagged = len(ix.ents) < tableIdxMask
	for i := range ix.ents {
		e := &ix.ents[i]
		h := e.hash
		tag := ix.tag(h)
		for p := h & mask; ; p = (p + 1) & mask {
			slot := ix.table[p]
			if slot == 0 {
				ix.table[p] = tag | uint32(i+1)
				break
			}
			j, ok := ix.slotEntry(slot, tag)
			if !ok {
				continue
			}
			o := &ix.ents[j]
			if sameName(o, e) {
				if e.lookupRank() < o.lookupRank() {
					ix.table[p] = tag | uint32(i+1)
				}
				break
			}
		}
	}
}

// find returns the best entry named name.
func (ix *symIndex) find(name string) (int, bool) {
	if len(ix.table) == 0 {
		return 0, false
	}
	mask := uint64(len(ix.table) - 1)
	h := maphash.String(hashSeed, name)
	tag := ix.tag(h)
	for p := h & mask; ; p = (p + 1) & mask {
		slot := ix.table[p]
		if slot == 0 {
			return 0, false
		}
		j, ok := ix.slotEntry(slot, tag)
		if !ok {
			continue
		}
		if e := &ix.ents[j]; e.hash == h && int(e.nameLen) == len(name) {
			return j, true
		}
	}
}

func (ix *symIndex) lookup(name string) (Symbol, bool) {
	base, ver := splitVersion(name)
	i, ok := ix.find(base)
	if !ok {
		return Symbol{}, false
	}
	if ver == "" || ix.vers[ix.ents[i].ver] == ver {
		return ix.symbol(i, base), true
	}
	// A specific, non-default version: the hash table holds one entry per
	// name, so scan. Asking for old versions is rare.
	best := -1
	h := ix.ents[i].hash
	for j := range ix.ents {
		e := &ix.ents[j]
		if e.hash == h && int(e.nameLen) == len(base) && ix.vers[e.ver] == ver &&
			(best < 0 || e.lookupRank() < ix.ents[best].lookupRank()) {
			best = j
		}
	}
	if best < 0 {
		return Symbol{}, false
	}
	return ix.symbol(best, base), true
}

// symbol returns entry i as a Symbol named name.
func (ix *symIndex) symbol(i int, name string) Symbol {
	e := &ix.ents[i]
	s := Symbol{
		Name:    name,
		Value:   e.value,
		Dynamic: e.flags&fDynamic != 0,
		Version: ix.vers[e.ver],
		Global:  e.flags&(fGlobal|fWeak) != 0,
		Func:    e.flags&fObject == 0,
	}
	if e.flags&fSizeless == 0 {
		s.Size = uint64(e.size)
	}
	return s
}

// symbolize returns the entry naming vaddr.
func (ix *symIndex) symbolize(vaddr uint64) (int, bool) {
	i, ok := containing(ix.ents[:ix.nfunc], vaddr)
	if !ok {
		i, ok = containing(ix.ents[ix.nfunc:], vaddr)
		i += ix.nfunc
	}
	return i, ok
}

// containing returns the index of the best symbol of ents (sorted by
// address) containing v. It looks at the nearest symbols at or below v
// first and walks back a little further for symbols nested in bigger ones
// (a sized local label inside a function), but never reports a symbol that
// does not contain v: an address in a stripped function is unknown, not
// "the previous exported function + 0x12345".
func containing(ents []symEntry, v uint64) (int, bool) {
	lo, hi := 0, len(ents)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ents[m].value <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	const maxWalk = 16
	end := lo - 1 // last entry with value <= v
	for walked := 0; end >= 0 && walked < maxWalk; {
		start := end
		for start > 0 && ents[start-1].value == ents[end].value {
			start--
		}
		for k := start; k <= end; k++ { // best alias first
			e := &ents[k]
			if v-e.value < uint64(e.size) || v == e.value {
				return k, true
			}
		}
		walked += end - start + 1
		end = start - 1
	}
	return 0, false
}
