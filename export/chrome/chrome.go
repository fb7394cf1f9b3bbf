// Package chrome writes a recording as a Chrome trace (JSON Trace Event
// Format) in the shape PyTorch's Kineto profiler writes, so Perfetto UI,
// chrome://tracing and Holistic Trace Analysis read it: host API calls on
// the OS pid/tid, inferred GPU activity on a track per stream, ac2g flows
// from launches to their GPU slices, and cudatap's loss counters alongside.
//
// The trace is streamed: a Writer is a model.Sink that writes each call,
// sync and GPU op as the model hands it over and keeps none of them, so
// its memory does not grow with the recording. Events come in the order
// the model finalizes them, not in time order; the viewers and HTA sort.
// Track names and counters follow the events, written by Close.
//
// All timestamps are absolute CLOCK_MONOTONIC µs with three decimals, as
// Kineto writes them; the "cudatap" block carries the offset to Unix time.
package chrome

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/steps"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Options tune the trace.
type Options struct {
	Version  string    // cudatap version, recorded in the "cudatap" block
	Counters []Counter // extra counter tracks; the result's NVML samples are added by Close
	// Origins says where the processes of a merged trace ran, by trace
	// pid: their track names show the host and the pid there.
	Origins map[uint32]Origin
	// Merge, when set, is written as is under "cudatap" → "merge": how a
	// merged trace's recordings were put on one clock (export/merge).
	Merge json.RawMessage
	// Pending makes the trace live: fed by a session that is still
	// naming what it traces, it holds here the events that name a kernel
	// or a Python frame not named yet, and Close writes them with the
	// names known then (pending.go). nil: the names are complete before
	// the events come (a recording's).
	Pending io.ReadWriteSeeker
}

// Origin is where a process of a merged trace ran.
type Origin = describe.Origin

// Counter is one sample of a counter track (ph "C"). Values are drawn as
// stacked series named by their keys.
type Counter struct {
	Name   string
	PID    int    // trace pid: an OS pid or GPUPID(pid)
	TS     uint64 // ns, CLOCK_MONOTONIC like every other timestamp
	Values map[string]float64
}

// gpuPIDBase puts device tracks above every OS pid (Linux caps pids at 2^22)
// and below 2^31, which some viewers take pids to fit in.
const gpuPIDBase = 1_000_000_000

// devicePIDBase holds the NVML counter tracks, one trace process per GPU.
const devicePIDBase = 2_000_000_000

// DevicePID is the trace pid of GPU index's counter tracks (NVML samples).
func DevicePID(index int) int { return devicePIDBase + index }

// GPUPID is the trace pid of the track of process pid's work on device 0:
// its inferred GPU activity is drawn there, one thread track per stream.
func GPUPID(pid uint32) int { return DeviceTrackPID(pid, 0) }

// DeviceTrackPID is the trace pid of process pid's work on device d (one
// trace process per process and device; DeviceUnknown has its own).
func DeviceTrackPID(pid uint32, d int8) int {
	slot := int(d)
	if d < 0 {
		slot = 63
	}
	return gpuPIDBase + slot*deviceTrackStride + int(pid)
}

// deviceTrackStride separates the device tracks of one process: above any
// pid (Linux caps them at 2^22), 64 slots below devicePIDBase.
const deviceTrackStride = 10_000_000

// SyncCategory is the category of host-blocking synchronization slices.
const SyncCategory = "cuda_host_sync"

// Flow ids: ac2g flows use the correlation id itself, as Kineto does (the
// model numbers correlations across the whole recording); event
// dependencies get a range of their own above any correlation.
const depFlowBase = 1 << 40

// minDur is the duration of GPU ops whose inferred end is not after their
// start: a zero-length slice would be invisible and could not anchor flows.
const minDur = 1 // ns

// snapped is where a host slice [ts, ts+dur] is drawn. HTA, like every
// Kineto reader, rounds a slice's start up and its end down to whole
// microseconds: a slice with no whole microsecond in it (a call shorter
// than one) would come out at -1 µs. Such a slice is drawn with no
// duration at the whole microsecond it starts in (the writer keeps its
// wall time in args.wall_ns): it moves by less than a microsecond, and a
// slice of no duration cannot partially overlap a neighbour.
func snapped(ts, dur uint64) (uint64, uint64) {
	if ts%1000 == 0 || ts/1000 != (ts+dur)/1000 {
		return ts, dur
	}
	return ts - ts%1000, 0
}

// markNs is how long a GPU op CUPTI did not time is drawn: a mark, not a
// duration (see mark).
const markNs = 1000

// mark is where a GPU op CUPTI did not time is drawn: a mark of exactly
// 1 µs inside the bounds the model proved ([lo, hi]: enqueued, proven
// complete), starting half-way into a microsecond, as near the model's
// layout (want) as the bounds and the marks before it on its track (after)
// allow. HTA, rounding the start up and the end down to the same whole
// microsecond, reads it as an op of no known duration (0, as Kineto writes
// one), never a made-up one; a viewer sees a 1 µs mark, and its bounds in
// args. Bounds that hold no such mark are drawn as they are.
func mark(lo, hi, want, after uint64) (ts, dur uint64) {
	half := func(t uint64) uint64 { // the first half-microsecond at or after t
		h := t - t%1000 + 500
		if h < t {
			h += 1000
		}
		return h
	}
	first := half(lo)
	if hi < first+markNs {
		return lo, max(hi, lo+minDur) - lo
	}
	y := hi - markNs
	last := y - (y+500)%1000 // the last half-microsecond whose mark ends by hi
	return min(max(half(max(want, after)), first), last), markNs
}

// trackKey is a GPU track: a process's stream on a device.
type trackKey struct {
	pid    uint32
	stream int
	device int8
}

// opKey is one process's GPU op.
type opKey struct {
	pid uint32
	id  int
}

// maxDrawn bounds the tracks and ops whose drawn times the writer keeps
// (for marks that must not overlap, and flows that start at an op).
const maxDrawn = 1 << 16

// Writer streams a Chrome trace to its output. It builds one event at a
// time in b and hands it to out. Not safe for concurrent use.
type Writer struct {
	out    *bufio.Writer
	err    error // the first write error; nothing more is formatted after it
	names  *model.Names
	opts   Options
	b      []byte
	sep    bool // a field precedes: the next key needs a comma
	events int
	deps   uint64 // dependency flows written so far, for unique ids
	closed bool
	// A live trace's events held until their names are known (pending.go):
	// whether the event being built is one, and those held so far.
	holding bool
	held    *bufio.Writer
	nHeld   int
	// The calls and ops held, and whether the flows being written bind to
	// one: a flow is held with the slices it binds to, after them.
	heldCall, heldOp map[opKey]uint64
	holdFlows        bool

	// Kernel names, demangled once per function rather than per launch.
	kernels *describe.Kernels
	// NCCL meetings: each collective's communicator and number (args
	// comm_id and seq), and a track per communicator with a slice per
	// meeting, from the first rank's arrival to the last's.
	meetings *straggler.Matcher[struct{}]
	commPIDs map[uint64]commTrack
	// Where recent slices were drawn: each GPU track's last end (marks go
	// after it), each GPU op's start (flows from it), each call that was
	// drawn with no duration (flows from it start there).
	trackEnd map[trackKey]uint64
	opStart  map[opKey]uint64
	snapCall map[opKey]uint64 // by call Seq
	// Dependency flows whose op waited for is not drawn yet: they start
	// where it will be.
	pendingDeps map[opKey][]pendingDep
	nPending    int
	// The program's NVTX ranges, paired as their calls come, and its
	// training steps, found by Close (ProfilerStep#N, as Kineto writes).
	ranges *steps.Ranges
	steps  *steps.Detector
}

// pendingDep is a dependency flow waiting for the op it starts at.
type pendingDep struct {
	id     uint64
	pid    int
	stream int
	ts     uint64 // where to start it if that op is never drawn
}

// commTrack is a communicator's meetings track.
type commTrack struct {
	pid, ranks int
}

// commPIDBase holds the communicators' meetings tracks: above the GPU
// tracks, below the NVML ones.
const commPIDBase = 1_900_000_000

// maxCommTracks bounds the communicators given a track.
const maxCommTracks = 1 << 16

// CommPID is the trace pid of the n-th communicator's meetings track.
func CommPID(n int) int { return commPIDBase + n }

var _ model.Sink = (*Writer)(nil)

// NewWriter starts a trace on out: it writes the head at once. names names
// threads, kernels and stack frames; it must be complete before the events
// that need it arrive (nil: nothing is named).
func NewWriter(out io.Writer, names *model.Names, opts Options) *Writer {
	if names == nil {
		names = model.NewNames()
	}
	w := &Writer{out: bufio.NewWriterSize(out, 256<<10), names: names, opts: opts, b: make([]byte, 0, 1024),
		kernels: describe.NewKernels(names), meetings: straggler.NewMatcher[struct{}](), commPIDs: map[uint64]commTrack{},
		trackEnd: map[trackKey]uint64{}, opStart: map[opKey]uint64{}, snapCall: map[opKey]uint64{}, pendingDeps: map[opKey][]pendingDep{},
		heldCall: map[opKey]uint64{}, heldOp: map[opKey]uint64{},
		ranges: steps.NewRanges(), steps: steps.NewDetector(false)}
	w.write([]byte(`{"schemaVersion":1,"displayTimeUnit":"ns","traceEvents":[` + "\n"))
	return w
}

func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	if _, err := w.out.Write(b); err != nil {
		w.err = err
	}
}

// Close writes the track names of r's processes and streams, the counter
// tracks (the options' and r's NVML samples) and the loss account, and
// flushes. It returns the first write error of the whole trace. It does
// not close the underlying writer.
func (w *Writer) Close(r *model.Result) error {
	if w.closed {
		return w.err
	}
	w.closed = true
	w.writeHeld(r.Process)
	// Dependencies from ops never drawn start where the model laid them out.
	for _, deps := range w.pendingDeps {
		for _, d := range deps {
			w.flow("s", "cuda_event", d.id, d.pid, d.stream, d.ts)
		}
	}
	w.annotations(r)
	for i, p := range describe.ByRank(r.Processes) {
		w.process(i, p)
	}
	// The communicators' meetings tracks, after every process.
	for _, id := range slices.SortedFunc(maps.Keys(w.commPIDs), func(a, b uint64) int { return w.commPIDs[a].pid - w.commPIDs[b].pid }) {
		tr := w.commPIDs[id]
		w.meta("process_name", tr.pid, 0, describe.CommTrack(id, tr.ranks))
		w.metaSort("process_sort_index", tr.pid, 0, 2*len(r.Processes)+tr.pid-commPIDBase)
	}
	counters := w.opts.Counters
	for _, c := range r.Counters {
		counters = append(counters, Counter{Name: c.Name, PID: DevicePID(c.Device), TS: c.TS, Values: c.Values})
	}
	named := map[int]bool{}
	for i := range counters {
		c := &counters[i]
		if c.PID >= devicePIDBase && !named[c.PID] {
			// Name the device's counter track once: "GPU 0 NVIDIA H200 (NVML)".
			named[c.PID] = true
			w.meta("process_name", c.PID, 0, c.Name+" (NVML)")
		}
		w.counter(c)
	}
	if r.Truncated != "" {
		// Visible on the timeline, not only in the footer: a global
		// instant event where the recording stops.
		w.begin("i", 0, 0, r.End)
		w.str("name", "recording truncated")
		w.str("s", "g")
		w.open("args")
		w.str("reason", r.Truncated)
		w.close()
		w.end()
	}
	w.write([]byte("\n],"))
	w.deviceProperties(r)
	w.distributedInfo(r)
	w.footer(r)
	w.write([]byte("}\n"))
	if err := w.out.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// begin starts an event with the fields every event carries.
func (w *Writer) begin(ph string, pid, tid int, ts uint64) {
	w.b = append(w.b[:0], ",\n{"...) // emit drops the separator of the first
	w.holding = false
	w.sep = false
	w.str("ph", ph)
	w.int("pid", int64(pid))
	w.int("tid", int64(tid))
	w.micros("ts", ts)
}

func (w *Writer) end() {
	w.b = append(w.b, '}')
	if w.holding {
		w.hold(w.b[len(",\n"):])
		return
	}
	w.emit(w.b)
}

// emit writes an event, ",\n" and its object, into the trace's list.
func (w *Writer) emit(ev []byte) {
	if w.events == 0 {
		ev = ev[len(",\n"):]
	}
	w.events++
	w.write(ev)
}

// meta writes a metadata event (process_name, thread_sort_index, ...).
func (w *Writer) meta(name string, pid, tid int, value string) {
	w.begin("M", pid, tid, 0)
	w.str("name", name)
	w.open("args")
	w.str("name", value)
	w.close()
	w.end()
}

func (w *Writer) metaSort(name string, pid, tid, index int) {
	w.begin("M", pid, tid, 0)
	w.str("name", name)
	w.open("args")
	w.int("sort_index", int64(index))
	w.close()
	w.end()
}

// label names p's process group, as describe.Label does.
func (w *Writer) label(p *model.Process) string {
	if o, ok := w.opts.Origins[p.PID]; ok {
		return describe.Label(p, &o)
	}
	return describe.Label(p, nil)
}

// process names the tracks of p: its threads, and its device track with
// one thread per stream.
func (w *Writer) process(idx int, p *model.Process) {
	pid := int(p.PID)
	label := w.label(p)

	// Each process's device track sorts right after the process itself.
	w.meta("process_name", pid, 0, label)
	w.metaSort("process_sort_index", pid, 0, 2*idx)
	tids := make([]uint32, 0, len(p.Threads))
	for tid := range p.Threads {
		tids = append(tids, tid)
	}
	slices.Sort(tids)
	for _, tid := range tids {
		name := w.names.Thread(p.PID, tid)
		if name == "" {
			name = "thread " + strconv.FormatUint(uint64(tid), 10)
		}
		w.meta("thread_name", pid, int(tid), name)
	}
	// When cudatap had let CUPTI go to the process's own profiler: process
	// marks (HTA leaves events without a duration out).
	for _, away := range p.CUPTIAway {
		w.instant(pid, away.Start, "cudatap: CUPTI handed over to another client of the process (its profiler): GPU ops bounded, not measured, until it finalizes CUPTI")
		if away.End != 0 {
			w.instant(pid, away.End, "cudatap: CUPTI taken back: GPU ops measured again")
		}
	}
	if len(p.Streams) == 0 && p.NGPUOps == 0 {
		return
	}
	// One track per device the process's work ran on ("GPU ?" for work
	// cudatap could not attribute), each stream under the devices it
	// served; a process with no GPU work yet shows its streams on device 0.
	devices := model.DeviceBits(p.Devices)
	if len(devices) == 0 {
		devices = []int8{0}
	}
	for _, d := range devices {
		gpid := DeviceTrackPID(p.PID, d)
		w.meta("process_name", gpid, 0, describe.DeviceTrack(d, label, p))
		w.metaSort("process_sort_index", gpid, 0, 2*idx+1)
		for _, s := range p.Streams {
			if s == nil || (s.Devices&model.DeviceBitsOf(d) == 0 && !(s.Devices == 0 && d == devices[0])) {
				continue
			}
			w.meta("thread_name", gpid, s.ID, s.Label())
			w.metaSort("thread_sort_index", gpid, s.ID, s.ID)
		}
	}
}

// instant writes a mark on process pid's track at ts.
func (w *Writer) instant(pid int, ts uint64, name string) {
	w.begin("i", pid, 0, ts)
	w.str("cat", "cudatap")
	w.str("name", name)
	w.str("s", "p")
	w.end()
}

// Call writes the host slice of c; an NVTX call draws the range it closes.
func (w *Writer) Call(p *model.Process, c *model.Call) {
	if w.err != nil || w.closed {
		return
	}
	w.steps.Call(p, c)
	if steps.Annotation(c) {
		if rg, ok := w.ranges.Call(p, c); ok {
			w.annotation(rg, false)
		}
		return
	}
	// A driver launch the runtime made is counted where it reached the
	// driver and named as the program called it; args.symbol keeps the
	// driver's symbol.
	spec, cat, name := describe.CallName(c)
	class := event.ClassOther
	if spec != nil {
		class = spec.Class
	}
	var wall uint64
	if c.End > c.Start {
		wall = c.End - c.Start
	}
	ts, dur := snapped(c.Start, wall)
	if ts != c.Start {
		keep(w.snapCall, opKey{p.PID, c.Seq}, ts) // its GPU op's flow starts there
	}
	w.begin("X", int(p.PID), int(c.TID), ts)
	w.str("cat", cat)
	w.str("name", name)
	// The slice spans the call on the wall clock; time cudatap held the
	// thread inside it is its own slice, nested, and left out of the
	// call's CUDA time (args.cuda_time_ns).
	w.micros("dur", dur)
	w.open("args")
	if dur != wall {
		w.uint("wall_ns", wall)
	}
	if c.HoldNs > 0 {
		w.uint("held_by_cudatap_ns", c.HoldNs)
		w.uint("cuda_time_ns", c.Duration())
	}
	if spec != nil {
		w.str("symbol", spec.Symbol(int(c.Symbol)))
	} else {
		w.str("symbol", c.API.String())
	}
	// The stream the call targets: not "stream", which Kineto and HTA
	// keep for GPU activity (HTA takes any event with a stream for a
	// kernel).
	if c.Stream >= 0 {
		w.int("target_stream", int64(c.Stream))
	}
	if c.Correlation != 0 {
		w.uint("correlation", c.Correlation)
	}
	a := &c.Args
	var met *straggler.Met[struct{}]
	if spec != nil && spec.Layer == event.NCCL {
		var at straggler.Arrival
		var ok bool
		if at, ok, met = w.meetings.Call(p, c, struct{}{}); ok {
			// The meeting across ranks: the communicator's unique id and
			// the collective's number on it (sends and receives are not
			// numbered); the communicator made: its id, rank and size.
			w.str("comm_id", fmt.Sprintf("%016x", at.Comm))
			if at.Seq >= 0 {
				w.int("seq", int64(at.Seq))
			} else {
				w.int("rank", int64(at.Rank))
				w.int("nranks", int64(at.Ranks))
			}
		}
	}
	switch class {
	case event.ClassMemcpy:
		w.uint("bytes", a.Bytes)
		w.str("kind", a.Kind.String())
		// Whether the host buffer was pinned, from the pinned ranges the
		// model tracked.
		w.bool("pageable", c.Pageable)
	case event.ClassMemset:
		w.uint("bytes", a.Bytes)
	case event.ClassLaunch:
		w.dim3("grid", a.Grid)
		w.dim3("block", a.Block)
		w.uint("shared_mem", a.SharedMem)
		k := w.kernels.Of(p, a.Func)
		w.kernelName("kernel", p, a.Func, k, formDisplay, w.kernelNamed(k))
	case event.ClassCollective:
		w.uint("bytes", a.Bytes)
		w.uint("count", a.Size) // elements
		w.str("datatype", describe.NCCLType(a.DataType))
		w.uint("comm", a.Comm)
		if a.Peer >= 0 {
			w.int("peer", int64(a.Peer))
		}
	}
	if c.Captured {
		w.bool("captured", true) // recorded into a CUDA graph, not executed here
	}
	if c.HasRet {
		w.int("ret", c.Ret)
	} else if c.End <= c.Start {
		w.bool("dur_measured", false)
	}
	w.close()
	if w.holding {
		keep(w.heldCall, opKey{p.PID, c.Seq}, 1)
	}
	w.end()
	if met != nil {
		w.meeting(met)
	}
}

// maxArrivalsListed bounds the ranks whose arrivals a meeting's slice lists.
const maxArrivalsListed = 64

// annotation draws an NVTX range on its thread's track, as Kineto draws
// the program's own annotations (record_function), or a mark; open: the
// recording ended before the range did.
func (w *Writer) annotation(rg steps.Range, open bool) {
	if rg.Mark {
		w.begin("i", int(rg.PID), int(rg.TID), rg.Start)
		w.str("s", "t")
	} else {
		w.begin("X", int(rg.PID), int(rg.TID), rg.Start)
		w.micros("dur", rg.End-rg.Start)
	}
	w.str("cat", event.AnnotationCategory)
	w.str("name", annotationName(rg.Name))
	w.open("args")
	w.str("source", "nvtx")
	if rg.Domain != 0 {
		w.uint("domain", rg.Domain)
	}
	if !rg.Mark {
		w.int("depth", int64(rg.Depth))
	}
	if open {
		w.bool("open", true) // still open when the recording ended
	}
	w.close()
	w.end()
}

// annotationName is how an NVTX range or mark is named: its message.
func annotationName(msg string) string {
	if msg == "" {
		return "(NVTX range without a message)"
	}
	return msg
}

// annotations draws, at the end, the NVTX ranges still open and the
// training steps found: ProfilerStep#N on the thread that marks them, as
// Kineto writes them (HTA's per-step analyses read them).
func (w *Writer) annotations(r *model.Result) {
	for _, rg := range w.ranges.Open(r.Process, r.End) {
		w.annotation(rg, true)
	}
	for _, f := range w.steps.Find(r) {
		for _, st := range f.Steps {
			w.begin("X", int(f.PID), int(f.TID), st.StartNs)
			w.str("cat", event.AnnotationCategory)
			w.str("name", steps.Name(st))
			w.micros("dur", st.Dur())
			w.open("args")
			w.str("source", "cudatap")
			w.str("found_by", f.By)
			w.str("marker", f.Marker)
			w.close()
			w.end()
		}
	}
}

// meeting draws a meeting of a communicator's ranks on its track: from
// the first arrival to the last, named by the collective and the rank that
// came last.
func (w *Writer) meeting(m *straggler.Met[struct{}]) {
	tr, ok := w.commPIDs[m.Comm]
	if !ok {
		if len(w.commPIDs) >= maxCommTracks {
			return
		}
		tr = commTrack{pid: CommPID(len(w.commPIDs)), ranks: len(m.Arrivals)}
		w.commPIDs[m.Comm] = tr
	}
	w.begin("X", tr.pid, 0, m.First)
	w.str("cat", "nccl_meeting")
	w.key("name")
	w.b = append(w.b, '"')
	w.b = describe.AppendMeeting(w.b, m.API, m.Seq, m.LastRank)
	w.b = append(w.b, '"')
	w.micros("dur", max(m.Last-m.First, minDur))
	w.open("args")
	w.str("comm_id", fmt.Sprintf("%016x", m.Comm))
	w.int("seq", int64(m.Seq))
	w.int("last_rank", int64(m.LastRank))
	w.uint("last_pid", uint64(m.PIDs[m.LastRank]))
	w.uint("arrival_spread_ns", m.Last-m.First)
	if len(m.Arrivals) <= maxArrivalsListed {
		// Each rank's arrival after the first, by rank.
		w.key("arrivals_after_first_us")
		w.b = append(w.b, '[')
		for i, t := range m.Arrivals {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.b = strconv.AppendFloat(w.b, float64(t-m.First)/1e3, 'f', 3, 64)
		}
		w.b = append(w.b, ']')
	}
	w.close()
	w.end()
}

// Sync writes the slice of a synchronization, with the stacks that led to it.
func (w *Writer) Sync(p *model.Process, s *model.Sync) {
	if w.err != nil || w.closed {
		return
	}
	w.steps.Sync(p, s)
	kind := s.Kind.String()
	ts, dur := snapped(s.Start, s.BlockedNs)
	w.begin("X", int(p.PID), int(s.TID), ts)
	// Not Kineto's "cuda_sync", which is GPU-side CUPTI activity: this is
	// the host thread blocked.
	w.str("cat", SyncCategory)
	w.key("name")
	w.b = append(w.b, `"sync: `...)
	w.b = append(w.b, kind...) // identifier-like, needs no escaping
	w.b = append(w.b, '"')
	w.micros("dur", dur)
	w.open("args")
	w.str("kind", kind)
	w.bool("explicit", s.Kind.Explicit())
	w.uint("blocked_ns", s.BlockedNs)
	if s.Stream >= 0 {
		w.int("target_stream", int64(s.Stream))
	}
	w.int("queued_ops", int64(s.QueuedOps))
	if s.Kind == model.SyncQueryPoll {
		w.int("polls", int64(s.Polls))
	}
	w.str("hint", s.Kind.Hint())
	w.stacks(p, "", s.Stack, s.PyStack)
	w.close()
	w.end()
}

// stacks writes the args prefix+"stack" and prefix+"python_stack": the
// native and Python stacks of a call (Process.Stacks and PyStacks
// indices, -1 = none), innermost first.
func (w *Writer) stacks(p *model.Process, prefix string, stack, py int32) {
	if stack >= 0 && int(stack) < len(p.Stacks) {
		w.key(prefix + "stack")
		w.b = append(w.b, '[')
		for i, addr := range p.Stacks[stack] {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.frame(p.PID, addr)
		}
		w.b = append(w.b, ']')
	}
	if py >= 0 && int(py) < len(p.PyStacks) && len(p.PyStacks[py]) > 0 {
		// The Python line that led here, innermost first.
		w.key(prefix + "python_stack")
		w.b = append(w.b, '[')
		for i, k := range p.PyStacks[py] {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.pyFrame(p.PID, k)
		}
		w.b = append(w.b, ']')
	}
}

// frame appends a stack frame's name as describe.Frame gives it, without
// building the string of an unresolved one.
func (w *Writer) frame(pid uint32, addr uint64) {
	if s := w.names.Frame(pid, addr); s != "" {
		w.b = appendString(w.b, s)
		return
	}
	w.b = append(w.b, `"0x`...)
	w.b = strconv.AppendUint(w.b, addr, 16)
	w.b = append(w.b, '"')
}

// pyFrame appends a Python frame's name as describe.PyFrame gives it.
func (w *Writer) pyFrame(pid uint32, k model.PyKey) {
	if s := w.names.PyFrame(pid, k); s != "" {
		w.b = appendString(w.b, s)
		return
	}
	if w.opts.Pending != nil {
		w.pyToken(pid, k) // it may be named yet
		return
	}
	w.b = append(w.b, `"<python code 0x`...)
	w.b = strconv.AppendUint(w.b, k.Code, 16)
	w.b = append(w.b, `>"`...)
}

// GPUOp writes the slice of an inferred GPU op on its stream's track, the
// ac2g flow from the call that enqueued it, and the cuda_event flow from
// the op it waited for (cudaEventRecord → cudaStreamWaitEvent).
func (w *Writer) GPUOp(p *model.Process, op *model.GPUOp) {
	if w.err != nil || w.closed {
		return
	}
	gpid := DeviceTrackPID(p.PID, op.Device)
	var k describe.Kernel
	named := true
	if op.Kind == model.OpKernel {
		k = w.kernels.Of(p, op.Func)
		named = w.kernelNamed(k)
	}
	track := trackKey{p.PID, op.Stream, op.Device}
	start, dur := op.Start, uint64(minDur)
	if op.End > op.Start {
		dur = op.End - op.Start
	}
	if !op.Measured { // CUPTI's times are real: kept to the ns
		latest := op.ProvenBy()
		if latest < op.Enqueued {
			latest = ^uint64(0) // not laid out by a model: no bound known
		}
		start, dur = mark(op.Enqueued, latest, op.Start, w.trackEnd[track])
	}
	keep(w.trackEnd, track, max(w.trackEnd[track], start+dur))
	keep(w.opStart, opKey{p.PID, op.ID}, start)
	w.begin("X", gpid, op.Stream, start)
	w.str("cat", op.Kind.Category())
	if op.Kind == model.OpKernel {
		// The full demangled name, as Kineto writes it: a shortened one
		// would merge distinct template instances.
		w.kernelName("name", p, op.Func, k, formFull, named)
	} else {
		w.key("name")
		w.b = append(w.b, '"')
		w.b = describe.AppendOpName(w.b, op)
		w.b = append(w.b, '"')
	}
	w.micros("dur", dur)
	w.open("args")
	w.str("timing", describe.Timing(op))
	if op.CUPTIOnly() {
		w.bool("cupti_only", true) // no traced call enqueued it: no call, no flow
	}
	w.bool("inferred", !op.Measured)
	w.bool("bounded", op.Bounded)
	if !op.Measured {
		// A mark: it ran, for an unknown time, within these bounds.
		w.micros("earliest_start", op.Enqueued)
		w.micros("latest_end", op.ProvenBy())
	}
	w.int("stream", int64(op.Stream))
	if op.Correlation != 0 {
		w.uint("correlation", op.Correlation)
	}
	w.int("device", int64(op.Device))
	switch op.Kind {
	case model.OpKernel:
		w.kernelName("kernel_short", p, op.Func, k, formDisplay, named)
		w.kernelName("kernel_mangled", p, op.Func, k, formMangled, named)
		w.dim3("grid", op.Grid)
		w.dim3("block", op.Block)
	case model.OpMemcpy:
		w.uint("bytes", op.Bytes)
		w.str("kind", op.CopyKind.String())
		w.bool("pageable", op.Pageable)
	case model.OpMemset, model.OpCollective:
		w.uint("bytes", op.Bytes)
	}
	node := p.NodeOf(op)
	if node != nil {
		// Run by a graph launch: its node, and the call that captured it
		// (the launch call is the correlation's).
		w.int("graph_node", int64(node.Index))
		w.str("captured_by", node.API.String())
		w.stacks(p, "capture_", node.Stack, node.PyStack)
	}
	w.close()
	if w.holding {
		keep(w.heldOp, opKey{p.PID, op.ID}, 1)
	}
	// Its flows bind to it, to its call and to the op it waited for:
	// held if one of them is.
	_, callHeld := w.heldCall[opKey{p.PID, op.Call}]
	_, afterHeld := w.heldOp[opKey{p.PID, op.After}]
	w.holdFlows = w.holding || (callHeld && op.Correlation != 0) || (afterHeld && op.AfterStream >= 0)
	w.end()

	// A graph launch's ops share its correlation id: one arrow, to its
	// first node (a flow id binds once).
	if op.Correlation != 0 && (node == nil || node.Index == 0) {
		enq := op.Enqueued
		if ts, ok := w.snapCall[opKey{p.PID, op.Call}]; ok {
			enq = ts // where its call's slice is drawn
		} else if op.EnqueueOnly {
			enq, _ = snapped(enq, 0)
		}
		w.flow("s", "ac2g", op.Correlation, int(p.PID), int(op.TID), enq)
		w.flow("f", "ac2g", op.Correlation, gpid, op.Stream, start)
	}
	// Dependencies that start at this op, now that it is drawn.
	if deps, ok := w.pendingDeps[opKey{p.PID, op.ID}]; ok {
		delete(w.pendingDeps, opKey{p.PID, op.ID})
		w.nPending -= len(deps)
		for _, d := range deps {
			w.flow("s", "cuda_event", d.id, gpid, op.Stream, start)
		}
	}
	// An event dependency: from the op the record followed on its stream
	// to this op, the one the wait held back; it starts where that op is
	// drawn, once it is.
	if op.AfterStream >= 0 {
		id := depFlowBase + w.deps
		w.deps++
		afterPID := DeviceTrackPID(p.PID, op.AfterDevice)
		if from, ok := w.opStart[opKey{p.PID, op.After}]; ok {
			w.flow("s", "cuda_event", id, afterPID, int(op.AfterStream), from)
		} else if w.nPending < maxDrawn {
			k := opKey{p.PID, op.After}
			w.pendingDeps[k] = append(w.pendingDeps[k], pendingDep{id, afterPID, int(op.AfterStream), op.AfterStart})
			w.nPending++
		} else {
			w.flow("s", "cuda_event", id, afterPID, int(op.AfterStream), op.AfterStart)
		}
		w.flow("f", "cuda_event", id, gpid, op.Stream, start)
	}
	w.holdFlows = false
}

// keep sets m[k] = v, forgetting everything first when m is full: what
// it holds helps drawing, and a writer streams traces of any length.
func keep[K comparable](m map[K]uint64, k K, v uint64) {
	if _, ok := m[k]; !ok && len(m) >= maxDrawn {
		clear(m)
	}
	m[k] = v
}

// Dependency writes nothing: the GPU op a wait held back carries the
// dependency (GPUOp.After), and is drawn with it.
func (w *Writer) Dependency(*model.Process, *model.Dependency) {}

// Hold draws the time cudatap held a thread while hooking a library it had
// just loaded: not the program's time, and marked so.
func (w *Writer) Hold(p *model.Process, h *model.Hold) {
	if w.err != nil || w.closed {
		return
	}
	w.begin("X", int(p.PID), int(h.TID), h.Start)
	w.str("cat", "cudatap")
	w.str("name", "cudatap: target held while a library is hooked")
	w.micros("dur", h.End-h.Start)
	w.open("args")
	w.bool("not_cuda_time", true)
	w.close()
	w.end()
}

// flow writes one end of a flow arrow. Both ends bind to the slice that
// encloses ts on their track ("bp":"e" on the finish).
func (w *Writer) flow(ph, cat string, id uint64, pid, tid int, ts uint64) {
	w.begin(ph, pid, tid, ts)
	w.holding = w.holdFlows
	w.str("cat", cat)
	w.str("name", cat)
	w.uint("id", id)
	if ph == "f" {
		w.str("bp", "e")
	}
	w.end()
}

func (w *Writer) counter(c *Counter) {
	names := make([]string, 0, len(c.Values))
	for k := range c.Values {
		names = append(names, k)
	}
	slices.Sort(names) // deterministic output
	w.begin("C", c.PID, 0, c.TS)
	w.str("name", c.Name)
	w.open("args")
	for _, k := range names {
		w.float(k, c.Values[k])
	}
	w.close()
	w.end()
}

// deviceProperties lists the GPUs NVML described, as Kineto does (it is
// known only at the end, and written after the events: keys of a JSON
// object are unordered). Empty without NVML.
func (w *Writer) deviceProperties(r *model.Result) {
	w.b = append(w.b[:0], `"deviceProperties":[`...)
	for i, g := range r.GPU.GPUs {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, '{')
		w.sep = false
		w.int("id", int64(g.Index))
		w.str("name", g.Name)
		w.uint("totalGlobalMem", g.MemTotal)
		if g.UUID != "" {
			w.str("uuid", g.UUID)
		}
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, "],"...)
	w.write(w.b)
}

// distributedInfo says which rank of an NCCL job the trace is, as Kineto
// does (HTA groups a job's traces by it): written when exactly one traced
// process made an NCCL communicator. A trace of several ranks (--all)
// names each in its process's track instead.
func (w *Writer) distributedInfo(r *model.Result) {
	var ranked *model.Process
	for _, p := range r.Processes {
		if p.WorldSize > 0 {
			if ranked != nil {
				return
			}
			ranked = p
		}
	}
	if ranked == nil {
		return
	}
	// As Kineto writes it, spaces included: HTA finds a trace's rank with
	// the pattern "rank":\s+(\d+) (without a match every trace is rank 0,
	// and a job's ranks replace one another), on the first line that has
	// one: no event writes that key with a space.
	w.b = append(w.b[:0], `"distributedInfo": {"backend": "nccl", "rank": `...)
	w.b = strconv.AppendInt(w.b, int64(ranked.Rank), 10)
	w.b = append(w.b, `, "world_size": `...)
	w.b = strconv.AppendInt(w.b, int64(ranked.WorldSize), 10)
	w.b = append(w.b, `, "pg_count": 1, "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": `...)
	w.b = strconv.AppendInt(w.b, int64(ranked.WorldSize), 10)
	w.b = append(w.b, `, "ranks": [`...)
	for r := range min(int(ranked.WorldSize), maxRanksListed) {
		if r > 0 {
			w.b = append(w.b, ", "...)
		}
		w.b = strconv.AppendInt(w.b, int64(r), 10)
	}
	w.b = append(w.b, `]}], "nccl_version": "unknown"},`...)
	w.write(w.b)
}

// maxRanksListed bounds the ranks distributedInfo lists.
const maxRanksListed = 1 << 16

// footer writes the "cudatap" block: which clock the timestamps use and
// what was lost, so a reader can tell a quiet GPU from a lossy recording.
func (w *Writer) footer(r *model.Result) {
	d := r.Drops
	w.b = w.b[:0]
	w.sep = false
	w.open("cudatap")
	w.str("version", w.opts.Version)
	w.str("clock", "CLOCK_MONOTONIC")
	w.int("wall_offset_ns", r.WallOffsetNs)
	if len(w.opts.Merge) > 0 && json.Valid(w.opts.Merge) {
		w.key("merge")
		w.b = append(w.b, w.opts.Merge...)
	}
	w.open("drops")
	w.uint("submitted", d.Submitted)
	w.uint("received", d.Received)
	w.uint("ringbuf_full", d.RingbufFull)
	w.uint("inflight_full", d.InflightFull)
	w.uint("orphan_returns", d.OrphanReturns)
	w.uint("read_faults", d.ReadFaults)
	w.uint("decode_errors", d.DecodeErrors)
	w.uint("unknown_api", d.UnknownAPI)
	w.uint("attach_failures", d.AttachFailures)
	w.uint("nested", d.Nested)
	w.uint("program_skips", d.ProgramSkips)
	w.uint("window_full", d.WindowFull)
	w.uint("stacks_dropped", d.StacksDropped)
	w.uint("python_code_not_copied", d.PyCodeLost)
	w.uint("gpu_times_lost", d.GPUTimesLost)
	w.uint("gpu_times_unmatched", d.GPUTimesUnmatched)
	w.uint("gpu_times_late", d.GPUTimesLate)
	w.uint("gpu_ops_unmeasured", d.GPUTimesUnmeasured)
	w.uint("gpu_ops_cupti_only", d.GPUOpsCUPTIOnly)
	// What the model's bounds merged or did not follow (a recording from
	// elsewhere can hold any number of processes, threads, streams...).
	l := d.Limits
	w.open("limits")
	w.uint("processes_merged", l.Processes)
	w.uint("threads_merged", l.Threads)
	w.uint("streams_merged", l.Streams)
	w.uint("events_not_followed", l.Events)
	w.uint("graphs_not_followed", l.Graphs)
	w.uint("kernel_names_not_kept", l.KernelNames)
	w.uint("allocations_not_tracked", l.Allocations)
	w.uint("polls_not_followed", l.Polls)
	w.uint("names_not_kept", l.Names)
	w.uint("nvml_samples_thinned", l.Samples)
	w.uint("nvml_report_entries_not_kept", l.GPUReport)
	w.close()
	w.close()
	w.uint("lost_events", d.Lost())
	if r.Truncated != "" {
		// The drop record comes last: after a cut, what was lost is unknown.
		w.str("truncated", r.Truncated)
		w.bool("drops_known", false)
	}
	w.close()
	w.write(w.b)
}
