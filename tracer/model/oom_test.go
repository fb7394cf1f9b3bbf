package model

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

const gib = uint64(1) << 30

// oomFailed is a cudaMalloc of size that failed for want of memory.
func oomFailed(tid uint32, t, size uint64) *ev {
	return malloc(tid, t, 50*us, 0, size).ret(errOutOfMemory)
}

// TestOOM: memory held at three places, then an allocation that fails
// twice (as PyTorch's caching allocator asks again after freeing its
// cache), then one that succeeds: one record with both attempts, what each
// place held at the last attempt, what was freed between, and the
// recovery.
func TestOOM(t *testing.T) {
	evs := []*ev{
		malloc(1, 1*ms, 10*us, 0x7f00_0000_0000, 40*gib).frames(0x401000, 0x402000),
		malloc(1, 2*ms, 10*us, 0x7f10_0000_0000, 30*gib).frames(0x401100, 0x402000),
		// A cached block the allocator lets go before asking again.
		malloc(1, 3*ms, 10*us, 0x7f20_0000_0000, 2*gib).frames(0x401300, 0x402000),
	}
	for i := range uint64(30) {
		evs = append(evs, malloc(1, 4*ms+i*ms, 10*us, 0x7f30_0000_0000+i*gib, gib).frames(0x401200, 0x402000))
	}
	evs = append(evs,
		// Another thread's allocations are not part of the request.
		launch(2, 40*ms, 0, 0x9000),
		oomFailed(1, 50*ms, 200*gib).frames(0x401400, 0x402000),
		free(1, 51*ms, 10*us, 0x7f20_0000_0000),
		oomFailed(1, 52*ms, 200*gib).frames(0x401400, 0x402000),
		free(1, 60*ms, 10*us, 0x7f00_0000_0000),
		malloc(1, 61*ms, 10*us, 0x7f40_0000_0000, gib).frames(0x401500, 0x402000),
	)
	p := run1(t, evs...)
	if p.OOMCount != 1 || len(p.OOMs) != 1 {
		t.Fatalf("%d failures, %d records, want 1", p.OOMCount, len(p.OOMs))
	}
	o := p.OOMs[0]
	if o.API != event.CudaMalloc || o.Size != 200*gib || o.Attempts != 2 || o.At != 50*ms || o.End != 52*ms+50*us || o.TID != 1 || o.Device != 0 {
		t.Errorf("record: %+v", o)
	}
	if o.Stack < 0 || p.Stacks[o.Stack][0] != 0x401400 {
		t.Errorf("the failed call's stack: %d", o.Stack)
	}
	if o.InUse != 100*gib || o.Allocations != 32 || o.Released != 2*gib {
		t.Errorf("held %d in %d allocations, released %d; want 100 GiB in 32, 2 GiB released", o.InUse, o.Allocations, o.Released)
	}
	want := []struct {
		pc           uint64
		bytes, count uint64
	}{{0x401000, 40 * gib, 1}, {0x401100, 30 * gib, 1}, {0x401200, 30 * gib, 30}}
	if len(o.Holders) != len(want) || o.Rest.Bytes != 0 || o.Rest.Sites != 0 {
		t.Fatalf("holders %+v, rest %+v", o.Holders, o.Rest)
	}
	for i, w := range want {
		h := o.Holders[i]
		if h.Stack < 0 || p.Stacks[h.Stack][0] != w.pc || h.Bytes != w.bytes || h.Count != w.count || h.API != event.CudaMalloc || h.Sites != 1 {
			t.Errorf("holder %d: %+v, want pc %#x, %d bytes in %d", i, h, w.pc, w.bytes, w.count)
		}
	}
	if len(o.ByAPI) != 1 || o.ByAPI[0].API != event.CudaMalloc || o.ByAPI[0].Bytes != 100*gib || o.ByAPI[0].Count != 32 || o.ByAPI[0].Sites != 3 {
		t.Errorf("by API: %+v", o.ByAPI)
	}
	if o.Calls != 37 || p.NCalls != 39 {
		t.Errorf("%d calls up to the last attempt, %d in all; want 37, 39", o.Calls, p.NCalls)
	}
	if !o.Recovered || o.RecoveredAt != 61*ms+10*us {
		t.Errorf("recovered %v at %d, want at the allocation after the frees", o.Recovered, o.RecoveredAt)
	}
	if p.DeviceMemInUse != 61*gib {
		t.Errorf("in use at the end %d, want 61 GiB", p.DeviceMemInUse)
	}
}

// TestOOMRequests: what makes failures one request or several, and which
// failures are out-of-memory ones.
func TestOOMRequests(t *testing.T) {
	// Died: no allocation succeeded after it.
	p := run1(t, malloc(1, ms, us, 0x7f00_0000_0000, gib), oomFailed(1, 2*ms, 8*gib))
	if len(p.OOMs) != 1 || p.OOMs[0].Recovered || p.OOMs[0].InUse != gib {
		t.Errorf("no recovery: %+v", p.OOMs)
	}

	// Another size, or another thread, is another request; a success of
	// the thread ends its request; other errors are no out-of-memory.
	p = run1(t,
		call(event.CudaSetDevice, 2, ms, us, 1),
		oomFailed(1, 2*ms, 8*gib),
		oomFailed(1, 3*ms, 4*gib),
		oomFailed(2, 4*ms, 4*gib),
		malloc(1, 5*ms, us, 0x7f00_0000_0000, gib),
		oomFailed(1, 6*ms, 4*gib),
		malloc(1, 7*ms, us, 0, 1<<50).ret(1), // cudaErrorInvalidValue
	)
	if p.OOMCount != 4 || len(p.OOMs) != 4 {
		t.Fatalf("%d failures, records %+v; want 4", p.OOMCount, p.OOMs)
	}
	for i, w := range []struct {
		size      uint64
		tid       uint32
		device    int8
		recovered bool
	}{{8 * gib, 1, 0, true}, {4 * gib, 1, 0, true}, {4 * gib, 2, 1, true}, {4 * gib, 1, 0, false}} {
		o := p.OOMs[i]
		if o.Size != w.size || o.TID != w.tid || o.Device != w.device || o.Recovered != w.recovered || o.Attempts != 1 {
			t.Errorf("record %d: %+v, want %+v", i, o, w)
		}
	}

	// The driver's failure inside the runtime's is one attempt, named by
	// the runtime's call, whichever comes first.
	drv := func(t0 uint64) *ev {
		return call(event.CuMemAlloc, 1, t0, 10*us, 0x7ffd2000, 8*gib).ret(errOutOfMemory)
	}
	for _, evs := range [][]*ev{
		{oomFailed(1, ms, 8*gib), drv(ms + 10*us)},
		{drv(ms + 10*us), oomFailed(1, ms, 8*gib)},
	} {
		p = run1(t, evs...)
		if len(p.OOMs) != 1 || p.OOMs[0].Attempts != 1 || p.OOMs[0].API != event.CudaMalloc {
			t.Errorf("nested: %+v", p.OOMs)
		}
	}

	// Past the bound, failures are counted, not kept.
	var evs []*ev
	for i := range uint64(maxOOMs + 6) {
		evs = append(evs, oomFailed(1, (i+1)*ms, gib+i))
	}
	p = run1(t, evs...)
	if p.OOMCount != maxOOMs+6 || len(p.OOMs) != maxOOMs {
		t.Errorf("%d failures, %d kept; want %d, %d", p.OOMCount, len(p.OOMs), maxOOMs+6, maxOOMs)
	}
}

// TestDeviceMemoryHandles: physical memory by handle (cuMemCreate,
// cuMemRelease) is followed apart from addresses, and its failures are
// out-of-memory ones too; an allocation over one never freed replaces it.
func TestDeviceMemoryHandles(t *testing.T) {
	create := func(t0, handle, size uint64) *ev {
		return call(event.CuMemCreate, 1, t0, 10*us, 0x7ffd2000, size, 0x7ffd3000, 0).out(handle)
	}
	release := func(t0, handle uint64) *ev { return call(event.CuMemRelease, 1, t0, 0, handle) }
	p := run1(t,
		// Handles close together: their sizes overlap as addresses would.
		create(ms, 0x5500_0010, 20<<20),
		create(2*ms, 0x5500_0020, 20<<20),
		malloc(1, 3*ms, us, 0x5500_0000, 1<<20), // an address among them
		release(4*ms, 0x5500_0010),
		create(5*ms, 0, 64*gib).ret(errOutOfMemory),
		// Reused without its free seen: the new one replaces the old.
		malloc(1, 6*ms, us, 0x5500_0000, 4<<20),
		malloc(1, 7*ms, us, 0x5500_0000+2<<20, 4<<20),
	)
	if len(p.OOMs) != 1 || p.OOMs[0].API != event.CuMemCreate || p.OOMs[0].InUse != 21<<20 || len(p.OOMs[0].ByAPI) != 2 ||
		p.OOMs[0].ByAPI[0].API != event.CuMemCreate || p.OOMs[0].ByAPI[0].Bytes != 20<<20 {
		t.Errorf("records: %+v", p.OOMs)
	}
	if p.DeviceMemInUse != 20<<20+4<<20 || p.DeviceMemPeak != 41<<20 {
		t.Errorf("in use %d, peak %d; want 24 MiB, 41 MiB", p.DeviceMemInUse, p.DeviceMemPeak)
	}
	if len(p.Syncs) != 0 {
		t.Errorf("cuMemRelease is no synchronization: %+v", p.Syncs)
	}
}

// TestOOMHolderBounds: past maxOOMHolders places the rest is added up, and
// past maxSites places they share one holder per API.
func TestOOMHolderBounds(t *testing.T) {
	var evs []*ev
	ts := ms
	for i := range uint64(maxSites + 10) {
		ts += us
		evs = append(evs, malloc(1, ts, us, 0x7f00_0000_0000+i<<21, 1<<20+i).frames(0x400000+i))
	}
	evs = append(evs, oomFailed(1, ts+ms, gib))
	p := run1(t, evs...)
	o := p.OOMs[0]
	// The ten places past the bound, together, hold the most.
	if len(o.Holders) != maxOOMHolders || !o.Holders[0].Other || o.Holders[0].Count != 10 || o.Holders[0].Stack != -1 ||
		o.Holders[1].Other || o.Holders[1].Bytes != 1<<20+maxSites-1 {
		t.Fatalf("holders: %+v", o.Holders[:2])
	}
	var sum, n uint64
	sites := 0
	for _, h := range append(o.Holders, o.Rest) {
		sum += h.Bytes
		n += h.Count
		sites += h.Sites
	}
	if sum != o.InUse || n != maxSites+10 || sites != maxSites+1 || o.ByAPI[0].Bytes != o.InUse {
		t.Errorf("holders add up to %d bytes in %d allocations at %d places; in use %d, %d allocations", sum, n, sites, o.InUse, maxSites+10)
	}
}
