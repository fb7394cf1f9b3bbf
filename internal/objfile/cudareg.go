package objfile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
)

// KernelRegistrations finds, by reading the machine code of an ELF file,
// which kernel name each host stub of the file registers with the CUDA
// runtime: the code nvcc generates calls
//
//	__cudaRegisterFunction(handle, hostFun, deviceFun, deviceName, ...)
//
// once per kernel when the library loads, with hostFun (the stub the
// program passes to cudaLaunchKernel) and deviceFun (the kernel's mangled
// name) loaded by lea instructions. Stripped libraries (pip's PyTorch) have
// no symbol for their stubs, and a tracer that attaches after the
// registration cannot see it: this is how their kernels are named then.
//
// CUDA 13's generated stubs also keep a kernel handle each, in a static
// variable filled at the stub's first launch by
//
//	__cudaGetKernel(&handle, hostFun)
//
// and launch with __cudaLaunchKernel(handle, ...): those calls give each
// handle variable's address, so a tracer can read the handles from the
// process and name a launch by its handle.
//
// Calls it cannot decode (arguments computed otherwise, no PLT call) are
// skipped: a missing name, never a wrong one unless the code is unusual.
// The text is read in bounded chunks; nil without CUDA kernels.
func KernelRegistrations(r io.ReaderAt) (*Registrations, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	if f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%v: only x86-64 code is decoded", f.Machine)
	}
	regSlots, err := gotSlots(f, "__cudaRegisterFunction")
	if err != nil || len(regSlots) == 0 {
		return nil, err
	}
	getSlots, _ := gotSlots(f, "__cudaGetKernel")
	regStubs, getStubs := pltStubs(f, regSlots), pltStubs(f, getSlots)
	text := f.Section(".text")
	if text == nil {
		return nil, nil
	}
	out := &Registrations{Names: map[uint64]string{}, Handles: map[uint64]uint64{}, TextAddr: text.Addr, TextOffset: text.Offset}
	inText := func(vaddr uint64) bool { return vaddr >= text.Addr && vaddr < text.Addr+text.Size }
	// Chunks of the text, each read with the bytes before it (the code
	// that loads a call's arguments) and a few after (a call's operand).
	const chunk, before, after = 4 << 20, 96, 6
	buf := make([]byte, before+chunk+after)
	for off := uint64(0); off < text.Size; off += chunk {
		lead := min(off, before)
		start := off - lead
		b := buf[:min(uint64(len(buf)), lead+text.Size-off)]
		if _, err := text.ReadAt(b, int64(start)); err != nil && err != io.EOF {
			return out, err
		}
		n := uint64(len(b))
		for i := lead; i < lead+chunk && i+5 <= n; i++ {
			addr := text.Addr + start + i
			var register, getKernel bool
			switch {
			case b[i] == 0xe8: // call rel32, to a PLT stub
				target := addr + 5 + uint64(int64(int32(binary.LittleEndian.Uint32(b[i+1:]))))
				register, getKernel = regStubs[target], getStubs[target]
			case b[i] == 0xff && i+6 <= n && b[i+1] == 0x15: // call *slot(%rip)
				slot := addr + 6 + uint64(int64(int32(binary.LittleEndian.Uint32(b[i+2:]))))
				register, getKernel = regSlots[slot], getSlots[slot]
			}
			if !register && !getKernel {
				continue
			}
			from := i - min(i, before)
			regs := argRegisters(b[from:i], text.Addr+start+from)
			stub := regs[regRSI]
			if stub == 0 || !inText(stub) {
				continue
			}
			switch {
			case register && regs[regRDX] != 0:
				if s := cString(f, regs[regRDX]); s != "" {
					out.Names[stub-text.Addr+text.Offset] = s
				}
			case getKernel && regs[regRDI] != 0:
				out.Handles[regs[regRDI]] = stub - text.Addr + text.Offset
			}
		}
	}
	return out, nil
}

// Registrations is what KernelRegistrations found in a file.
type Registrations struct {
	Names   map[uint64]string // kernel name by its stub's file offset
	Handles map[uint64]uint64 // a stub's file offset by the vaddr of its handle variable (CUDA 13)
	// Where .text is: a vaddr of the file becomes a runtime address by the
	// bias of the mapping holding its text.
	TextAddr, TextOffset uint64
}

// Registers of the System V calling convention's first arguments.
const (
	regRDX = 2
	regRSI = 6
	regRDI = 7
)

// argRegisters finds the register values at a call from the code before
// it: rip-relative lea into a register, and register-to-register moves (the
// compiler keeps an address it needs again in a callee-saved register and
// moves it into place). Pattern matching, not decoding: what it cannot
// follow is left unknown (0).
func argRegisters(code []byte, base uint64) [16]uint64 {
	var regs [16]uint64
	for j := 0; j+3 <= len(code); j++ {
		rex := code[j]
		if rex&0xf8 != 0x48 { // REX.W, any R/X/B
			continue
		}
		op, modrm := code[j+1], code[j+2]
		r := int(modrm>>3&7) | int(rex>>2&1)<<3
		m := int(modrm&7) | int(rex&1)<<3
		switch {
		case op == 0x8d && modrm&0xc7 == 0x05 && j+7 <= len(code): // lea disp32(%rip), r
			regs[r] = base + uint64(j) + 7 + uint64(int64(int32(binary.LittleEndian.Uint32(code[j+3:]))))
		case op == 0x89 && modrm&0xc0 == 0xc0: // mov r, r/m
			regs[m] = regs[r]
		case op == 0x8b && modrm&0xc0 == 0xc0: // mov r/m, r
			regs[r] = regs[m]
		}
	}
	return regs
}

// gotSlots returns the addresses of the GOT slots through which the file
// calls the dynamic symbol name (jump slots, and GLOB_DAT for -fno-plt).
func gotSlots(f *elf.File, name string) (map[uint64]bool, error) {
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, nil // nothing imported
	}
	slots := map[uint64]bool{}
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_RELA {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			return nil, err
		}
		for i := 0; i+24 <= len(data); i += 24 {
			info := binary.LittleEndian.Uint64(data[i+8:])
			typ, sym := elf.R_X86_64(info&0xffffffff), int(info>>32)
			if (typ != elf.R_X86_64_JMP_SLOT && typ != elf.R_X86_64_GLOB_DAT) || sym == 0 || sym > len(syms) {
				continue
			}
			if s := syms[sym-1].Name; s == name || bytes.HasPrefix([]byte(s), []byte(name+"@")) {
				slots[binary.LittleEndian.Uint64(data[i:])] = true
			}
		}
	}
	return slots, nil
}

// pltStubs returns the entry addresses of the PLT stubs that jump through
// one of slots: [endbr64] [bnd] jmp *slot(%rip).
func pltStubs(f *elf.File, slots map[uint64]bool) map[uint64]bool {
	stubs := map[uint64]bool{}
	for _, name := range []string{".plt", ".plt.sec", ".plt.got"} {
		sec := f.Section(name)
		if sec == nil {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			continue
		}
		for i := 0; i+6 <= len(data); i++ {
			j := i
			if data[j] == 0xf2 { // bnd
				j++
			}
			if j+6 > len(data) || data[j] != 0xff || data[j+1] != 0x25 {
				continue
			}
			slot := sec.Addr + uint64(j) + 6 + uint64(int64(int32(binary.LittleEndian.Uint32(data[j+2:]))))
			if !slots[slot] {
				continue
			}
			// The entry starts at its 16-byte boundary (with endbr64
			// before the jump in IBT PLTs).
			stubs[sec.Addr+uint64(i)&^15] = true
			stubs[sec.Addr+uint64(i)] = true
		}
	}
	return stubs
}

// cString reads the NUL-terminated string at vaddr from the file's
// loadable sections (at most 4 KiB).
func cString(f *elf.File, vaddr uint64) string {
	for _, sec := range f.Sections {
		if sec.Type == elf.SHT_NOBITS || vaddr < sec.Addr || vaddr >= sec.Addr+sec.Size || sec.Flags&elf.SHF_ALLOC == 0 {
			continue
		}
		b := make([]byte, min(4096, sec.Addr+sec.Size-vaddr))
		if _, err := sec.ReadAt(b, int64(vaddr-sec.Addr)); err != nil && err != io.EOF {
			return ""
		}
		if i := bytes.IndexByte(b, 0); i > 0 {
			return string(b[:i])
		}
		return ""
	}
	return ""
}
