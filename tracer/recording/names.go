package recording

import (
	"encoding/json"

	"github.com/cudatap/cudatap/tracer/model"
)

type nameKey struct {
	pid uint32
	key uint64
}

// Names holds what a recording resolved while the processes lived; its
// methods are the model.Options callbacks of a replay.
type Names struct {
	procs   map[uint32]model.ProcessInfo
	threads map[nameKey]string
	kernels map[nameKey]string
	frames  map[nameKey]string
	py      map[pyKey]string
}

type pyKey struct {
	pid         uint32
	code, instr uint64
}

func (n *Names) addPy(pid uint32, code, instr uint64, name string) {
	n.py[pyKey{pid, code, instr}] = name
}

// NewNames returns empty tables.
func NewNames() *Names {
	return &Names{procs: map[uint32]model.ProcessInfo{}, threads: map[nameKey]string{},
		kernels: map[nameKey]string{}, frames: map[nameKey]string{}, py: map[pyKey]string{}}
}

func (n *Names) add(typ byte, pid uint32, key uint64, name string) {
	switch typ {
	case recProcess:
		var info model.ProcessInfo
		if json.Unmarshal([]byte(name), &info) == nil {
			n.procs[pid] = info
		}
	case recThread:
		n.threads[nameKey{pid, key}] = name
	case recKernel:
		n.kernels[nameKey{pid, key}] = name
	case recFrame:
		n.frames[nameKey{pid, key}] = name
	}
}

// Options returns model options that answer from the tables.
func (n *Names) Options() model.Options {
	return model.Options{
		ProcessInfo: func(pid uint32) model.ProcessInfo { return n.procs[pid] },
		ThreadName:  func(pid, tid uint32) string { return n.threads[nameKey{pid, uint64(tid)}] },
		KernelName:  func(pid uint32, addr uint64) string { return n.kernels[nameKey{pid, addr}] },
		FrameName:   func(pid uint32, addr uint64) string { return n.frames[nameKey{pid, addr}] },
		PyFrameName: func(pid uint32, code, instr uint64) string { return n.py[pyKey{pid, code, instr}] },
	}
}
