package unwind

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// maxEHFrame bounds the .eh_frame and .eh_frame_hdr sizes we read: a
// corrupt header must not make us allocate gigabytes.
const maxEHFrame = 1 << 30

// object is the call frame information of one ELF file. It is immutable
// once loaded and shared by every process mapping the file.
type object struct {
	eh     []byte // .eh_frame
	ehAddr uint64 // its ELF virtual address
	bases  bases  // for .eh_frame pointers

	// The .eh_frame_hdr binary search table, if usable.
	hdr      []byte
	hdrAddr  uint64
	tblOff   int
	tblEnc   byte
	tblCount int
	tblEnt   int // bytes per entry

	// Otherwise, an index of all FDEs sorted by start address.
	index []indexEntry
}

type indexEntry struct {
	start uint64
	size  uint32
	off   uint32 // of the FDE in eh
}

// loadOptions select code paths for tests.
type loadOptions struct {
	ignoreHdr      bool // build the FDE index even if .eh_frame_hdr has a table
	ignoreSections bool // find the CFI through program headers only
}

// parseObject reads the CFI of the ELF file r of the given size.
func parseObject(r io.ReaderAt, size int64, opt loadOptions) (obj *object, err error) {
	defer func() {
		// debug/elf is robust against malformed input, but a tracer
		// must never crash on a weird file in some container.
		if p := recover(); p != nil {
			obj, err = nil, fmt.Errorf("malformed ELF: %v", p)
		}
	}()
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	if ef.Class != elf.ELFCLASS64 || ef.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("not an x86-64 ELF64 object (%v, %v)", ef.Class, ef.Machine)
	}
	read := func(off, n uint64) ([]byte, error) {
		if n > maxEHFrame || off > uint64(size) || n > uint64(size)-off {
			return nil, fmt.Errorf("range [%#x, +%#x) beyond end of file or too large", off, n)
		}
		b := make([]byte, n)
		if _, err := r.ReadAt(b, int64(off)); err != nil {
			return nil, err
		}
		return b, nil
	}

	obj = &object{}
	var ehSec *elf.Section
	if !opt.ignoreSections {
		for _, s := range ef.Sections {
			if s.Type == elf.SHT_NOBITS {
				continue
			}
			switch s.Name {
			case ".eh_frame":
				ehSec = s
			case ".eh_frame_hdr":
				if obj.hdr, err = read(s.Offset, s.Size); err != nil {
					return nil, fmt.Errorf(".eh_frame_hdr: %w", err)
				}
				obj.hdrAddr = s.Addr
			case ".got":
				obj.bases.data = s.Addr
			case ".text":
				obj.bases.text = s.Addr
			}
		}
	}
	if obj.hdr == nil && (ehSec == nil || !opt.ignoreHdr) {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_GNU_EH_FRAME {
				if obj.hdr, err = read(p.Off, p.Filesz); err != nil {
					return nil, fmt.Errorf("PT_GNU_EH_FRAME: %w", err)
				}
				obj.hdrAddr = p.Vaddr
				break
			}
		}
	}
	hdrEH, hdrOK := obj.parseHdr()
	switch {
	case ehSec != nil:
		if obj.eh, err = read(ehSec.Offset, ehSec.Size); err != nil {
			return nil, fmt.Errorf(".eh_frame: %w", err)
		}
		obj.ehAddr = ehSec.Addr
		if hdrOK && hdrEH != obj.ehAddr {
			hdrOK = false // the header describes some other .eh_frame
		}
	case hdrOK || hdrEH != 0:
		// No section headers: .eh_frame runs from where the header says
		// to at most the end of its segment, or to its zero terminator.
		for _, p := range ef.Progs {
			if p.Type == elf.PT_LOAD && hdrEH >= p.Vaddr && hdrEH-p.Vaddr < p.Filesz {
				d := hdrEH - p.Vaddr
				if obj.eh, err = read(p.Off+d, min(p.Filesz-d, maxEHFrame)); err != nil {
					return nil, fmt.Errorf(".eh_frame: %w", err)
				}
				obj.ehAddr = hdrEH
				break
			}
		}
		if obj.eh == nil {
			return nil, errors.New(".eh_frame_hdr points outside the loadable segments")
		}
	default:
		return nil, errNoCFI
	}
	if !hdrOK || opt.ignoreHdr {
		obj.hdr, obj.tblCount = nil, 0
		obj.buildIndex()
	}
	return obj, nil
}

var errNoCFI = errors.New("no .eh_frame")

// parseHdr parses .eh_frame_hdr. It returns the address of .eh_frame it
// names (0 if none) and whether the binary search table is usable.
func (o *object) parseHdr() (ehAddr uint64, tableOK bool) {
	if len(o.hdr) < 4 || o.hdr[0] != 1 {
		return 0, false
	}
	hb := bases{data: o.hdrAddr}
	r := reader{b: o.hdr, pos: 4, addr: o.hdrAddr}
	ptrEnc, cntEnc, tblEnc := o.hdr[1], o.hdr[2], o.hdr[3]
	eh, indirect, ok := r.pointer(ptrEnc, &hb)
	if !ok || indirect {
		return 0, false
	}
	count, indirect, ok := r.pointer(cntEnc, &hb)
	if !ok || indirect || tblEnc == peOmit || tblEnc&peIndirect != 0 {
		return eh, false
	}
	size := pointerSize(tblEnc)
	switch tblEnc & 0x70 {
	case peAbsptr, peDataRel:
	default:
		size = 0
	}
	if size == 0 || count == 0 || count > uint64(len(o.hdr)-r.pos)/uint64(2*size) {
		return eh, false
	}
	o.tblOff, o.tblEnc, o.tblCount, o.tblEnt = r.pos, tblEnc, int(count), 2*size
	return eh, true
}

// tableEntry decodes the initial location (field 0) or FDE address
// (field 1) of table entry i.
func (o *object) tableEntry(i, field int) uint64 {
	pos := o.tblOff + i*o.tblEnt + field*o.tblEnt/2
	if o.tblEnc == peDataRel|peSdata4 { // what every linker emits
		return o.hdrAddr + uint64(int64(int32(binary.LittleEndian.Uint32(o.hdr[pos:]))))
	}
	r := reader{b: o.hdr, pos: pos, addr: o.hdrAddr}
	v, _, _ := r.pointer(o.tblEnc, &bases{data: o.hdrAddr})
	return v
}

// buildIndex walks every record of .eh_frame and indexes the FDEs.
func (o *object) buildIndex() {
	cies := make(map[int]cie)
	cieAt := func(off int) (cie, bool) {
		if c, ok := cies[off]; ok {
			return c, true
		}
		c, ok := parseCIE(o.eh, o.ehAddr, off, &o.bases)
		if ok {
			cies[off] = c
		}
		return c, ok
	}
	for off := 0; off < len(o.eh) && off <= 1<<32-1; {
		rec, ok := readRecord(o.eh, off)
		if !ok || rec.end == off {
			break
		}
		if rec.id != 0 {
			start, end, _, _, ok := fdeRange(o.eh, o.ehAddr, off, &o.bases, cieAt)
			if ok && end > start && end-start <= 1<<32-1 {
				o.index = append(o.index, indexEntry{start: start, size: uint32(end - start), off: uint32(off)})
			}
		}
		off = rec.end
	}
	slices.SortFunc(o.index, func(a, b indexEntry) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	o.index = slices.Clip(o.index)
}

// find returns the FDE covering the ELF virtual address pc.
func (o *object) find(pc uint64) (fde, bool) {
	var off uint64
	if o.tblCount > 0 {
		// Last entry with an initial location <= pc.
		lo, hi := 0, o.tblCount
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if o.tableEntry(m, 0) <= pc {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if lo == 0 {
			return fde{}, false
		}
		off = o.tableEntry(lo-1, 1) - o.ehAddr
	} else {
		i, _ := slices.BinarySearchFunc(o.index, pc, func(e indexEntry, pc uint64) int {
			if e.start <= pc {
				return -1
			}
			return 1
		})
		if i == 0 || pc-o.index[i-1].start >= uint64(o.index[i-1].size) {
			return fde{}, false
		}
		off = uint64(o.index[i-1].off)
	}
	if off >= uint64(len(o.eh)) {
		return fde{}, false
	}
	f, ok := parseFDE(o.eh, o.ehAddr, int(off), &o.bases)
	if !ok || pc < f.start || pc >= f.end {
		return fde{}, false
	}
	return f, true
}
