package lint

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// cross-stream-race: device memory a copy or memset wrote on one stream,
// then read or written by a copy or memset on another stream, with nothing
// known to order the second after the first (no event wait, no legacy
// stream rule, no host synchronization that proved the write complete).
// Only memory inside device allocations seen made (cudaMalloc and the
// like) counts: an address there is device memory, whatever the copy's
// direction says. Kernels read and write memory too, but their arguments
// are not traced: the lint sees copies and memsets only.

// spans is a set of disjoint [start, end) ranges sorted by start.
type spans struct{ start, end []uint64 }

func (r *spans) find(p uint64) int {
	i, found := slices.BinarySearch(r.start, p)
	if !found {
		i--
	}
	if i >= 0 && p < r.end[i] {
		return i
	}
	return -1
}

func (r *spans) add(start, size uint64) {
	end := start + size
	j := 0
	for i := range r.start { // overlapping ranges are replaced
		if r.start[i] < end && start < r.end[i] {
			continue
		}
		r.start[j], r.end[j] = r.start[i], r.end[i]
		j++
	}
	r.start, r.end = r.start[:j], r.end[:j]
	i, _ := slices.BinarySearch(r.start, start)
	r.start = slices.Insert(r.start, i, start)
	r.end = slices.Insert(r.end, i, end)
}

func (r *spans) removeAt(p uint64) (start, end uint64, ok bool) {
	i, found := slices.BinarySearch(r.start, p)
	if !found {
		return 0, 0, false
	}
	start, end = r.start[i], r.end[i]
	r.start = slices.Delete(r.start, i, i+1)
	r.end = slices.Delete(r.end, i, i+1)
	return start, end, true
}

// write is a range of device memory an op wrote, until it is known
// complete.
type write struct {
	start, end uint64
	stream     int32
	pos        uint64 // the op's position on its stream
	call       ref
}

// writes are the live writes, disjoint and sorted by start.
type writes struct{ w []write }

func (s *writes) clear() { s.w = s.w[:0] }

// overlapping returns the index range of the writes overlapping [start, end).
func (s *writes) overlapping(start, end uint64) (i, j int) {
	i, _ = slices.BinarySearchFunc(s.w, start, func(w write, p uint64) int {
		if w.end <= p {
			return -1
		}
		return 1
	})
	j = i
	for j < len(s.w) && s.w[j].start < end {
		j++
	}
	return i, j
}

// put records w, cutting what it overwrites out of older writes.
func (s *writes) put(w write) {
	i, j := s.overlapping(w.start, w.end)
	var keep [3]write
	n := 0
	if i < j && s.w[i].start < w.start {
		left := s.w[i]
		left.end = w.start
		keep[n] = left
		n++
	}
	keep[n] = w
	n++
	if i < j && s.w[j-1].end > w.end {
		right := s.w[j-1]
		right.start = w.end
		keep[n] = right
		n++
	}
	s.w = slices.Replace(s.w, i, j, keep[:n]...)
}

// memory is what the race lint knows of a process's device memory.
type memory struct {
	allocs spans
	writes writes
}

func (m *memory) alloc(p, size uint64, limits *Limits) {
	if size == 0 {
		return
	}
	if len(m.allocs.start) >= maxAllocs {
		limits.Allocs++
		return
	}
	m.allocs.add(p, size)
}

// free drops an allocation and the writes inside it.
func (m *memory) free(p uint64) {
	start, end, ok := m.allocs.removeAt(p)
	if !ok {
		return
	}
	i, j := m.writes.overlapping(start, end)
	if i < j {
		// An allocation's writes lie inside it: no cutting needed.
		m.writes.w = slices.Delete(m.writes.w, i, j)
	}
}

// direction infers a cudaMemcpyDefault copy's direction, as the model does.
func (m *memory) direction(dst, src uint64) event.MemcpyKind {
	d, s := m.allocs.find(dst) >= 0, m.allocs.find(src) >= 0
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

// device clips [p, p+n) to the device allocation p lies in; ok is false
// when p lies in none.
func (m *memory) device(p, n uint64) (start, end, allocStart, allocEnd uint64, ok bool) {
	i := m.allocs.find(p)
	if i < 0 || n == 0 {
		return 0, 0, 0, 0, false
	}
	allocStart, allocEnd = m.allocs.start[i], m.allocs.end[i]
	return p, min(p+n, allocEnd), allocStart, allocEnd, true
}

// accesses checks the memory a copy or memset on stream sid (its op at
// pos) reads and writes against the live writes of other streams, then
// records what it writes.
func (c *Collector) accesses(ps *proc, x *model.Call, class event.Class, sid int, pos uint64) {
	a := &x.Args
	m := &ps.mem
	raced := false
	if class == event.ClassMemcpy {
		if start, end, as, ae, ok := m.device(a.Src, a.Bytes); ok {
			raced = c.check(ps, x, sid, start, end, as, ae)
		}
	}
	start, end, as, ae, ok := m.device(a.Dst, a.Bytes)
	if !ok {
		return
	}
	if !raced {
		c.check(ps, x, sid, start, end, as, ae)
	}
	if len(m.writes.w) >= maxWrites {
		c.compact(ps)
	}
	m.writes.put(write{start: start, end: end, stream: int32(sid), pos: pos, call: refOf(x)})
}

// check looks for a live write of another stream overlapping [start, end)
// that is not known to come before the op; the first one found is booked
// as a possible race.
func (c *Collector) check(ps *proc, x *model.Call, sid int, start, end, allocStart, allocEnd uint64) bool {
	m := &ps.mem
	i, j := m.writes.overlapping(start, end)
	for k := i; k < j; k++ {
		w := &m.writes.w[k]
		if ps.order.before(w.stream, w.pos, sid) {
			continue
		}
		use := refOf(x)
		key := groupKey{a: w.call.site(), b: use.site(), sa: w.stream, sb: int32(sid)}
		g := ps.groups[lRace].get(key, &c.limits)
		if g == nil {
			return true
		}
		lo, hi := max(start, w.start), min(end, w.end)
		if g.count == 0 {
			g.calls = [2]ref{w.call, use}
			g.addr, g.allocStart, g.allocSize = lo, allocStart, allocEnd-allocStart
		}
		g.count++
		g.bytes += hi - lo
		return true
	}
	return false
}

// compact drops the writes the host knows complete and, if that is not
// enough, the oldest half (counted: races with them go unseen).
func (c *Collector) compact(ps *proc) {
	w := ps.mem.writes.w
	w = slices.DeleteFunc(w, func(x write) bool { return ps.order.done(x.stream, x.pos) })
	if len(w) > maxWrites/2 {
		starts := make([]uint64, len(w))
		for i := range w {
			starts[i] = w[i].call.start
		}
		slices.Sort(starts)
		cut := starts[len(starts)-maxWrites/2]
		n := len(w)
		w = slices.DeleteFunc(w, func(x write) bool { return x.call.start < cut })
		c.limits.Writes += int64(n - len(w))
	}
	ps.mem.writes.w = w
}
