package model

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// TestPinnedRanges: which host ranges are pinned decides pageable vs pinned
// copies.
func TestPinnedRanges(t *testing.T) {
	const (
		alloc = 0x7f40_0000_0000 // cudaHostAlloc, 1 MiB
		mhost = 0x7f50_0000_0000 // cudaMallocHost, 64 KiB
		reg   = 0x5600_0000_0000 // cudaHostRegister'ed, 8 KiB
		plain = 0x5700_0000_0000 // never pinned
	)
	type cp struct {
		host, bytes uint64
		pageable    bool
	}
	steps := []struct {
		ev     *ev
		copies []cp
		pinned uint64 // PinnedBytes after the step
	}{
		{hostAlloc(1, 1000, alloc, 1<<20), []cp{
			{alloc, 1 << 20, false},         // all of it
			{alloc + 100, 1000, false},      // inside
			{alloc + 1<<20 - 10, 10, false}, // the last bytes
			{alloc + 1<<20 - 10, 11, true},  // runs past the end
			{alloc - 1, 2, true},            // starts before
			{plain, 64, true},
		}, 1 << 20},
		{mallocHost(1, 2000, mhost, 64<<10), []cp{{mhost + 512, 512, false}, {alloc + 5, 5, false}}, 1<<20 + 64<<10},
		{hostRegister(1, 3000, reg, 8192), []cp{{reg, 8192, false}, {reg + 4096, 4097, true}}, 1<<20 + 64<<10 + 8192},
		// A failed registration pins nothing.
		{hostRegister(1, 4000, plain, 4096).ret(712), []cp{{plain, 64, true}}, 1<<20 + 64<<10 + 8192},
		{freeHost(1, 5000, 10*us, alloc), []cp{{alloc + 100, 1000, true}, {mhost, 1, false}}, 64<<10 + 8192},
		{hostUnregister(1, 6000, reg), []cp{{reg, 8192, true}}, 64 << 10},
		// Freeing an address that starts no range changes nothing.
		{freeHost(1, 7000, 10*us, mhost+512), []cp{{mhost, 64 << 10, false}}, 64 << 10},
		{freeHost(1, 8000, 10*us, mhost), []cp{{mhost, 1, true}}, 0},
	}
	col := NewCollector()
	m := New(col)
	type check struct {
		op       int
		pageable bool
	}
	var checks []check
	ts := uint64(10_000)
	for i, s := range steps {
		ts += 10_000 // keep the thread's calls in time order
		if s.ev.End != 0 {
			s.ev.End = ts + s.ev.End - s.ev.Start
		}
		s.ev.Start = ts
		m.Handle(&s.ev.Event)
		for _, c := range s.copies {
			ts += 10_000
			// Alternate directions: the host side is src for HtoD, dst for DtoH.
			var e *ev
			if len(checks)%2 == 0 {
				e = memcpyAsync(1, ts, us, devA, c.host, c.bytes, event.HostToDevice, stream)
			} else {
				e = memcpyAsync(1, ts, us, c.host, devA, c.bytes, event.DeviceToHost, stream)
			}
			m.Handle(&e.Event)
			checks = append(checks, check{len(checks), c.pageable})
		}
		if got := m.procs[testPID].p.PinnedBytes; got != s.pinned {
			t.Errorf("step %d (%v): PinnedBytes %d, want %d", i, s.ev.API(), got, s.pinned)
		}
	}
	p := finish(m, col)[0]
	if len(p.GPUOps) != len(checks) {
		t.Fatalf("%d copies, want %d", len(p.GPUOps), len(checks))
	}
	for _, c := range checks {
		op := p.GPUOps[c.op]
		if op.Pageable != c.pageable {
			a := p.Calls[op.Call].Args
			t.Errorf("copy %d (%v dst %#x src %#x %d bytes): pageable %v, want %v", c.op, op.CopyKind, a.Dst, a.Src, a.Bytes, op.Pageable, c.pageable)
		}
		if (p.Calls[op.Call].Sync != SyncNone) != c.pageable {
			t.Errorf("copy %d: sync %d, want one exactly for pageable copies", c.op, p.Calls[op.Call].Sync)
		}
	}
}

// TestMemcpyDefaultDirection: cudaMemcpyDefault's direction comes from the
// device allocations seen.
func TestMemcpyDefaultDirection(t *testing.T) {
	p := run1(t,
		malloc(1, 1000, us, devA, 1<<20),
		mallocAsync(1, 2000, devB, 4096, stream),
		hostAlloc(1, 3000, hostP, 1<<20),
		memcpyAsync(1, 10_000, us, devA+64, hostP, 128, event.DefaultKind, stream),   // HtoD, pinned
		memcpyAsync(1, 20_000, ms, hostQ, devB+8, 128, event.DefaultKind, stream),    // DtoH, pageable
		memcpyAsync(1, 30_000, us, devB, devA, 4096, event.DefaultKind, stream),      // DtoD
		memcpyAsync(1, 40_000, us, hostQ, hostP, 64, event.DefaultKind, stream),      // HtoH
		memcpyAsync(1, 50_000, ms, devA+1<<20, hostQ, 64, event.DefaultKind, stream), // just past devA: host
		free(1, 3*ms, us, devA),
		memcpyAsync(1, 4*ms, us, devA, hostP, 8, event.DefaultKind, stream), // devA freed: HtoH
		memcpySync(1, 5*ms, ms, hostQ, devB, 16, event.DefaultKind),         // sync, DtoH
	)
	want := []struct {
		kind     event.MemcpyKind
		pageable bool
	}{
		{event.HostToDevice, false}, {event.DeviceToHost, true}, {event.DeviceToDevice, false},
		{event.HostToHost, false}, {event.HostToHost, false}, {event.HostToHost, false}, {event.DeviceToHost, true},
	}
	for i, w := range want {
		op := p.GPUOps[i]
		if op.CopyKind != w.kind || op.Pageable != w.pageable {
			t.Errorf("copy %d: %v pageable %v, want %v %v", i, op.CopyKind, op.Pageable, w.kind, w.pageable)
		}
	}
	wantSyncs(t, p, []Sync{
		{Kind: SyncPageableMemcpy, Call: 4, TID: 1, Stream: 1, Start: 20_000, BlockedNs: ms, QueuedOps: 1},
		{Kind: SyncFree, Call: 8, TID: 1, Stream: -1, Start: 3 * ms, BlockedNs: us, QueuedOps: 3},
		// The pre-existing stream is assumed blocking: its queued copy
		// serializes the legacy one.
		{Kind: SyncLegacyStream, Call: 10, TID: 1, Stream: 0, Start: 5 * ms, BlockedNs: 0, QueuedOps: 1},
		{Kind: SyncMemcpy, Call: 10, TID: 1, Stream: 0, Start: 5 * ms, BlockedNs: ms, QueuedOps: 0},
	})
	st := p.Streams[1].Stats
	if st.BytesHtoD != 128 || st.BytesDtoH != 128 || st.BytesDtoD != 4096 || st.BytesOther != 136 ||
		st.BytesPageable != 128 || st.BytesPinned != 128 {
		t.Errorf("stream stats %+v", st)
	}
}

func TestDeviceMemory(t *testing.T) {
	type step struct {
		ev          *ev
		inUse, peak uint64
	}
	steps := []step{
		{malloc(1, 1000, us, devA, 1000), 1000, 1000},
		{malloc(1, 2000, us, devB, 3000), 4000, 4000},
		{malloc(1, 3000, us, 0x7f30_0000_0000, 500).ret(2), 4000, 4000}, // cudaErrorMemoryAllocation
		{free(1, 4000, us, devA), 3000, 4000},
		{malloc(1, 4500, us, devA, 500), 3500, 4000}, // below the peak: the peak stays
		{free(1, 4600, us, devA), 3000, 4000},
		{free(1, 5000, us, devA), 3000, 4000},   // double free: nothing left to remove
		{free(1, 6000, us, devB+8), 3000, 4000}, // not an allocation's start
		{mallocAsync(1, 7000, devA, 2000, stream), 5000, 5000},
		{freeAsync(1, 8000, devA, stream), 3000, 5000},
		{call(event.CudaMalloc, 1, 9000, us, 0, 100).out(0), 3000, 5000}, // out pointer not read
		{free(1, 10_000, us, devB), 0, 5000},
	}
	m := New(nil)
	for i, s := range steps {
		m.Handle(&s.ev.Event)
		p := m.procs[testPID].p
		if p.DeviceMemInUse != s.inUse || p.DeviceMemPeak != s.peak {
			t.Errorf("step %d (%v): in use %d peak %d, want %d %d", i, s.ev.API(), p.DeviceMemInUse, p.DeviceMemPeak, s.inUse, s.peak)
		}
	}
}

func TestRanges(t *testing.T) {
	var r Ranges
	r.Add(100, 50, maxRanges)  // [100,150)
	r.Add(300, 100, maxRanges) // [300,400)
	r.Add(200, 10, maxRanges)  // [200,210)
	r.Add(500, 0, maxRanges)   // empty: ignored
	if len(r.start) != 3 || r.start[0] != 100 || r.start[1] != 200 || r.start[2] != 300 {
		t.Fatalf("ranges %v %v", r.start, r.end)
	}
	for _, c := range []struct {
		p, n uint64
		want bool
	}{
		{100, 50, true}, {100, 51, false}, {149, 1, true}, {150, 1, false}, {99, 1, false},
		{205, 5, true}, {205, 6, false}, {399, 1, true}, {0, 1, false}, {500, 1, false},
	} {
		if got := r.Contains(c.p, c.n); got != c.want {
			t.Errorf("contains(%d, %d) = %v, want %v", c.p, c.n, got, c.want)
		}
	}
	// A new range replaces the ones it overlaps.
	r.Add(140, 70, maxRanges) // [140,210) overlaps [100,150) and [200,210)
	if len(r.start) != 2 || r.start[0] != 140 || r.end[0] != 210 || r.start[1] != 300 {
		t.Errorf("after overlapping add: %v %v", r.start, r.end)
	}
	if _, _, ok := r.RemoveAt(141); ok {
		t.Errorf("RemoveAt inside a range removed one")
	}
	if start, end, ok := r.RemoveAt(140); !ok || end-start != 70 || len(r.start) != 1 {
		t.Errorf("RemoveAt(140) = [%d, %d) %v, %d left", start, end, ok, len(r.start))
	}
	r.Remove(350, 1)
	if len(r.start) != 0 {
		t.Errorf("remove did not drop the overlapping range: %v", r.start)
	}
}
