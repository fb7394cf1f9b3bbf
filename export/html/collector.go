// Package html makes the cudatap report: the verdicts, the lines to change
// and a picture of a recording, as terminal text and as one self-contained
// HTML page (inline script, style and data; it makes no request) with a
// zoomable timeline of every thread and stream, NVML plots on the same time
// axis, and the analyses: overlap of copy, compute and communication per
// device, idle gaps on each stream with what the host did meanwhile, queue
// depth and launch rates, top kernels, device memory over time with who
// holds it, and the hidden synchronizations (export/syncs, the same sites
// as the summary) with their stacks and fix hints.
//
// A Collector is a model.Sink fed by replaying a recording. Its memory is
// bounded, never by the number of events: time series live in a fixed
// number of buckets that widen as the recording grows; per-slice detail is
// kept for at most Options.MaxSlices slices, in the busiest window when the
// recording holds more (a second, detail pass collects them); live device
// allocations are attributed to their stacks up to Options.MaxLive; rows,
// kernels and gaps are capped. What does not fit is counted, and the page
// says what was aggregated.
//
// GPU times are shown as the model knows them: measured (CUPTI, --gpu-times)
// or bounded (the op ran after its enqueue and was proven complete by a
// synchronization); a bounded op is drawn hatched where the model laid it
// out, and analyses that would need its real duration give the bound
// ("at most") rather than an invented number.
package html

import (
	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/steps"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Options bound the collector's memory and tune the report.
type Options struct {
	// MaxSlices is how many calls, GPU ops, syncs and holds the timeline
	// shows in full detail (0: 20,000); past it the busiest window that
	// holds that many is shown in detail and the rest as occupancy.
	MaxSlices int
	// Buckets is the resolution of every time series (0: 1024).
	Buckets int
	// MaxLive is how many live device allocations are attributed to their
	// stacks, over all processes (0: 1<<17).
	MaxLive int
	// MaxRows bounds the timeline's thread and stream rows (0: 256); the
	// threads and streams past it share one row per process.
	MaxRows int
	// TopGaps is how many idle gaps each stream lists (0: 5).
	TopGaps int
	// MaxOps bounds the distinct GPU operations (kernel, copy kind, ...)
	// the top list tells apart (0: 4096); the rest are counted as "other".
	MaxOps int
	// Title heads the page ("" : the processes' names); Version is
	// cudatap's.
	Title, Version string
	// Also, when set, is fed the first replay too: aggregates a caller
	// wants of the same recording (the JSON summary's stragglers).
	Also model.Sink
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxSlices, 20_000)
	def(&o.Buckets, 1024)
	def(&o.MaxLive, 1<<17)
	def(&o.MaxRows, 256)
	def(&o.TopGaps, 5)
	def(&o.MaxOps, 4096)
	return o
}

// Limits that are not options.
const (
	maxIntervals = 1 << 14 // per device and kind of overlap measure before settling
	ringSize     = 1024    // recent host calls kept per process, for what the host did in a gap
	ringProcs    = 64      // processes that keep such a ring
	maxDepth     = 1 << 16 // queue depth tracked exactly per stream
)

// Row kinds.
const (
	rowHost = iota
	rowGPU
)

// otherID is the id of a process's row for the threads or streams past
// Options.MaxRows.
const otherID = -1

type rowKey struct {
	pid  uint32
	kind uint8
	id   int64 // thread id, stream id, or otherID
}

// Occupancy categories of a row (drawn when a part of the timeline is
// aggregated): host rows by what the call did, GPU rows by op kind.
const (
	hostLaunch = iota // launches and other enqueues
	hostCopy          // memcpy, memset
	hostSync          // calls that blocked for the GPU
	hostMem           // allocations and frees
	hostOther
	hostHeld // held by cudatap while it hooked a library
	numCats
)

const (
	gpuKernel = iota
	gpuCopy
	gpuComm
	gpuOther
)

type row struct {
	key   rowKey
	first uint64
	count *sumSeries
	occ   [numCats]*spanSeries
	// GPU rows: the ops queued or running, integrated over time (an upper
	// bound where ops are not measured); launches by enqueue time; the
	// devices its ops ran on; gaps and depth.
	queue    *spanSeries
	launches *sumSeries
	devices  uint64
	ops      int64
	measured int64
	firstEnq uint64
	lastDone uint64
	gaps     gapState
	depth    depthState
	merged   int // threads or streams folded into an "other" row
}

func (c *Collector) occupy(r *row, cat int, start, end uint64) {
	if r.occ[cat] == nil {
		r.occ[cat] = c.clock.newSpan()
	}
	r.occ[cat].add(start, end)
}

type procState struct {
	pid      uint32
	p        *model.Process
	ring     *ring
	mem      memState
	launches *sumSeries // launch calls by time
	launchN  int64
	blocked  uint64
	syncs    int64
	deps     int64
	hostRows int
	gpuRows  int
}

// Collector is the report's model.Sink: feed it a replay of a recording
// (or a live session), then Build the report. Syncs collects the
// synchronization sites for the summary and the report alike; Lints runs
// the lints (as `cudatap lint` does); Steps finds the training steps (as
// the summary's). Each sees every event (also).
type Collector struct {
	opts  Options
	clock *clock
	Syncs *syncs.Collector
	Lints *lint.Collector
	Steps *steps.Detector
	also  model.Sinks // Syncs, Lints, Steps

	procs  map[uint32]*procState
	order  []*procState
	rows   []*row
	rowIdx map[rowKey]int
	merged int // rows folded into "other" rows

	devices map[int8]*deviceState

	ops     map[opKey]*opStats
	opsOver int64

	live     int // live allocations attributed, over all processes
	detail   detail
	firstT   uint64
	lastT    uint64
	gpuFirst uint64 // the first GPU op's enqueue and the last op's end: the timeline's first view
	gpuLast  uint64
	nSlices  int64 // every slice the timeline could show
	perBkt   *sumSeries
	counts   counts
}

type counts struct {
	calls, ops, syncs, deps, holds int64
}

var _ model.Sink = (*Collector)(nil)

// NewCollector returns an empty collector.
func NewCollector(opts Options) *Collector {
	opts = opts.withDefaults()
	c := &Collector{
		opts: opts, clock: newClock(opts.Buckets), Syncs: syncs.NewCollector(), Lints: lint.NewCollector(lint.DefaultOptions()),
		Steps: steps.NewDetector(true), procs: map[uint32]*procState{}, rowIdx: map[rowKey]int{},
		devices: map[int8]*deviceState{}, ops: map[opKey]*opStats{},
	}
	c.also = model.Sinks{c.Syncs, c.Lints, c.Steps}
	c.perBkt = c.clock.newSum()
	c.detail.max = opts.MaxSlices
	return c
}

func (c *Collector) proc(p *model.Process) *procState {
	ps := c.procs[p.PID]
	if ps == nil {
		// Its series are made when it first needs them: a process that
		// never launches or allocates costs no buckets.
		ps = &procState{pid: p.PID, p: p}
		ps.mem.init()
		if len(c.order) < ringProcs {
			ps.ring = &ring{}
		}
		c.procs[p.PID] = ps
		c.order = append(c.order, ps)
	}
	ps.p = p
	return ps
}

// rowFor finds or makes the row of a thread or stream; past MaxRows it is
// the process's "other" row.
func (c *Collector) rowFor(ps *procState, kind uint8, id int64, t uint64) *row {
	k := rowKey{ps.pid, kind, id}
	if i, ok := c.rowIdx[k]; ok {
		return c.rows[i]
	}
	if len(c.rows) >= c.opts.MaxRows {
		ok := rowKey{ps.pid, kind, otherID}
		if i, found := c.rowIdx[ok]; found {
			c.rows[i].merged++
			c.merged++
			c.rowIdx[k] = i
			return c.rows[i]
		}
		k = ok
	}
	r := &row{key: k, first: t, count: c.clock.newSum()}
	if kind == rowGPU {
		r.queue, r.launches = c.clock.newSpan(), c.clock.newSum()
		r.depth.init()
	}
	if k.id == otherID {
		r.merged = 1
		c.merged++
	}
	c.rowIdx[k] = len(c.rows)
	if k.id == otherID && id != otherID {
		c.rowIdx[rowKey{ps.pid, kind, id}] = len(c.rows)
	}
	c.rows = append(c.rows, r)
	return r
}

func (c *Collector) see(start, end uint64) {
	c.clock.see(start)
	if start != 0 && (c.firstT == 0 || start < c.firstT) {
		c.firstT = start
	}
	c.lastT = max(c.lastT, end, start)
}

// hostCategory is what a call did, for occupancy.
func hostCategory(x *model.Call, class event.Class) int {
	switch {
	case x.Sync != model.SyncNone && x.Sync != model.SyncLegacyStream && x.BlockedNs > 0:
		return hostSync
	case class == event.ClassLaunch || class == event.ClassGraphLaunch || class == event.ClassCollective || class == event.ClassHostFunc:
		return hostLaunch
	case class == event.ClassMemcpy || class == event.ClassMemset:
		return hostCopy
	case class == event.ClassMalloc || class == event.ClassFree || class == event.ClassHostAlloc || class == event.ClassHostFree:
		return hostMem
	}
	return hostOther
}

// Call records a host call: its row, occupancy, detail slice, the recent
// calls a gap may ask about, launch rates, and device memory.
func (c *Collector) Call(p *model.Process, x *model.Call) {
	c.also.Call(p, x)
	ps := c.proc(p)
	c.counts.calls++
	c.see(x.Start, x.End)
	var class event.Class
	if s := x.Spec(); s != nil {
		class = s.Class
	}
	r := c.rowFor(ps, rowHost, int64(x.TID), x.Start)
	c.occupy(r, hostCategory(x, class), x.Start, x.End)
	r.count.add(c.clock, x.Start, 1)
	c.perBkt.add(c.clock, x.Start, 1)
	c.nSlices++
	c.detail.call(c.rowIdx[r.key], ps.pid, x)
	if ps.ring != nil {
		ps.ring.push(x)
	}
	switch class {
	case event.ClassLaunch, event.ClassGraphLaunch:
		if ps.launches == nil {
			ps.launches = c.clock.newSum()
		}
		ps.launches.add(c.clock, x.Start, 1)
		ps.launchN++
		if class == event.ClassLaunch && !x.Captured {
			c.opStat(opKey{pid: ps.pid, kind: model.OpKernel, fn: x.Args.Func}).hostNs += x.Duration()
		}
	case event.ClassMalloc, event.ClassFree:
		c.memory(ps, p, x, class)
	}
}

// Sync records a host-blocking synchronization on its thread.
func (c *Collector) Sync(p *model.Process, s *model.Sync) {
	c.also.Sync(p, s)
	ps := c.proc(p)
	c.counts.syncs++
	if s.Kind == model.SyncLegacyStream {
		return // serializes streams; the host does not wait (the call shows it)
	}
	end := s.Start + s.BlockedNs
	c.see(s.Start, end)
	r := c.rowFor(ps, rowHost, int64(s.TID), s.Start)
	r.count.add(c.clock, s.Start, 1)
	c.perBkt.add(c.clock, s.Start, 1)
	c.nSlices++
	c.detail.sync(c.rowIdx[r.key], s)
	ps.blocked += s.BlockedNs
	ps.syncs++
}

// Dependency counts event dependencies (they are drawn from the ops).
func (c *Collector) Dependency(p *model.Process, d *model.Dependency) {
	c.also.Dependency(p, d)
	c.proc(p).deps++
	c.counts.deps++
}

// Hold records a stretch cudatap held a thread: its time, not CUDA's.
func (c *Collector) Hold(p *model.Process, h *model.Hold) {
	c.also.Hold(p, h)
	ps := c.proc(p)
	c.counts.holds++
	c.see(h.Start, h.End)
	r := c.rowFor(ps, rowHost, int64(h.TID), h.Start)
	c.occupy(r, hostHeld, h.Start, h.End)
	r.count.add(c.clock, h.Start, 1)
	c.perBkt.add(c.clock, h.Start, 1)
	c.nSlices++
	c.detail.hold(c.rowIdx[r.key], h)
}

// proven is the latest time the op can have ended: measured, its end;
// else the return of the call that proved it complete (the end of the
// recording when none did). Ops made by hand have no proof: their end.
func proven(op *model.GPUOp) uint64 {
	if op.Measured {
		return op.End
	}
	return max(op.ProvenBy(), op.End)
}

func opCategory(k model.OpKind) (gpuCat int, mask uint8) {
	switch k {
	case model.OpKernel, model.OpGraph:
		return gpuKernel, catCompute
	case model.OpMemcpy, model.OpMemset:
		return gpuCopy, catCopy
	case model.OpCollective:
		return gpuComm, catComm
	}
	return gpuOther, 0
}

// GPUOp records a GPU op on its stream's row, in its device's overlap
// measures, the stream's gaps and queue depth, and the top operations.
func (c *Collector) GPUOp(p *model.Process, op *model.GPUOp) {
	c.also.GPUOp(p, op)
	ps := c.proc(p)
	c.counts.ops++
	done := proven(op)
	c.see(op.Enqueued, done)
	r := c.rowFor(ps, rowGPU, int64(op.Stream), op.Enqueued)
	r.devices |= model.DeviceBitsOf(op.Device)
	r.ops++
	if op.Measured {
		r.measured++
	}
	if r.firstEnq == 0 || op.Enqueued < r.firstEnq {
		r.firstEnq = op.Enqueued
	}
	r.lastDone = max(r.lastDone, done)
	if c.gpuFirst == 0 || op.Enqueued < c.gpuFirst {
		c.gpuFirst = op.Enqueued
	}
	c.gpuLast = max(c.gpuLast, op.End)
	cat, mask := opCategory(op.Kind)
	c.occupy(r, cat, op.Start, op.End)
	r.count.add(c.clock, op.Start, 1)
	c.perBkt.add(c.clock, op.Start, 1)
	c.nSlices++
	r.queue.add(op.Enqueued, max(done, op.Enqueued+1))
	if op.Kind == model.OpKernel || op.Kind == model.OpGraph {
		r.launches.add(c.clock, op.Enqueued, 1)
	}
	r.depth.op(op.Enqueued, done, !op.Measured)
	if g, ok := r.gaps.op(op, c.opts.TopGaps); ok {
		if ps.ring != nil {
			g.Host, g.HostComplete = ps.ring.during(g.span())
		}
		r.gaps.keep(g, c.opts.TopGaps)
	}
	c.detail.op(c.rowIdx[r.key], ps.pid, op, c.rowIdxOf(ps.pid, op.AfterStream))
	if mask != 0 {
		d := c.device(op.Device)
		d.ops++
		if op.Measured {
			d.measured++
		}
		d.drawn.add(op.Start, op.End, mask)
		start := op.Enqueued
		if op.Measured {
			start = op.Start
		}
		d.bound.add(start, done, mask)
	}
	k := opKey{pid: ps.pid, kind: op.Kind}
	switch op.Kind {
	case model.OpKernel, model.OpHostFunc:
		k.fn = op.Func
	case model.OpMemcpy:
		k.copy, k.pageable = op.CopyKind, op.Pageable && op.CopyKind != event.DeviceToDevice
	case model.OpCollective:
		k.api = op.API
	}
	st := c.opStat(k)
	st.count++
	st.bytes += op.Bytes
	if op.Measured {
		st.measured++
		st.measuredNs += op.End - op.Start
		st.maxNs = max(st.maxNs, op.End-op.Start)
	}
}

// rowIdxOf is the row of a stream of pid, -1 when it has none (yet).
func (c *Collector) rowIdxOf(pid uint32, stream int32) int {
	if stream < 0 {
		return -1
	}
	if i, ok := c.rowIdx[rowKey{pid, rowGPU, int64(stream)}]; ok {
		return i
	}
	return -1
}

// opKey tells GPU operations apart in the top list.
type opKey struct {
	pid      uint32
	kind     model.OpKind
	fn       uint64
	api      event.API
	copy     event.MemcpyKind
	pageable bool
}

type opStats struct {
	count, measured   int64
	measuredNs, maxNs uint64
	bytes             uint64
	hostNs            uint64 // launch calls' host time (kernels)
}

// otherOps holds the operations past Options.MaxOps.
var otherOps = opKey{}

func (c *Collector) opStat(k opKey) *opStats {
	st := c.ops[k]
	if st == nil {
		if len(c.ops) >= c.opts.MaxOps {
			c.opsOver++
			k = otherOps
			if st = c.ops[k]; st != nil {
				return st
			}
		}
		st = &opStats{}
		c.ops[k] = st
	}
	return st
}

// deviceState measures the overlap of categories on one device: as drawn
// (measured times, or where the model laid bounded ops out) and as far as
// the bounds allow (each op anywhere between its enqueue and its proof of
// completion: an upper bound of what can have run at once).
type deviceState struct {
	drawn, bound  *concurrency
	ops, measured int64
}

func (c *Collector) device(d int8) *deviceState {
	s := c.devices[d]
	if s == nil {
		s = &deviceState{drawn: newConcurrency(maxIntervals), bound: newConcurrency(maxIntervals)}
		c.devices[d] = s
	}
	return s
}
