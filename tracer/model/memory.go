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
