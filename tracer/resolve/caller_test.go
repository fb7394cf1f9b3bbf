package resolve

import (
	"os"
	"reflect"
	"testing"

	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// lateLookup knows this process only from its third ask, and takes every
// file for the runtime: a driver launch judged before then is asked again.
type lateLookup struct {
	noLookup
	asks int
}

func (l *lateLookup) Process(pid uint32) *symbolize.Process {
	if l.asks++; l.asks < 3 {
		return nil
	}
	p, _ := symbolize.NewProcess(int(pid), nil)
	return p
}

func (*lateLookup) IsRuntimeFile(uint32, string, uint64, string) bool { return true }

// TestCallerJudgedWhenKnown: a launch whose caller cannot be judged yet is
// not remembered as the program's own (the runtime's launches were counted
// twice for a whole run: TestPerSymbolUprobes under two make test at once);
// once the process is known, the caller is judged and remembered; and one
// in no mapping is given up after maxUnsure tries, not read for ever.
func TestCallerJudgedWhenKnown(t *testing.T) {
	pid := uint32(os.Getpid())
	caller := uint64(reflect.ValueOf(TestCallerJudgedWhenKnown).Pointer()) // in this test binary's text
	ev := &event.Event{}
	ev.PID, ev.Caller = pid, caller
	l := &lateLookup{}
	r := New(l, nil, nil, nil)
	for i, want := range []bool{false, false, true, true} {
		if got := r.viaRuntime(ev); got != want {
			t.Errorf("launch %d: via the runtime %v, want %v", i, got, want)
		}
	}
	if l.asks != 3 {
		t.Errorf("the process was looked up %d times, want 3 (remembered once judged)", l.asks)
	}

	// A caller in no mapping of a known process: given up after
	// maxUnsure tries, each of which re-read /proc/PID/maps.
	gone := New(&lateLookup{asks: 3}, nil, nil, nil)
	odd := *ev
	odd.Caller = 8 // in no mapping
	for range maxUnsure + 3 {
		gone.viaRuntime(&odd)
	}
	if v, ok := gone.callers[model.NameKey{PID: pid, Key: odd.Caller}]; !ok || v {
		t.Errorf("a caller in no mapping: remembered %v %v, want false after %d tries", v, ok, maxUnsure)
	}
}
