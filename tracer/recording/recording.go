// Package recording reads and writes .cudatap files: the raw event records
// exactly as the BPF programs wrote them, plus everything resolved while the
// processes were alive (process and thread names, kernel and frame symbols)
// and the final drop counters, so that `cudatap export` can rebuild every
// output later. The format is versioned and self-describing.
//
// Layout: "CUDATAP\n", u32 version, u32 header length, JSON header, then
// records of (u8 type, uvarint length, payload), ending with an end record
// that holds the number of records before it.
package recording

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Version of the format this package writes.
const Version = 1

var magic = [8]byte{'C', 'U', 'D', 'A', 'T', 'A', 'P', '\n'}

// Record types.
const (
	recEvent   = 1
	recProcess = 2
	recThread  = 3
	recKernel  = 4
	recFrame   = 5
	recDrops   = 6
	recCounter = 7
	recPyFrame = 8
	recGPU     = 9
	recNote    = 10 // a fact the session learnt outside the ring buffer: a hold, a pinned range
	recGPUTime = 11 // a measured GPU time, or the collector's start, mark or stop
	recEnd     = 0xff
)

// maxRecord bounds a record's length so a corrupt length cannot make the
// reader allocate gigabytes.
const maxRecord = 1 << 24

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

// Writer appends records to a .cudatap stream. Not safe for concurrent use.
type Writer struct {
	w     *bufio.Writer
	hdr   [1 + binary.MaxVarintLen64]byte // a record's type and length (a field: a local would escape)
	n     uint64
	bytes int64
	buf   []byte
	err   error
}

// NewWriter writes the file header.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
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
	return &Writer{w: bw, bytes: int64(16 + len(hdr))}, nil
}

func (w *Writer) record(typ byte, payload []byte) {
	if w.err != nil {
		return
	}
	w.hdr[0] = typ
	n := 1 + binary.PutUvarint(w.hdr[1:], uint64(len(payload)))
	w.w.Write(w.hdr[:n])
	_, w.err = w.w.Write(payload)
	w.n++
	w.bytes += int64(n + len(payload))
}

// Event appends one raw ring-buffer record, unchanged.
func (w *Writer) Event(raw []byte) { w.record(recEvent, raw) }

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
	w.named(recProcess, pid, 0, string(js))
}

// Thread records a thread's name.
func (w *Writer) Thread(pid, tid uint32, name string) { w.named(recThread, pid, uint64(tid), name) }

// Kernel records the symbol of a kernel stub address.
func (w *Writer) Kernel(pid uint32, addr uint64, name string) { w.named(recKernel, pid, addr, name) }

// Frame records the name of a stack address.
func (w *Writer) Frame(pid uint32, addr uint64, name string) { w.named(recFrame, pid, addr, name) }

// PyFrame records the "file:line function" of a Python frame.
func (w *Writer) PyFrame(pid uint32, code, instr uint64, name string) {
	b := binary.LittleEndian.AppendUint32(w.buf[:0], pid)
	b = binary.LittleEndian.AppendUint64(b, code)
	b = binary.LittleEndian.AppendUint64(b, instr)
	b = append(b, name...)
	w.buf = b
	w.record(recPyFrame, b)
}

// Kinds of note records.
const (
	noteHold         = 1 // [a, b) the thread was held while cudatap hooked a library
	notePinned       = 2 // [a, a+b) was pinned host memory when cudatap attached
	noteAttachedLate = 3 // the process ran before cudatap attached
)

func (w *Writer) note(kind byte, pid, tid uint32, a, b uint64) {
	buf := append(w.buf[:0], kind)
	buf = binary.LittleEndian.AppendUint32(buf, pid)
	buf = binary.LittleEndian.AppendUint32(buf, tid)
	buf = binary.LittleEndian.AppendUint64(buf, a)
	buf = binary.LittleEndian.AppendUint64(buf, b)
	w.buf = buf
	w.record(recNote, buf)
}

// Hold records that thread tid of pid was held from start to end while
// cudatap hooked a library. It must precede the events of the calls that
// contain it.
func (w *Writer) Hold(pid, tid uint32, start, end uint64) { w.note(noteHold, pid, tid, start, end) }

// Pinned records a pinned host range found when cudatap attached.
func (w *Writer) Pinned(pid uint32, start, size uint64) { w.note(notePinned, pid, 0, start, size) }

// AttachedLate records that pid ran before cudatap attached.
func (w *Writer) AttachedLate(pid uint32) { w.note(noteAttachedLate, pid, 0, 0, 0) }

// What a GPU-time record says (Writer.GPUTimes).
const (
	GPUTimesStart   = 1 // the process's GPU ops are measured from here
	GPUTimesMeasure = 2 // one measurement
	GPUTimesMark    = 3 // every measurement of work complete before t came
	GPUTimesStop    = 4 // no more; t: measurements lost
)

// gpuTimeSize is a GPU-time record: kind, pid, t, then the measurement.
const gpuTimeSize = 1 + 4 + 8 + 4 + 8*4 + 1 + 1 + 8

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
	buf = le.AppendUint32(buf, m.TID)
	for _, v := range []uint64{m.APIStart, m.APIEnd, m.Start, m.End} {
		buf = le.AppendUint64(buf, v)
	}
	buf = append(buf, byte(m.Kind), byte(m.Device))
	buf = le.AppendUint64(buf, m.Bytes)
	buf = append(buf, m.Name...)
	w.buf = buf
	w.record(recGPUTime, buf)
}

// Counter records one sample of a time series.
func (w *Writer) Counter(c Counter) {
	js, _ := json.Marshal(c)
	w.record(recCounter, js)
}

// GPU records what the NVML sampler concluded.
func (w *Writer) GPU(g model.GPUReport) {
	js, _ := json.Marshal(g)
	w.record(recGPU, js)
}

// Drops records the final loss counters.
func (w *Writer) Drops(d model.Drops) {
	js, _ := json.Marshal(d)
	w.record(recDrops, js)
}

// Err is the first write error, nil while every write succeeded. Writes
// are buffered: an error shows within about a megabyte of records.
func (w *Writer) Err() error { return w.err }

// Size is the number of bytes written so far.
func (w *Writer) Size() int64 { return w.bytes }

// Close writes the end record and flushes. It does not close the underlying writer.
func (w *Writer) Close() error {
	w.record(recEnd, binary.LittleEndian.AppendUint64(nil, w.n))
	if w.err != nil {
		return fmt.Errorf("write recording: %w", w.err)
	}
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("write recording: %w", err)
	}
	return nil
}

// ErrFormat marks a file that is not a valid .cudatap recording.
var ErrFormat = errors.New("not a cudatap recording")

// ErrTruncated marks a recording that ends without its end record (the
// recorder was killed): everything before the cut is still delivered.
var ErrTruncated = errors.New("recording is truncated")

// Replay is what a recording holds besides its events.
type Replay struct {
	Header    Header
	Names     *model.Names
	Processes []uint32 // every process the recorder named, in file order
	Counters  []Counter
	GPU       *model.GPUReport
	Drops     *model.Drops // nil when the recording ends before its drop record
	Records   uint64
}

// ReadNames reads everything but the events: header, name tables, NVML
// series, GPU report and drop counters. Events are skipped, so a replay
// can name things before it sees the first event, whatever the order of
// the records in the file. Truncated files return ErrTruncated with what
// was read before the cut; garbage returns ErrFormat; it never panics.
func ReadNames(r io.Reader) (*Replay, error) {
	rp := &Replay{Names: model.NewNames()}
	err := scan(r, rp, nil, nil)
	return rp, err
}

// ReadEvents feeds every event of a recording to m in file order (the
// order they were read from the ring buffer), and registers every named
// process with it. progress, if non-nil, is called with the bytes consumed
// so far every 64 KiB or so.
func ReadEvents(r io.Reader, m *model.Model, progress func(int64)) (*Replay, error) {
	rp := &Replay{}
	err := scan(r, rp, m, progress)
	return rp, err
}

// scan reads the records of a recording: names and the rest into rp when
// m is nil, events (and process registrations) into m otherwise.
func scan(r io.Reader, rp *Replay, m *model.Model, progress func(int64)) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var pre [16]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return fmt.Errorf("%w: file too short", ErrFormat)
	}
	if [8]byte(pre[:8]) != magic {
		return fmt.Errorf("%w: bad magic", ErrFormat)
	}
	if v := binary.LittleEndian.Uint32(pre[8:]); v != Version {
		return fmt.Errorf("%w: version %d, this cudatap reads version %d", ErrFormat, v, Version)
	}
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen > maxRecord {
		return fmt.Errorf("%w: header of %d bytes", ErrFormat, hlen)
	}
	hdr, err := readN(br, nil, int(hlen))
	if err != nil {
		return fmt.Errorf("%w: header cut short", ErrTruncated)
	}
	if err := json.Unmarshal(hdr, &rp.Header); err != nil {
		return fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	var (
		buf      []byte
		ev       event.Event
		consumed = int64(16 + hlen)
		lastTick int64
	)
	for {
		typ, err := br.ReadByte()
		if err != nil {
			return fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
		}
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w after %d records: record length cut short", ErrTruncated, rp.Records)
		}
		if err != nil || n > maxRecord {
			return fmt.Errorf("%w: bad record length after %d records", ErrFormat, rp.Records)
		}
		consumed += int64(1+uvarintLen(n)) + int64(n)
		if progress != nil && consumed-lastTick > 64<<10 {
			progress(consumed)
			lastTick = consumed
		}
		// Records of the other pass are skipped unread.
		if (typ == recEvent || typ == recNote || typ == recGPUTime) != (m != nil) && typ != recEnd && typ != recProcess {
			if _, err := br.Discard(int(n)); err != nil {
				return fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
			}
			rp.Records++
			continue
		}
		if buf, err = readN(br, buf, int(n)); err != nil {
			return fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
		}
		if err := rp.record(typ, buf, m, &ev); err != nil {
			return err
		}
		if typ == recEnd {
			if progress != nil {
				progress(consumed)
			}
			return nil
		}
		rp.Records++
	}
}

// record handles one record's payload.
func (rp *Replay) record(typ byte, buf []byte, m *model.Model, ev *event.Event) error {
	switch typ {
	case recEvent:
		if err := event.Decode(buf, ev); err != nil {
			m.DecodeError()
		} else if ev.API() == event.LibraryLoad {
			m.Auxiliary()
		} else {
			m.Handle(ev)
		}
	case recProcess, recThread, recKernel, recFrame:
		if len(buf) < 12 {
			return fmt.Errorf("%w: short name record", ErrFormat)
		}
		pid, key, name := binary.LittleEndian.Uint32(buf), binary.LittleEndian.Uint64(buf[4:]), string(buf[12:])
		if m != nil {
			// The recorder names a process when it first sees it, which
			// for an attached process that never calls CUDA is all it sees.
			if typ == recProcess {
				m.AddProcess(pid)
			}
			return nil
		}
		n := rp.Names
		switch typ {
		case recProcess:
			var info model.ProcessInfo
			if json.Unmarshal([]byte(name), &info) == nil {
				n.Procs[pid] = info
			}
			rp.Processes = append(rp.Processes, pid)
		case recThread:
			n.Threads[model.NameKey{PID: pid, Key: key}] = name
		case recKernel:
			n.Kernels[model.NameKey{PID: pid, Key: key}] = name
		case recFrame:
			n.Frames[model.NameKey{PID: pid, Key: key}] = name
		}
	case recPyFrame:
		if len(buf) < 20 {
			return fmt.Errorf("%w: short Python frame record", ErrFormat)
		}
		k := model.PyNameKey{PID: binary.LittleEndian.Uint32(buf), PyKey: model.PyKey{Code: binary.LittleEndian.Uint64(buf[4:]), Instr: binary.LittleEndian.Uint64(buf[12:])}}
		rp.Names.Py[k] = string(buf[20:])
	case recDrops:
		var d model.Drops
		if err := json.Unmarshal(buf, &d); err != nil {
			return fmt.Errorf("%w: drops record: %v", ErrFormat, err)
		}
		rp.Drops = &d
	case recCounter:
		var c Counter
		if err := json.Unmarshal(buf, &c); err != nil {
			return fmt.Errorf("%w: counter record: %v", ErrFormat, err)
		}
		rp.Counters = append(rp.Counters, c)
	case recGPU:
		var g model.GPUReport
		if err := json.Unmarshal(buf, &g); err != nil {
			return fmt.Errorf("%w: GPU record: %v", ErrFormat, err)
		}
		rp.GPU = &g
	case recNote:
		if len(buf) < 25 {
			return fmt.Errorf("%w: short note record", ErrFormat)
		}
		pid, tid := binary.LittleEndian.Uint32(buf[1:]), binary.LittleEndian.Uint32(buf[5:])
		a, b := binary.LittleEndian.Uint64(buf[9:]), binary.LittleEndian.Uint64(buf[17:])
		switch buf[0] {
		case noteHold:
			m.AddHold(pid, tid, a, b)
		case notePinned:
			m.AddPinned(pid, a, b)
		case noteAttachedLate:
			m.AttachedLate(pid)
		}
	case recGPUTime:
		if len(buf) < gpuTimeSize {
			return fmt.Errorf("%w: short GPU time record", ErrFormat)
		}
		if m == nil {
			return nil
		}
		le := binary.LittleEndian
		pid, t := le.Uint32(buf[1:]), le.Uint64(buf[5:])
		switch buf[0] {
		case GPUTimesStart:
			m.StartMeasuring(pid)
		case GPUTimesMeasure:
			b := buf[13:]
			ms := model.Measurement{TID: le.Uint32(b), APIStart: le.Uint64(b[4:]), APIEnd: le.Uint64(b[12:]),
				Start: le.Uint64(b[20:]), End: le.Uint64(b[28:]), Kind: model.OpKind(b[36]), Device: int8(b[37]), Bytes: le.Uint64(b[38:]),
				Name: string(b[46:])}
			m.Measure(pid, &ms)
		case GPUTimesMark:
			m.MeasuredUntil(pid, t)
		case GPUTimesStop:
			m.AddGPUTimesLost(t)
			m.StopMeasuring(pid)
		}
	case recEnd:
	default:
		return fmt.Errorf("%w: unknown record type %d", ErrFormat, typ)
	}
	return nil
}

// readN reads n bytes into buf, reusing it when it is big enough and else
// growing it only as the data arrives: a corrupt length cannot make the
// reader allocate much more than the file holds.
func readN(r io.Reader, buf []byte, n int) ([]byte, error) {
	if n <= cap(buf) {
		buf = buf[:n]
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	buf = buf[:0]
	for len(buf) < n {
		chunk := min(n-len(buf), max(len(buf), 64<<10))
		buf = slices.Grow(buf, chunk)
		k, err := io.ReadFull(r, buf[len(buf):len(buf)+chunk])
		buf = buf[:len(buf)+k]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

func uvarintLen(n uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], n)
}

// Load replays a whole recording in two passes, names first, then events
// into a model that hands what it concludes to the sink newSink returns
// (called once, between the passes, with everything but the events). A
// truncated recording still yields a result (with the error): its drop
// counters are then unknown, which Result.Drops cannot say, so callers must
// report it. Memory is bounded by the name tables and the model's state,
// not by the number of events.
func Load(r io.ReadSeeker, newSink func(*Replay) model.Sink, progress func(int64)) (*model.Result, *Replay, error) {
	rp, err := ReadNames(r)
	if err != nil && !errors.Is(err, ErrTruncated) {
		return nil, nil, err
	}
	if _, serr := r.Seek(0, io.SeekStart); serr != nil {
		return nil, nil, fmt.Errorf("rewind recording: %w", serr)
	}
	var sink model.Sink
	if newSink != nil {
		sink = newSink(rp)
	}
	m := model.New(sink)
	evs, err := ReadEvents(r, m, progress)
	if d := rp.Drops; d != nil {
		m.SetKernelStats(d.Submitted, d.RingbufFull, d.InflightFull, d.OrphanReturns, d.ReadFaults)
		m.SetAttachFailures(d.AttachFailures)
		m.SetNested(d.Nested)
		m.SetProgramSkips(d.ProgramSkips)
		m.SetPyCodeLost(d.PyCodeLost)
		m.SetGPUTimesLost(d.GPUTimesLost) // the session's own losses too
	}
	res := m.Finish()
	res.WallOffsetNs = rp.Header.WallOffsetNs
	res.Counters = rp.Counters
	if rp.GPU != nil {
		res.GPU = *rp.GPU
	} else {
		res.GPU.Status = "unknown: the recording ends before its GPU record"
	}
	// Records the recorder could not decode were counted but not written.
	if d := rp.Drops; d != nil && d.DecodeErrors > res.Drops.DecodeErrors {
		missing := d.DecodeErrors - res.Drops.DecodeErrors
		res.Drops.DecodeErrors += missing
		res.Drops.Received += missing
	}
	res.Name(rp.Names)
	rp.Records = evs.Records
	return res, rp, err
}
