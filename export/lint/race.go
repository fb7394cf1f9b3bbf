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
	allocs model.Ranges
	writes writes
}

func (m *memory) alloc(p, size uint64, limits *Limits) {
	if !m.allocs.Add(p, size, maxAllocs) {
		limits.Allocs++
	}
}

// free drops an allocation and the writes inside it.
func (m *memory) free(p uint64) {
	start, end, ok := m.allocs.RemoveAt(p)
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
	_, _, d := m.allocs.Find(dst)
	_, _, s := m.allocs.Find(src)
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
	allocStart, allocEnd, ok = m.allocs.Find(p)
	if !ok || n == 0 {
		return 0, 0, 0, 0, false
	}
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
