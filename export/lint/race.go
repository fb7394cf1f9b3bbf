package lint

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// cross-stream-race: device memory written on one stream, then used on
// another with nothing known to order the use after the write (no event
// wait, no legacy stream rule, no host synchronization that proved the
// write complete). Copies and memsets say what they read and write. A
// kernel says only which pointers it was given (its parameter values, in
// records made with --kernel-args): each one inside a live device
// allocation is memory the kernel uses, and may have written; how far from
// the pointer it reads or writes is not known, so it stands for one byte.
// Only memory inside device allocations seen made (cudaMalloc and the
// like) counts: an address there is device memory, whatever the copy's
// direction says.
//
// What each pair of calls proves ranks its races (evidence): a copy or
// memset on both sides; a copy or memset then a kernel given the memory;
// a kernel then a copy or memset (the kernel may only have read it); two
// kernels (both may only have read it).

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

// cut drops what lies in [start, end): writes inside it, and the parts of
// those across its ends.
func (s *writes) cut(start, end uint64) {
	i, j := s.overlapping(start, end)
	if i == j {
		return
	}
	var keep [2]write
	n := 0
	if s.w[i].start < start {
		keep[n] = s.w[i]
		keep[n].end = start
		n++
	}
	if s.w[j-1].end > end {
		keep[n] = s.w[j-1]
		keep[n].start = end
		n++
	}
	s.w = slices.Replace(s.w, i, j, keep[:n]...)
}

// memory is what the race lint knows of a process's device memory.
type memory struct {
	allocs model.Ranges
	writes writes // what copies and memsets wrote
	// kernels: what kernels may have written, the pointers they were
	// given, a byte each. Apart from writes, so that a kernel given memory
	// a copy wrote leaves the copy's write standing: a later use races
	// with the copy, the better evidence.
	kernels writes
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
	m.writes.cut(start, end)
	m.kernels.cut(start, end)
}

// clear forgets every write: the host knows them all complete.
func (m *memory) clear() {
	m.writes.clear()
	m.kernels.clear()
}

// live is how many writes are kept.
func (m *memory) live() int { return len(m.writes.w) + len(m.kernels.w) }

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
	if m.live() >= maxWrites {
		c.compact(ps)
	}
	m.writes.put(write{start: start, end: end, stream: int32(sid), pos: pos, call: refOf(x)})
	m.kernels.cut(start, end) // the copy's now
}

// kernelPointers bounds the pointers of one launch the lint follows: every
// aligned word of the parameter values a launch record holds.
const kernelPointers = event.KernelBytes / 8

// kernelAccesses checks the memory a kernel on stream sid (its op at pos)
// was given, each pointer among its parameter values that lies in a live
// device allocation, against the live writes of other streams, then
// records each as a write the kernel may have made. Its parameters are the
// leading entries of kernelParams whose values could be copied: past the
// last one the array holds what the stack held, most often nothing
// readable.
func (c *Collector) kernelAccesses(ps *proc, x *model.Call, sid int, pos uint64) {
	m := &ps.mem
	lo, hi, ok := m.allocs.Bounds()
	if !ok {
		return
	}
	var seen [kernelPointers]uint64
	n := 0
	k := x.KernelArgs
	for _, v := range k.Words(k.Copied()) {
		if v < lo || v >= hi || slices.Contains(seen[:n], v) {
			continue // most words are no device pointer: one comparison
		}
		as, ae, ok := m.allocs.Find(v)
		if !ok {
			continue
		}
		seen[n] = v
		n++
		c.check(ps, x, sid, v, v+1, as, ae)
		if m.live() >= maxWrites {
			c.compact(ps)
		}
		m.kernels.put(write{start: v, end: v + 1, stream: int32(sid), pos: pos, call: refOf(x)})
	}
}

// check looks for a live write of another stream overlapping [start, end)
// that is not known to come before the op, a copy's or memset's before a
// kernel's; the first one found is booked as a possible race.
func (c *Collector) check(ps *proc, x *model.Call, sid int, start, end, allocStart, allocEnd uint64) bool {
	return c.checkIn(ps, &ps.mem.writes, x, sid, start, end, allocStart, allocEnd) ||
		c.checkIn(ps, &ps.mem.kernels, x, sid, start, end, allocStart, allocEnd)
}

func (c *Collector) checkIn(ps *proc, ws *writes, x *model.Call, sid int, start, end, allocStart, allocEnd uint64) bool {
	i, j := ws.overlapping(start, end)
	for k := i; k < j; k++ {
		w := &ws.w[k]
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
		if !w.call.kernel() && !use.kernel() {
			g.bytes += hi - lo // a kernel's extent is not known
		}
		return true
	}
	return false
}

// compact drops the writes the host knows complete and, if that is not
// enough, the oldest half (counted: races with them go unseen).
func (c *Collector) compact(ps *proc) {
	m := &ps.mem
	done := func(x write) bool { return ps.order.done(x.stream, x.pos) }
	m.writes.w = slices.DeleteFunc(m.writes.w, done)
	m.kernels.w = slices.DeleteFunc(m.kernels.w, done)
	if m.live() <= maxWrites/2 {
		return
	}
	starts := make([]uint64, 0, m.live())
	for _, ws := range []*writes{&m.writes, &m.kernels} {
		for i := range ws.w {
			starts = append(starts, ws.w[i].call.start)
		}
	}
	slices.Sort(starts)
	cut := starts[len(starts)-maxWrites/2]
	n := m.live()
	old := func(x write) bool { return x.call.start < cut }
	m.writes.w = slices.DeleteFunc(m.writes.w, old)
	m.kernels.w = slices.DeleteFunc(m.kernels.w, old)
	c.limits.Writes += int64(n - m.live())
}
