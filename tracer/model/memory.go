package model

import (
	"cmp"
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
)

// devMem is the device memory a process holds through CUDA: each live
// allocation with its size and the place that made it, and what each
// place holds, so that an out-of-memory failure can say who held the
// memory at that moment. Bounded: at most maxRanges live allocations
// (past them an allocation is not followed, Limits.Allocations) and
// maxSites places (past them a place's memory goes to one per API).
type devMem struct {
	ranges  Ranges               // allocations by address: copies' directions (copyKind)
	live    map[uint64]liveAlloc // by address
	handles map[uint64]liveAlloc // physical memory by handle (cuMemCreate)
	sites   []siteMem
	index   map[siteKey]int32
	inUse   uint64
}

type liveAlloc struct {
	size uint64
	site int32
}

// siteKey is a place that allocates: the API and the call's stacks.
type siteKey struct {
	api       event.API
	symbol    uint8
	stack, py int32
}

// otherSites is the stack of the places past maxSites (one per API).
const otherSites = -2

// maxSites bounds the distinct allocating places followed per process.
const maxSites = 4096

type siteMem struct {
	key      siteKey
	bytes, n uint64
}

func (d *devMem) site(k siteKey) int32 {
	if d.index == nil {
		d.index = map[siteKey]int32{}
	}
	i, ok := d.index[k]
	if !ok && len(d.sites) >= maxSites {
		k.stack, k.py = otherSites, otherSites
		i, ok = d.index[k]
	}
	if !ok {
		i = int32(len(d.sites))
		d.sites = append(d.sites, siteMem{key: k})
		d.index[k] = i
	}
	return i
}

// alloc follows a successful allocation of size bytes at ptr (a handle
// when handle) made at k, and reports whether it is followed. What it
// overlaps was freed unseen (a free lost, or the driver's allocation
// inside the runtime's): it is let go first.
func (d *devMem) alloc(ptr, size uint64, k siteKey, handle bool) bool {
	if size == 0 {
		return true
	}
	if d.live == nil {
		d.live, d.handles = map[uint64]liveAlloc{}, map[uint64]liveAlloc{}
	}
	if handle {
		d.free(ptr, true)
	} else {
		for {
			start, ok := d.ranges.overlap(ptr, size)
			if !ok {
				break
			}
			d.free(start, false)
		}
	}
	if len(d.live)+len(d.handles) >= maxRanges {
		return false
	}
	i := d.site(k)
	if handle {
		d.handles[ptr] = liveAlloc{size: size, site: i}
	} else {
		d.ranges.Add(ptr, size, maxRanges)
		d.live[ptr] = liveAlloc{size: size, site: i}
	}
	d.sites[i].bytes += size
	d.sites[i].n++
	d.inUse += size
	return true
}

// free lets the allocation at ptr (a handle when handle) go and returns
// its size, 0 when it was not followed.
func (d *devMem) free(ptr uint64, handle bool) uint64 {
	m := d.live
	if handle {
		m = d.handles
	} else {
		d.ranges.RemoveAt(ptr)
	}
	l, ok := m[ptr]
	if !ok {
		return 0
	}
	delete(m, ptr)
	s := &d.sites[l.site]
	s.bytes -= l.size
	s.n--
	d.inUse -= l.size
	return l.size
}

// allocations is the number of live allocations followed.
func (d *devMem) allocations() uint64 { return uint64(len(d.live) + len(d.handles)) }

// maxOOMHolders bounds the places an out-of-memory record names; the
// others are added up in OOM.Rest.
const maxOOMHolders = 16

// holders says who holds the memory now: the places holding most, at
// most maxOOMHolders, the others together, and the memory by API.
func (d *devMem) holders() (top []MemHolder, rest MemHolder, byAPI []MemHolder) {
	order := make([]int32, 0, len(d.sites))
	apis := map[event.API]int{}
	for i := range d.sites {
		s := &d.sites[i]
		if s.bytes == 0 {
			continue
		}
		order = append(order, int32(i))
		j, ok := apis[s.key.api]
		if !ok {
			j = len(byAPI)
			apis[s.key.api] = j
			byAPI = append(byAPI, MemHolder{API: s.key.api, Stack: -1, PyStack: -1})
		}
		byAPI[j].Bytes += s.bytes
		byAPI[j].Count += s.n
		byAPI[j].Sites++
	}
	// Most memory first; ties in the order the places first allocated.
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(d.sites[b].bytes, d.sites[a].bytes) })
	slices.SortStableFunc(byAPI, func(a, b MemHolder) int { return cmp.Compare(b.Bytes, a.Bytes) })
	for n, i := range order {
		s := &d.sites[i]
		h := MemHolder{API: s.key.api, Symbol: s.key.symbol, Stack: s.key.stack, PyStack: s.key.py, Bytes: s.bytes, Count: s.n, Sites: 1}
		if s.key.stack == otherSites {
			h.Stack, h.PyStack, h.Other = -1, -1, true
		}
		if n < maxOOMHolders {
			top = append(top, h)
			continue
		}
		rest.Bytes += h.Bytes
		rest.Count += h.Count
		rest.Sites++
	}
	rest.Stack, rest.PyStack = -1, -1
	return top, rest, byAPI
}

// overlap returns the start of the first range overlapping [start,
// start+size); ok is false when none does.
func (r *Ranges) overlap(start, size uint64) (uint64, bool) {
	end := start + max(size, 1)
	if end < start {
		end = ^uint64(0)
	}
	i, _ := slices.BinarySearch(r.end, start+1)
	if i < len(r.start) && r.start[i] < end {
		return r.start[i], true
	}
	return 0, false
}

// A cudaMalloc taking longer than this while work was queued is reported as
// an implicit synchronization.
const mallocSyncThreshold = 1_000_000 // ns

// malloc follows an allocation of device memory, or of physical memory
// by handle (cuMemCreate): held from its return, by the place that made
// it. A failure for want of memory is an out-of-memory record (oom.go).
func (m *Model) malloc(ps *procState, spec *event.Spec, _ *event.Event) {
	p, call := ps.p, &m.call
	a := &call.Args
	switch {
	case !call.failed() && a.Ptr != 0:
		if !ps.mem.alloc(a.Ptr, a.Size, siteKey{api: call.API, symbol: call.Symbol, stack: call.Stack, py: call.PyStack}, spec.Handle) {
			m.drops.Limits.Allocations++
		}
		p.DeviceMemInUse = ps.mem.inUse
		p.DeviceMemPeak = max(p.DeviceMemPeak, p.DeviceMemInUse)
		ps.allocated(call.TID, call.End)
	case call.HasRet && int32(call.Ret) == errOutOfMemory:
		m.outOfMemory(ps, call, spec)
	}
	if !a.HasStream && !spec.Handle && call.Duration() > mallocSyncThreshold {
		if q := m.queuedAll(ps); q > 0 {
			m.addSync(ps, SyncMalloc, -1, q)
		}
	}
}

// free follows a release of device memory. cudaFree synchronizes the
// device; cudaFree(NULL) only initializes the context, cudaFreeAsync is
// stream-ordered and cuMemRelease lets physical memory go once unmapped.
func (m *Model) free(ps *procState, spec *event.Spec, _ *event.Event) {
	p, call := ps.p, &m.call
	ptr := call.Args.Ptr
	if ptr != 0 {
		ps.mem.free(ptr, spec.Handle)
		p.DeviceMemInUse = ps.mem.inUse
	}
	if spec.Sync && ptr != 0 {
		m.addSync(ps, SyncFree, -1, m.queuedAll(ps))
		m.boundAll(ps, boundTime(call))
	}
}

// hostAlloc follows cudaHostAlloc and cudaMallocHost: pinned host memory,
// which copies from or to it do not wait for.
func (m *Model) hostAlloc(ps *procState, _ *event.Spec, _ *event.Event) {
	a := &m.call.Args
	if !m.call.failed() && a.Ptr != 0 && m.track(&ps.pinned, a.Ptr, a.Size) {
		ps.p.PinnedBytes += a.Size
	}
}

// hostRegister follows cudaHostRegister: host memory pinned in place.
func (m *Model) hostRegister(ps *procState, _ *event.Spec, _ *event.Event) {
	a := &m.call.Args
	if !m.call.failed() && m.track(&ps.pinned, a.Ptr, a.Size) {
		ps.p.PinnedBytes += a.Size
	}
}

// hostFree follows cudaFreeHost, which synchronizes the device.
func (m *Model) hostFree(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	ptr := call.Args.Ptr
	ps.p.PinnedBytes -= min(ps.p.PinnedBytes, removed(&ps.pinned, ptr))
	if ptr != 0 {
		m.addSync(ps, SyncFree, -1, m.queuedAll(ps))
		m.boundAll(ps, boundTime(call))
	}
}

// hostUnregister follows cudaHostUnregister: the memory is pageable again.
func (m *Model) hostUnregister(ps *procState, _ *event.Spec, _ *event.Event) {
	ps.p.PinnedBytes -= min(ps.p.PinnedBytes, removed(&ps.pinned, m.call.Args.Ptr))
}

// memcpy follows a copy: on its stream, or on the default one when it
// takes none; pinned or pageable by what its host side is. A synchronous
// copy, and an asynchronous one from or to pageable memory, waited for its
// stream to drain up to it.
func (m *Model) memcpy(ps *procState, spec *event.Spec, ev *event.Event) {
	p := ps.p
	call := &m.call
	a := &call.Args
	if call.Stream < 0 {
		// Synchronous copies run on the default stream of the build.
		call.Stream = int32(m.streamID(ps, 0, spec.PerThreadDefault(ev.SymbolIndex()), call.TID, call.Start))
	}
	kind := a.Kind
	if kind == event.DefaultKind {
		kind = ps.direction(a.Dst, a.Src)
	}
	host := uint64(0)
	switch kind {
	case event.HostToDevice:
		host = a.Src
	case event.DeviceToHost:
		host = a.Dst
	}
	pageable := host != 0 && !ps.pinned.Contains(host, max(a.Bytes, 1))
	call.Pageable = pageable
	s := &p.Streams[call.Stream].Stats
	s.Memcpys++
	switch kind {
	case event.HostToDevice:
		s.BytesHtoD += a.Bytes
	case event.DeviceToHost:
		s.BytesDtoH += a.Bytes
	case event.DeviceToDevice:
		s.BytesDtoD += a.Bytes
	default:
		s.BytesOther += a.Bytes
	}
	if host != 0 {
		if pageable {
			s.BytesPageable += a.Bytes
		} else {
			s.BytesPinned += a.Bytes
		}
	}
	sid := int(call.Stream)
	queued := m.queued(ps, sid)
	op := m.enqueue(ps, GPUOp{Kind: OpMemcpy, Bytes: a.Bytes, CopyKind: kind, Pageable: pageable})
	if op < 0 {
		return // captured into a graph
	}
	switch {
	case spec.Sync && kind != event.DeviceToDevice && kind != event.HostToHost:
		m.addSync(ps, SyncMemcpy, sid, queued)
	case !spec.Sync && pageable:
		m.addSync(ps, SyncPageableMemcpy, sid, queued)
	default:
		return
	}
	// The host returned only once the stream had drained up to this copy.
	m.boundStream(ps, sid, op, call.End)
	if sid == 0 {
		m.boundBlocking(ps, call.End) // the legacy stream waited for them first
	}
}

// memset follows a memset, which a synchronous one waited for.
func (m *Model) memset(ps *procState, spec *event.Spec, ev *event.Event) {
	p := ps.p
	call := &m.call
	if call.Stream < 0 {
		call.Stream = int32(m.streamID(ps, 0, spec.PerThreadDefault(ev.SymbolIndex()), call.TID, call.Start))
	}
	sid := int(call.Stream)
	p.Streams[sid].Stats.Memsets++
	queued := m.queued(ps, sid)
	op := m.enqueue(ps, GPUOp{Kind: OpMemset, Bytes: call.Args.Bytes})
	if spec.Sync && op >= 0 {
		m.addSync(ps, SyncMemset, sid, queued)
		m.boundStream(ps, sid, op, call.End)
		if sid == 0 {
			m.boundBlocking(ps, call.End)
		}
	}
}

// direction infers a cudaMemcpyDefault copy's direction from the device
// allocations seen.
func (ps *procState) direction(dst, src uint64) event.MemcpyKind {
	d, s := ps.mem.ranges.Contains(dst, 1), ps.mem.ranges.Contains(src, 1)
	switch {
	case d && s:
		return event.DeviceToDevice
	case d:
		return event.HostToDevice
	case s:
		return event.DeviceToHost
	}
	return event.HostToHost
}
