package resolve

import (
	"bytes"
	"encoding/binary"

	"github.com/cudatap/cudatap/internal/procfs"
)

// callTarget finds the function the call instruction before return address
// ret called, following a PLT stub to the function it jumps to: when the
// runtime tail-calls the driver (cudaLaunchKernelExC jumps to
// cuLaunchKernelEx), the driver's return address is in the program, right
// after its call to the runtime's function. Reads the target's code with
// process_vm_readv; false when the bytes are no call it knows.
func callTarget(pid int, ret uint64) (uint64, bool) {
	var b [6]byte
	if ret < 6 || procfs.ReadMem(pid, ret-6, b[:]) != nil {
		return 0, false
	}
	var target uint64
	switch {
	case b[1] == 0xe8: // call rel32
		target = ret + uint64(int64(int32(binary.LittleEndian.Uint32(b[2:]))))
	case b[0] == 0xff && b[1] == 0x15: // call *disp32(%rip) (-fno-plt)
		slot := ret + uint64(int64(int32(binary.LittleEndian.Uint32(b[2:]))))
		var p [8]byte
		if procfs.ReadMem(pid, slot, p[:]) != nil {
			return 0, false
		}
		return binary.LittleEndian.Uint64(p[:]), true
	default:
		return 0, false
	}
	// A PLT stub: [endbr64] [bnd] jmp *disp32(%rip), through the GOT slot
	// the dynamic linker filled.
	var stub [16]byte
	if procfs.ReadMem(pid, target, stub[:]) != nil {
		return target, true
	}
	off := 0
	if bytes.HasPrefix(stub[:], []byte{0xf3, 0x0f, 0x1e, 0xfa}) {
		off = 4
	}
	if stub[off] == 0xf2 { // bnd
		off++
	}
	if stub[off] != 0xff || stub[off+1] != 0x25 {
		return target, true
	}
	slot := target + uint64(off) + 6 + uint64(int64(int32(binary.LittleEndian.Uint32(stub[off+2:]))))
	var p [8]byte
	if procfs.ReadMem(pid, slot, p[:]) != nil {
		return target, true
	}
	return binary.LittleEndian.Uint64(p[:]), true
}
