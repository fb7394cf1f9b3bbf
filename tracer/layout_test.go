package tracer

import (
	"testing"
	"unsafe"

	"github.com/cudatap/cudatap/tracer/event"
)

// The Go decoder's idea of the record layout must match the C struct.
func TestEventLayout(t *testing.T) {
	var e cudatapEvent
	if got := int(unsafe.Offsetof(e.Stack)); got != event.HeaderSize {
		t.Errorf("stack[] at %d, decoder assumes %d", got, event.HeaderSize)
	}
	if got := int(unsafe.Offsetof(e.Copy)); got != event.CopyOffset {
		t.Errorf("copy[] at %d, decoder assumes %d", got, event.CopyOffset)
	}
	if got := int(unsafe.Sizeof(e)); got != event.RecordSize {
		t.Errorf("struct event is %d bytes, decoder assumes %d", got, event.RecordSize)
	}
	if len(e.Py) != 2*event.MaxPy || len(e.Stack) != event.MaxStack || len(e.Args) != event.NArgs {
		t.Errorf("array sizes differ: py %d stack %d args %d", len(e.Py), len(e.Stack), len(e.Args))
	}
}

// Every counter of enum stat is read into Stats.
func TestStatCounters(t *testing.T) {
	var s Stats
	seen := map[*uint64]bool{}
	for i, f := range s.counters() {
		if f == nil {
			t.Errorf("stat %d is not read", i)
		}
		if seen[f] {
			t.Errorf("stat %d read into a field already used", i)
		}
		seen[f] = true
	}
}
