package model

import (
	"cmp"
	"slices"
)

// NameKey is a per-process key: a thread id or an address.
type NameKey struct {
	PID uint32
	Key uint64
}

// PyNameKey is a per-process Python frame position.
type PyNameKey struct {
	PID uint32
	PyKey
}

// Mapping is a file mapped into a process, as the process saw it: [Start,
// Limit) maps File from Offset.
type Mapping struct {
	File    string // path as the process sees it
	BuildID string // hex GNU build ID, "" when the file has none
	Start   uint64
	Limit   uint64
	Offset  uint64
}

// Names holds what a resolver learnt about raw keys while the processes
// lived: process and thread names, the ELF symbols of kernel stubs, stack
// frames and Python lines, and the mappings that hold the stack frames. The model never consults it; exporters join it
// with the model's raw keys, so a replay names things the same whatever
// order the name records come in.
type Names struct {
	Procs   map[uint32]ProcessInfo
	Threads map[NameKey]string
	Kernels map[NameKey]string // raw (mangled) symbol at a host address
	Frames  map[NameKey]string // "function (object)" of a stack address
	Py      map[PyNameKey]string
	// Mappings holds, by process and start address, the mappings of the
	// files that code of stack frames lies in.
	Mappings map[NameKey]Mapping
}

// NewNames returns empty tables.
func NewNames() *Names {
	return &Names{Procs: map[uint32]ProcessInfo{}, Threads: map[NameKey]string{}, Kernels: map[NameKey]string{},
		Frames: map[NameKey]string{}, Py: map[PyNameKey]string{}, Mappings: map[NameKey]Mapping{}}
}

// Thread is the name of a thread, "" when unknown.
func (n *Names) Thread(pid, tid uint32) string { return n.Threads[NameKey{pid, uint64(tid)}] }

// Kernel is the raw symbol at a host address of pid, "" when unknown.
func (n *Names) Kernel(pid uint32, addr uint64) string { return n.Kernels[NameKey{pid, addr}] }

// Frame names a stack address of pid, "" when unknown.
func (n *Names) Frame(pid uint32, addr uint64) string { return n.Frames[NameKey{pid, addr}] }

// PyFrame is the "file:line function" of a Python frame, "" when unknown.
// Names are kept by k.Site(); recordings made before that keep them by
// the whole key.
func (n *Names) PyFrame(pid uint32, k PyKey) string {
	if s, ok := n.Py[PyNameKey{pid, k.Site()}]; ok {
		return s
	}
	return n.Py[PyNameKey{pid, k}]
}

// MappingsOf lists the mappings known of pid, by start address.
func (n *Names) MappingsOf(pid uint32) []Mapping {
	var out []Mapping
	for k, m := range n.Mappings {
		if k.PID == pid {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// Flags the Python stack walkers keep in the top bits of PyKey.Instr, above
// any instruction pointer or f_lasti (bpf/python.h; symbolize/python's
// InstrEntry and InstrEntryKnown).
const (
	PyInstrEntry      = 1 << 63
	PyInstrEntryKnown = 1 << 62
)

// Site is k without the walkers' flags: what names it (a frame entered
// from C or not is at the same line).
func (k PyKey) Site() PyKey {
	k.Instr &^= PyInstrEntry | PyInstrEntryKnown
	return k
}

// Entry reports whether the frame was entered from C: the first frame of
// an activation of the interpreter's evaluation loop, which runs it and the
// Python functions it calls from Python (py-spy's "entry" frames; up to
// Python 3.10 every frame). known is false in recordings made before the
// walkers set it, and for the last frame of a walk cut short.
func (k PyKey) Entry() (entry, known bool) {
	return k.Instr&PyInstrEntry != 0, k.Instr&PyInstrEntryKnown != 0
}
