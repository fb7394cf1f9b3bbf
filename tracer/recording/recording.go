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
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = typ
	n := 1 + binary.PutUvarint(hdr[1:], uint64(len(payload)))
	w.w.Write(hdr[:n])
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
	Header   Header
	Counters []Counter
	GPU      *model.GPUReport
	Drops    *model.Drops // nil when the recording ends before its drop record
	Records  uint64
}

// Read parses a recording, feeding every event to m in file order (the
// order they were read from the ring buffer). progress, if non-nil, is
// called with the bytes consumed so far every 64 KiB or so. A truncated
// file returns ErrTruncated after delivering everything before the cut;
// garbage returns ErrFormat; it never panics.
func Read(r io.Reader, m *model.Model, names *Names, progress func(int64)) (*Replay, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var pre [16]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return nil, fmt.Errorf("%w: file too short", ErrFormat)
	}
	if [8]byte(pre[:8]) != magic {
		return nil, fmt.Errorf("%w: bad magic", ErrFormat)
	}
	if v := binary.LittleEndian.Uint32(pre[8:]); v != Version {
		return nil, fmt.Errorf("%w: version %d, this cudatap reads version %d", ErrFormat, v, Version)
	}
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen > maxRecord {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrFormat, hlen)
	}
	hdr, err := readN(br, nil, int(hlen))
	if err != nil {
		return nil, fmt.Errorf("%w: header cut short", ErrTruncated)
	}
	rp := &Replay{}
	if err := json.Unmarshal(hdr, &rp.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
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
			return rp, fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
		}
		n, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return rp, fmt.Errorf("%w after %d records: record length cut short", ErrTruncated, rp.Records)
		}
		if err != nil || n > maxRecord {
			return rp, fmt.Errorf("%w: bad record length after %d records", ErrFormat, rp.Records)
		}
		if buf, err = readN(br, buf, int(n)); err != nil {
			return rp, fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
		}
		consumed += int64(1+uvarintLen(n)) + int64(n)
		if progress != nil && consumed-lastTick > 64<<10 {
			progress(consumed)
			lastTick = consumed
		}
		switch typ {
		case recEvent:
			if err := event.Decode(buf, &ev); err != nil {
				m.DecodeError()
			} else if ev.API() == event.LibraryLoad {
				m.Auxiliary()
			} else {
				m.Handle(&ev)
			}
		case recProcess, recThread, recKernel, recFrame:
			if len(buf) < 12 {
				return rp, fmt.Errorf("%w: short name record", ErrFormat)
			}
			pid := binary.LittleEndian.Uint32(buf)
			names.add(typ, pid, binary.LittleEndian.Uint64(buf[4:]), string(buf[12:]))
			if typ == recProcess {
				// The recorder names a process when it first sees it, which
				// for an attached process that never calls CUDA is all it sees.
				m.AddProcess(pid)
			}
		case recPyFrame:
			if len(buf) < 20 {
				return rp, fmt.Errorf("%w: short Python frame record", ErrFormat)
			}
			names.addPy(binary.LittleEndian.Uint32(buf), binary.LittleEndian.Uint64(buf[4:]), binary.LittleEndian.Uint64(buf[12:]), string(buf[20:]))
		case recDrops:
			var d model.Drops
			if err := json.Unmarshal(buf, &d); err != nil {
				return rp, fmt.Errorf("%w: drops record: %v", ErrFormat, err)
			}
			rp.Drops = &d
		case recCounter:
			var c Counter
			if err := json.Unmarshal(buf, &c); err != nil {
				return rp, fmt.Errorf("%w: counter record: %v", ErrFormat, err)
			}
			rp.Counters = append(rp.Counters, c)
		case recGPU:
			var g model.GPUReport
			if err := json.Unmarshal(buf, &g); err != nil {
				return rp, fmt.Errorf("%w: GPU record: %v", ErrFormat, err)
			}
			rp.GPU = &g
		case recEnd:
			if progress != nil {
				progress(consumed)
			}
			return rp, nil
		default:
			return rp, fmt.Errorf("%w: unknown record type %d", ErrFormat, typ)
		}
		rp.Records++
	}
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

// Load replays a whole recording into a finished model. A truncated
// recording still yields a result (with the error): its drop counters are
// then unknown, which Result.Drops cannot say, so callers must report it.
func Load(r io.Reader, progress func(int64)) (*model.Result, *Replay, error) {
	names := NewNames()
	m := model.New(names.Options())
	rp, err := Read(r, m, names, progress)
	if rp == nil {
		return nil, nil, err
	}
	if d := rp.Drops; d != nil {
		m.SetKernelStats(d.Submitted, d.RingbufFull, d.InflightFull, d.OrphanReturns, d.ReadFaults)
		m.SetAttachFailures(d.AttachFailures)
		m.SetNested(d.Nested)
		m.SetProgramSkips(d.ProgramSkips)
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
	return res, rp, err
}
