package model

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// handleAll feeds events to m one at a time, as a replay does.
func handleAll(m *Model, evs ...*ev) {
	for _, e := range evs {
		m.Handle(&e.Event)
	}
}

// TestProcessesBounded: past maxProcesses, the calls of further processes
// go to the one process that stands for them, counted; none is lost.
func TestProcessesBounded(t *testing.T) {
	const extra = 10
	m := New(nil)
	for i := range maxProcesses + extra {
		pid := uint32(1000 + i)
		handleAll(m, launch(pid, uint64(i+1)*us, 0, 0x401000).pid(pid))
	}
	handleAll(m, launch(1000, 1*ms, 0, 0x401000).pid(1000)) // a process kept apart stays so
	m.AddProcess(5)                                         // a process record past the bound too
	r := m.Finish()
	if n := len(r.Processes); n != maxProcesses+1 {
		t.Fatalf("%d processes, want %d and the other one", n, maxProcesses)
	}
	other := r.Processes[0]
	if !other.Other || other.PID != OtherPID || other.NCalls != extra || !strings.Contains(other.Label(), "other processes") {
		t.Errorf("other process: pid %d, other %v, %d calls (want %d), label %q", other.PID, other.Other, other.NCalls, extra, other.Label())
	}
	if got := r.Drops.Limits.Processes; got != extra+1 {
		t.Errorf("Limits.Processes = %d, want %d", got, extra+1)
	}
	// Their threads are all the other one: tids of different processes.
	if _, ok := other.Threads[OtherTID]; len(other.Threads) != 1 || !ok || r.Drops.Limits.Threads != 0 {
		t.Errorf("other process: threads %v, %d threads merged; want tid %d only, none counted", other.Threads, r.Drops.Limits.Threads, OtherTID)
	}
	var calls int64
	for _, p := range r.Processes {
		calls += p.NCalls
	}
	if calls != maxProcesses+extra+1 {
		t.Errorf("%d calls in all, want %d", calls, maxProcesses+extra+1)
	}
	if !strings.Contains(r.Drops.Limits.Describe(), "11 processes past 1024") {
		t.Errorf("Describe() = %q", r.Drops.Limits.Describe())
	}
}

// TestThreadsBounded: past maxThreads in one process, further threads are
// its OtherTID, named so, counted; a per-thread default stream follows.
func TestThreadsBounded(t *testing.T) {
	const extra = 20
	c := NewCollector()
	m := New(c)
	for i := range maxThreads + extra {
		tid := uint32(testPID + i)
		handleAll(m, launch(tid, uint64(i+1)*us, 0, 0x401000).ptsz())
	}
	r := m.Finish()
	r.Name(NewNames())
	p := r.Processes[0]
	if n := len(p.Threads); n != maxThreads+1 {
		t.Errorf("%d threads, want %d and the other one", n, maxThreads)
	}
	if got := r.Drops.Limits.Threads; got != extra {
		t.Errorf("Limits.Threads = %d, want %d", got, extra)
	}
	calls := c.Traces[testPID].Calls
	if last := calls[len(calls)-1]; last.TID != OtherTID || p.Streams[last.Stream].OwnerTID != OtherTID {
		t.Errorf("last call: tid %d on stream %d (%s), want tid %d on its per-thread stream", last.TID, last.Stream, p.Streams[last.Stream].Label(), OtherTID)
	}
	if name := r.Names.Thread(testPID, OtherTID); name != "other threads" {
		t.Errorf("thread %d named %q", OtherTID, name)
	}
}

// TestThreadsTotalBounded: the bound over all processes holds too.
func TestThreadsTotalBounded(t *testing.T) {
	m := New(nil)
	procs := maxThreadsTotal/maxThreads + 1
	for i := range procs * maxThreads {
		pid, tid := uint32(1000+i/maxThreads), uint32(i)+1
		handleAll(m, launch(tid, uint64(i+1)*us, 0, 0x401000).pid(pid))
	}
	r := m.Finish()
	threads := 0
	for _, p := range r.Processes {
		threads += len(p.Threads)
	}
	if threads != maxThreadsTotal+1 || r.Drops.Limits.Threads != maxThreads {
		t.Errorf("%d threads, %d merged; want %d and %d", threads, r.Drops.Limits.Threads, maxThreadsTotal+1, maxThreads)
	}
}

// TestStreamsBounded: past maxStreams, work on further streams goes to
// one stream of the process, counted; created and pre-existing alike.
func TestStreamsBounded(t *testing.T) {
	const extra = 5
	m := New(nil)
	var evs []*ev
	for i := range maxStreams + extra {
		h := uint64(0x10000 + 16*i)
		if i%2 == 0 {
			evs = append(evs, streamCreate(1, uint64(2*i+1)*us, h))
		}
		evs = append(evs, launch(1, uint64(2*i+2)*us, h, 0x401000))
	}
	handleAll(m, evs...)
	handleAll(m, launch(1, 10*ms, 0x10000+16*(maxStreams+1), 0x401000)) // merged again: counted once
	r := m.Finish()
	p := r.Processes[0]
	if n := len(p.Streams); n != maxStreams+1 {
		t.Fatalf("%d streams, want %d and the other one", n, maxStreams)
	}
	other := p.Streams[maxStreams]
	if other.Kind != StreamOther || other.Stats.Launches != extra+2 || !strings.Contains(other.Label(), "past 1024") {
		t.Errorf("other stream: %s, %d launches, want %d", other.Label(), other.Stats.Launches, extra+2)
	}
	if got := r.Drops.Limits.Streams; got != extra+1 {
		t.Errorf("Limits.Streams = %d, want %d (the stream 0 counts)", got, extra+1)
	}
}

// TestTablesBounded: events, graphs, kernel names, allocations and poll
// loops past their bounds are not followed, and counted.
func TestTablesBounded(t *testing.T) {
	m := New(nil)
	t0 := uint64(1)
	next := func() uint64 { t0 += us; return t0 }
	for i := range maxEvents + 3 {
		handleAll(m, eventRecord(1, next(), uint64(0xe0000+i), 0))
	}
	for i := range maxKernelNames + 4 {
		getFn := call(event.CuModuleGetFunction, 1, next(), us, 0x7ffd0000, 0x6000, 0x7ffd1000).out(uint64(0xf0000 + i))
		getFn.HasStack, getFn.Copy = true, []byte("_Z3addPfS_i")
		handleAll(m, getFn)
	}
	for i := range maxRanges + 5 {
		handleAll(m, malloc(1, next(), us, uint64(0x7f00_0000_0000+(i*7919%(maxRanges+5))<<20), 1<<20))
	}
	for i := range maxPolls + 6 {
		handleAll(m, streamQuery(1, next(), us, uint64(0x50000+16*i), errNotReady))
	}
	r := m.Finish()
	l := r.Drops.Limits
	p := r.Processes[0]
	if l.Events != 3 || l.KernelNames != 4 || l.Allocations != 5 || l.Polls != 6 {
		t.Errorf("limits %+v, want 3 events, 4 kernel names, 5 allocations, 6 polls", l)
	}
	if p.DeviceMemInUse != maxRanges<<20 {
		t.Errorf("device memory in use %d, want the tracked allocations' %d", p.DeviceMemInUse, maxRanges<<20)
	}
	for _, s := range []string{"3 event records not followed", "4 kernel names not kept", "5 allocations not tracked", "6 query polls not followed"} {
		if !strings.Contains(l.Describe(), s) {
			t.Errorf("Describe() = %q, want %q in it", l.Describe(), s)
		}
	}
}

// TestRangesRandom: the binary-searched ranges agree with a plain list
// under random adds and removes, overlapping ones included.
func TestRangesRandom(t *testing.T) {
	type rg struct{ start, end uint64 }
	var r Ranges
	var ref []rg
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		start, size := rnd.Uint64N(1<<16), 1+rnd.Uint64N(64)
		if rnd.IntN(3) == 0 && len(ref) > 0 {
			x := ref[rnd.IntN(len(ref))]
			if start, end, ok := r.RemoveAt(x.start); !ok || start != x.start || end != x.end {
				t.Fatalf("step %d: RemoveAt(%d) = [%d, %d) %v, want [%d, %d)", i, x.start, start, end, ok, x.start, x.end)
			}
			ref = slices.DeleteFunc(ref, func(y rg) bool { return y == x })
			continue
		}
		r.Add(start, size, maxRanges)
		ref = slices.DeleteFunc(ref, func(y rg) bool { return y.start < start+size && start < y.end })
		ref = append(ref, rg{start, start + size})
		slices.SortFunc(ref, func(a, b rg) int { return int(a.start) - int(b.start) })
		if len(ref) != len(r.start) {
			t.Fatalf("step %d: %d ranges, want %d", i, len(r.start), len(ref))
		}
		for k := range ref {
			if r.start[k] != ref[k].start || r.end[k] != ref[k].end {
				t.Fatalf("step %d: range %d is [%d,%d), want [%d,%d)", i, k, r.start[k], r.end[k], ref[k].start, ref[k].end)
			}
		}
	}
}
