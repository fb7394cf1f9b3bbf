package html

import (
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// The timeline's slices in full detail: every call, GPU op, sync and hold
// while they number at most Options.MaxSlices. A recording with more is
// replayed a second time (DetailPass) keeping only the slices of the
// busiest window that holds that many; outside it the page draws each
// row's occupancy per time bucket.

type hostSlice struct {
	row        int32
	pid, tid   uint32
	start, end uint64
	hold       uint64
	blocked    uint64
	bytes      uint64
	fn         uint64 // launches: the kernel
	seq        int
	gpuOp      int
	stream     int32
	api        event.API
	sym        uint8
	sync       model.SyncKind
	pageable   bool
	captured   bool
}

type opSlice struct {
	row, afterRow   int32
	pid, tid        uint32
	start, end      uint64
	enq, proven     uint64
	afterStart      uint64
	bytes           uint64
	fn              uint64
	id, call, after int
	kind            model.OpKind
	copy            event.MemcpyKind
	api             event.API
	device          int8
	measured, bound bool
	pageable        bool
	grid, block     event.Dim3
	stream          int32
}

type syncSlice struct {
	row           int32
	start         uint64
	blocked       uint64
	stream        int
	queued, polls int
	kind          model.SyncKind
	api           event.API
	sym           uint8
}

type holdSlice struct {
	row        int32
	start, end uint64
}

type detail struct {
	max      int
	from, to uint64 // the window of a detail pass; to == 0: everything
	n        int
	over     bool  // the first pass saw more than max: it keeps none
	dropped  int64 // a detail pass: slices in the window past max
	host     []hostSlice
	ops      []opSlice
	syncs    []syncSlice
	holds    []holdSlice
}

// admit says whether a slice over [start, end] is kept.
func (d *detail) admit(start, end uint64) bool {
	if d.over {
		return false
	}
	if d.to != 0 && (end < d.from || start >= d.to) {
		return false
	}
	if d.n >= d.max {
		if d.to == 0 {
			// Too many for one pass: the window is chosen at the end.
			d.over = true
			d.host, d.ops, d.syncs, d.holds = nil, nil, nil, nil
			return false
		}
		d.dropped++
		return false
	}
	d.n++
	return true
}

func (d *detail) call(row int, pid uint32, x *model.Call) {
	if !d.admit(x.Start, x.End) {
		return
	}
	s := hostSlice{row: int32(row), pid: pid, tid: x.TID, start: x.Start, end: x.End, hold: x.HoldNs, blocked: x.BlockedNs,
		seq: x.Seq, gpuOp: x.GPUOp, stream: x.Stream, api: x.API, sym: x.Symbol, sync: x.Sync, pageable: x.Pageable, captured: x.Captured}
	if spec := x.Spec(); spec != nil {
		switch spec.Class {
		case event.ClassLaunch:
			s.fn = x.Args.Func
		case event.ClassMemcpy, event.ClassMemset, event.ClassCollective:
			s.bytes = x.Args.Bytes
		case event.ClassMalloc, event.ClassHostAlloc:
			s.bytes = x.Args.Size
		}
	}
	d.host = append(d.host, s)
}

func (d *detail) sync(row int, s *model.Sync) {
	if !d.admit(s.Start, s.Start+s.BlockedNs) {
		return
	}
	d.syncs = append(d.syncs, syncSlice{row: int32(row), start: s.Start, blocked: s.BlockedNs, stream: s.Stream,
		queued: s.QueuedOps, polls: s.Polls, kind: s.Kind, api: s.API, sym: s.Symbol})
}

func (d *detail) hold(row int, h *model.Hold) {
	if !d.admit(h.Start, h.End) {
		return
	}
	d.holds = append(d.holds, holdSlice{row: int32(row), start: h.Start, end: h.End})
}

func (d *detail) op(row int, pid uint32, op *model.GPUOp, afterRow int) {
	if !d.admit(op.Start, op.End) {
		return
	}
	d.ops = append(d.ops, opSlice{row: int32(row), afterRow: int32(afterRow), pid: pid, tid: op.TID, start: op.Start, end: op.End,
		enq: op.Enqueued, proven: proven(op), afterStart: op.AfterStart, bytes: op.Bytes, fn: op.Func, id: op.ID, call: op.Call,
		after: op.After, kind: op.Kind, copy: op.CopyKind, api: op.API, device: op.Device,
		measured: op.Measured, bound: op.Bounded, pageable: op.Pageable, grid: op.Grid, block: op.Block, stream: int32(op.Stream)})
}

// DetailWindow is, after the first pass, the window of the recording to
// replay for detail: the run of time buckets holding the most slices but
// no more than 98% of Options.MaxSlices, or a single bucket holding more,
// whose first MaxSlices slices are then kept (it shows as many). need
// is false when the first pass kept every slice.
func (c *Collector) DetailWindow() (from, to uint64, need bool) {
	if !c.detail.over {
		return 0, 0, false
	}
	v := c.perBkt.v
	// Slices are counted where they start; those that began before the
	// window and reach into it are kept too: 2% to spare for them.
	limit := uint64(c.opts.MaxSlices - c.opts.MaxSlices/50)
	bestI, bestJ, best := 0, 0, uint64(0)
	var sum uint64
	i := 0
	for j := range v {
		if v[j] > limit {
			// Too many alone: it shows limit slices, in one bucket.
			if limit > best || limit == best && bestJ > bestI {
				bestI, bestJ, best = j, j, limit
			}
			sum, i = 0, j+1
			continue
		}
		sum += v[j]
		for sum > limit {
			sum -= v[i]
			i++
		}
		if sum > best {
			bestI, bestJ, best = i, j, sum
		}
	}
	return c.clock.start(bestI), c.clock.start(bestJ + 1), true
}

// DetailPass returns the sink of a second replay of the same recording:
// it keeps the slices of [from, to) (DetailWindow) for the timeline and
// nothing else.
func (c *Collector) DetailPass(from, to uint64) model.Sink {
	c.detail = detail{max: c.opts.MaxSlices, from: from, to: max(to, from+1)}
	return detailPass{c}
}

type detailPass struct{ c *Collector }

func (d detailPass) row(pid uint32, kind uint8, id int64) (int, bool) {
	i, ok := d.c.rowIdx[rowKey{pid, kind, id}]
	return i, ok
}

func (d detailPass) Call(p *model.Process, x *model.Call) {
	if i, ok := d.row(p.PID, rowHost, int64(x.TID)); ok {
		d.c.detail.call(i, p.PID, x)
	}
}

func (d detailPass) Sync(p *model.Process, s *model.Sync) {
	if s.Kind == model.SyncLegacyStream {
		return
	}
	if i, ok := d.row(p.PID, rowHost, int64(s.TID)); ok {
		d.c.detail.sync(i, s)
	}
}

func (d detailPass) GPUOp(p *model.Process, op *model.GPUOp) {
	if i, ok := d.row(p.PID, rowGPU, int64(op.Stream)); ok {
		d.c.detail.op(i, p.PID, op, d.c.rowIdxOf(p.PID, op.AfterStream))
	}
}

func (d detailPass) Dependency(*model.Process, *model.Dependency) {}

func (d detailPass) Hold(p *model.Process, h *model.Hold) {
	if i, ok := d.row(p.PID, rowHost, int64(h.TID)); ok {
		d.c.detail.hold(i, h)
	}
}
