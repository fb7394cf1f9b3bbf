package probe

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

// The arm64 object cannot run here (no arm64 kernel); the root tests run
// the x86-64 one. These tests check that the arm64 object is the same
// program set built for the other ABI: the same programs, maps, variables
// and record types, and programs that read arm64's registers where the
// x86-64 ones read x86-64's (tracer/event's abi_test.go checks what the
// reads mean).

func loadObjects(t *testing.T) (x86, arm64 *ebpf.CollectionSpec) {
	t.Helper()
	x86, err := ebpf.LoadCollectionSpec("cudatap_x86_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	arm64, err = ebpf.LoadCollectionSpec("cudatap_arm64_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	return x86, arm64
}

func TestObjectsAlike(t *testing.T) {
	x86, arm64 := loadObjects(t)
	if got, want := slices.Sorted(maps.Keys(arm64.Programs)), slices.Sorted(maps.Keys(x86.Programs)); !slices.Equal(got, want) {
		t.Errorf("arm64 programs %v, x86-64 %v", got, want)
	}
	for name, p := range x86.Programs {
		q := arm64.Programs[name]
		if q == nil {
			continue
		}
		if q.Type != p.Type || q.AttachType != p.AttachType || q.SectionName != p.SectionName || q.License != p.License {
			t.Errorf("program %s: arm64 %v %v %q %q, x86-64 %v %v %q %q", name,
				q.Type, q.AttachType, q.SectionName, q.License, p.Type, p.AttachType, p.SectionName, p.License)
		}
	}
	if got, want := slices.Sorted(maps.Keys(arm64.Maps)), slices.Sorted(maps.Keys(x86.Maps)); !slices.Equal(got, want) {
		t.Errorf("arm64 maps %v, x86-64 %v", got, want)
	}
	for name, m := range x86.Maps {
		n := arm64.Maps[name]
		if n == nil {
			continue
		}
		if n.Type != m.Type || n.KeySize != m.KeySize || n.ValueSize != m.ValueSize || n.MaxEntries != m.MaxEntries || n.Flags != m.Flags {
			t.Errorf("map %s: arm64 %v %d/%d ×%d flags %#x, x86-64 %v %d/%d ×%d flags %#x", name,
				n.Type, n.KeySize, n.ValueSize, n.MaxEntries, n.Flags, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, m.Flags)
		}
	}
	if got, want := slices.Sorted(maps.Keys(arm64.Variables)), slices.Sorted(maps.Keys(x86.Variables)); !slices.Equal(got, want) {
		t.Errorf("arm64 variables %v, x86-64 %v", got, want)
	}
	// The records and keys user space decodes: one layout for both.
	for _, name := range []string{"event", "py_code", "inflight", "inflight_key", "agg_key", "launch_time_key", "launch_time", "py_config"} {
		var a, b *btf.Struct
		if err := x86.Types.TypeByName(name, &a); err != nil {
			t.Fatalf("x86-64 struct %s: %v", name, err)
		}
		if err := arm64.Types.TypeByName(name, &b); err != nil {
			t.Fatalf("arm64 struct %s: %v", name, err)
		}
		if layout(a) != layout(b) {
			t.Errorf("struct %s differs:\n x86-64 %s\n arm64  %s", name, layout(a), layout(b))
		}
	}
}

// layout names a struct's members with their offsets and sizes.
func layout(s *btf.Struct) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:", s.Size)
	for _, m := range s.Members {
		size, _ := btf.Sizeof(m.Type)
		fmt.Fprintf(&b, " %s@%d/%d", m.Name, m.Offset.Bytes(), size)
	}
	return b.String()
}

// TestObjectsReadTheirRegisters: each object's CUDA programs load from the
// probe's registers (ctx) exactly the fields of its architecture's
// register set that the ABI needs: argument registers, stack pointer,
// return value, and for stacks the instruction and frame pointers and (arm64)
// the link register that holds the caller.
func TestObjectsReadTheirRegisters(t *testing.T) {
	x86, arm64 := loadObjects(t)
	for _, tc := range []struct {
		arch string
		spec *ebpf.CollectionSpec
		want map[int16]string // ctx offset: register
	}{
		// struct pt_regs (arch/x86/include/uapi/asm/ptrace.h, x86-64).
		{"x86-64", x86, map[int16]string{112: "rdi", 104: "rsi", 96: "rdx", 88: "rcx", 72: "r8", 64: "r9",
			80: "rax", 128: "rip", 152: "rsp", 32: "rbp"}},
		// struct user_pt_regs {u64 regs[31], sp, pc, pstate} (arm64).
		{"arm64", arm64, map[int16]string{0: "x0", 8: "x1", 16: "x2", 24: "x3", 32: "x4", 40: "x5", 48: "x6", 56: "x7",
			232: "x29", 240: "x30", 248: "sp", 256: "pc"}},
	} {
		got := map[int16]bool{}
		for _, name := range []string{"cuda_entry", "cuda_entry_multi", "cuda_return", "cuda_return_multi"} {
			p := tc.spec.Programs[name]
			if p == nil {
				t.Fatalf("%s: no program %s", tc.arch, name)
			}
			for _, off := range ctxLoads(p.Instructions) {
				got[off] = true
			}
			for _, ins := range p.Instructions {
				if relo := btf.CORERelocationMetadata(&ins); relo != nil && tc.arch == "arm64" {
					t.Errorf("arm64 %s: CO-RE relocation %v (python.h's fs base is x86-64's)", name, relo)
				}
			}
		}
		for off := range got {
			if _, ok := tc.want[off]; !ok {
				t.Errorf("%s programs load ctx offset %d, not a register they need", tc.arch, off)
			}
		}
		for off, reg := range tc.want {
			if !got[off] {
				t.Errorf("%s programs never read %s (ctx offset %d)", tc.arch, reg, off)
			}
		}
	}
}

// ctxLoads returns the offsets of 8-byte loads from the program's context:
// r1 at entry, and the registers and stack slots it is copied to on some
// path (clang may keep ctx in a register on one branch and reuse that
// register on another, so the walk follows the jumps to a fixed point).
func ctxLoads(insns asm.Instructions) []int16 {
	type state struct {
		regs  [11]bool
		slots map[int16]bool // r10 offsets holding ctx
	}
	// Jumps count raw instruction slots (a 64-bit immediate load takes two).
	index := map[asm.RawInstructionOffset]int{}
	raw := make([]asm.RawInstructionOffset, len(insns))
	var off asm.RawInstructionOffset
	for i, ins := range insns {
		index[off], raw[i] = i, off
		off += asm.RawInstructionOffset(ins.Size() / asm.InstructionSize)
	}
	in := make([]*state, len(insns))
	in[0] = &state{slots: map[int16]bool{}}
	in[0].regs[asm.R1] = true
	// merge ORs s into instruction i's state; it reports a change.
	merge := func(i int, s *state) bool {
		if i >= len(insns) {
			return false
		}
		if in[i] == nil {
			in[i] = &state{regs: s.regs, slots: maps.Clone(s.slots)}
			return true
		}
		changed := false
		for r, v := range s.regs {
			if v && !in[i].regs[r] {
				in[i].regs[r], changed = true, true
			}
		}
		for k, v := range s.slots {
			if v && !in[i].slots[k] {
				in[i].slots[k], changed = true, true
			}
		}
		return changed
	}
	loads := map[int16]bool{}
	work := []int{0}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		ins := insns[i]
		s := &state{regs: in[i].regs, slots: maps.Clone(in[i].slots)}
		op := ins.OpCode
		regs, slots := &s.regs, s.slots
		switch {
		case op.Class().IsLoad() && op.Mode() == asm.MemMode:
			if regs[ins.Src] && ins.Src != asm.R10 && op.Size() == asm.DWord {
				loads[ins.Offset] = true
			}
			regs[ins.Dst] = ins.Src == asm.R10 && slots[ins.Offset]
		case op.Class().IsStore() && op.Mode() == asm.MemMode && ins.Dst == asm.R10:
			slots[ins.Offset] = op.Class() == asm.StXClass && regs[ins.Src]
		case op.Class().IsALU() && op.ALUOp() == asm.Mov && op.Source() == asm.RegSource:
			regs[ins.Dst] = regs[ins.Src]
		case op.Class().IsALU() || op.Class().IsLoad():
			regs[ins.Dst] = false
		case op.Class().IsJump() && op.JumpOp() == asm.Call:
			for r := asm.R0; r <= asm.R5; r++ {
				regs[r] = false
			}
		}
		next := []int{i + 1}
		if op.Class().IsJump() {
			switch jo := op.JumpOp(); {
			case jo == asm.Exit:
				next = nil
			case jo == asm.Call:
			case jo == asm.Ja:
				next = []int{index[raw[i]+1+asm.RawInstructionOffset(ins.Offset)]}
			default:
				next = append(next, index[raw[i]+1+asm.RawInstructionOffset(ins.Offset)])
			}
		}
		for _, j := range next {
			if merge(j, s) {
				work = append(work, j)
			}
		}
	}
	return slices.Sorted(maps.Keys(loads))
}
