// Package lint finds CUDA usage patterns that practice has shown to cost
// time or correctness, each with its evidence (the calls, their threads,
// streams and lines) and the fix:
//
//   - out-of-memory: a device allocation that failed for want of memory
//     (from the model's records, named by export/oom: what was held, by
//     whom, and whether the process recovered);
//   - legacy-nonblocking-copy: an asynchronous host↔device copy on the
//     legacy default stream, which serializes with every blocking stream;
//   - cross-stream-race: device memory written on one stream and used on
//     another with no event wait or synchronization between (a possible
//     race; copies and memsets, and kernels where the recording has their
//     parameter values: record --kernel-args);
//   - many-busy-streams: more than MaxBusyStreams streams with GPU work at
//     once on one device;
//   - pageable-copy-loop: one call site copying pageable host memory to or
//     from the device again and again;
//   - sync-every-launch: a thread that synchronizes after every launch.
//
// Each finding is priced (cost.go): the time it cost, measured where the
// times exist and bounded otherwise; one that cost less than
// Options.NoteBelow of its process's traced time is a note, not raised.
//
// The Collector is a model sink whose memory is bounded by the threads,
// streams, distinct call sites and live device writes of the processes,
// never by the number of calls; what does not fit is counted (Limits) and
// shown. Findings names what it found with the recording's name tables.
package lint

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// ID names a lint.
type ID string

// The lints, in the order they are reported.
const (
	OutOfMemory       ID = "out-of-memory"
	LegacyNonBlocking ID = "legacy-nonblocking-copy"
	CrossStreamRace   ID = "cross-stream-race"
	ManyBusyStreams   ID = "many-busy-streams"
	PageableLoop      ID = "pageable-copy-loop"
	SyncEveryLaunch   ID = "sync-every-launch"
)

// Options are the lints' thresholds.
type Options struct {
	// MaxBusyStreams: more streams than this with GPU work at one instant
	// on one device fire many-busy-streams (8: CUDA_DEVICE_MAX_CONNECTIONS'
	// default, the hardware queues streams are spread over).
	MaxBusyStreams int
	// PageableRepeats: a call site that makes at least this many pageable
	// host↔device copies fires pageable-copy-loop.
	PageableRepeats int
	// SyncRun: at least this many launches in a row, each followed by a
	// synchronize before the next, fire sync-every-launch.
	SyncRun int
	// Examples: how many examples of evidence a finding keeps (the
	// costliest sites first, then the most frequent).
	Examples int
	// NoteBelow: a finding that cost less than this share of its
	// process's traced time is a note, not raised.
	NoteBelow float64
}

// DefaultOptions are the thresholds cudatap uses.
func DefaultOptions() Options {
	return Options{MaxBusyStreams: 8, PageableRepeats: 10, SyncRun: 10, Examples: 3, NoteBelow: 0.01}
}

// Bounds on what the collector keeps per process.
const (
	maxThreads  = 4096    // threads followed (lints 1 and 5)
	maxGroups   = 4096    // distinct sites (or site pairs) per lint
	maxStreams  = 4096    // streams whose order is followed (lint 2)
	maxEvents   = 1 << 16 // recorded event positions (lint 2)
	maxAllocs   = 1 << 16 // live device allocations (lint 2)
	maxWrites   = 1 << 14 // live device writes not yet known complete (lint 2)
	maxPending  = 1 << 17 // GPU ops enqueued, not yet laid out (lint 3)
	maxArrived  = 1 << 16 // GPU ops laid out, not yet swept (lint 3)
	maxShown    = 16      // streams named at the peak of lint 3
	siteFrames  = 64      // native frames looked at to name a site
	unknownTime = ^uint64(0)
)

// Limits counts what the bounds above left out. All zero in an ordinary
// recording; every output shows the ones that are not.
type Limits struct {
	Threads  int64 `json:"threads_not_followed,omitempty"`   // calls of threads past maxThreads
	Sites    int64 `json:"occurrences_not_kept,omitempty"`   // occurrences at sites past maxGroups (counted, not shown)
	Streams  int64 `json:"stream_ops_not_ordered,omitempty"` // ops on streams past maxStreams (not checked for races)
	Events   int64 `json:"events_not_kept,omitempty"`        // event records past maxEvents (later waits on them unknown)
	Allocs   int64 `json:"allocations_not_kept,omitempty"`   // device allocations past maxAllocs (not checked for races)
	Writes   int64 `json:"writes_forgotten,omitempty"`       // device writes dropped past maxWrites (races with them missed)
	LateOps  int64 `json:"late_gpu_ops,omitempty"`           // GPU ops laid out after the stream count passed their time (clipped)
	Unpriced int64 `json:"copies_not_priced,omitempty"`      // legacy-stream copies past maxPriced being priced at once (their cost left out)
}

func (l Limits) any() bool { return l != Limits{} }

// ref is what a finding keeps of a call: enough to show it once named.
type ref struct {
	start     uint64
	bytes     uint64
	seq       int
	tid       uint32
	stream    int32
	stack, py int32
	fn        uint64 // launches: the kernel
	api       event.API
	symbol    uint8
	valid     bool
}

func refOf(c *model.Call) ref {
	r := ref{start: c.Start, bytes: c.Args.Bytes, seq: c.Seq, tid: c.TID, stream: c.Stream,
		stack: c.Stack, py: c.PyStack, api: c.API, symbol: c.Symbol, valid: true}
	if r.kernel() {
		r.fn = c.Args.Func
	}
	return r
}

// kernel reports whether the call launched a kernel.
func (r ref) kernel() bool {
	s := event.Lookup(r.api)
	return s != nil && s.Class == event.ClassLaunch
}

// site is a raw call site: the exact symbol, the captured stacks and, for
// a launch, the kernel.
type site struct {
	api       event.API
	symbol    uint8
	stack, py int32
	fn        uint64
}

func (r ref) site() site {
	return site{api: r.api, symbol: r.symbol, stack: r.stack, py: r.py, fn: r.fn}
}

// unnamed reports whether the call has no stack to name its site by.
func (s site) unnamed() bool { return s.stack < 0 && s.py < 0 }

// groupKey is what makes occurrences one group of a lint: the sites of
// its calls, and what else tells them apart where no stack does.
type groupKey struct {
	a, b   site
	sa, sb int32 // streams (-1 when they do not matter)
	tid    uint32
	kind   event.MemcpyKind
}

// group is the occurrences of one lint with one key: their number and the
// first occurrence's calls.
type group struct {
	key   groupKey
	count int64
	bytes uint64
	calls [2]ref
	// Per lint: legacy copies that waited for blocking streams' work,
	// pageable ones; runs of sync-every-launch and the longest.
	waited, pageable int64
	runs             int64
	longest          int
	// races: the allocation the memory lies in.
	allocStart, allocSize uint64
	addr                  uint64
	// The cost (cost.go): measured, and the union of the bounds of what
	// was not (atMost: there is some).
	costNs uint64
	bound  union
	atMost bool
}

// groups is one lint's groups in a process, in the order first seen.
type groups struct {
	index map[groupKey]int
	list  []group
}

func (g *groups) get(k groupKey, limits *Limits) *group {
	if g.index == nil {
		g.index = map[groupKey]int{}
	}
	i, ok := g.index[k]
	if !ok {
		if len(g.list) >= maxGroups {
			limits.Sites++
			return nil
		}
		i = len(g.list)
		g.index[k] = i
		g.list = append(g.list, group{key: k})
	}
	return &g.list[i]
}

// Collector is the model sink that runs the lints. Not safe for
// concurrent use (the model calls it from one goroutine).
type Collector struct {
	opts    Options
	procs   map[uint32]*proc
	order   []uint32 // pids in the order first seen
	last    *proc
	limits  Limits
	flushed bool
}

var _ model.Sink = (*Collector)(nil)

// NewCollector returns an empty collector with opts' thresholds (zero
// fields take DefaultOptions').
func NewCollector(opts Options) *Collector {
	d := DefaultOptions()
	if opts.MaxBusyStreams <= 0 {
		opts.MaxBusyStreams = d.MaxBusyStreams
	}
	if opts.PageableRepeats <= 0 {
		opts.PageableRepeats = d.PageableRepeats
	}
	if opts.SyncRun <= 0 {
		opts.SyncRun = d.SyncRun
	}
	if opts.Examples <= 0 {
		opts.Examples = d.Examples
	}
	if opts.NoteBelow <= 0 {
		opts.NoteBelow = d.NoteBelow
	}
	return &Collector{opts: opts, procs: map[uint32]*proc{}}
}

// Options are the thresholds the collector applies.
func (c *Collector) Options() Options { return c.opts }

// proc is what the collector keeps of one process.
type proc struct {
	pid     uint32
	now     uint64 // latest call start seen
	threads map[uint32]*thread
	lastTID uint32
	lastTh  *thread
	order   order  // lint 2: stream order and what the host knows complete
	mem     memory // lint 2: device allocations and live writes
	ops     opTracker
	legacy  legacyPrices // lint 1's costs
	holds   holds        // not the process's time
	groups  [nLints]groups
	// kernelArgs: some launch of the process carried its parameter
	// values (record --kernel-args): lint 2 sees kernels.
	kernelArgs bool
}

// Lint indexes.
const (
	lLegacy = iota
	lRace
	lStreams
	lPageable
	lSync
	nLints
)

var ids = [nLints]ID{LegacyNonBlocking, CrossStreamRace, ManyBusyStreams, PageableLoop, SyncEveryLaunch}

// thread is what the collector follows of one thread: a legacy-stream
// copy waiting to see whether a synchronize follows it (a blocking copy,
// such as .item() and .cpu() make, is not a non_blocking one), and its
// current run of launches each followed by a synchronize.
type thread struct {
	copy    ref
	copyOp  int // its GPU op
	copyKnd event.MemcpyKind
	copyPgb bool
	copyWtd bool
	// The run: launches so far each followed by a synchronize; whether the
	// last launch still waits for one; the run's first launch and sync;
	// the host time blocked in its synchronizes.
	run     int
	pending bool
	last    ref
	first   [2]ref
	runNs   uint64
}

func (c *Collector) proc(pid uint32) *proc {
	if c.last != nil && c.last.pid == pid {
		return c.last
	}
	ps := c.procs[pid]
	if ps == nil {
		ps = &proc{pid: pid, threads: map[uint32]*thread{}}
		ps.order.init()
		ps.ops.init()
		c.procs[pid] = ps
		c.order = append(c.order, pid)
	}
	c.last = ps
	return ps
}

func (c *Collector) thread(ps *proc, tid uint32) *thread {
	if ps.lastTh != nil && ps.lastTID == tid {
		return ps.lastTh
	}
	t := ps.threads[tid]
	if t == nil {
		if len(ps.threads) >= maxThreads {
			c.limits.Threads++
			return nil
		}
		t = &thread{}
		ps.threads[tid] = t
	}
	ps.lastTID, ps.lastTh = tid, t
	return t
}

// Call runs the lints that follow calls.
func (c *Collector) Call(p *model.Process, x *model.Call) {
	spec := x.Spec()
	if spec == nil {
		return
	}
	ps := c.proc(p.PID)
	ps.now = max(ps.now, x.Start)
	th := c.thread(ps, x.TID)
	if th != nil && th.copy.valid && spec.Class != event.ClassSetDevice && spec.Class != event.ClassFuncName {
		// The copy before this call was a blocking one in disguise when
		// this call waits for it (a device switch or a kernel lookup in
		// between decides nothing).
		if !x.Sync.Explicit() {
			c.legacyCopy(ps, th)
		} else {
			ps.legacy.book(th.copyOp, -1, &ps.groups[lLegacy])
		}
		th.copy.valid = false
	}
	sid := int(max(x.Stream, 0))
	enqueued := x.GPUOp >= 0 && !x.Captured
	var pos uint64
	ordered, serialized := false, false
	if enqueued {
		ps.ops.enqueued(x)
		pos, ordered, serialized = ps.order.enqueue(p, sid, &c.limits)
		if !ps.ops.bounding && len(ps.order.used) > c.opts.MaxBusyStreams {
			ps.ops.startBounds(x.Start, &c.limits)
		}
	}
	a := &x.Args
	kind := a.Kind
	if spec.Class == event.ClassMemcpy && kind == event.DefaultKind {
		kind = ps.mem.direction(a.Dst, a.Src)
	}
	legacy := enqueued && spec.Class == event.ClassMemcpy && th != nil && legacyCandidate(p, spec, sid, kind)
	if enqueued && !legacy && (sid == 0 || sid < len(p.Streams) && p.Streams[sid] != nil && p.Streams[sid].Blocking()) {
		ps.legacy.queued(x.Start) // it waits behind the legacy copies still running
	}
	ok := !x.HasRet || x.Ret == 0
	switch spec.Class {
	case event.ClassMalloc:
		if ok && a.Ptr != 0 {
			ps.mem.alloc(a.Ptr, a.Size, &c.limits)
		}
	case event.ClassMemcpy, event.ClassMemset:
		if !enqueued {
			break
		}
		if ordered {
			c.accesses(ps, x, spec.Class, sid, pos)
		}
		if spec.Class == event.ClassMemcpy {
			c.copyLints(ps, th, x, sid, kind, legacy, serialized)
		}
	case event.ClassEventRecord:
		ps.order.record(p, a.Event, sid, &c.limits)
	case event.ClassStreamWaitEvent:
		ps.order.wait(a.Event, sid)
	case event.ClassEventCreate, event.ClassEventDestroy:
		ps.order.forget(a.Event)
	case event.ClassLaunch, event.ClassGraphLaunch:
		if ordered && x.KernelArgs != nil {
			ps.kernelArgs = true
			c.kernelAccesses(ps, x, sid, pos)
		}
		if enqueued && th != nil {
			c.launch(ps, th, x)
		}
	}
	c.hostKnows(p, ps, x, spec, sid)
	if spec.Class == event.ClassFree && a.Ptr != 0 {
		ps.mem.free(a.Ptr)
	}
	if th != nil && x.Sync.Explicit() {
		synced(th, x)
	}
}

// hostKnows applies what a call proves complete: the host waited for it
// (a synchronization, a blocking copy) or was told (a "ready" query).
func (c *Collector) hostKnows(p *model.Process, ps *proc, x *model.Call, spec *event.Spec, sid int) {
	o := &ps.order
	switch spec.Class {
	case event.ClassEventSync:
		o.hostEvent(x.Args.Event)
		return
	case event.ClassEventQuery:
		if x.HasRet && x.Ret == 0 {
			o.hostEvent(x.Args.Event)
		}
		return
	case event.ClassStreamQuery:
		if x.HasRet && x.Ret == 0 {
			o.hostStream(p, sid)
		}
		return
	}
	switch x.Sync {
	case model.SyncDevice, model.SyncFree:
		o.hostAll()
		ps.mem.clear()
	case model.SyncStream, model.SyncMemcpy, model.SyncMemset, model.SyncPageableMemcpy:
		o.hostStream(p, sid)
	}
}

// legacyCandidate reports whether a copy is an asynchronous host↔device
// one on the legacy default stream: legacy-nonblocking-copy's, unless its
// thread synchronizes right after (decided at the thread's next call).
func legacyCandidate(p *model.Process, spec *event.Spec, sid int, kind event.MemcpyKind) bool {
	return !spec.Sync && sid == 0 && hostSide(kind) && p.Streams[0].Kind == model.StreamLegacy
}

func hostSide(kind event.MemcpyKind) bool {
	return kind == event.HostToDevice || kind == event.DeviceToHost
}

// copyLints runs the lints of one copy: legacy-nonblocking-copy (legacy:
// a candidate, decided at the thread's next call) and pageable-copy-loop.
// serialized says the copy waited for work of blocking streams.
func (c *Collector) copyLints(ps *proc, th *thread, x *model.Call, sid int, kind event.MemcpyKind, legacy, serialized bool) {
	if legacy {
		th.copy, th.copyOp, th.copyKnd, th.copyPgb = refOf(x), x.GPUOp, kind, x.Pageable
		th.copyWtd = serialized
		ps.legacy.enqueued(x.GPUOp, x.Start, serialized, &c.limits)
	}
	if x.Pageable && hostSide(kind) {
		k := groupKey{a: refOf(x).site(), kind: kind, sa: -1, sb: -1}
		if k.a.unnamed() {
			// No stack to tell sites apart: one thread and stream are
			// taken for one site.
			k.sa, k.tid = int32(sid), x.TID
		}
		if g := ps.groups[lPageable].get(k, &c.limits); g != nil {
			if g.count == 0 {
				g.calls[0] = refOf(x)
			}
			g.count++
			g.bytes += x.Args.Bytes
			g.costNs += x.BlockedNs // the host waited for the staged copy
		}
	}
}

// legacyCopy counts the thread's pending legacy-stream copy.
func (c *Collector) legacyCopy(ps *proc, th *thread) {
	k := groupKey{a: th.copy.site(), kind: th.copyKnd, sa: -1, sb: -1}
	if k.a.unnamed() {
		k.tid = th.copy.tid
	}
	g := ps.groups[lLegacy].get(k, &c.limits)
	if g == nil {
		ps.legacy.book(th.copyOp, -1, &ps.groups[lLegacy])
		return
	}
	ps.legacy.book(th.copyOp, ps.groups[lLegacy].index[k], &ps.groups[lLegacy])
	if g.count == 0 {
		g.calls[0] = th.copy
	}
	g.count++
	g.bytes += th.copy.bytes
	if th.copyPgb {
		g.pageable++
	}
	if th.copyWtd {
		g.waited++
	}
}

// launch follows the thread's run of launches each followed by a
// synchronize: a launch while the one before is still unsynchronized ends
// the run.
func (c *Collector) launch(ps *proc, th *thread, x *model.Call) {
	if th.pending {
		c.endRun(ps, th)
	}
	th.pending = true
	th.last = refOf(x)
}

// synced marks the thread's pending launch as followed by a synchronize.
func synced(th *thread, x *model.Call) {
	if !th.pending {
		return
	}
	th.pending = false
	if th.run == 0 {
		th.first = [2]ref{th.last, refOf(x)}
	}
	th.run++
	th.runNs += x.BlockedNs
}

// endRun books the thread's run when it is long enough, and starts anew.
func (c *Collector) endRun(ps *proc, th *thread) {
	if th.run >= c.opts.SyncRun {
		k := groupKey{a: th.first[0].site(), b: th.first[1].site(), sa: -1, sb: -1}
		if k.a.unnamed() && k.b.unnamed() {
			k.tid = th.first[0].tid
		}
		if g := ps.groups[lSync].get(k, &c.limits); g != nil {
			if g.count == 0 {
				g.calls = th.first
			}
			g.count += int64(th.run)
			g.runs++
			g.longest = max(g.longest, th.run)
			g.costNs += th.runNs
		}
	}
	th.run, th.runNs = 0, 0
}

// GPUOp runs the stream count of many-busy-streams and prices the
// legacy-stream copies.
func (c *Collector) GPUOp(p *model.Process, op *model.GPUOp) {
	ps := c.proc(p.PID)
	ps.ops.final(op, ps.now, c.opts.MaxBusyStreams, &c.limits)
	if op.Stream == 0 {
		ps.legacy.op(op, &ps.groups[lLegacy])
	}
}

// Sync is not needed: every call carries the synchronization it caused.
func (*Collector) Sync(*model.Process, *model.Sync) {}

// Dependency is not needed: waits are followed from their calls.
func (*Collector) Dependency(*model.Process, *model.Dependency) {}

// Hold notes a time cudatap held a thread: not the process's own time,
// which the findings are priced against.
func (c *Collector) Hold(p *model.Process, h *model.Hold) { c.proc(p.PID).holds.add(h.Start, h.End) }

// flush books what was still open when the recording ended: each thread's
// last legacy copy (nothing waited for it) and its current run, and the
// GPU ops not yet counted. Idempotent.
func (c *Collector) flush() {
	if c.flushed {
		return
	}
	c.flushed = true
	for _, pid := range c.order {
		ps := c.procs[pid]
		tids := make([]uint32, 0, len(ps.threads))
		for tid := range ps.threads {
			tids = append(tids, tid)
		}
		slices.Sort(tids)
		for _, tid := range tids {
			th := ps.threads[tid]
			if th.copy.valid {
				c.legacyCopy(ps, th)
				th.copy.valid = false
			}
			c.endRun(ps, th)
		}
		ps.ops.finish()
	}
}
