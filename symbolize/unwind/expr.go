package unwind

import "encoding/binary"

// snapshot is the copy of the target's stack: b holds the bytes at
// addresses [lo, lo+len(b)).
type snapshot struct {
	lo uint64
	b  []byte
}

func newSnapshot(rsp uint64, stack []byte) snapshot {
	if n := uint64(len(stack)); rsp+n < rsp { // would wrap past the top of the address space
		stack = stack[:-rsp]
	}
	return snapshot{lo: rsp, b: stack}
}

// read returns the n bytes (1, 2, 4 or 8) at addr, zero-extended, if the
// snapshot holds all of them.
func (s *snapshot) read(addr uint64, n int) (uint64, bool) {
	if addr < s.lo {
		return 0, false
	}
	off := addr - s.lo
	if uint64(len(s.b)) < uint64(n) || off > uint64(len(s.b)-n) {
		return 0, false
	}
	p := s.b[off:]
	switch n {
	case 1:
		return uint64(p[0]), true
	case 2:
		return uint64(binary.LittleEndian.Uint16(p)), true
	case 4:
		return uint64(binary.LittleEndian.Uint32(p)), true
	case 8:
		return binary.LittleEndian.Uint64(p), true
	}
	return 0, false
}

func (s *snapshot) word(addr uint64) (uint64, bool) { return s.read(addr, 8) }

// frame is what the unwinder knows of the registers of one frame.
type frame struct {
	pc, sp, fp uint64
	fpOK       bool // fp (rbp) is known
}

// reg returns the value of DWARF register reg in the frame: only rsp,
// rbp and rip are known.
func (f *frame) reg(reg uint64) (uint64, bool) {
	switch reg {
	case regRSP:
		return f.sp, true
	case regRBP:
		return f.fp, f.fpOK
	case regRIP:
		return f.pc, true
	}
	return 0, false
}

// Expression evaluation limits.
const (
	maxExprStack = 64
	maxExprSteps = 1000
)

// DWARF expression opcodes.
const (
	opAddr       = 0x03
	opDeref      = 0x06
	opConst1u    = 0x08
	opConst1s    = 0x09
	opConst2u    = 0x0a
	opConst2s    = 0x0b
	opConst4u    = 0x0c
	opConst4s    = 0x0d
	opConst8u    = 0x0e
	opConst8s    = 0x0f
	opConstu     = 0x10
	opConsts     = 0x11
	opDup        = 0x12
	opDrop       = 0x13
	opOver       = 0x14
	opPick       = 0x15
	opSwap       = 0x16
	opRot        = 0x17
	opAbs        = 0x19
	opAnd        = 0x1a
	opDiv        = 0x1b
	opMinus      = 0x1c
	opMod        = 0x1d
	opMul        = 0x1e
	opNeg        = 0x1f
	opNot        = 0x20
	opOr         = 0x21
	opPlus       = 0x22
	opPlusUconst = 0x23
	opShl        = 0x24
	opShr        = 0x25
	opShra       = 0x26
	opXor        = 0x27
	opBra        = 0x28
	opEq         = 0x29
	opGe         = 0x2a
	opGt         = 0x2b
	opLe         = 0x2c
	opLt         = 0x2d
	opNe         = 0x2e
	opSkip       = 0x2f
	opLit0       = 0x30
	opLit31      = 0x4f
	opBreg0      = 0x70
	opBreg31     = 0x8f
	opBregx      = 0x92
	opDerefSize  = 0x94
	opNop        = 0x96
)

// evalExpr evaluates a DWARF expression as used by CFI: the CFA
// expression (push is nil) or a register rule's expression (push is the
// CFA, pushed first). Registers other than rsp, rbp and rip are unknown,
// and memory is the stack snapshot. This covers the expressions gcc and
// binutils emit on x86-64: the PLT entries'
//
//	DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
//	DW_OP_lit11 (or lit10, lit5); DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
//
// the stack-realignment (DRAP) CFA "DW_OP_breg6 (rbp) -8; DW_OP_deref",
// and glibc's signal trampoline, which loads registers from the ucontext.
func evalExpr(expr []byte, push *uint64, f *frame, s *snapshot) (uint64, bool) {
	var st [maxExprStack]uint64
	n := 0
	if push != nil {
		st[0] = *push
		n = 1
	}
	r := reader{b: expr}
	for steps := 0; r.pos < len(expr); steps++ {
		if steps >= maxExprSteps {
			return 0, false
		}
		op := r.u8()
		// Operands first.
		var (
			val    uint64
			pushes bool
		)
		switch {
		case op >= opLit0 && op <= opLit31:
			val, pushes = uint64(op-opLit0), true
		case op >= opBreg0 && op <= opBreg31 || op == opBregx:
			reg := uint64(op - opBreg0)
			if op == opBregx {
				reg = r.uleb()
			}
			off := r.sleb()
			v, ok := f.reg(reg)
			if !ok || r.bad {
				return 0, false
			}
			val, pushes = v+uint64(off), true
		case op == opAddr:
			val, pushes = r.u64(), true
		case op == opConst1u:
			val, pushes = uint64(r.u8()), true
		case op == opConst1s:
			val, pushes = uint64(int64(int8(r.u8()))), true
		case op == opConst2u:
			val, pushes = uint64(r.u16()), true
		case op == opConst2s:
			val, pushes = uint64(int64(int16(r.u16()))), true
		case op == opConst4u:
			val, pushes = uint64(r.u32()), true
		case op == opConst4s:
			val, pushes = uint64(int64(int32(r.u32()))), true
		case op == opConst8u, op == opConst8s:
			val, pushes = r.u64(), true
		case op == opConstu:
			val, pushes = r.uleb(), true
		case op == opConsts:
			val, pushes = uint64(r.sleb()), true
		}
		if r.bad {
			return 0, false
		}
		if pushes {
			if n == len(st) {
				return 0, false
			}
			st[n] = val
			n++
			continue
		}
		// Stack operations.
		need := 0
		switch op {
		case opDeref, opDerefSize, opDup, opDrop, opPick, opAbs, opNeg, opNot, opPlusUconst, opBra:
			need = 1
		case opOver, opSwap, opAnd, opDiv, opMinus, opMod, opMul, opOr, opPlus,
			opShl, opShr, opShra, opXor, opEq, opGe, opGt, opLe, opLt, opNe:
			need = 2
		case opRot:
			need = 3
		}
		if n < need {
			return 0, false
		}
		switch op {
		case opNop:
		case opDeref, opDerefSize:
			size := 8
			if op == opDerefSize {
				size = int(r.u8())
				if r.bad || (size != 1 && size != 2 && size != 4 && size != 8) {
					return 0, false
				}
			}
			v, ok := s.read(st[n-1], size)
			if !ok {
				return 0, false
			}
			st[n-1] = v
		case opDup, opOver, opPick:
			idx := 0
			switch op {
			case opOver:
				idx = 1
			case opPick:
				idx = int(r.u8())
			}
			if r.bad || idx >= n || n == len(st) {
				return 0, false
			}
			st[n] = st[n-1-idx]
			n++
		case opDrop:
			n--
		case opSwap:
			st[n-1], st[n-2] = st[n-2], st[n-1]
		case opRot:
			st[n-1], st[n-2], st[n-3] = st[n-2], st[n-3], st[n-1]
		case opAbs:
			if int64(st[n-1]) < 0 {
				st[n-1] = -st[n-1]
			}
		case opNeg:
			st[n-1] = -st[n-1]
		case opNot:
			st[n-1] = ^st[n-1]
		case opPlusUconst:
			st[n-1] += r.uleb()
		case opBra:
			off := int16(r.u16())
			n--
			if st[n] != 0 && !jump(&r, off) {
				return 0, false
			}
		case opSkip:
			if !jump(&r, int16(r.u16())) {
				return 0, false
			}
		case opAnd, opDiv, opMinus, opMod, opMul, opOr, opPlus, opShl, opShr, opShra,
			opXor, opEq, opGe, opGt, opLe, opLt, opNe:
			a, b := st[n-2], st[n-1] // b was on top
			var v uint64
			switch op {
			case opAnd:
				v = a & b
			case opOr:
				v = a | b
			case opXor:
				v = a ^ b
			case opPlus:
				v = a + b
			case opMinus:
				v = a - b
			case opMul:
				v = a * b
			case opDiv:
				if b == 0 || (int64(a) == -1<<63 && int64(b) == -1) {
					return 0, false
				}
				v = uint64(int64(a) / int64(b))
			case opMod:
				if b == 0 {
					return 0, false
				}
				v = a % b
			case opShl:
				if b < 64 {
					v = a << b
				}
			case opShr:
				if b < 64 {
					v = a >> b
				}
			case opShra:
				v = uint64(int64(a) >> min(b, 63))
			case opEq:
				v = b2u(a == b)
			case opNe:
				v = b2u(a != b)
			case opGe:
				v = b2u(int64(a) >= int64(b))
			case opGt:
				v = b2u(int64(a) > int64(b))
			case opLe:
				v = b2u(int64(a) <= int64(b))
			case opLt:
				v = b2u(int64(a) < int64(b))
			}
			n--
			st[n-1] = v
		default:
			// Register location descriptions (DW_OP_reg*), TLS, calls,
			// piece descriptions, vendor extensions: not in CFI we handle.
			return 0, false
		}
		if r.bad {
			return 0, false
		}
	}
	if n == 0 {
		return 0, false
	}
	return st[n-1], true
}

func jump(r *reader, off int16) bool {
	p := r.pos + int(off)
	if p < 0 || p > len(r.b) {
		return false
	}
	r.pos = p
	return true
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
