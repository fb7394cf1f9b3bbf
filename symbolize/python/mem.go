package python

import (
	"encoding/binary"

	"github.com/cudatap/cudatap/internal/procfs"
)

// memory is where code objects are read from: the live process (mem) or
// the copies the BPF side made of them (copied).
type memory interface {
	read(addr uint64, b []byte) error
}

// mem reads another process's memory with process_vm_readv: no ptrace
// stop, no write, and a fault is an error instead of a signal.
type mem struct{ pid int }

// read fills b from the target's address addr.
func (m mem) read(addr uint64, b []byte) error { return procfs.ReadMem(m.pid, addr, b) }

func (m mem) u64(addr uint64) (uint64, error) {
	var b [8]byte
	if err := m.read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (m mem) u32(addr uint64) (uint32, error) {
	var b [4]byte
	if err := m.read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

func (m mem) u8(addr uint64) (uint8, error) {
	var b [1]byte
	if err := m.read(addr, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

// region is a copy of the target's memory at addr.
type region struct {
	addr uint64
	data []byte
}

// copied serves reads from copies of the target's memory, and what no copy
// holds whole from the live process (a string or line table longer than
// its copy), which may be gone.
type copied struct {
	regions []region
	live    mem
}

func (c copied) read(addr uint64, b []byte) error {
	for _, r := range c.regions {
		if addr >= r.addr && addr-r.addr+uint64(len(b)) <= uint64(len(r.data)) {
			copy(b, r.data[addr-r.addr:])
			return nil
		}
	}
	return c.live.read(addr, b)
}
