// Package perfetto writes a recording as a Perfetto trace (protobuf
// TracePackets, .perfetto-trace), which ui.perfetto.dev and trace_processor
// open natively: the same tracks, slices, flows and counters as the Chrome
// trace (export/chrome), named alike, in a fraction of its size. The
// Chrome trace stays for what reads Kineto's JSON (HTA).
//
// A trace file is a sequence of Trace.packet fields, so the Writer, a
// model.Sink, encodes each packet as the model hands over its event and
// keeps none: names, categories, argument names and string values are
// interned (defined once per sequence, then referred to by id) in bounded
// tables. Slices are a begin and an end packet, written together; events
// come in the order the model finalizes them, and readers sort by time.
// Packets go out in deflated bundles of 256 KiB, compressed on other
// cores (bundle.go), as Perfetto's tracing service writes them when asked
// to compress. The track descriptors, counters and loss account follow
// the events, written by Close.
//
// Tracks: a process track per process (named as the Chrome trace names
// it) with its threads' tracks (API calls, holds) and under each thread a
// track of its host-blocking syncs and, where there are any, of its
// training steps (ProfilerStep#N, export/steps) and its NVTX ranges (one
// per domain; those started and ended by id on lanes under the process);
// a track per process and device with a
// track per stream (GPU ops); a track per NCCL communicator (meetings);
// a track per GPU with a counter track per NVML series; and a "cudatap"
// track whose slice spans the recording and carries the loss account.
// Flows join each launch to its GPU op and each event dependency's ops.
//
// Timestamps are CLOCK_MONOTONIC ns, written on Perfetto's default trace
// clock; a clock snapshot at the end maps them to wall-clock time.
package perfetto

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cudatap/cudatap/export/chrome"
	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/perfetto/pb"
	"github.com/cudatap/cudatap/export/steps"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Options tune the trace.
type Options struct {
	Version string // cudatap version, in the recording's slice
	// Origins says where the processes of a merged trace ran, by trace
	// pid: their track names show the host and the pid there.
	Origins map[uint32]describe.Origin
	// Merge, when set, is how a merged trace's recordings were put on one
	// clock (export/merge): the recording slice's "merge" argument.
	Merge json.RawMessage
	// Pending makes the trace live: fed by a session that is still
	// naming what it traces, it holds here the packets that name a kernel
	// or a Python frame not named yet, and Close writes them with the
	// names known then (pending.go). nil: the names are complete before
	// the events come (a recording's).
	Pending io.ReadWriteSeeker
}

// sequenceID is the one packet sequence of the trace: its interned data
// belong to it.
const sequenceID = 1

// depFlowBase starts the flow ids of event dependencies, above any
// correlation id (launch → GPU op flows use the correlation itself), as in
// the Chrome trace.
const depFlowBase = 1 << 40

// maxCommTracks bounds the communicators given a track.
const maxCommTracks = 1 << 16

// Names of the tracks the Chrome trace has no name for.
const (
	syncTrackName    = "syncs (host blocked)"
	nvtxTrackName    = "NVTX ranges"
	stepsTrackName   = "steps"
	recordingTrack   = "cudatap"
	otherThreadsName = "other threads"
)

// trackKind says what a track holds.
type trackKind uint8

const (
	kindProcess   trackKind = iota + 1
	kindThread              // API calls and holds
	kindSyncs               // a thread's host-blocking syncs
	kindDevice              // a process's work on a device
	kindStream              // GPU ops of a stream on a device
	kindComm                // an NCCL communicator's meetings
	kindNVML                // a GPU's NVML counters
	kindCounter             // one NVML series
	kindRecording           // the recording and its loss account
	kindNVTX                // a thread's NVTX ranges pushed in one domain (id: tid), or started ones (id: lane)
	kindSteps               // the training steps found on a thread
)

// startedLanes spreads the NVTX ranges started and ended by id (which may
// overlap) over this many tracks per process, by id.
const startedLanes = 8

// trackKey identifies a track; id is the thread, stream or communicator.
type trackKey struct {
	kind   trackKind
	device int8
	pid    uint32
	id     uint64
	series string // a counter's series
	domain uint64 // an NVTX track's domain
	lane   bool   // an NVTX track of started ranges (id: the lane)
}

// Writer streams a Perfetto trace to its output. Not safe for concurrent
// use.
type Writer struct {
	out     *bufio.Writer
	bundles *bundler
	err     error // the first write error; nothing more is encoded after it
	names   *model.Names
	opts    Options
	closed  bool

	e      enc // the packet being built
	intern *interner
	// Tracks by key, given uuids as first used: bounded by what the model
	// keeps (processes, threads, streams, devices) and maxCommTracks.
	tracks map[trackKey]uint64
	deps   uint64 // dependency flows written so far, for unique ids

	kernels  *describe.Kernels
	meetings *straggler.Matcher[struct{}]
	comms    map[uint64]int // communicator → ranks, those with a track
	// Where a name or a string value is built (scratch), and a category or
	// argument name (kb): both are passed to event, which must not mix them.
	scratch, kb []byte
	// The program's NVTX ranges, paired as their calls come, and its
	// training steps, found by Close.
	ranges *steps.Ranges
	steps  *steps.Detector
	// A live trace's packets held until their names are known
	// (pending.go): whether those being written are, and those held.
	holding bool
	held    *bufio.Writer
	nHeld   int
	lenBuf  [binary.MaxVarintLen64]byte
}

var _ model.Sink = (*Writer)(nil)

// NewWriter starts a trace on out. names names threads, kernels and stack
// frames; it must be complete before the events that need it arrive (nil:
// nothing is named).
func NewWriter(out io.Writer, names *model.Names, opts Options) *Writer {
	if names == nil {
		names = model.NewNames()
	}
	buf := bufio.NewWriterSize(out, 256<<10)
	return &Writer{out: buf, bundles: newBundler(buf), names: names, opts: opts,
		intern: newInterner(), tracks: map[trackKey]uint64{}, kernels: describe.NewKernels(names),
		meetings: straggler.NewMatcher[struct{}](), comms: map[uint64]int{}, ranges: steps.NewRanges(), steps: steps.NewDetector(false)}
}

// track returns the uuid of a track (uuid 0 is Perfetto's root).
func (w *Writer) track(k trackKey) uint64 {
	id, ok := w.tracks[k]
	if !ok {
		id = uint64(len(w.tracks)) + 1
		w.tracks[k] = id
	}
	return id
}

func threadKey(pid, tid uint32) trackKey {
	return trackKey{kind: kindThread, pid: pid, id: uint64(tid)}
}

func streamKey(pid uint32, device int8, stream int) trackKey {
	return trackKey{kind: kindStream, pid: pid, device: device, id: uint64(stream)}
}

func deviceKey(pid uint32, device int8) trackKey {
	return trackKey{kind: kindDevice, pid: pid, device: device}
}

// event starts a TrackEvent packet: its time, type, track, category and
// name (both interned; name may be w.scratch). Arguments and flows follow;
// send writes it. A slice is its begin packet followed by its end
// (endAt), written together; one with no duration is an instant.
func (w *Writer) event(ts uint64, typ uint64, track uint64, cat string, name []byte) {
	w.begin(ts, typ, track, cat)
	if id := w.intern.iid(internEventNames, name); id != 0 {
		w.e.varint(eventNameIID, id)
	} else {
		w.e.bytes(eventName, name)
	}
}

// eventNamed is event for a name that is a string.
func (w *Writer) eventNamed(ts uint64, typ uint64, track uint64, cat string, name string) {
	w.begin(ts, typ, track, cat)
	if id := w.intern.iidOf(internEventNames, name); id != 0 {
		w.e.varint(eventNameIID, id)
	} else {
		w.e.string(eventName, name)
	}
}

// begin starts a TrackEvent packet, up to its name.
func (w *Writer) begin(ts uint64, typ uint64, track uint64, cat string) {
	e := &w.e
	e.reset()
	e.open(fieldTracePacket)
	e.varint(packetTimestamp, ts)
	e.varint(packetSequenceID, sequenceID)
	if w.holding {
		w.intern.in.reset() // no interned string: it needs no state
	} else {
		e.varint(packetSeqFlags, w.intern.startPacket())
	}
	e.open(packetTrackEvent)
	e.varint(eventType, typ)
	e.varint(eventTrackUUID, track)
	if cat != "" {
		if id := w.intern.iidOf(internCategories, cat); id != 0 {
			e.varint(eventCategoryIIDs, id)
		} else {
			e.string(eventCategories, cat)
		}
	}
}

// send finishes the packet event began and writes it.
func (w *Writer) send() {
	e := &w.e
	e.close() // TrackEvent
	if len(w.intern.in.b) > 0 {
		e.bytes(packetInterned, w.intern.in.b)
	}
	e.close() // packet
	w.write(e.b)
}

func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	if w.holding {
		w.hold(b)
		return
	}
	w.bundles.add(b)
	w.err = w.bundles.err
}

// endAt writes the end of the slice last begun on track: it needs no
// interned data, so it says nothing of the sequence's state.
func (w *Writer) endAt(track, end uint64) {
	e := &w.e
	e.reset()
	e.open(fieldTracePacket)
	e.varint(packetTimestamp, end)
	e.varint(packetSequenceID, sequenceID)
	e.open(packetTrackEvent)
	e.varint(eventType, typeSliceEnd)
	e.varint(eventTrackUUID, track)
	e.close()
	e.close()
	w.write(e.b)
}

// nameStr is s in w.scratch, for event.
func (w *Writer) nameStr(s string) []byte {
	w.scratch = append(w.scratch[:0], s...)
	return w.scratch
}

// Arguments (debug annotations), named as the Chrome trace's args. Those
// of one value are written with their length known in advance (annotate),
// lists and dictionaries with open and close.

// key opens an annotation named k.
func (w *Writer) key(k string) {
	w.e.open(eventAnnotations)
	w.annKey(k)
}

// annKey names the annotation being written (also a dict entry's).
func (w *Writer) annKey(k string) {
	if id := w.intern.iidOf(internAnnNames, k); id != 0 {
		w.e.varint(annNameIID, id)
	} else {
		w.e.string(annName, k)
	}
}

// annotate writes annotation k (in field: eventAnnotations, or annDict
// for a dictionary's entry) whose value is varint v in field vf.
func (w *Writer) annotate(field protowire.Number, k string, vf protowire.Number, v uint64) {
	id := w.intern.iidOf(internAnnNames, k)
	n := protowire.SizeTag(vf) + protowire.SizeVarint(v)
	if id != 0 {
		n += protowire.SizeTag(annNameIID) + protowire.SizeVarint(id)
	} else {
		n += protowire.SizeTag(annName) + protowire.SizeBytes(len(k))
	}
	e := &w.e
	e.b = protowire.AppendTag(e.b, field, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(n))
	if id != 0 {
		e.varint(annNameIID, id)
	} else {
		e.string(annName, k)
	}
	e.varint(vf, v)
}

// strValue writes an annotation's string value, interned.
func (w *Writer) strValue(v []byte) {
	if id := w.intern.iid(internAnnStrings, v); id != 0 {
		w.e.varint(annStringIID, id)
	} else {
		w.e.bytes(annString, v)
	}
}

func (w *Writer) str(k, v string) {
	if id := w.intern.iidOf(internAnnStrings, v); id != 0 {
		w.annotate(eventAnnotations, k, annStringIID, id)
		return
	}
	w.key(k)
	w.e.string(annString, v)
	w.e.close()
}

func (w *Writer) int(k string, v int64) { w.annotate(eventAnnotations, k, annInt, uint64(v)) }

func (w *Writer) uint(k string, v uint64) { w.annotate(eventAnnotations, k, annUint, v) }

func (w *Writer) bool(k string, v bool) {
	b := uint64(0)
	if v {
		b = 1
	}
	w.annotate(eventAnnotations, k, annBool, b)
}

func (w *Writer) float(k string, v float64) {
	w.key(k)
	w.e.double(annDouble, v)
	w.e.close()
}

func (w *Writer) dim3(k string, d event.Dim3) {
	w.key(k)
	w.uintItem(uint64(d.X))
	w.uintItem(uint64(d.Y))
	w.uintItem(uint64(d.Z))
	w.e.close()
}

// uintItem writes an item of a list: a number.
func (w *Writer) uintItem(v uint64) {
	e := &w.e
	e.b = protowire.AppendTag(e.b, annArray, protowire.BytesType)
	e.b = protowire.AppendVarint(e.b, uint64(protowire.SizeTag(annUint)+protowire.SizeVarint(v)))
	e.varint(annUint, v)
}

// item writes a string item of a list (a stack frame), interned.
func (w *Writer) item(s []byte) {
	w.e.open(annArray)
	w.strValue(s)
	w.e.close()
}

// frame is a stack frame's name as describe.Frame gives it, in w.scratch,
// without building the string of an unresolved one.
func (w *Writer) frame(pid uint32, addr uint64) []byte {
	if s := w.names.Frame(pid, addr); s != "" {
		return w.nameStr(s)
	}
	w.scratch = strconv.AppendUint(append(w.scratch[:0], "0x"...), addr, 16)
	return w.scratch
}

// pyFrame is a Python frame's name as describe.PyFrame gives it, in
// w.scratch.
func (w *Writer) pyFrame(pid uint32, k model.PyKey) []byte {
	if s := w.names.PyFrame(pid, k); s != "" {
		return w.nameStr(s)
	}
	if w.holding {
		return w.pyToken(pid, k) // it may be named yet
	}
	w.scratch = strconv.AppendUint(append(w.scratch[:0], "<python code 0x"...), k.Code, 16)
	w.scratch = append(w.scratch, '>')
	return w.scratch
}

// dict opens a dictionary argument; its entries are written with the
// entry methods between dict and w.e.close().
func (w *Writer) dict(k string) { w.key(k) }

func (w *Writer) entryUint(k string, v uint64) { w.annotate(annDict, k, annUint, v) }

func (w *Writer) entryStr(k, v string) {
	w.e.open(annDict)
	w.annKey(k)
	w.strValue(w.nameStr(v))
	w.e.close()
}

func (w *Writer) flow(field protowire.Number, id uint64) { w.e.fixed64(field, id) }

// Call writes the host slice of c on its thread's track, the start of the
// flow to the GPU op it enqueued, and an NCCL meeting it completed.
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
	spec, cat, name := describe.CallName(c)
	class := event.ClassOther
	if spec != nil {
		class = spec.Class
	}
	track := w.track(threadKey(p.PID, c.TID))
	typ := uint64(typeSliceBegin)
	if c.End <= c.Start {
		typ = typeInstant // only the entry was probed
	}
	w.holdIf(class == event.ClassLaunch && w.late(p, true, c.Args.Func, -1))
	defer w.holdIf(false)
	w.eventNamed(c.Start, typ, track, cat, name)
	if c.GPUOp >= 0 && c.Correlation != 0 {
		w.flow(eventFlowIDs, c.Correlation)
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
		w.bool("pageable", c.Pageable)
	case event.ClassMemset:
		w.uint("bytes", a.Bytes)
	case event.ClassLaunch:
		w.dim3("grid", a.Grid)
		w.dim3("block", a.Block)
		w.uint("shared_mem", a.SharedMem)
		w.str("kernel", w.kernelName(p, a.Func, w.kernels.Of(p, a.Func), formDisplay))
	case event.ClassCollective:
		w.uint("bytes", a.Bytes)
		w.uint("count", a.Size)
		w.str("datatype", describe.NCCLType(a.DataType))
		w.uint("comm", a.Comm)
		if a.Peer >= 0 {
			w.int("peer", int64(a.Peer))
		}
	}
	if c.Captured {
		w.bool("captured", true)
	}
	if c.HasRet {
		w.int("ret", c.Ret)
	} else if c.End <= c.Start {
		w.bool("dur_measured", false)
	}
	w.send()
	if typ == typeSliceBegin {
		w.endAt(track, c.End)
	}
	if met != nil {
		w.meeting(met)
	}
}

// meeting draws a meeting of a communicator's ranks on its track: from
// the first arrival to the last, named by the collective and the rank that
// came last.
func (w *Writer) meeting(m *straggler.Met[struct{}]) {
	if _, ok := w.comms[m.Comm]; !ok {
		if len(w.comms) >= maxCommTracks {
			return
		}
		w.comms[m.Comm] = len(m.Arrivals)
	}
	track := w.track(trackKey{kind: kindComm, id: m.Comm})
	typ := uint64(typeSliceBegin)
	if m.Last <= m.First {
		typ = typeInstant
	}
	w.scratch = describe.AppendMeeting(w.scratch[:0], m.API, m.Seq, m.LastRank)
	w.event(m.First, typ, track, "nccl_meeting", w.scratch)
	w.str("comm_id", fmt.Sprintf("%016x", m.Comm))
	w.int("seq", int64(m.Seq))
	w.int("last_rank", int64(m.LastRank))
	w.uint("last_pid", uint64(m.PIDs[m.LastRank]))
	w.uint("arrival_spread_ns", m.Last-m.First)
	if len(m.Arrivals) <= maxArrivalsListed {
		// Each rank's arrival after the first, by rank.
		w.key("arrivals_after_first_ns")
		for _, t := range m.Arrivals {
			w.uintItem(t - m.First)
		}
		w.e.close()
	}
	w.send()
	if typ == typeSliceBegin {
		w.endAt(track, m.Last)
	}
}

// maxArrivalsListed bounds the ranks whose arrivals a meeting's slice lists.
const maxArrivalsListed = 64

// annotation draws an NVTX range, or a mark, on its NVTX track: a pushed
// one on its thread's (per domain: they nest there), a started one on one
// of its process's lanes; open: the recording ended before the range did.
func (w *Writer) annotation(rg steps.Range, open bool) {
	k := trackKey{kind: kindNVTX, pid: rg.PID, id: uint64(rg.TID), domain: rg.Domain}
	if rg.Started {
		lane := rg.ID
		if lane == 0 {
			lane = uint64(rg.StartSeq) // NVTX gave no id (steps.Ranges): by the call that started it
		}
		k = trackKey{kind: kindNVTX, pid: rg.PID, id: lane % startedLanes, lane: true}
	}
	track := w.track(k)
	typ := uint64(typeSliceBegin)
	if rg.Mark || rg.End <= rg.Start {
		typ = typeInstant
	}
	w.eventNamed(rg.Start, typ, track, event.AnnotationCategory, annotationName(rg.Name))
	w.str("source", "nvtx")
	if rg.Domain != 0 {
		w.uint("domain", rg.Domain)
	}
	if open {
		w.bool("open", true)
	}
	w.send()
	if typ == typeSliceBegin {
		w.endAt(track, rg.End)
	}
}

// annotationName is how an NVTX range or mark is named: its message.
func annotationName(msg string) string {
	if msg == "" {
		return "(NVTX range without a message)"
	}
	return msg
}

// annotations draws, at the end, the NVTX ranges still open and the
// training steps found, on each thread's steps track.
func (w *Writer) annotations(r *model.Result) {
	for _, rg := range w.ranges.Open(r.Process, r.End) {
		w.annotation(rg, true)
	}
	for _, f := range w.steps.Find(r) {
		track := w.track(trackKey{kind: kindSteps, pid: f.PID, id: uint64(f.TID)})
		for _, st := range f.Steps {
			w.eventNamed(st.StartNs, typeSliceBegin, track, event.AnnotationCategory, steps.Name(st))
			w.str("found_by", f.By)
			w.str("marker", f.Marker)
			w.send()
			w.endAt(track, st.EndNs)
		}
	}
}

// Sync writes the slice of a synchronization on its thread's sync track,
// with the stacks that led to it.
func (w *Writer) Sync(p *model.Process, s *model.Sync) {
	if w.err != nil || w.closed {
		return
	}
	w.steps.Sync(p, s)
	kind := s.Kind.String()
	track := w.track(trackKey{kind: kindSyncs, pid: p.PID, id: uint64(s.TID)})
	typ := uint64(typeSliceBegin)
	if s.BlockedNs == 0 {
		typ = typeInstant
	}
	w.holdIf(w.late(p, false, 0, s.PyStack))
	defer w.holdIf(false)
	w.scratch = append(append(w.scratch[:0], "sync: "...), kind...)
	w.event(s.Start, typ, track, chrome.SyncCategory, w.scratch)
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
	w.send()
	if typ == typeSliceBegin {
		w.endAt(track, s.Start+s.BlockedNs)
	}
}

// stacks writes the args prefix+"stack" and prefix+"python_stack": the
// native and Python stacks of a call (Process.Stacks and PyStacks
// indices, -1 = none), innermost first.
func (w *Writer) stacks(p *model.Process, prefix string, stack, py int32) {
	if stack >= 0 && int(stack) < len(p.Stacks) {
		w.key(prefix + "stack")
		for _, addr := range p.Stacks[stack] {
			w.item(w.frame(p.PID, addr))
		}
		w.e.close()
	}
	if py >= 0 && int(py) < len(p.PyStacks) && len(p.PyStacks[py]) > 0 {
		// The Python line that led here, innermost first.
		w.key(prefix + "python_stack")
		for _, k := range p.PyStacks[py] {
			w.item(w.pyFrame(p.PID, k))
		}
		w.e.close()
	}
}

// GPUOp writes the slice of a GPU op on its stream's track, the end of the
// flow from the call that enqueued it, and the flow from the op it waited
// for (cudaEventRecord → cudaStreamWaitEvent): from an instant at that
// op's start, as the Chrome trace draws it.
func (w *Writer) GPUOp(p *model.Process, op *model.GPUOp) {
	if w.err != nil || w.closed {
		return
	}
	var dep uint64
	if op.AfterStream >= 0 {
		dep = depFlowBase + w.deps
		w.deps++
		w.eventNamed(op.AfterStart, typeInstant, w.track(streamKey(p.PID, op.AfterDevice, int(op.AfterStream))), "cuda_event", "cuda_event")
		w.flow(eventFlowIDs, dep)
		w.send()
	}
	track := w.track(streamKey(p.PID, op.Device, op.Stream))
	typ := uint64(typeSliceBegin)
	if op.End <= op.Start {
		typ = typeInstant // no inferred duration
	}
	node := p.NodeOf(op)
	py := int32(-1)
	if node != nil {
		py = node.PyStack
	}
	w.holdIf(w.late(p, op.Kind == model.OpKernel, op.Func, py))
	defer w.holdIf(false)
	var k describe.Kernel
	if op.Kind == model.OpKernel {
		// The full demangled name, as Kineto writes it: a shortened one
		// would merge distinct template instances.
		k = w.kernels.Of(p, op.Func)
		w.eventNamed(op.Start, typ, track, op.Kind.Category(), w.kernelName(p, op.Func, k, formFull))
	} else {
		w.scratch = describe.AppendOpName(w.scratch[:0], op)
		w.event(op.Start, typ, track, op.Kind.Category(), w.scratch)
	}
	// A graph launch's ops share its correlation id: one arrow, to its
	// first node.
	if op.Correlation != 0 && (node == nil || node.Index == 0) {
		w.flow(eventTerminating, op.Correlation)
	}
	if dep != 0 {
		w.flow(eventTerminating, dep)
	}
	w.str("timing", describe.Timing(op))
	w.bool("inferred", !op.Measured)
	w.bool("bounded", op.Bounded)
	if !op.Measured {
		w.uint("earliest_start_ns", op.Enqueued)
		w.uint("latest_end_ns", op.ProvenBy())
	}
	w.int("stream", int64(op.Stream))
	if op.Correlation != 0 {
		w.uint("correlation", op.Correlation)
	}
	w.int("device", int64(op.Device))
	switch op.Kind {
	case model.OpKernel:
		w.str("kernel_short", w.kernelName(p, op.Func, k, formDisplay))
		w.str("kernel_mangled", w.kernelName(p, op.Func, k, formMangled))
		w.dim3("grid", op.Grid)
		w.dim3("block", op.Block)
	case model.OpMemcpy:
		w.uint("bytes", op.Bytes)
		w.str("kind", op.CopyKind.String())
		w.bool("pageable", op.Pageable)
	case model.OpMemset, model.OpCollective:
		w.uint("bytes", op.Bytes)
	}
	if node != nil {
		// Run by a graph launch: its node, and the call that captured it.
		w.int("graph_node", int64(node.Index))
		w.str("captured_by", node.API.String())
		w.stacks(p, "capture_", node.Stack, node.PyStack)
	}
	w.send()
	if typ == typeSliceBegin {
		w.endAt(track, op.End)
	}
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
	track := w.track(threadKey(p.PID, h.TID))
	w.eventNamed(h.Start, typeSliceBegin, track, "cudatap", "cudatap: target held while a library is hooked")
	w.bool("not_cuda_time", true)
	w.send()
	w.endAt(track, h.End)
}

// Close writes the counters (r's NVML samples), the recording's slice with
// its loss account, the descriptors of every track and a clock snapshot,
// and flushes. It returns the first write error of the whole trace. It
// does not close the underlying writer.
func (w *Writer) Close(r *model.Result) error {
	if w.closed {
		return w.err
	}
	w.closed = true
	w.writeHeld(r.Process)
	w.annotations(r)
	w.counters(r)
	w.recording(r)
	w.descriptors(r)
	w.clock(r)
	if err := w.bundles.close(); err != nil && w.err == nil {
		w.err = err
	}
	if err := w.out.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// counters writes r's NVML samples: a counter track per device and series.
func (w *Writer) counters(r *model.Result) {
	for i := range r.Counters {
		c := &r.Counters[i]
		for _, k := range slices.Sorted(maps.Keys(c.Values)) {
			w.begin(c.TS, typeCounter, w.track(trackKey{kind: kindCounter, id: uint64(c.Device), series: k}), "")
			w.e.double(eventDoubleValue, c.Values[k])
			w.send()
		}
	}
}

// recording writes the slice that spans the recording on cudatap's own
// track: what the Chrome trace's "cudatap" block, deviceProperties and
// distributedInfo say, as its arguments; and an instant where a truncated
// recording stops.
func (w *Writer) recording(r *model.Result) {
	d := r.Drops
	track := w.track(trackKey{kind: kindRecording})
	typ := uint64(typeSliceBegin)
	if r.End <= r.Start {
		typ = typeInstant
	}
	// Its name says at a glance whether the run lost events.
	w.scratch = strconv.AppendUint(append(w.scratch[:0], "recording: "...), d.Lost(), 10)
	w.scratch = append(w.scratch, " events lost"...)
	if r.Truncated != "" {
		w.scratch = append(w.scratch[:0], "recording: cut short, events lost unknown"...)
	}
	w.event(r.Start, typ, track, "cudatap", w.scratch)
	w.str("version", w.opts.Version)
	w.str("clock", "CLOCK_MONOTONIC")
	w.int("wall_offset_ns", r.WallOffsetNs)
	if len(w.opts.Merge) > 0 && json.Valid(w.opts.Merge) {
		w.str("merge", string(w.opts.Merge))
	}
	w.str("loss", describe.Account(r))
	w.dict("drops")
	for _, f := range []struct {
		k string
		v uint64
	}{{"submitted", d.Submitted}, {"received", d.Received}, {"ringbuf_full", d.RingbufFull}, {"inflight_full", d.InflightFull},
		{"orphan_returns", d.OrphanReturns}, {"read_faults", d.ReadFaults}, {"decode_errors", d.DecodeErrors}, {"unknown_api", d.UnknownAPI},
		{"attach_failures", d.AttachFailures}, {"nested", d.Nested}, {"program_skips", d.ProgramSkips}, {"window_full", d.WindowFull},
		{"stacks_dropped", d.StacksDropped}, {"python_code_not_copied", d.PyCodeLost}, {"gpu_times_lost", d.GPUTimesLost},
		{"gpu_times_unmatched", d.GPUTimesUnmatched}, {"gpu_times_late", d.GPUTimesLate}, {"gpu_ops_unmeasured", d.GPUTimesUnmeasured},
		{"gpu_ops_cupti_only", d.GPUOpsCUPTIOnly}} {
		w.entryUint(f.k, f.v)
	}
	w.e.close()
	l := d.Limits
	w.dict("limits")
	for _, f := range []struct {
		k string
		v uint64
	}{{"processes_merged", l.Processes}, {"threads_merged", l.Threads}, {"streams_merged", l.Streams}, {"events_not_followed", l.Events},
		{"graphs_not_followed", l.Graphs}, {"kernel_names_not_kept", l.KernelNames}, {"allocations_not_tracked", l.Allocations},
		{"polls_not_followed", l.Polls}, {"names_not_kept", l.Names}, {"nvml_samples_thinned", l.Samples}} {
		w.entryUint(f.k, f.v)
	}
	w.e.close()
	w.uint("lost_events", d.Lost())
	if r.Truncated != "" {
		// After a cut, what was lost is unknown.
		w.str("truncated", r.Truncated)
		w.bool("drops_known", false)
	}
	// Interning's bounds at work, counted (before this slice's own names).
	w.dict("interning")
	w.entryUint("strings_written_in_full", w.intern.inline)
	w.entryUint("tables_cleared", w.intern.resets)
	w.e.close()
	for _, g := range r.GPU.GPUs {
		// Kineto's deviceProperties.
		w.dict("gpu " + strconv.Itoa(g.Index))
		w.entryStr("name", g.Name)
		w.entryUint("totalGlobalMem", g.MemTotal)
		if g.UUID != "" {
			w.entryStr("uuid", g.UUID)
		}
		w.e.close()
	}
	if p := ranked(r); p != nil {
		// Kineto's distributedInfo: which rank of an NCCL job this is.
		w.dict("distributed")
		w.entryStr("backend", "nccl")
		w.entryUint("rank", uint64(p.Rank))
		w.entryUint("world_size", uint64(p.WorldSize))
		w.e.close()
	}
	w.send()
	if typ == typeSliceBegin {
		w.endAt(track, r.End)
	}
	if r.Truncated != "" {
		w.eventNamed(r.End, typeInstant, track, "cudatap", "recording truncated")
		w.str("reason", r.Truncated)
		w.send()
	}
}

// ranked is the one traced process that made an NCCL communicator, or nil
// (none, or several: each is named in its process's track).
func ranked(r *model.Result) *model.Process {
	var one *model.Process
	for _, p := range r.Processes {
		if p.WorldSize > 0 {
			if one != nil {
				return nil
			}
			one = p
		}
	}
	return one
}

// descriptors names every track: first those of r's processes (in the
// Chrome trace's order: ranks, then by pid; each process's devices right
// after it), then the communicators, the GPUs' counters and cudatap's
// track; then any track events used that r does not describe.
func (w *Writer) descriptors(r *model.Result) {
	// The root track: processes in the order of their ranks below.
	w.descriptor(&pb.TrackDescriptor{Uuid: proto.Uint64(0),
		ProcessOrdering: pb.TrackDescriptor_PROCESS_ORDERING_EXPLICIT.Enum(),
		ThreadOrdering:  pb.TrackDescriptor_THREAD_ORDERING_EXPLICIT.Enum(),
		ChildOrdering:   pb.TrackDescriptor_EXPLICIT.Enum()})
	d := &describer{w: w, r: r, done: map[trackKey]bool{}}
	for _, p := range describe.ByRank(r.Processes) {
		d.process(p)
	}
	// Tracks the events used and r does not name: their keys say enough.
	rest := slices.SortedFunc(maps.Keys(w.tracks), func(a, b trackKey) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.pid, b.pid), cmp.Compare(a.device, b.device),
			cmp.Compare(a.id, b.id), cmp.Compare(a.series, b.series))
	})
	for _, k := range rest {
		if d.done[k] {
			continue
		}
		switch k.kind {
		case kindProcess:
			d.processTrack(k.pid)
		case kindThread:
			d.thread(k.pid, uint32(k.id))
		case kindSyncs, kindNVTX, kindSteps:
			d.child(k)
		case kindDevice:
			d.device(k.pid, k.device)
		case kindStream:
			d.describe(k, d.device(k.pid, k.device), "stream "+strconv.FormatUint(k.id, 10), int32(k.id))
		case kindComm:
			d.describe(k, 0, describe.CommTrack(k.id, w.comms[k.id]), d.next())
		case kindCounter:
			nvml := trackKey{kind: kindNVML, id: k.id}
			if !d.done[nvml] {
				d.describe(nvml, 0, nvmlName(r, int(k.id)), d.next())
			}
			d.done[k] = true
			w.descriptor(&pb.TrackDescriptor{Uuid: proto.Uint64(w.track(k)), ParentUuid: proto.Uint64(w.track(nvml)),
				StaticOrDynamicName: &pb.TrackDescriptor_Name{Name: k.series}, Counter: &pb.CounterDescriptor{}, SiblingMergeBehavior: noMerge()})
		case kindRecording:
			d.describe(k, 0, recordingTrack, d.next())
		}
	}
}

// describer writes the descriptors of a trace's tracks, each once.
type describer struct {
	w    *Writer
	r    *model.Result
	done map[trackKey]bool
	rank int32 // the last sibling rank given to a top-level track
}

func (d *describer) next() int32 {
	d.rank++
	return d.rank
}

// describe writes the descriptor of custom track k: under parent (0: top
// level), named, ranked among its siblings.
func (d *describer) describe(k trackKey, parent uint64, name string, rank int32) uint64 {
	d.done[k] = true
	t := &pb.TrackDescriptor{Uuid: proto.Uint64(d.w.track(k)), StaticOrDynamicName: &pb.TrackDescriptor_Name{Name: name},
		SiblingOrderRank: proto.Int32(rank), ChildOrdering: pb.TrackDescriptor_EXPLICIT.Enum(), SiblingMergeBehavior: noMerge()}
	if parent != 0 {
		t.ParentUuid = proto.Uint64(parent)
	}
	d.w.descriptor(t)
	return d.w.track(k)
}

// process describes p's tracks: the process, its threads, and its work on
// each device, a track per stream, right after it.
func (d *describer) process(p *model.Process) {
	w := d.w
	var label string
	if o, ok := w.opts.Origins[p.PID]; ok {
		label = describe.Label(p, &o)
	} else {
		label = describe.Label(p, nil)
	}
	d.processNamed(p.PID, label, p.Info.Cmdline)
	for _, tid := range slices.Sorted(maps.Keys(p.Threads)) {
		d.thread(p.PID, tid)
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
	for _, dev := range devices {
		parent := d.describe(deviceKey(p.PID, dev), 0, describe.DeviceTrack(dev, label, p), d.next())
		for _, s := range p.Streams {
			if s == nil || (s.Devices&model.DeviceBitsOf(dev) == 0 && !(s.Devices == 0 && dev == devices[0])) {
				continue
			}
			d.describe(streamKey(p.PID, dev, s.ID), parent, s.Label(), int32(s.ID))
		}
	}
}

// processTrack is the uuid of pid's process track, described (by its pid
// alone) if it was not.
func (d *describer) processTrack(pid uint32) uint64 {
	if k := (trackKey{kind: kindProcess, pid: pid}); !d.done[k] {
		d.processNamed(pid, "pid "+strconv.FormatUint(uint64(pid), 10), "")
	}
	return d.w.track(trackKey{kind: kindProcess, pid: pid})
}

func (d *describer) processNamed(pid uint32, label, cmdline string) {
	k := trackKey{kind: kindProcess, pid: pid}
	if pid == model.OtherPID {
		// pid 0 is the kernel's in Perfetto: the processes past the
		// model's bound get a track of their own.
		d.describe(k, 0, label, d.next())
		return
	}
	d.done[k] = true
	t := &pb.TrackDescriptor{Uuid: proto.Uint64(d.w.track(k)), SiblingOrderRank: proto.Int32(d.next()),
		Process: &pb.ProcessDescriptor{Pid: proto.Int32(int32(pid)), ProcessName: proto.String(label)}}
	if cmdline != "" {
		t.Process.Cmdline = []string{cmdline}
	}
	d.w.descriptor(t)
}

// thread describes a thread's track, and its sync track if it has one.
func (d *describer) thread(pid, tid uint32) uint64 {
	w := d.w
	k := threadKey(pid, tid)
	if d.done[k] {
		return w.track(k)
	}
	name := w.names.Thread(pid, tid)
	if name == "" {
		name = "thread " + strconv.FormatUint(uint64(tid), 10)
	}
	if pid == model.OtherPID || tid == model.OtherTID {
		// Thread 0 is the kernel's in Perfetto: the threads past the
		// model's bound are a track of their process.
		if tid == model.OtherTID {
			name = otherThreadsName
		}
		d.describe(k, d.processTrack(pid), name, int32(tid))
	} else {
		d.processTrack(pid)
		d.done[k] = true
		w.descriptor(&pb.TrackDescriptor{Uuid: proto.Uint64(w.track(k)), SiblingOrderRank: proto.Int32(int32(tid)),
			Thread: &pb.ThreadDescriptor{Pid: proto.Int32(int32(pid)), Tid: proto.Int64(int64(tid)), ThreadName: proto.String(name)}})
	}
	for _, kind := range []trackKind{kindSteps, kindSyncs} {
		if c := (trackKey{kind: kind, pid: pid, id: uint64(tid)}); w.tracks[c] != 0 {
			d.child(c)
		}
	}
	return w.track(k)
}

// child describes a track under a thread's (its syncs, its steps, its
// NVTX ranges of a domain), or under its process's (started NVTX ranges).
func (d *describer) child(k trackKey) {
	if d.done[k] {
		return
	}
	if k.lane {
		d.describe(k, d.processTrack(k.pid), nvtxTrackName+" (started and ended)", int32(k.id))
		return
	}
	parent := d.thread(k.pid, uint32(k.id)) // which may describe k
	if d.done[k] {
		return
	}
	switch {
	case k.kind == kindSyncs:
		d.describe(k, parent, syncTrackName, 1)
	case k.kind == kindSteps:
		d.describe(k, parent, stepsTrackName, 0)
	case k.domain != 0:
		d.describe(k, parent, nvtxTrackName+", domain "+strconv.FormatUint(k.domain, 10), 3)
	default:
		d.describe(k, parent, nvtxTrackName, 2)
	}
}

// device is the uuid of a device track, described (by its pid alone) if
// it was not.
func (d *describer) device(pid uint32, dev int8) uint64 {
	k := deviceKey(pid, dev)
	if d.done[k] {
		return d.w.track(k)
	}
	return d.describe(k, 0, describe.DeviceName(dev)+" — pid "+strconv.FormatUint(uint64(pid), 10), d.next())
}

// nvmlName names a GPU's counter track as the Chrome trace does: "GPU 0
// NVIDIA H200 (NVML)".
func nvmlName(r *model.Result, device int) string {
	for i := range r.Counters {
		if r.Counters[i].Device == device {
			return r.Counters[i].Name + " (NVML)"
		}
	}
	return "GPU " + strconv.Itoa(device) + " (NVML)"
}

func noMerge() *pb.TrackDescriptor_SiblingMergeBehavior {
	return pb.TrackDescriptor_SIBLING_MERGE_BEHAVIOR_NONE.Enum()
}

func (w *Writer) descriptor(d *pb.TrackDescriptor) {
	w.packet(&pb.TracePacket{Data: &pb.TracePacket_TrackDescriptor{TrackDescriptor: d}})
}

// clock maps the trace's clock to wall-clock time at the recording's
// start, so that Perfetto can show real times.
func (w *Writer) clock(r *model.Result) {
	const realtime, boottime = 1, 6 // ClockSnapshot.Clock.BuiltinClocks
	w.packet(&pb.TracePacket{Timestamp: proto.Uint64(r.Start), Data: &pb.TracePacket_ClockSnapshot{ClockSnapshot: &pb.ClockSnapshot{
		Clocks: []*pb.ClockSnapshot_Clock{
			{ClockId: proto.Uint32(boottime), Timestamp: proto.Uint64(r.Start)},
			{ClockId: proto.Uint32(realtime), Timestamp: proto.Uint64(uint64(int64(r.Start) + r.WallOffsetNs))},
		}}}})
}

// packet writes a packet made with the generated types (the few written
// once, at Close).
func (w *Writer) packet(p *pb.TracePacket) {
	if w.err != nil {
		return
	}
	p.OptionalTrustedPacketSequenceId = &pb.TracePacket_TrustedPacketSequenceId{TrustedPacketSequenceId: sequenceID}
	b, err := proto.Marshal(p)
	if err != nil {
		w.err = err
		return
	}
	w.e.reset()
	w.e.bytes(fieldTracePacket, b)
	w.write(w.e.b)
}
