package flight

import (
	"github.com/cudatap/cudatap/tracer/event"
)

// What a window needs from before it. A call that makes lasting state
// (an allocation, a stream, a communicator, a kernel handle's name, the
// thread's device) is needed to read the calls after it: a free, a launch
// on the stream, a collective of the communicator. When such a call leaves
// the window while its state lives on, the recorder keeps its record in
// the process's state table, and a dump writes those records ahead of the
// window: replayed, they make the state again, with the stacks and times
// of the calls that made it. A call that enqueued GPU work the model has
// not seen complete yet is kept the same way (a hang's pending work).

type stateKind uint8

const (
	stateAlloc   stateKind = iota + 1 // device memory, by pointer
	stateHandle                       // physical memory (cuMemCreate), by handle
	stateHost                         // pinned host memory, by pointer
	stateStream                       // a stream created, by handle
	stateDevice                       // a thread's current device, by thread
	stateComm                         // an NCCL communicator, by handle
	stateFunc                         // a kernel handle's name (cuModuleGetFunction...), by handle
	statePending                      // a call whose GPU work is pending, by its sequence number
	stateFact                         // a note or GPU-time record of lasting meaning, by its sequence number
)

type stateKey struct {
	kind stateKind
	id   uint64
}

// budget is the part of a process's budget k's record counts against:
// lasting state 0, pending GPU work 1.
func (k stateKey) budget() int {
	if k.kind == statePending {
		return 1
	}
	return 0
}

// stateChange is what an event record does to the state: makes (or
// replaces) key, or ends it.
type stateChange struct {
	key  stateKey
	make bool
}

// changes reports what ev does to lasting state (at most one key).
func changes(ev *event.Event, a *event.Args) (stateChange, bool) {
	spec := ev.Spec()
	if spec == nil {
		return stateChange{}, false
	}
	ok := !ev.HasReturn() || ev.Ret == 0
	mem := stateAlloc
	if spec.Handle {
		mem = stateHandle
	}
	switch spec.Class {
	case event.ClassMalloc:
		if ev.Decode(a); ok && a.Ptr != 0 {
			return stateChange{stateKey{mem, a.Ptr}, true}, true
		}
	case event.ClassFree:
		if ev.Decode(a); a.Ptr != 0 {
			return stateChange{stateKey{mem, a.Ptr}, false}, true
		}
	case event.ClassHostAlloc, event.ClassHostRegister:
		if ev.Decode(a); ok && a.Ptr != 0 {
			return stateChange{stateKey{stateHost, a.Ptr}, true}, true
		}
	case event.ClassHostFree, event.ClassHostUnregister:
		if ev.Decode(a); a.Ptr != 0 {
			return stateChange{stateKey{stateHost, a.Ptr}, false}, true
		}
	case event.ClassStreamCreate:
		if ev.Decode(a); ok && a.Stream != 0 {
			return stateChange{stateKey{stateStream, a.Stream}, true}, true
		}
	case event.ClassStreamDestroy:
		ev.Decode(a)
		return stateChange{stateKey{stateStream, a.Stream}, false}, true
	case event.ClassSetDevice:
		if ok {
			return stateChange{stateKey{stateDevice, uint64(ev.TID)}, true}, true
		}
	case event.ClassCommInit:
		if ev.Decode(a); ok {
			return stateChange{stateKey{stateComm, a.Comm}, true}, true
		}
	case event.ClassFuncName:
		if ev.Decode(a); ok && a.Ptr != 0 {
			return stateChange{stateKey{stateFunc, a.Ptr}, true}, true
		}
	}
	return stateChange{}, false
}

// stateRecord is a record kept in a process's state table.
type stateRecord struct {
	seq     uint64
	typ     byte
	payload []byte
}
