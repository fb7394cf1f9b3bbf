package unwind

import (
	"debug/elf"
	"encoding/binary"
	"slices"
	"testing"
)

// Hand-assembled .eh_frame records for what the compiled fixtures do not
// exercise: other augmentations and encodings, 64-bit records, rarely
// emitted instructions.

func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func sleb(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func cat(parts ...[]byte) []byte { return slices.Concat(parts...) }

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// ehBuilder assembles an .eh_frame section at address addr.
type ehBuilder struct {
	b    []byte
	addr uint64
}

// record appends a record whose content after the id field is body(the
// address of the body), and returns its offset.
func (e *ehBuilder) record(is64 bool, id func(idPos int) uint64, body func(bodyAddr uint64) []byte) int {
	off := len(e.b)
	idPos, idLen := off+4, 4
	if is64 {
		idPos, idLen = off+12, 8
	}
	content := body(e.addr + uint64(idPos+idLen))
	n := idLen + len(content)
	if is64 {
		e.b = append(e.b, le32(0xffffffff)...)
		e.b = append(e.b, le64(uint64(n))...)
		e.b = append(e.b, le64(id(idPos))...)
	} else {
		e.b = append(e.b, le32(uint32(n))...)
		e.b = append(e.b, le32(uint32(id(idPos)))...)
	}
	e.b = append(e.b, content...)
	return off
}

func (e *ehBuilder) cie(is64 bool, content []byte) int {
	return e.record(is64, func(int) uint64 { return 0 }, func(uint64) []byte { return content })
}

func (e *ehBuilder) fde(is64 bool, cieOff int, body func(bodyAddr uint64) []byte) int {
	return e.record(is64, func(idPos int) uint64 { return uint64(idPos - cieOff) }, body)
}

func (e *ehBuilder) object() *object {
	o := &object{eh: append(e.b, 0, 0, 0, 0), ehAddr: e.addr, bases: bases{text: 0x1000, data: 0x200000}}
	o.buildIndex()
	return o
}

// The usual x86-64 initial instructions: CFA = rsp+8, ra at CFA-8.
var initialInsns = []byte{cfaDefCFA, regRSP, 8, cfaOffset | regRIP, 1}

// zrCIE is gcc's CIE: version 1, "zR", pcrel|sdata4.
func zrCIE() []byte {
	return cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{regRIP}, uleb(1), []byte{pePCRel | peSdata4}, initialInsns)
}

// pcrel4FDE is the body of an FDE for [start, start+size) in a "zR"
// pcrel|sdata4 CIE, with no augmentation data.
func pcrel4FDE(start, size uint64, insns []byte) func(uint64) []byte {
	return func(bodyAddr uint64) []byte {
		return cat(le32(uint32(start-bodyAddr)), le32(uint32(size)), uleb(0), insns)
	}
}

type rowCase struct {
	pc      uint64
	cfaReg  uint64
	cfaOff  int64
	fp, ra  regRule
	noFound bool
}

func checkRows(t *testing.T, o *object, cases []rowCase) {
	t.Helper()
	for _, c := range cases {
		f, ok := o.find(c.pc)
		if ok == c.noFound {
			t.Errorf("pc %#x: found %v", c.pc, ok)
			continue
		}
		if !ok {
			continue
		}
		rw, ok := computeRow(&f, c.pc, &o.bases)
		if !ok {
			t.Errorf("pc %#x: row not computed", c.pc)
			continue
		}
		if rw.cfaExpr != nil || rw.cfaReg != c.cfaReg || rw.cfaOff != c.cfaOff {
			t.Errorf("pc %#x: CFA r%d%+d (expr %x), want r%d%+d", c.pc, rw.cfaReg, rw.cfaOff, rw.cfaExpr, c.cfaReg, c.cfaOff)
		}
		if rw.regs[slotRBP].kind != c.fp.kind || rw.regs[slotRBP].off != c.fp.off {
			t.Errorf("pc %#x: rbp rule %+v, want %+v", c.pc, rw.regs[slotRBP], c.fp)
		}
		if rw.regs[slotRA].kind != c.ra.kind || rw.regs[slotRA].off != c.ra.off {
			t.Errorf("pc %#x: ra rule %+v, want %+v", c.pc, rw.regs[slotRA], c.ra)
		}
	}
}

var raAtCFA8 = regRule{kind: ruleOffset, off: -8}

// A function with a frame pointer and an early return:
//
//	0x1000 push rbp            CFA rsp+16, rbp at CFA-16
//	0x1001 mov rbp, rsp        CFA rbp+16
//	...    remember_state
//	0x1010 leave; ret          CFA rsp+8, rbp restored
//	0x1012 restore_state       CFA rbp+16 again
func frameFunctionInsns() []byte {
	return cat(
		[]byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 16, cfaOffset | regRBP, 2},
		[]byte{cfaAdvanceLoc | 3, cfaDefCFARegister, regRBP},
		[]byte{cfaAdvanceLoc1, 0x0c, cfaRememberState, cfaDefCFA, regRSP, 8, cfaRestore | regRBP},
		[]byte{cfaAdvanceLoc2}, le32(2)[:2], []byte{cfaRestoreState},
		[]byte{cfaAdvanceLoc4}, le32(0x10), []byte{cfaGNUArgsSize, 16, cfaNop, cfaNop},
	)
}

func frameFunctionRows(base uint64) []rowCase {
	return []rowCase{
		{pc: base, cfaReg: regRSP, cfaOff: 8, ra: raAtCFA8},
		{pc: base + 1, cfaReg: regRSP, cfaOff: 16, fp: regRule{kind: ruleOffset, off: -16}, ra: raAtCFA8},
		{pc: base + 3, cfaReg: regRSP, cfaOff: 16, fp: regRule{kind: ruleOffset, off: -16}, ra: raAtCFA8},
		{pc: base + 4, cfaReg: regRBP, cfaOff: 16, fp: regRule{kind: ruleOffset, off: -16}, ra: raAtCFA8},
		{pc: base + 0xf, cfaReg: regRBP, cfaOff: 16, fp: regRule{kind: ruleOffset, off: -16}, ra: raAtCFA8},
		{pc: base + 0x10, cfaReg: regRSP, cfaOff: 8, ra: raAtCFA8},
		{pc: base + 0x11, cfaReg: regRSP, cfaOff: 8, ra: raAtCFA8},
		{pc: base + 0x12, cfaReg: regRBP, cfaOff: 16, fp: regRule{kind: ruleOffset, off: -16}, ra: raAtCFA8},
		{pc: base + 0x40, cfaReg: regRBP, cfaOff: 16, fp: regRule{kind: ruleOffset, off: -16}, ra: raAtCFA8},
		{pc: base + 0x100 - 1, cfaReg: regRBP, cfaOff: 16, fp: regRule{kind: ruleOffset, off: -16}, ra: raAtCFA8},
		{pc: base + 0x100, noFound: true},
		{pc: base - 1, noFound: true},
	}
}

func TestCFIBasic(t *testing.T) {
	for _, is64 := range []bool{false, true} {
		e := &ehBuilder{addr: 0x5000}
		c := e.cie(is64, zrCIE())
		e.fde(is64, c, pcrel4FDE(0x1000, 0x100, frameFunctionInsns()))
		e.fde(is64, c, pcrel4FDE(0x2000, 0x10, nil))
		o := e.object()
		if len(o.index) != 2 {
			t.Fatalf("64-bit %v: %d FDEs indexed", is64, len(o.index))
		}
		checkRows(t, o, frameFunctionRows(0x1000))
		checkRows(t, o, []rowCase{{pc: 0x2005, cfaReg: regRSP, cfaOff: 8, ra: raAtCFA8}, {pc: 0x2010, noFound: true}})
	}
}

// Augmentations "zPLR" (personality, LSDA) and "zRS", CIE versions 3 and 4,
// and the pointer encodings.
func TestCFIEncodings(t *testing.T) {
	type encCase struct {
		name   string
		enc    byte
		encode func(fieldAddr, v uint64) []byte
	}
	encs := []encCase{
		{"absptr", peAbsptr, func(_, v uint64) []byte { return le64(v) }},
		{"udata4", peUdata4, func(_, v uint64) []byte { return le32(uint32(v)) }},
		{"udata2", peUdata2, func(_, v uint64) []byte { return le32(uint32(v))[:2] }},
		{"udata8", peUdata8, func(_, v uint64) []byte { return le64(v) }},
		{"uleb128", peULEB128, func(_, v uint64) []byte { return uleb(v) }},
		{"sleb128", peSLEB128, func(_, v uint64) []byte { return sleb(int64(v)) }},
		{"sdata2", peSdata2, func(_, v uint64) []byte { return le32(uint32(v))[:2] }},
		{"sdata4", peSdata4, func(_, v uint64) []byte { return le32(uint32(v)) }},
		{"sdata8", peSdata8, func(_, v uint64) []byte { return le64(v) }},
		{"pcrel|sdata4", pePCRel | peSdata4, func(a, v uint64) []byte { return le32(uint32(v - a)) }},
		{"pcrel|sleb128", pePCRel | peSLEB128, func(a, v uint64) []byte { return sleb(int64(v - a)) }},
		{"pcrel|sdata8", pePCRel | peSdata8, func(a, v uint64) []byte { return le64(v - a) }},
		{"datarel|sdata4", peDataRel | peSdata4, func(_, v uint64) []byte { return le32(uint32(v - 0x200000)) }},
		{"textrel|udata4", peTextRel | peUdata4, func(_, v uint64) []byte { return le32(uint32(v - 0x1000)) }},
		{"aligned", peAligned, func(a, v uint64) []byte {
			pad := make([]byte, (8-a%8)%8)
			return cat(pad, le64(v))
		}},
	}
	for _, ec := range encs {
		for _, version := range []byte{1, 3, 4} {
			for _, aug := range []string{"zR", "zPLR", "zRS", "zLRP"} {
				e := &ehBuilder{addr: 0x7000}
				// The CIE: personality (indirect pcrel), LSDA encoding, FDE encoding.
				cieBody := func() []byte {
					b := cat([]byte{version}, []byte(aug+"\x00"))
					if version == 4 {
						b = append(b, 8, 0)
					}
					b = cat(b, uleb(1), sleb(-8))
					if version == 1 {
						b = append(b, regRIP)
					} else {
						b = append(b, uleb(regRIP)...)
					}
					var augData []byte
					for _, ch := range aug[1:] {
						switch ch {
						case 'P':
							augData = append(augData, peIndirect|pePCRel|peSdata4)
							augData = append(augData, le32(0x1234)...)
						case 'L':
							augData = append(augData, pePCRel|peSdata4)
						case 'R':
							augData = append(augData, ec.enc)
						}
					}
					// The 'P' pointer's field address does not matter: it is
					// skipped. The aligned encoding pads relative to the field.
					return cat(b, uleb(uint64(len(augData))), augData, initialInsns)
				}()
				ci := e.cie(false, cieBody)
				var lsda []byte
				if slices.Contains([]byte(aug), 'L') {
					lsda = le32(0x4321)
				}
				e.fde(false, ci, func(bodyAddr uint64) []byte {
					start := ec.encode(bodyAddr, 0x3000)
					size := ec.encode(0, 0x80)
					if ec.enc&0x70 != 0 { // the range is never relative
						var plain encCase
						for _, x := range encs {
							if x.enc == ec.enc&0x0f {
								plain = x
							}
						}
						size = plain.encode(0, 0x80)
					}
					if ec.name == "aligned" {
						size = le64(0x80) // the range is plain absptr after the aligned start
					}
					// An FDE body: pc_begin, pc_range, augmentation data, instructions.
					b := cat(start, size)
					b = cat(b, uleb(uint64(len(lsda))), lsda)
					return cat(b, frameFunctionInsns())
				})
				o := e.object()
				if len(o.index) != 1 {
					t.Errorf("%s v%d %s: %d FDEs indexed", ec.name, version, aug, len(o.index))
					continue
				}
				if o.index[0].start != 0x3000 || o.index[0].size != 0x80 {
					t.Errorf("%s v%d %s: FDE [%#x, +%#x)", ec.name, version, aug, o.index[0].start, o.index[0].size)
					continue
				}
				f, _ := o.find(0x3000)
				if f.cie.signal != (aug == "zRS") {
					t.Errorf("%s v%d %s: signal frame %v", ec.name, version, aug, f.cie.signal)
				}
				checkRows(t, o, frameFunctionRows(0x3000)[:9])
			}
		}
	}
}

// DW_CFA_set_loc, the _sf and val_ variants, register and expression rules,
// undefined and same_value, GNU_negative_offset_extended.
func TestCFIMoreInstructions(t *testing.T) {
	e := &ehBuilder{addr: 0x9000}
	ci := e.cie(false, cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{regRIP}, uleb(1), []byte{peUdata8}, initialInsns))
	insns := cat(
		[]byte{cfaSetLoc}, le64(0x4004), []byte{cfaDefCFASF, regRSP}, sleb(-3), // rsp+24
		[]byte{cfaOffsetExtendedSF, regRBP}, sleb(3), // CFA-24
		[]byte{cfaSetLoc}, le64(0x4008), []byte{cfaDefCFAOffsetSF}, sleb(-4), // rsp+32
		[]byte{cfaValOffset, regRBP, 1},                                 // rbp = CFA-8
		[]byte{cfaSetLoc}, le64(0x400c), []byte{cfaRegister, regRBP, 3}, // rbp in rbx
		[]byte{cfaSetLoc}, le64(0x4010), []byte{cfaUndefined, regRBP, cfaSameValue, 3},
		[]byte{cfaSetLoc}, le64(0x4014), []byte{cfaGNUNegOffsetExt, regRBP, 2}, // CFA+16
		[]byte{cfaSetLoc}, le64(0x4018), []byte{cfaExpression, regRBP, 2, opBreg7, 0}, // rbp at [rsp]
		[]byte{cfaValExpression, regRIP, 1, opLit0},
		[]byte{cfaSetLoc}, le64(0x401c), []byte{cfaOffsetExtended}, uleb(regRBP), uleb(4), // CFA-32
		[]byte{cfaRestoreExtended, regRIP, cfaValOffsetSF, 5}, sleb(-1), // r5 ignored
		[]byte{cfaSetLoc}, le64(0x4020), []byte{cfaUndefined, regRIP},
	)
	e.fde(false, ci, func(uint64) []byte { return cat(le64(0x4000), le64(0x40), uleb(0), insns) })
	o := e.object()
	cfa8 := rowCase{cfaReg: regRSP, cfaOff: 8, ra: raAtCFA8}
	cases := []rowCase{
		{pc: 0x4000, cfaReg: regRSP, cfaOff: 8, ra: raAtCFA8},
		{pc: 0x4004, cfaReg: regRSP, cfaOff: 24, fp: regRule{kind: ruleOffset, off: -24}, ra: raAtCFA8},
		{pc: 0x4008, cfaReg: regRSP, cfaOff: 32, fp: regRule{kind: ruleValOffset, off: -8}, ra: raAtCFA8},
		{pc: 0x400c, cfaReg: regRSP, cfaOff: 32, fp: regRule{kind: ruleRegister, off: 3}, ra: raAtCFA8},
		{pc: 0x4010, cfaReg: regRSP, cfaOff: 32, fp: regRule{kind: ruleUndefined}, ra: raAtCFA8},
		{pc: 0x4014, cfaReg: regRSP, cfaOff: 32, fp: regRule{kind: ruleOffset, off: 16}, ra: raAtCFA8},
		{pc: 0x4018, cfaReg: regRSP, cfaOff: 32, fp: regRule{kind: ruleExpr}, ra: regRule{kind: ruleValExpr}},
		{pc: 0x401c, cfaReg: regRSP, cfaOff: 32, fp: regRule{kind: ruleOffset, off: -32}, ra: raAtCFA8},
		{pc: 0x4020, cfaReg: regRSP, cfaOff: 32, fp: regRule{kind: ruleOffset, off: -32}, ra: regRule{kind: ruleUndefined}},
	}
	_ = cfa8
	checkRows(t, o, cases)

	// Walk the rules against a stack: CFA = rsp+32, rbp at [rsp], ra = 0.
	w := walker{snap: snapshot{lo: 0x7000, b: make([]byte, 64)}}
	putWord(w.snap.b, 0, 0xfeed)
	f, _ := o.find(0x4018)
	next, _, ok := w.cfiStep(frame{pc: 0x4018, sp: 0x7000}, &f, 0x4018, &o.bases)
	if !ok || next.sp != 0x7020 || next.fp != 0xfeed || !next.fpOK || next.pc != 0 {
		t.Errorf("step at 0x4018: %+v %v", next, ok)
	}
	// An undefined return address ends the walk.
	f, _ = o.find(0x4020)
	if _, _, ok := w.cfiStep(frame{pc: 0x4020, sp: 0x7000}, &f, 0x4020, &o.bases); ok {
		t.Errorf("step at 0x4020 went on past an undefined return address")
	}
}

// libgcrypt's hand-written assembly switches the CFA from an expression
// back to a register: the offset defined before the expression applies.
func TestCFIExpressionThenRegister(t *testing.T) {
	e := &ehBuilder{addr: 0x5000}
	c := e.cie(false, zrCIE())
	e.fde(false, c, pcrel4FDE(0x1000, 0x100, cat(
		[]byte{cfaAdvanceLoc | 1, cfaDefCFAOffset, 56},
		[]byte{cfaAdvanceLoc | 1, cfaDefCFARegister, 0},                                                // rax+56
		[]byte{cfaAdvanceLoc | 1, cfaDefCFAExpression, 6, opBreg7, 0x98, 4, opDeref, opPlusUconst, 56}, // [rsp+536]+56
		[]byte{cfaAdvanceLoc | 1, cfaDefCFARegister, regRSP},                                           // rsp+56
		[]byte{cfaAdvanceLoc | 1, cfaDefCFAExpression, 1, opLit0, cfaDefCFAOffset, 48},                 // rsp+48
	)))
	o := e.object()
	checkRows(t, o, []rowCase{
		{pc: 0x1001, cfaReg: regRSP, cfaOff: 56, ra: raAtCFA8},
		{pc: 0x1002, cfaReg: 0, cfaOff: 56, ra: raAtCFA8},
		{pc: 0x1004, cfaReg: regRSP, cfaOff: 56, ra: raAtCFA8},
		{pc: 0x1005, cfaReg: regRSP, cfaOff: 48, ra: raAtCFA8},
	})
	f, _ := o.find(0x1003)
	if rw, ok := computeRow(&f, 0x1003, &o.bases); !ok || len(rw.cfaExpr) != 6 {
		t.Errorf("pc 0x1003: CFA expression %x, %v", rw.cfaExpr, ok)
	}
}

// Malformed programs are refused, not misread.
func TestCFIRejects(t *testing.T) {
	for name, insns := range map[string][]byte{
		"restore_state without remember": {cfaRestoreState},
		"unknown opcode":                 {0x1d},
		"truncated":                      {cfaDefCFA, regRSP},
		"block past the end":             {cfaExpression, regRBP, 9, opLit0},
		"deep remember_state":            slices.Repeat([]byte{cfaRememberState}, maxRememberDepth+1),
		"set_loc backwards":              cat([]byte{cfaSetLoc}, le64(0xff0)),
		"indirect pc_begin":              cat([]byte{cfaSetLoc}, le64(0x1010)),
	} {
		e := &ehBuilder{addr: 0x5000}
		enc := byte(peUdata8)
		if name == "indirect pc_begin" {
			enc |= peIndirect // pc_begin cannot be dereferenced
		}
		c := e.cie(false, cat([]byte{1}, []byte("zR\x00"), uleb(1), sleb(-8), []byte{regRIP}, uleb(1), []byte{enc}, initialInsns))
		e.fde(false, c, func(uint64) []byte { return cat(le64(0x1000), le64(0x100), uleb(0), insns) })
		o := e.object()
		f, ok := o.find(0x1080)
		if name == "indirect pc_begin" {
			if ok {
				t.Errorf("%s: FDE with an indirect pc_begin accepted", name)
			}
			continue
		}
		if !ok {
			t.Fatalf("%s: FDE not found", name)
		}
		if _, ok := computeRow(&f, 0x1080, &o.bases); ok {
			t.Errorf("%s: accepted", name)
		}
	}
	// Broken records.
	for name, eh := range map[string][]byte{
		"length past the end": cat(le32(100), le32(0)),
		"bad CIE pointer":     cat(le32(20), le32(1000), le64(0x1000), le64(0x10)),
		"pointer to an FDE":   cat(le32(20), le32(4), le64(0x1000), le64(0x10)),
		"garbage":             {0xff, 0xff, 0xff, 0xff, 1},
	} {
		o := &object{eh: eh, ehAddr: 0x1000}
		o.buildIndex()
		if len(o.index) != 0 {
			t.Errorf("%s: indexed %d FDEs", name, len(o.index))
		}
	}
	for name, body := range map[string][]byte{
		"version 2":            {2, 0, 1, 0x78, 16},
		"unknown augmentation": {1, 'x', 0, 1, 0x78, 16},
		"code alignment 0":     {1, 0, 0, 0x78, 16},
		"ra is rsp":            {1, 0, 1, 0x78, regRSP},
		"aug data too long":    {1, 'z', 'R', 0, 1, 0x78, 16, 9, 0x1b},
		"v4 address size 4":    {4, 0, 4, 0, 1, 0x78, 16},
		"unterminated":         {1, 'z', 'R'},
	} {
		e := &ehBuilder{addr: 0x5000}
		off := e.cie(false, body)
		if _, ok := parseCIE(e.b, e.addr, off, &bases{}); ok {
			t.Errorf("CIE %s: accepted", name)
		}
	}
}

// The two CFA expressions binutils emits for PLT entries, and the DRAP one
// gcc emits for functions realigning the stack.
func TestExpressions(t *testing.T) {
	plt := func(lit byte) []byte {
		return []byte{opBreg7, 8, opBreg0 + 16, 0, opLit15, opAnd, opLit0 + lit, opGe, opLit0 + 3, opShl, opPlus}
	}
	s := snapshot{lo: 0x1000, b: make([]byte, 64)}
	putWord(s.b, 0x10, 0xabcdef)
	for _, c := range []struct {
		name string
		expr []byte
		pc   uint64
		want uint64
	}{
		{"lazy PLT at jmp", plt(11), 0x4030, 0x1008},
		{"lazy PLT at push", plt(11), 0x4036, 0x1008},
		{"lazy PLT after push", plt(11), 0x403b, 0x1010},
		{"lazy PLT end", plt(11), 0x403f, 0x1010},
		{"IBT PLT at endbr", plt(9), 0x4030, 0x1008},
		{"IBT PLT at push", plt(9), 0x4034, 0x1008},
		{"IBT PLT after push", plt(9), 0x4039, 0x1010},
		{"IBT PLT lit10", plt(10), 0x403a, 0x1010},
		{"DRAP", []byte{opBreg6, 0x78 /* -8 */, opDeref}, 0, 0xabcdef},
		{"consts and stack ops", []byte{opConst1s, 0xff, opConst2u, 2, 0, opSwap, opDup, opDrop, opOver, opRot, opPlus, opPlus, opNeg, opAbs}, 0, 3},
		{"bra taken", []byte{opLit1, opBra, 1, 0, opLit0 + 7, opLit0 + 9}, 0, 9},
		{"bra not taken", []byte{opLit0, opBra, 1, 0, opLit0 + 7}, 0, 7},
		{"skip", []byte{opSkip, 1, 0, opLit0 + 7, opLit0 + 5}, 0, 5},
		{"deref_size", []byte{opBreg7, 0x10, opDerefSize, 2}, 0, 0xcdef},
		{"bregx", []byte{opBregx, 6, 0x10}, 0, 0x1028},
		{"constu mul div mod", []byte{opConstu, 0x90, 0x01, opLit3, opMul, opLit0 + 7, opDiv, opLit0 + 10, opMod}, 0, (0x90 * 3 / 7) % 10},
		{"comparisons", []byte{opLit1, opLit2, opLt, opLit2, opLit1, opGt, opPlus, opLit1, opLit1, opEq, opPlus, opLit1, opLit2, opNe, opPlus, opLit2, opLit2, opLe, opPlus}, 0, 5},
		{"shifts", []byte{opConst1s, 0xf0, opLit1, opShra, opLit0 + 16, opLit0 + 2, opShr, opXor, opNot, opLit1, opOr, opPlusUconst, 1}, 0, ^((^uint64(7)) ^ 4) | 1 + 1},
	} {
		f := frame{pc: c.pc, sp: 0x1000, fp: 0x1018, fpOK: true}
		got, ok := evalExpr(c.expr, nil, &f, &s)
		if !ok || got != c.want {
			t.Errorf("%s: %#x %v, want %#x", c.name, got, ok, c.want)
		}
	}
	for name, expr := range map[string][]byte{
		"empty":             {},
		"unknown register":  {opBreg0 + 3, 0},
		"rbp unknown":       {opBreg6, 0},
		"deref outside":     {opBreg7, 0x40, opDeref},
		"stack underflow":   {opPlus},
		"division by zero":  {opLit1, opLit0, opDiv},
		"jump out":          {opSkip, 0x10, 0},
		"endless loop":      {opSkip, 0xfd, 0xff},
		"register location": {0x50},
		"overflow":          slices.Repeat([]byte{opLit1}, maxExprStack+1),
	} {
		f := frame{pc: 0x4000, sp: 0x1000, fp: 0x1008, fpOK: name != "rbp unknown"}
		if v, ok := evalExpr(expr, nil, &f, &s); ok {
			t.Errorf("%s: evaluated to %#x", name, v)
		}
	}
}

// .eh_frame_hdr tables in an encoding other than datarel|sdata4.
func TestHdrGenericTable(t *testing.T) {
	e := &ehBuilder{addr: 0x5000}
	c := e.cie(false, zrCIE())
	var offs []int
	for i := range 4 {
		offs = append(offs, e.fde(false, c, pcrel4FDE(0x1000+uint64(i)*0x100, 0x80, frameFunctionInsns())))
	}
	hdr := []byte{1, peUdata8, peUdata4, peUdata8}
	hdr = cat(hdr, le64(0x5000), le32(4))
	for i, off := range offs {
		hdr = cat(hdr, le64(0x1000+uint64(i)*0x100), le64(0x5000+uint64(off)))
	}
	o := &object{eh: e.b, ehAddr: 0x5000, hdr: hdr, hdrAddr: 0x9000}
	eh, ok := o.parseHdr()
	if !ok || eh != 0x5000 || o.tblCount != 4 {
		t.Fatalf("parseHdr: %#x %v, %d entries", eh, ok, o.tblCount)
	}
	checkRows(t, o, frameFunctionRows(0x1200)[:9])
	checkRows(t, o, []rowCase{{pc: 0x1080, noFound: true}, {pc: 0xfff, noFound: true}, {pc: 0x1380, noFound: true}})
}

// DWARF expression opcodes the tests spell out.
const (
	opBreg6 = opBreg0 + regRBP
	opBreg7 = opBreg0 + regRSP
	opLit1  = opLit0 + 1
	opLit2  = opLit0 + 2
	opLit3  = opLit0 + 3
	opLit15 = opLit0 + 15
)

// FuzzEHFrame feeds mutated .eh_frame and .eh_frame_hdr sections (seeded
// with the fixture's) to the parser, the lookup and the interpreter.
func FuzzEHFrame(f *testing.F) {
	ef, err := elf.Open(fixture(f, variants[0]))
	if err != nil {
		f.Fatal(err)
	}
	eh, hdr := ef.Section(".eh_frame"), ef.Section(".eh_frame_hdr")
	ehData, err := eh.Data()
	if err != nil {
		f.Fatal(err)
	}
	hdrData, err := hdr.Data()
	if err != nil {
		f.Fatal(err)
	}
	text := ef.Section(".text")
	ef.Close()
	f.Add(ehData, hdrData, text.Addr+5)
	f.Add(ehData, []byte{}, text.Addr+text.Size/2)
	f.Add(ehData[:len(ehData)/2], hdrData, text.Addr+text.Size-1)
	stack := make([]byte, 256)
	for i := range stack {
		stack[i] = byte(i)
	}
	f.Fuzz(func(t *testing.T, ehb, hdrb []byte, pc uint64) {
		o := &object{eh: ehb, ehAddr: eh.Addr, hdr: hdrb, hdrAddr: hdr.Addr, bases: bases{text: text.Addr, data: 0x4000}}
		if _, ok := o.parseHdr(); !ok {
			o.hdr, o.tblCount = nil, 0
			o.buildIndex()
		}
		fd, ok := o.find(pc)
		if !ok {
			return
		}
		if pc < fd.start || pc >= fd.end {
			t.Fatalf("FDE [%#x,%#x) for pc %#x", fd.start, fd.end, pc)
		}
		w := walker{snap: snapshot{lo: 0x10000, b: stack}}
		w.cfiStep(frame{pc: pc, sp: 0x10000, fp: 0x10010, fpOK: true}, &fd, pc, &o.bases)
	})
}
