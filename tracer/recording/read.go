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

// ErrFormat marks a file that is not a valid .cudatap recording.
var ErrFormat = errors.New("not a cudatap recording")

// ErrTruncated marks a recording that ends without its end record (the
// recorder was killed): everything before the cut is still delivered.
var ErrTruncated = errors.New("recording is truncated")

// Timeline puts a recording on another timeline as it is read: a Reader
// rewrites every timestamp and pid of a record through it, in the record
// itself, before decoding it (tracer/replay's Transform aligns several
// recordings so). A nil Timeline keeps the recording's own.
type Timeline interface {
	Time(ns uint64) uint64 // 0 (unknown) stays 0
	PID(pid uint32) uint32
}

// Pass is which records a Reader reads; it skips the others unread. A
// replay reads a recording twice, names first, so that it can name things
// before it sees the first event, whatever the order of the records.
type Pass uint8

const (
	// NamesPass: everything but the events (name tables, NVML series,
	// GPU report, drop counters), and the process records.
	NamesPass Pass = iota + 1
	// EventsPass: events, notes, GPU times and process records.
	EventsPass
)

// reads reports whether p reads records of type typ (the end record
// aside). Process records are in both passes; unknown types only in the
// names pass, which rejects them.
func (p Pass) reads(typ byte) bool {
	events := typ == RecEvent || typ == RecNote || typ == RecGPUTime || typ == RecProcess
	if p == EventsPass {
		return events
	}
	return !events || typ == RecProcess
}

// Record is the record a Reader is at, decoded and on the reader's
// Timeline. Type says which fields hold it.
type Record struct {
	Type byte // RecEvent, RecProcess, ...
	PID  uint32

	// RecEvent: the event, unless EventErr says why it does not decode.
	Event    event.Event
	EventErr error

	// The names pass: a process's Info (InfoOK: its JSON parsed); a
	// thread's, kernel's or frame's Key (thread id, address) and Name; a
	// Python frame's Py key and Name; a Mapping. Size is the bytes of the
	// name, what a replay's bounds on its name tables count.
	Info    model.ProcessInfo
	InfoOK  bool
	Key     uint64
	Py      model.PyKey
	Name    string
	Mapping model.Mapping
	Size    int

	Drops   model.Drops     // RecDrops
	Counter Counter         // RecCounter
	GPU     model.GPUReport // RecGPU

	// RecNote: its kind (NoteHold, NotePinned, NoteAttachedLate), the
	// thread, and two values: a hold's start and end, a pinned range's
	// start and size.
	Note byte
	TID  uint32
	A, B uint64

	// RecGPUTime: what the collector said (GPUTimesStart, ...), at T,
	// and a measurement's Measurement.
	GPUTimes    byte
	T           uint64
	Measurement model.Measurement
}

// Reader reads one pass of a recording one record at a time, in file
// order, through a Timeline.
type Reader struct {
	br       *bufio.Reader
	pass     Pass
	tl       Timeline
	hdr      Header
	rec      Record
	typ      byte // the current record as read, for Writer.Copy
	buf      []byte
	at       uint64
	records  uint64
	consumed int64
	lastTick int64
	err      error
	end      bool

	// Progress, if set, is called with the bytes consumed so far every
	// 64 KiB or so, and at the end record.
	Progress func(int64)
}

// NewReader starts reading pass of r through tl (nil: the recording's
// own timeline). A recording whose header cannot be read gives a Reader
// whose Next is false at once and whose Err says why.
func NewReader(r io.Reader, pass Pass, tl Timeline) *Reader {
	return NewReaderSize(r, pass, tl, 1<<20)
}

// NewReaderSize is NewReader reading through a buffer of size bytes.
func NewReaderSize(r io.Reader, pass Pass, tl Timeline, size int) *Reader {
	rd := &Reader{br: bufio.NewReaderSize(r, size), pass: pass, tl: tl}
	rd.consumed, rd.err = readPrelude(rd.br, &rd.hdr)
	return rd
}

// Header is the recording's header.
func (r *Reader) Header() Header { return r.hdr }

// Count is the number of records read so far, of both passes (the end
// record excluded).
func (r *Reader) Count() uint64 { return r.records }

// Err is why Next stopped: nil at the end record, ErrTruncated when the
// file ends before it, ErrFormat for garbage.
func (r *Reader) Err() error { return r.err }

// Time is when the current record happened on the timeline, for
// interleaving recordings: an event's return (its start when only the
// entry was probed), else the time of the event before it, which a note or
// a GPU time follows.
func (r *Reader) Time() uint64 { return r.at }

// Record is the current record, valid until the next call to Next.
func (r *Reader) Record() *Record { return &r.rec }

// readPrelude reads the magic, the version and the header into hdr and
// returns the bytes consumed.
func readPrelude(br *bufio.Reader, hdr *Header) (int64, error) {
	var pre [16]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return 0, fmt.Errorf("%w: file too short", ErrFormat)
	}
	if [8]byte(pre[:8]) != magic {
		return 0, fmt.Errorf("%w: bad magic (give a .cudatap file that cudatap record -o wrote)", ErrFormat)
	}
	if v := binary.LittleEndian.Uint32(pre[8:]); v != Version {
		return 0, fmt.Errorf("%w: version %d, this cudatap reads version %d", ErrFormat, v, Version)
	}
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen > MaxRecord {
		return 0, fmt.Errorf("%w: header of %d bytes", ErrFormat, hlen)
	}
	b, err := readN(br, nil, int(hlen))
	if err != nil {
		return 0, fmt.Errorf("%w: header cut short", ErrTruncated)
	}
	if err := json.Unmarshal(b, hdr); err != nil {
		return 0, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	return int64(16 + hlen), nil
}

// Next reads the next record of the pass; false at the end of the
// recording or at an error (Err).
func (r *Reader) Next() bool {
	if r.err != nil || r.end {
		return false
	}
	for {
		typ, err := r.br.ReadByte()
		if err != nil {
			r.err = fmt.Errorf("%w after %d records", ErrTruncated, r.records)
			return false
		}
		n, err := binary.ReadUvarint(r.br)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			r.err = fmt.Errorf("%w after %d records: record length cut short", ErrTruncated, r.records)
			return false
		}
		if err != nil || n > MaxRecord {
			r.err = fmt.Errorf("%w: bad record length after %d records", ErrFormat, r.records)
			return false
		}
		r.consumed += int64(1+uvarintLen(n)) + int64(n)
		if r.Progress != nil && r.consumed-r.lastTick > 64<<10 {
			r.Progress(r.consumed)
			r.lastTick = r.consumed
		}
		// Records of the other pass are skipped unread.
		if typ != RecEnd && !r.pass.reads(typ) {
			if _, err := r.br.Discard(int(n)); err != nil {
				r.err = fmt.Errorf("%w after %d records", ErrTruncated, r.records)
				return false
			}
			r.records++
			continue
		}
		if r.buf, err = readN(r.br, r.buf, int(n)); err != nil {
			r.err = fmt.Errorf("%w after %d records", ErrTruncated, r.records)
			return false
		}
		if typ == RecEnd {
			if r.Progress != nil {
				r.Progress(r.consumed)
			}
			r.typ, r.end = 0, true
			return false
		}
		r.typ, r.rec.Type = typ, typ
		if r.pass == EventsPass {
			err = r.decodeEvent(typ)
		} else {
			err = r.decodeName(typ)
		}
		if err != nil {
			r.err = err
			return false
		}
		r.records++
		return true
	}
}

func (r *Reader) patchTime(b []byte) {
	if r.tl != nil {
		binary.LittleEndian.PutUint64(b, r.tl.Time(binary.LittleEndian.Uint64(b)))
	}
}

func (r *Reader) patchPID(b []byte) {
	if r.tl != nil {
		binary.LittleEndian.PutUint32(b, r.tl.PID(binary.LittleEndian.Uint32(b)))
	}
}

// decodeEvent checks a record of the events pass, puts it on the
// timeline and decodes it.
func (r *Reader) decodeEvent(typ byte) error {
	le := binary.LittleEndian
	b, rec := r.buf, &r.rec
	switch typ {
	case RecEvent:
		if len(b) >= 28 {
			r.patchTime(b[0:])
			r.patchTime(b[8:])
			r.patchPID(b[24:])
		}
		if rec.EventErr = event.Decode(b, &rec.Event); rec.EventErr == nil {
			r.at = max(rec.Event.Start, rec.Event.End)
		}
	case RecProcess:
		if len(b) < 12 {
			return fmt.Errorf("%w: short name record", ErrFormat)
		}
		r.patchPID(b)
		rec.PID = le.Uint32(b)
	case RecNote:
		if len(b) < 25 {
			return fmt.Errorf("%w: short note record", ErrFormat)
		}
		r.patchPID(b[1:])
		if b[0] == NoteHold {
			r.patchTime(b[9:])
			r.patchTime(b[17:])
		}
		rec.Note, rec.PID, rec.TID = b[0], le.Uint32(b[1:]), le.Uint32(b[5:])
		rec.A, rec.B = le.Uint64(b[9:]), le.Uint64(b[17:])
	case RecGPUTime:
		if len(b) < gpuTimeSize {
			return fmt.Errorf("%w: short GPU time record", ErrFormat)
		}
		r.patchPID(b[1:])
		switch b[0] {
		case GPUTimesMark, GPUTimesStart, GPUTimesHandOver:
			r.patchTime(b[5:])
		case GPUTimesMeasure, GPUTimesMeasureStream:
			for off := 17; off <= 41; off += 8 { // APIStart, APIEnd, Start, End
				r.patchTime(b[off:])
			}
		}
		rec.GPUTimes, rec.PID, rec.T = b[0], le.Uint32(b[1:]), le.Uint64(b[5:])
		if b[0] == GPUTimesMeasure || b[0] == GPUTimesMeasureStream {
			m := b[13:]
			rec.Measurement = model.Measurement{TID: le.Uint32(m), APIStart: le.Uint64(m[4:]), APIEnd: le.Uint64(m[12:]),
				Start: le.Uint64(m[20:]), End: le.Uint64(m[28:]), Kind: model.OpKind(m[36]), Device: int8(m[37]), Bytes: le.Uint64(m[38:])}
			m = m[46:]
			if b[0] == GPUTimesMeasureStream && len(m) >= gpuTimeStreamSize {
				rec.Measurement.CUPTIStream, rec.Measurement.GraphNode, rec.Measurement.CopyKind = le.Uint32(m), le.Uint64(m[4:]), event.MemcpyKind(m[12])
				m = m[gpuTimeStreamSize:]
			}
			rec.Measurement.Name = string(m)
		}
	}
	return nil
}

// decodeName checks and decodes a record of the names pass, its pid on
// the timeline.
func (r *Reader) decodeName(typ byte) error {
	le := binary.LittleEndian
	b, rec := r.buf, &r.rec
	switch typ {
	case RecProcess, RecThread, RecKernel, RecFrame:
		if len(b) < 12 {
			return fmt.Errorf("%w: short name record", ErrFormat)
		}
		r.patchPID(b)
		rec.PID, rec.Key, rec.Size = le.Uint32(b), le.Uint64(b[4:]), len(b)-12
		if typ == RecProcess {
			rec.Info = model.ProcessInfo{}
			rec.InfoOK = json.Unmarshal(b[12:], &rec.Info) == nil
		} else {
			rec.Name = string(b[12:])
		}
	case RecPyFrame:
		if len(b) < 20 {
			return fmt.Errorf("%w: short Python frame record", ErrFormat)
		}
		r.patchPID(b)
		rec.PID, rec.Py = le.Uint32(b), model.PyKey{Code: le.Uint64(b[4:]), Instr: le.Uint64(b[12:])}
		rec.Name, rec.Size = string(b[20:]), len(b)-20
	case RecMapping:
		if len(b) < mappingSize {
			return fmt.Errorf("%w: short mapping record", ErrFormat)
		}
		m := model.Mapping{Start: le.Uint64(b[4:]), Limit: le.Uint64(b[12:]), Offset: le.Uint64(b[20:])}
		n, k := binary.Uvarint(b[mappingSize:])
		rest := b[mappingSize+max(k, 0):]
		if k <= 0 || n > uint64(len(rest)) {
			return fmt.Errorf("%w: bad mapping record", ErrFormat)
		}
		m.BuildID, m.File = string(rest[:n]), string(rest[n:])
		r.patchPID(b)
		rec.PID, rec.Mapping, rec.Size = le.Uint32(b), m, len(rest)
	case RecDrops:
		rec.Drops = model.Drops{}
		if err := json.Unmarshal(b, &rec.Drops); err != nil {
			return fmt.Errorf("%w: drops record: %v", ErrFormat, err)
		}
	case RecCounter:
		rec.Counter = Counter{}
		if err := json.Unmarshal(b, &rec.Counter); err != nil {
			return fmt.Errorf("%w: counter record: %v", ErrFormat, err)
		}
	case RecGPU:
		rec.GPU = model.GPUReport{}
		if err := json.Unmarshal(b, &rec.GPU); err != nil {
			return fmt.Errorf("%w: GPU record: %v", ErrFormat, err)
		}
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
