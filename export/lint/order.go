package lint

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/model"
)

// What orders GPU work across streams, followed with vector clocks: the
// n-th op of a stream is known to run after the first k ops of another
// stream when an event wait, the legacy default stream's implicit
// synchronization, or a host synchronization says so.

// tick: the first n ops of stream s.
type tick struct {
	stream int32
	n      uint64
}

// clock is a sparse vector clock, by stream.
type clock []tick

func (c clock) get(s int32) uint64 {
	for _, t := range c {
		if t.stream == s {
			return t.n
		}
		if t.stream > s {
			break
		}
	}
	return 0
}

// raise makes the clock hold at least the first n ops of stream s.
func (c *clock) raise(s int32, n uint64) {
	if n == 0 {
		return
	}
	i, found := slices.BinarySearchFunc(*c, s, func(t tick, s int32) int { return int(t.stream - s) })
	if found {
		(*c)[i].n = max((*c)[i].n, n)
		return
	}
	*c = slices.Insert(*c, i, tick{stream: s, n: n})
}

// join raises c to o, stream by stream.
func (c *clock) join(o clock) {
	for _, t := range o {
		c.raise(t.stream, t.n)
	}
}

// streamOrder is one stream: its ops so far, and the ops of other streams
// known to come before its next op.
type streamOrder struct {
	pos   uint64
	after clock
}

// order follows, per process, what is known to run before what.
type order struct {
	streams []streamOrder // by stream id, up to maxStreams
	used    []int32       // streams with ops, in the order first used
	host    clock         // ops the host knows complete
	events  map[uint64]clock
}

func (o *order) init() { o.events = map[uint64]clock{} }

func (o *order) stream(sid int) *streamOrder {
	for len(o.streams) <= sid {
		o.streams = append(o.streams, streamOrder{})
	}
	return &o.streams[sid]
}

// implicit applies the legacy default stream's rule before work is put on
// stream sid: work on the legacy stream waits for every blocking stream,
// work on a blocking stream waits for the legacy stream. It reports
// whether legacy work waited for work of blocking streams not known
// complete.
func (o *order) implicit(p *model.Process, sid int) (waited bool) {
	o.stream(sid)
	s := &o.streams[sid]
	if sid == 0 {
		for _, b := range o.used {
			if b == 0 || int(b) >= len(p.Streams) || !p.Streams[b].Blocking() {
				continue
			}
			bs := &o.streams[b]
			if bs.pos > max(s.after.get(b), o.host.get(b)) {
				waited = true
			}
			s.after.join(bs.after)
			s.after.raise(b, bs.pos)
		}
		return waited
	}
	if l := &o.streams[0]; l.pos > 0 && sid < len(p.Streams) && p.Streams[sid].Blocking() {
		s.after.join(l.after)
		s.after.raise(0, l.pos)
	}
	return false
}

// enqueue puts an op on stream sid and returns its position; ok is false
// for a stream past maxStreams (not followed).
func (o *order) enqueue(p *model.Process, sid int, limits *Limits) (pos uint64, ok, waited bool) {
	if sid >= maxStreams {
		limits.Streams++
		return 0, false, false
	}
	waited = o.implicit(p, sid)
	s := &o.streams[sid]
	pos = s.pos
	if pos == 0 {
		o.used = append(o.used, int32(sid))
	}
	s.pos++
	return pos, true, waited
}

// snapshot is stream sid's clock including its own ops so far, into buf.
func (o *order) snapshot(sid int, buf clock) clock {
	s := &o.streams[sid]
	buf = append(buf[:0], s.after...)
	buf.raise(int32(sid), s.pos)
	return buf
}

// record marks event ev at stream sid's current position.
func (o *order) record(p *model.Process, ev uint64, sid int, limits *Limits) {
	if sid >= maxStreams {
		limits.Streams++
		return
	}
	o.implicit(p, sid)
	old, known := o.events[ev]
	if !known && len(o.events) >= maxEvents {
		// Deterministically forget them all: waits on them are then
		// unknown, counted.
		limits.Events += int64(len(o.events))
		clear(o.events)
	}
	o.events[ev] = o.snapshot(sid, old)
}

// wait makes stream sid's next op run after event ev's position.
func (o *order) wait(ev uint64, sid int) {
	if sid >= maxStreams {
		return
	}
	if c, ok := o.events[ev]; ok {
		o.stream(sid).after.join(c)
	}
}

// forget drops a destroyed (or new) event's position.
func (o *order) forget(ev uint64) { delete(o.events, ev) }

// hostEvent: the host knows event ev's position complete.
func (o *order) hostEvent(ev uint64) {
	if c, ok := o.events[ev]; ok {
		o.host.join(c)
	}
}

// hostStream: the host knows stream sid drained, and with it what the
// stream waited for; draining the legacy stream drains the blocking
// streams too.
func (o *order) hostStream(p *model.Process, sid int) {
	if sid >= len(o.streams) {
		return
	}
	s := &o.streams[sid]
	o.host.join(s.after)
	o.host.raise(int32(sid), s.pos)
	if sid != 0 {
		return
	}
	for _, b := range o.used {
		if b != 0 && int(b) < len(p.Streams) && p.Streams[b].Blocking() {
			bs := &o.streams[b]
			o.host.join(bs.after)
			o.host.raise(b, bs.pos)
		}
	}
}

// hostAll: the host knows every stream drained.
func (o *order) hostAll() {
	for _, b := range o.used {
		o.host.raise(b, o.streams[b].pos)
	}
}

// done reports whether the host knows op pos of stream sid complete.
func (o *order) done(sid int32, pos uint64) bool { return pos < o.host.get(sid) }

// before reports whether op pos of stream from is known to run before the
// next op of stream to.
func (o *order) before(from int32, pos uint64, to int) bool {
	if int(from) == to || o.done(from, pos) {
		return true
	}
	return to < len(o.streams) && pos < o.streams[to].after.get(from)
}
