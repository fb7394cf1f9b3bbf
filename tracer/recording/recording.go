// Package recording reads and writes .cudatap files: the raw event records
// exactly as the BPF programs wrote them, plus everything resolved while the
// processes were alive (process and thread names, kernel and frame symbols,
// the mappings of the files the frames lie in) and the final drop counters, so that `cudatap export` can rebuild every
// output later. The format is versioned and self-describing. This package
// is the codec (Writer, Reader); tracer/replay replays a recording into a
// model.
//
// Layout: "CUDATAP\n", u32 version, u32 header length, JSON header, then
// records of (u8 type, uvarint length, payload), ending with an end record
// that holds the number of records before it.
package recording

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Version of the format this package writes.
const Version = 1

var magic = [8]byte{'C', 'U', 'D', 'A', 'T', 'A', 'P', '\n'}

// Record types: the byte before each record's length (a Tap gets it,
// Record.Type is it).
const (
	RecEvent   = 1
	RecProcess = 2
	RecThread  = 3
	RecKernel  = 4
	RecFrame   = 5
	RecDrops   = 6
	RecCounter = 7
	RecPyFrame = 8
	RecGPU     = 9
	RecNote    = 10 // a fact the session learnt outside the ring buffer: a hold, a pinned range
	RecGPUTime = 11 // a measured GPU time, or the collector's start, mark or stop
	RecMapping = 12 // a file mapped into a process, that stack frames lie in
	RecEnd     = 0xff
)

// MaxRecord bounds a record's length so a corrupt length cannot make the
// reader allocate gigabytes.
const MaxRecord = 1 << 24

// Header describes the file.
type Header struct {
	Version      int       `json:"version"`
	Tool         string    `json:"tool"`
	Clock        string    `json:"clock"`
	WallOffsetNs int64     `json:"wall_offset_ns"`
	Host         string    `json:"host,omitempty"`
	Kernel       string    `json:"kernel,omitempty"`
	Command      []string  `json:"command,omitempty"`
	EventHeader  int       `json:"event_header_bytes"`
	EventMax     int       `json:"event_max_bytes"`
	APIs         []APIDesc `json:"apis"`
	// BootID is the recording host's /proc/sys/kernel/random/boot_id: two
	// recordings with the same one share their CLOCK_MONOTONIC (SameClock).
	// Absent from recordings made before it was written, and from merged
	// ones (their clock is shifted).
	BootID string `json:"boot_id,omitempty"`
	// Merge, in a recording `cudatap merge` wrote, says which recordings
	// it joins and how their clocks were aligned (export/merge reads it).
	// Its timestamps are then on the clock of one of them, the reference.
	Merge json.RawMessage `json:"merge,omitempty"`
	// Flight, in a recording the flight recorder dumped, says what made
	// it and what window it holds.
	Flight *Flight `json:"flight,omitempty"`
}

// Flight describes a flight recorder's dump (internal/flight): the
// trigger, then the window of each process it holds, preceded by the
// calls from before the window that made state the window still used
// (live allocations, streams, pending GPU work, communicators).
type Flight struct {
	// Trigger: oom, gpu_xid, gpu_throttle, nccl_stall, sync, signal or
	// on_demand; Detail says it in words.
	Trigger string `json:"trigger"`
	Detail  string `json:"detail"`
	// PID is the process the trigger is about (0: several, or all).
	PID  uint32   `json:"pid,omitempty"`
	PIDs []uint32 `json:"pids"`
	// At is when it fired, CLOCK_MONOTONIC ns; WindowNs how much of each
	// process's activity the recorder keeps (--flight-recorder).
	At       uint64 `json:"at_ns"`
	WindowNs uint64 `json:"window_ns"`
	// Events: the events of the windows in the dump; Restated: the calls
	// from before the windows written ahead of them.
	Events   uint64 `json:"events"`
	Restated uint64 `json:"restated"`
	// Dropped: events of the windows that did not fit the per-process
	// budget (the oldest went first); StateDropped: calls and names that
	// did not fit what the budget leaves for them.
	Dropped      uint64 `json:"dropped"`
	StateDropped uint64 `json:"state_dropped"`
}

// SameClock reports whether h's and o's timestamps are on one clock: the
// CLOCK_MONOTONIC of one boot of one host, as their boot ids say. False
// when either does not know its boot id.
func (h Header) SameClock(o Header) bool {
	return h.BootID != "" && h.BootID == o.BootID && h.Clock == o.Clock && len(h.Merge) == 0 && len(o.Merge) == 0
}

// APIDesc names an API id, so a file stays readable when ids grow.
type APIDesc struct {
	ID      int      `json:"id"`
	Name    string   `json:"name"`
	Layer   string   `json:"layer"`
	Symbols []string `json:"symbols"`
}

// Counter is one sample of a device time series (NVML).
type Counter = model.Counter

// NewHeader fills the fields every writer sets.
func NewHeader(tool string, wallOffset int64) Header {
	h := Header{Version: Version, Tool: tool, Clock: "CLOCK_MONOTONIC", WallOffsetNs: wallOffset,
		EventHeader: event.HeaderSize, EventMax: event.RecordSize}
	for _, l := range []event.Layer{event.Runtime, event.Driver, event.NCCL} {
		for _, s := range event.Specs(l) {
			h.APIs = append(h.APIs, APIDesc{ID: int(s.API), Name: s.Name, Layer: l.String(), Symbols: s.Symbols})
		}
	}
	return h
}

// Writer appends records to a .cudatap stream, or hands them to a Tap. Not
// safe for concurrent use.
type Writer struct {
	w     *bufio.Writer
	tap   Tap
	hdr   [1 + binary.MaxVarintLen64]byte // a record's type and length (a field: a local would escape)
	n     uint64
	bytes atomic.Int64 // Size is read from other goroutines (a session's status line)
	buf   []byte
	err   error
}

// NewWriter writes the file header; a w that is a Tap gets the header and
// then every record instead.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	if t, ok := w.(Tap); ok {
		t.Begin(h)
		return &Writer{tap: t}, nil
	}
	hdr, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var pre [16]byte
	copy(pre[:], magic[:])
	binary.LittleEndian.PutUint32(pre[8:], Version)
	binary.LittleEndian.PutUint32(pre[12:], uint32(len(hdr)))
	bw.Write(pre[:])
	bw.Write(hdr)
	rw := &Writer{w: bw}
	rw.bytes.Store(int64(16 + len(hdr)))
	return rw, nil
}

func (w *Writer) record(typ byte, payload []byte) {
	if w.err != nil {
		return
	}
	w.hdr[0] = typ
	n := 1 + binary.PutUvarint(w.hdr[1:], uint64(len(payload)))
	if w.tap != nil {
		w.tap.Record(typ, payload)
		w.n++
		w.bytes.Add(int64(n + len(payload)))
		return
	}
	w.w.Write(w.hdr[:n])
	_, w.err = w.w.Write(payload)
	w.n++
	w.bytes.Add(int64(n + len(payload)))
}

// Event appends one raw ring-buffer record, unchanged.
func (w *Writer) Event(raw []byte) { w.record(RecEvent, raw) }

func (w *Writer) named(typ byte, pid uint32, key uint64, name string) {
	b := binary.LittleEndian.AppendUint32(w.buf[:0], pid)
	b = binary.LittleEndian.AppendUint64(b, key)
	b = append(b, name...)
	w.buf = b
	w.record(typ, b)
}

// Process records what is known about a process.
func (w *Writer) Process(pid uint32, info model.ProcessInfo) {
	js, _ := json.Marshal(info)
	w.named(RecProcess, pid, 0, string(js))
}

// Thread records a thread's name.
func (w *Writer) Thread(pid, tid uint32, name string) { w.named(RecThread, pid, uint64(tid), name) }

// Kernel records the symbol of a kernel stub address.
func (w *Writer) Kernel(pid uint32, addr uint64, name string) { w.named(RecKernel, pid, addr, name) }

// Frame records the name of a stack address.
func (w *Writer) Frame(pid uint32, addr uint64, name string) { w.named(RecFrame, pid, addr, name) }

// PyFrame records the "file:line function" of a Python frame.
func (w *Writer) PyFrame(pid uint32, code, instr uint64, name string) {
	b := binary.LittleEndian.AppendUint32(w.buf[:0], pid)
	b = binary.LittleEndian.AppendUint64(b, code)
	b = binary.LittleEndian.AppendUint64(b, instr)
	b = append(b, name...)
	w.buf = b
	w.record(RecPyFrame, b)
}

// mappingSize is a mapping record before its strings: pid, start, limit,
// offset.
const mappingSize = 4 + 8*3

// Mapping records a file mapped into a process: where, from which offset,
// its path as the process saw it and its build ID.
func (w *Writer) Mapping(pid uint32, m model.Mapping) {
	le := binary.LittleEndian
	b := le.AppendUint32(w.buf[:0], pid)
	b = le.AppendUint64(b, m.Start)
	b = le.AppendUint64(b, m.Limit)
	b = le.AppendUint64(b, m.Offset)
	b = binary.AppendUvarint(b, uint64(len(m.BuildID)))
	b = append(b, m.BuildID...)
	b = append(b, m.File...)
	w.buf = b
	w.record(RecMapping, b)
}

// Kinds of note records.
const (
	NoteHold         = 1 // [a, b) the thread was held while cudatap hooked a library
	NotePinned       = 2 // [a, a+b) was pinned host memory when cudatap attached
	NoteAttachedLate = 3 // the process ran before cudatap attached
)

func (w *Writer) note(kind byte, pid, tid uint32, a, b uint64) {
	buf := append(w.buf[:0], kind)
	buf = binary.LittleEndian.AppendUint32(buf, pid)
	buf = binary.LittleEndian.AppendUint32(buf, tid)
	buf = binary.LittleEndian.AppendUint64(buf, a)
	buf = binary.LittleEndian.AppendUint64(buf, b)
	w.buf = buf
	w.record(RecNote, buf)
}

// Hold records that thread tid of pid was held from start to end while
// cudatap hooked a library. It must precede the events of the calls that
// contain it.
func (w *Writer) Hold(pid, tid uint32, start, end uint64) { w.note(NoteHold, pid, tid, start, end) }

// Pinned records a pinned host range found when cudatap attached.
func (w *Writer) Pinned(pid uint32, start, size uint64) { w.note(NotePinned, pid, 0, start, size) }

// AttachedLate records that pid ran before cudatap attached.
func (w *Writer) AttachedLate(pid uint32) { w.note(NoteAttachedLate, pid, 0, 0, 0) }

// What a GPU-time record says (Writer.GPUTimes).
const (
	GPUTimesStart    = 1 // the process's GPU ops enqueued from t on are measured (or again, after a hand-over)
	GPUTimesMeasure  = 2 // one measurement
	GPUTimesMark     = 3 // the collector flushed CUPTI at t
	GPUTimesStop     = 4 // no more; t: measurements lost
	GPUTimesHandOver = 5 // CUPTI let go to another client of the process at t
	GPUTimesRefused  = 6 // not measured after all (the collector could not start)
	// One measurement with CUPTI's stream, copy kind and graph node after
	// the fields of GPUTimesMeasure, before the name: the model shows an
	// op CUPTI alone saw on its stream. The writer writes every
	// measurement so; GPUTimesMeasure is read from older recordings.
	GPUTimesMeasureStream = 7
)

// gpuTimeSize is a GPU-time record: kind, pid, t, then the measurement;
// gpuTimeStreamSize what GPUTimesMeasureStream adds (stream, graph node,
// copy kind).
const (
	gpuTimeSize       = 1 + 4 + 8 + 4 + 8*4 + 1 + 1 + 8
	gpuTimeStreamSize = 4 + 8 + 1
)

// GPUTimes records what a process's collector said, in order with the
// events, exactly as the model was told.
func (w *Writer) GPUTimes(kind byte, pid uint32, t uint64, m *model.Measurement) {
	le := binary.LittleEndian
	buf := append(w.buf[:0], kind)
	buf = le.AppendUint32(buf, pid)
	buf = le.AppendUint64(buf, t)
	var z model.Measurement
	if m == nil {
		m = &z
	}
	if kind == GPUTimesMeasure {
		buf[0] = GPUTimesMeasureStream
	}
	buf = le.AppendUint32(buf, m.TID)
	for _, v := range []uint64{m.APIStart, m.APIEnd, m.Start, m.End} {
		buf = le.AppendUint64(buf, v)
	}
	buf = append(buf, byte(m.Kind), byte(m.Device))
	buf = le.AppendUint64(buf, m.Bytes)
	if kind == GPUTimesMeasure {
		buf = le.AppendUint32(buf, m.CUPTIStream)
		buf = le.AppendUint64(buf, m.GraphNode)
		buf = append(buf, byte(m.CopyKind))
	}
	buf = append(buf, m.Name...)
	w.buf = buf
	w.record(RecGPUTime, buf)
}

// Counter records one sample of a time series.
func (w *Writer) Counter(c Counter) {
	js, _ := json.Marshal(c)
	w.record(RecCounter, js)
}

// GPU records what the NVML sampler concluded.
func (w *Writer) GPU(g model.GPUReport) {
	js, _ := json.Marshal(g)
	w.record(RecGPU, js)
}

// Copy appends the record r is at, as r read it (on r's Timeline).
func (w *Writer) Copy(r *Reader) {
	if r.typ != 0 && r.typ != RecEnd {
		w.record(r.typ, r.buf)
	}
}

// Names records the name tables, every process's (n.Procs) too when procs
// is set, in a fixed order.
func (w *Writer) Names(n *model.Names, procs bool) {
	if procs {
		for _, pid := range slices.Sorted(maps.Keys(n.Procs)) {
			w.Process(pid, n.Procs[pid])
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(n.Threads), KeyOrder) {
		w.Thread(k.PID, uint32(k.Key), n.Threads[k])
	}
	for _, k := range slices.SortedFunc(maps.Keys(n.Kernels), KeyOrder) {
		w.Kernel(k.PID, k.Key, n.Kernels[k])
	}
	for _, k := range slices.SortedFunc(maps.Keys(n.Frames), KeyOrder) {
		w.Frame(k.PID, k.Key, n.Frames[k])
	}
	for _, k := range slices.SortedFunc(maps.Keys(n.Py), PyKeyOrder) {
		w.PyFrame(k.PID, k.Code, k.Instr, n.Py[k])
	}
	for _, k := range slices.SortedFunc(maps.Keys(n.Mappings), KeyOrder) {
		w.Mapping(k.PID, n.Mappings[k])
	}
}

// KeyOrder and PyKeyOrder put the name tables' keys in the fixed order
// Names writes them in.
func KeyOrder(a, b model.NameKey) int {
	return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Key, b.Key))
}

func PyKeyOrder(a, b model.PyNameKey) int {
	return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Instr, b.Instr))
}

// Drops records the final loss counters.
func (w *Writer) Drops(d model.Drops) {
	js, _ := json.Marshal(d)
	w.record(RecDrops, js)
}

// Err is the first write error, nil while every write succeeded. Writes
// are buffered: an error shows within about a megabyte of records.
func (w *Writer) Err() error { return w.err }

// Size is the number of bytes written so far.
func (w *Writer) Size() int64 { return w.bytes.Load() }

// Flush hands what is buffered to the file, so that a recorder killed
// after it leaves a recording readable up to here.
func (w *Writer) Flush() {
	if w.tap != nil {
		w.tap.Flush()
		return
	}
	if w.err == nil {
		w.err = w.w.Flush()
	}
}

// Close writes the end record and flushes. It does not close the underlying writer.
func (w *Writer) Close() error {
	w.record(RecEnd, binary.LittleEndian.AppendUint64(nil, w.n))
	if w.tap != nil {
		return nil
	}
	if w.err != nil {
		return fmt.Errorf("write recording: %w", w.err)
	}
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("write recording: %w", err)
	}
	return nil
}
