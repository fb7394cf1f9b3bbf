package procfs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ReadMem fills b from address addr of process pid with process_vm_readv:
// no ptrace stop, nothing written, a fault is an error.
func ReadMem(pid int, addr uint64, b []byte) error {
	for len(b) > 0 {
		local := []unix.Iovec{{Base: &b[0]}}
		local[0].SetLen(len(b))
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			return fmt.Errorf("read %d bytes at %#x in process %d: %w", len(b), addr, pid, err)
		}
		if n <= 0 {
			return fmt.Errorf("read %d bytes at %#x in process %d: %w", len(b), addr, pid, unix.EFAULT)
		}
		b = b[n:]
		addr += uint64(n)
	}
	return nil
}
