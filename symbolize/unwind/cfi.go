package unwind

import "encoding/binary"

// This file decodes .eh_frame: CIE and FDE records, DW_EH_PE pointer
// encodings and the DW_CFA call frame instructions. Everything works on
// byte slices of the object file and reports malformed input as "not ok";
// nothing here may panic on garbage.

// DW_EH_PE pointer encodings.
const (
	peAbsptr  = 0x00
	peULEB128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePCRel   = 0x10
	peTextRel = 0x20
	peDataRel = 0x30
	peFuncRel = 0x40
	peAligned = 0x50

	peIndirect = 0x80
	peOmit     = 0xff
)

// reader reads little-endian DWARF data from b, whose first byte lives at
// the ELF virtual address addr (needed for pc-relative pointers). A read
// past the end sets bad and returns zero; callers check bad once.
type reader struct {
	b    []byte
	pos  int
	addr uint64
	bad  bool
}

func (r *reader) need(n int) bool {
	if r.bad || n < 0 || n > len(r.b)-r.pos {
		r.bad = true
		return false
	}
	return true
}

func (r *reader) u8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.pos]
	r.pos++
	return v
}

func (r *reader) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.pos:])
	r.pos += 2
	return v
}

func (r *reader) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.pos:])
	r.pos += 4
	return v
}

func (r *reader) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.pos:])
	r.pos += 8
	return v
}

func (r *reader) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		b := r.u8()
		if r.bad {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	for {
		b := r.u8()
		if r.bad {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

// skip advances n bytes.
func (r *reader) skip(n uint64) {
	if n > uint64(len(r.b)-r.pos) {
		r.bad = true
		return
	}
	r.pos += int(n)
}

// cstring reads a NUL-terminated string (without the NUL).
func (r *reader) cstring() []byte {
	for i := r.pos; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := r.b[r.pos:i]
			r.pos = i + 1
			return s
		}
	}
	r.bad = true
	return nil
}

// bases are the base addresses of the relative pointer encodings.
type bases struct {
	text uint64 // DW_EH_PE_textrel: .text; 0 if unknown
	data uint64 // DW_EH_PE_datarel: .got for .eh_frame, the header for .eh_frame_hdr; 0 if unknown
}

// pointer reads a pointer in encoding enc. Indirect pointers are returned
// undereferenced with indirect set: the caller decides whether it needs the
// value (an FDE's pc_begin) or only has to skip it (a personality routine).
func (r *reader) pointer(enc byte, b *bases) (v uint64, indirect bool, ok bool) {
	if enc == peOmit {
		return 0, false, false
	}
	fieldAddr := r.addr + uint64(r.pos)
	if enc&0x70 == peAligned {
		pad := (8 - fieldAddr%8) % 8
		r.skip(pad)
		fieldAddr += pad
	}
	switch enc & 0x0f {
	case peAbsptr:
		v = r.u64()
	case peULEB128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peUdata8:
		v = r.u64()
	case peSLEB128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	case peSdata8:
		v = r.u64()
	default:
		r.bad = true
	}
	switch enc & 0x70 {
	case peAbsptr, peAligned:
	case pePCRel:
		v += fieldAddr
	case peTextRel:
		if b == nil || b.text == 0 {
			r.bad = true
		} else {
			v += b.text
		}
	case peDataRel:
		if b == nil || b.data == 0 {
			r.bad = true
		} else {
			v += b.data
		}
	default: // DW_EH_PE_funcrel only makes sense in an LSDA
		r.bad = true
	}
	if r.bad {
		return 0, false, false
	}
	return v, enc&peIndirect != 0, true
}

// pointerSize is the size of a fixed-size encoding, 0 for LEB128 ones.
func pointerSize(enc byte) int {
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		return 8
	case peUdata4, peSdata4:
		return 4
	case peUdata2, peSdata2:
		return 2
	}
	return 0
}

// record is the framing of one .eh_frame entry.
type record struct {
	idPos int    // offset of the CIE id / CIE pointer field
	body  int    // offset of the first byte after that field
	end   int    // offset of the first byte after the record
	id    uint64 // 0 for a CIE, else the distance back to the CIE
}

// readRecord frames the record at off. It reports end == off for the
// zero terminator and ok == false for a malformed record.
func readRecord(eh []byte, off int) (rec record, ok bool) {
	r := reader{b: eh, pos: off}
	length := uint64(r.u32())
	if r.bad {
		return rec, false
	}
	if length == 0 {
		return record{idPos: off, body: off, end: off}, true
	}
	is64 := length == 0xffffffff
	if is64 {
		length = r.u64()
	}
	if r.bad || length > uint64(len(eh)-r.pos) {
		return rec, false
	}
	rec.idPos = r.pos
	rec.end = r.pos + int(length)
	r.b = eh[:rec.end]
	if is64 {
		rec.id = r.u64()
	} else {
		rec.id = uint64(r.u32())
	}
	if r.bad {
		return rec, false
	}
	rec.body = r.pos
	return rec, true
}

// cie is a parsed Common Information Entry.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    byte
	hasAug    bool // 'z': FDEs carry augmentation data
	signal    bool // 'S': FDEs using this CIE describe signal frames
	insns     []byte
	insnsAddr uint64
}

// parseCIE parses the CIE at off in eh, which lives at address ehAddr.
func parseCIE(eh []byte, ehAddr uint64, off int, b *bases) (c cie, ok bool) {
	rec, ok := readRecord(eh, off)
	if !ok || rec.end == off || rec.id != 0 {
		return c, false
	}
	r := reader{b: eh[:rec.end], pos: rec.body, addr: ehAddr}
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		return c, false
	}
	aug := r.cstring()
	if version == 4 {
		addrSize, segSize := r.u8(), r.u8()
		if addrSize != 8 || segSize != 0 {
			return c, false
		}
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if r.bad || c.codeAlign == 0 || c.raReg == regRBP || c.raReg == regRSP {
		return c, false
	}
	c.fdeEnc = peAbsptr
	switch {
	case len(aug) == 0:
	case string(aug) == "eh":
		r.u64() // GCC 2.x exception table pointer
	case aug[0] == 'z':
		c.hasAug = true
		n := r.uleb()
		if r.bad || n > uint64(len(r.b)-r.pos) {
			return c, false
		}
		a := reader{b: r.b[:r.pos+int(n)], pos: r.pos, addr: ehAddr}
		r.pos += int(n)
	augLoop:
		for i := 1; i < len(aug); i++ {
			switch aug[i] {
			case 'L':
				a.u8() // LSDA encoding: FDE augmentation data is skipped by length
			case 'P':
				a.pointer(a.u8(), b) // personality routine: skipped
			case 'R':
				c.fdeEnc = a.u8()
			case 'S':
				c.signal = true
			case 'B', 'G': // AArch64 BTI / MTE markers
			default:
				// Unknown letters mean unknown data; 'z' told us its size.
				break augLoop
			}
			if a.bad {
				return c, false
			}
		}
	default:
		return c, false
	}
	if r.bad {
		return c, false
	}
	c.insns = r.b[r.pos:]
	c.insnsAddr = ehAddr + uint64(r.pos)
	return c, true
}

// fde is a parsed Frame Description Entry with its CIE.
type fde struct {
	cie       cie
	start     uint64 // [start, end): code covered, ELF virtual addresses
	end       uint64
	insns     []byte
	insnsAddr uint64
}

// fdeRange parses just the CIE pointer and the address range of the FDE
// at off. cieAt parses (or fetches) the CIE at an offset.
func fdeRange(eh []byte, ehAddr uint64, off int, b *bases, cieAt func(int) (cie, bool)) (start, end uint64, c cie, r reader, ok bool) {
	rec, ok := readRecord(eh, off)
	if !ok || rec.end == off || rec.id == 0 || rec.id > uint64(rec.idPos) {
		return 0, 0, c, r, false
	}
	c, ok = cieAt(rec.idPos - int(rec.id))
	if !ok {
		return 0, 0, c, r, false
	}
	r = reader{b: eh[:rec.end], pos: rec.body, addr: ehAddr}
	start, indirect, ok := r.pointer(c.fdeEnc, b)
	if !ok || indirect {
		return 0, 0, c, r, false
	}
	length, _, ok := r.pointer(c.fdeEnc&0x0f, nil)
	if !ok || start+length < start {
		return 0, 0, c, r, false
	}
	return start, start + length, c, r, true
}

// parseFDE parses the FDE at off completely.
func parseFDE(eh []byte, ehAddr uint64, off int, b *bases) (f fde, ok bool) {
	cieAt := func(o int) (cie, bool) { return parseCIE(eh, ehAddr, o, b) }
	start, end, c, r, ok := fdeRange(eh, ehAddr, off, b, cieAt)
	if !ok {
		return f, false
	}
	if c.hasAug {
		r.skip(r.uleb()) // LSDA pointer
	}
	if r.bad {
		return f, false
	}
	return fde{cie: c, start: start, end: end, insns: r.b[r.pos:], insnsAddr: ehAddr + uint64(r.pos)}, true
}

// x86-64 DWARF register numbers.
const (
	regRBP = 6
	regRSP = 7
	regRIP = 16 // the return address column
)

// ruleKind is how a register of the caller is recovered.
type ruleKind uint8

const (
	ruleUnset     ruleKind = iota // no rule: same value as in the callee
	ruleUndefined                 // not recoverable (for the return address: outermost frame)
	ruleSame                      // unchanged
	ruleOffset                    // saved at CFA+off
	ruleValOffset                 // value is CFA+off
	ruleRegister                  // in register off
	ruleExpr                      // saved at the address expr computes
	ruleValExpr                   // value is what expr computes
)

type regRule struct {
	kind ruleKind
	off  int64 // offset, or register number for ruleRegister
	expr []byte
}

// The registers whose rules we track: all the unwinder can recover.
const (
	slotRBP = iota
	slotRSP
	slotRA
	nslots
)

// row is the unwind table row for one pc.
type row struct {
	cfaReg  uint64
	cfaOff  int64
	cfaExpr []byte // if non-nil, the CFA is this DWARF expression's value
	regs    [nslots]regRule
}

func slotOf(c *cie, reg uint64) int {
	switch reg {
	case regRBP:
		return slotRBP
	case regRSP:
		return slotRSP
	case c.raReg:
		return slotRA
	}
	return -1
}

// maxRememberDepth bounds DW_CFA_remember_state nesting.
const maxRememberDepth = 16

// DW_CFA opcodes.
const (
	cfaAdvanceLoc       = 0x40
	cfaOffset           = 0x80
	cfaRestore          = 0xc0
	cfaNop              = 0x00
	cfaSetLoc           = 0x01
	cfaAdvanceLoc1      = 0x02
	cfaAdvanceLoc2      = 0x03
	cfaAdvanceLoc4      = 0x04
	cfaOffsetExtended   = 0x05
	cfaRestoreExtended  = 0x06
	cfaUndefined        = 0x07
	cfaSameValue        = 0x08
	cfaRegister         = 0x09
	cfaRememberState    = 0x0a
	cfaRestoreState     = 0x0b
	cfaDefCFA           = 0x0c
	cfaDefCFARegister   = 0x0d
	cfaDefCFAOffset     = 0x0e
	cfaDefCFAExpression = 0x0f
	cfaExpression       = 0x10
	cfaOffsetExtendedSF = 0x11
	cfaDefCFASF         = 0x12
	cfaDefCFAOffsetSF   = 0x13
	cfaValOffset        = 0x14
	cfaValOffsetSF      = 0x15
	cfaValExpression    = 0x16
	cfaGNUArgsSize      = 0x2e
	cfaGNUNegOffsetExt  = 0x2f
)

// computeRow runs the CIE's initial instructions and then the FDE's up to
// pc (an ELF virtual address inside [f.start, f.end)).
func computeRow(f *fde, pc uint64, b *bases) (row, bool) {
	var rw row
	if !execute(&f.cie, f.cie.insns, f.cie.insnsAddr, f.start, ^uint64(0), &rw, nil, b) {
		return rw, false
	}
	initial := rw
	if !execute(&f.cie, f.insns, f.insnsAddr, f.start, pc, &rw, &initial, b) {
		return rw, false
	}
	return rw, true
}

// execute interprets the call frame instructions prog (at address addr)
// starting at location loc, updating rw, until the location passes pc.
// initial holds the rules after the CIE's instructions (for
// DW_CFA_restore); it is nil while those run.
func execute(c *cie, prog []byte, addr, loc, pc uint64, rw *row, initial *row, b *bases) bool {
	var stack [maxRememberDepth]row
	depth := 0
	r := reader{b: prog, addr: addr}
	// advance moves the location; it reports false once the new location
	// is past pc, when the current row is the answer.
	advance := func(delta uint64) bool {
		d := delta * c.codeAlign
		if c.codeAlign != 0 && d/c.codeAlign != delta {
			return false
		}
		if loc+d < loc || loc+d > pc {
			return false
		}
		loc += d
		return true
	}
	setRule := func(reg uint64, rule regRule) {
		if s := slotOf(c, reg); s >= 0 {
			rw.regs[s] = rule
		}
	}
	restore := func(reg uint64) bool {
		if initial == nil {
			return false
		}
		if s := slotOf(c, reg); s >= 0 {
			rw.regs[s] = initial.regs[s]
		}
		return true
	}
	block := func() []byte {
		n := r.uleb()
		if r.bad || n > uint64(len(r.b)-r.pos) {
			r.bad = true
			return nil
		}
		e := r.b[r.pos : r.pos+int(n) : r.pos+int(n)]
		r.pos += int(n)
		return e
	}
	for r.pos < len(r.b) {
		op := r.u8()
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			if !advance(uint64(op & 0x3f)) {
				return true
			}
			continue
		case cfaOffset:
			setRule(uint64(op&0x3f), regRule{kind: ruleOffset, off: int64(r.uleb()) * c.dataAlign})
			continue
		case cfaRestore:
			if !restore(uint64(op & 0x3f)) {
				return false
			}
			continue
		}
		switch op {
		case cfaNop:
		case cfaSetLoc:
			v, indirect, ok := r.pointer(c.fdeEnc, b)
			if !ok || indirect || v < loc {
				return false
			}
			if v > pc {
				return true
			}
			loc = v
		case cfaAdvanceLoc1:
			d := uint64(r.u8())
			if !r.bad && !advance(d) {
				return true
			}
		case cfaAdvanceLoc2:
			d := uint64(r.u16())
			if !r.bad && !advance(d) {
				return true
			}
		case cfaAdvanceLoc4:
			d := uint64(r.u32())
			if !r.bad && !advance(d) {
				return true
			}
		case cfaOffsetExtended:
			reg := r.uleb()
			setRule(reg, regRule{kind: ruleOffset, off: int64(r.uleb()) * c.dataAlign})
		case cfaOffsetExtendedSF:
			reg := r.uleb()
			setRule(reg, regRule{kind: ruleOffset, off: r.sleb() * c.dataAlign})
		case cfaGNUNegOffsetExt:
			reg := r.uleb()
			setRule(reg, regRule{kind: ruleOffset, off: -int64(r.uleb()) * c.dataAlign})
		case cfaValOffset:
			reg := r.uleb()
			setRule(reg, regRule{kind: ruleValOffset, off: int64(r.uleb()) * c.dataAlign})
		case cfaValOffsetSF:
			reg := r.uleb()
			setRule(reg, regRule{kind: ruleValOffset, off: r.sleb() * c.dataAlign})
		case cfaRestoreExtended:
			if reg := r.uleb(); !r.bad && !restore(reg) {
				return false
			}
		case cfaUndefined:
			setRule(r.uleb(), regRule{kind: ruleUndefined})
		case cfaSameValue:
			setRule(r.uleb(), regRule{kind: ruleSame})
		case cfaRegister:
			reg := r.uleb()
			setRule(reg, regRule{kind: ruleRegister, off: int64(r.uleb())})
		case cfaRememberState:
			if depth == len(stack) {
				return false
			}
			stack[depth] = *rw
			depth++
		case cfaRestoreState:
			if depth == 0 {
				return false
			}
			depth--
			*rw = stack[depth]
		case cfaDefCFA:
			rw.cfaReg = r.uleb()
			rw.cfaOff = int64(r.uleb())
			rw.cfaExpr = nil
		case cfaDefCFASF:
			rw.cfaReg = r.uleb()
			rw.cfaOff = r.sleb() * c.dataAlign
			rw.cfaExpr = nil
		// DWARF allows these only while the CFA is register+offset. Like
		// libgcc, which hand-written assembly (libgcrypt) relies on, we
		// let them switch back from an expression, keeping the register
		// and offset last defined.
		case cfaDefCFARegister:
			rw.cfaReg = r.uleb()
			rw.cfaExpr = nil
		case cfaDefCFAOffset:
			rw.cfaOff = int64(r.uleb())
			rw.cfaExpr = nil
		case cfaDefCFAOffsetSF:
			rw.cfaOff = r.sleb() * c.dataAlign
			rw.cfaExpr = nil
		case cfaDefCFAExpression:
			e := block()
			if e == nil && !r.bad {
				e = []byte{} // an empty expression is invalid; evaluation fails later
			}
			rw.cfaExpr = e
		case cfaExpression:
			reg := r.uleb()
			setRule(reg, regRule{kind: ruleExpr, expr: block()})
		case cfaValExpression:
			reg := r.uleb()
			setRule(reg, regRule{kind: ruleValExpr, expr: block()})
		case cfaGNUArgsSize:
			r.uleb()
		default:
			return false
		}
		if r.bad {
			return false
		}
	}
	return !r.bad
}
