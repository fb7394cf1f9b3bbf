package recording

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// ErrFormat marks a file that is not a valid .cudatap recording.
var ErrFormat = errors.New("not a cudatap recording")

// ErrTruncated marks a recording that ends without its end record (the
// recorder was killed): everything before the cut is still delivered.
var ErrTruncated = errors.New("recording is truncated")

// Replay is what a recording holds besides its events.
type Replay struct {
	Header    Header
	Names     *model.Names
	Processes []uint32  // every process the recorder named, in file order
	Counters  []Counter // in time order
	GPU       *model.GPUReport
	Drops     *model.Drops // nil when the recording ends before its drop record
	Records   uint64
	// What the bounds on the tables left out (bounds.go): names past
	// them, NVML samples thinned out, entries of the NVML report.
	NamesNotKept, CountersThinned, GPUNotKept uint64

	names     int   // entries of the name tables
	nameBytes int64 // and their bytes
	counters  counterSet
}

// Transform puts a recording on another timeline as it is read: every
// timestamp it decodes (events, notes, GPU times, NVML samples and the GPU
// report) is shifted, processes are renumbered, NVML devices too. Every
// sink then sees the recording as if it had been made there; `cudatap
// merge` replays several hosts' recordings into one model this way. The
// zero Transform changes nothing.
type Transform struct {
	ShiftNs int64             // added to every timestamp (ns); one that would fall before 1 is read as 1
	PIDs    map[uint32]uint32 // recorded pid → pid on the timeline; pids not listed are kept
	// Devices is added to NVML device indexes (counters, GPU report), and
	// DevicePrefix put before device and counter track names, so that two
	// hosts' GPU 0 stay apart.
	Devices      int
	DevicePrefix string
}

func (t *Transform) identity() bool {
	return t.ShiftNs == 0 && len(t.PIDs) == 0 && t.Devices == 0 && t.DevicePrefix == ""
}

// Time is timestamp v on the timeline; 0 (unknown) stays 0.
func (t *Transform) Time(v uint64) uint64 {
	if t.ShiftNs == 0 || v == 0 {
		return v
	}
	s := int64(v) + t.ShiftNs
	if s < 1 {
		return 1
	}
	return uint64(s)
}

// PID is recorded pid p on the timeline.
func (t *Transform) PID(p uint32) uint32 {
	if q, ok := t.PIDs[p]; ok {
		return q
	}
	return p
}

func (t *Transform) patchTime(b []byte) {
	binary.LittleEndian.PutUint64(b, t.Time(binary.LittleEndian.Uint64(b)))
}

func (t *Transform) patchPID(b []byte) {
	binary.LittleEndian.PutUint32(b, t.PID(binary.LittleEndian.Uint32(b)))
}

func (t *Transform) counter(c *Counter) {
	c.TS = t.Time(c.TS)
	c.Device += t.Devices
	c.Name = t.DevicePrefix + c.Name
}

func (t *Transform) gpu(g *model.GPUReport) {
	if t.identity() {
		return
	}
	for i := range g.GPUs {
		d := &g.GPUs[i]
		d.Index += t.Devices
		d.Name = t.DevicePrefix + d.Name
		d.StartNs, d.EndNs = t.Time(d.StartNs), t.Time(d.EndNs)
		if d.MemPeakPID != 0 {
			d.MemPeakPID = t.PID(d.MemPeakPID)
		}
		for j := range d.Processes {
			d.Processes[j].PID = t.PID(d.Processes[j].PID)
		}
	}
	for i := range g.Traced {
		g.Traced[i].PID = t.PID(g.Traced[i].PID)
	}
	for i := range g.Events {
		g.Events[i].TS = t.Time(g.Events[i].TS)
		g.Events[i].Device += t.Devices
	}
	for i := range g.Devices {
		g.Devices[i] = t.DevicePrefix + g.Devices[i]
	}
	for i := range g.Moments {
		m := &g.Moments[i]
		m.TS = t.Time(m.TS)
		m.Device += t.Devices
		for j := range m.Processes {
			m.Processes[j].PID = t.PID(m.Processes[j].PID)
		}
	}
}

// ReadNames reads everything but the events: header, name tables, NVML
// series, GPU report and drop counters. Events are skipped, so a replay
// can name things before it sees the first event, whatever the order of
// the records in the file. Truncated files return ErrTruncated with what
// was read before the cut; garbage returns ErrFormat; it never panics.
func ReadNames(r io.Reader) (*Replay, error) { return ReadNamesWith(r, Transform{}) }

// ReadNamesWith is ReadNames through t: names are keyed by the pids t
// gives, samples and the GPU report are on its timeline.
func ReadNamesWith(r io.Reader, t Transform) (*Replay, error) {
	rp := &Replay{Names: model.NewNames()}
	err := scanNames(r, rp, &t)
	rp.Counters, rp.CountersThinned = rp.counters.sorted(), rp.counters.thinned
	return rp, err
}

// readPrelude reads the magic, the version and the header into rp and
// returns the bytes consumed.
func readPrelude(br *bufio.Reader, rp *Replay) (int64, error) {
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
	if hlen > maxRecord {
		return 0, fmt.Errorf("%w: header of %d bytes", ErrFormat, hlen)
	}
	hdr, err := readN(br, nil, int(hlen))
	if err != nil {
		return 0, fmt.Errorf("%w: header cut short", ErrTruncated)
	}
	if err := json.Unmarshal(hdr, &rp.Header); err != nil {
		return 0, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	return int64(16 + hlen), nil
}

// eventPass reports whether records of type typ belong to the events pass
// (the rest are read by ReadNames; process records by both).
func eventPass(typ byte) bool {
	return typ == recEvent || typ == recNote || typ == recGPUTime || typ == recProcess
}

// scanNames reads the names pass of a recording into rp.
func scanNames(r io.Reader, rp *Replay, t *Transform) error {
	br := bufio.NewReaderSize(r, 1<<20)
	if _, err := readPrelude(br, rp); err != nil {
		return err
	}
	var buf []byte
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
		// Records of the events pass are skipped unread.
		if eventPass(typ) && typ != recProcess {
			if _, err := br.Discard(int(n)); err != nil {
				return fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
			}
			rp.Records++
			continue
		}
		if buf, err = readN(br, buf, int(n)); err != nil {
			return fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
		}
		if err := rp.name(typ, buf, t); err != nil {
			return err
		}
		if typ == recEnd {
			return nil
		}
		rp.Records++
	}
}

// name handles one record of the names pass.
func (rp *Replay) name(typ byte, buf []byte, t *Transform) error {
	switch typ {
	case recProcess, recThread, recKernel, recFrame:
		if len(buf) < 12 {
			return fmt.Errorf("%w: short name record", ErrFormat)
		}
		pid, key, name := t.PID(binary.LittleEndian.Uint32(buf)), binary.LittleEndian.Uint64(buf[4:]), string(buf[12:])
		n := rp.Names
		switch typ {
		case recProcess:
			// A process may be named twice (again at its first call, once
			// it had exec'd): the last name stands.
			_, seen := n.Procs[pid]
			if !rp.keepName(seen, len(name), len(n.Procs), maxProcNames) {
				break
			}
			var info model.ProcessInfo
			if json.Unmarshal([]byte(name), &info) == nil {
				n.Procs[pid] = info
			}
			if !seen {
				rp.Processes = append(rp.Processes, pid)
			}
		case recThread:
			keepName(rp, n.Threads, model.NameKey{PID: pid, Key: key}, name, len(name), maxThreadNames)
		case recKernel:
			keepName(rp, n.Kernels, model.NameKey{PID: pid, Key: key}, name, len(name), maxNames)
		case recFrame:
			keepName(rp, n.Frames, model.NameKey{PID: pid, Key: key}, name, len(name), maxNames)
		}
	case recPyFrame:
		if len(buf) < 20 {
			return fmt.Errorf("%w: short Python frame record", ErrFormat)
		}
		k := model.PyNameKey{PID: t.PID(binary.LittleEndian.Uint32(buf)), PyKey: model.PyKey{Code: binary.LittleEndian.Uint64(buf[4:]), Instr: binary.LittleEndian.Uint64(buf[12:])}}
		keepName(rp, rp.Names.Py, k, string(buf[20:]), len(buf)-20, maxNames)
	case recMapping:
		if len(buf) < mappingSize {
			return fmt.Errorf("%w: short mapping record", ErrFormat)
		}
		le := binary.LittleEndian
		m := model.Mapping{Start: le.Uint64(buf[4:]), Limit: le.Uint64(buf[12:]), Offset: le.Uint64(buf[20:])}
		n, k := binary.Uvarint(buf[mappingSize:])
		rest := buf[mappingSize+max(k, 0):]
		if k <= 0 || n > uint64(len(rest)) {
			return fmt.Errorf("%w: bad mapping record", ErrFormat)
		}
		m.BuildID, m.File = string(rest[:n]), string(rest[n:])
		keepName(rp, rp.Names.Mappings, model.NameKey{PID: t.PID(le.Uint32(buf)), Key: m.Start}, m, len(rest), maxMappings)
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
		t.counter(&c)
		rp.counters.add(c)
	case recGPU:
		var g model.GPUReport
		if err := json.Unmarshal(buf, &g); err != nil {
			return fmt.Errorf("%w: GPU record: %v", ErrFormat, err)
		}
		t.gpu(&g)
		rp.GPUNotKept += boundGPU(&g)
		rp.GPU = &g
	case recEnd:
	default:
		return fmt.Errorf("%w: unknown record type %d", ErrFormat, typ)
	}
	return nil
}

// keepName puts v under k in table, within the name tables' bounds and
// limit names in table.
func keepName[K comparable, V any](rp *Replay, table map[K]V, k K, v V, bytes, limit int) {
	if _, known := table[k]; rp.keepName(known, bytes, len(table), limit) {
		table[k] = v
	}
}

// Records reads the events pass of a recording one record at a time:
// events, notes, GPU times and process records, in file order, through a
// Transform. Apply hands the current record to a model; Writer.Copy
// writes it to another recording. Several Records interleaved by Time
// replay several recordings as one (LoadInputs).
type Records struct {
	br       *bufio.Reader
	rp       *Replay
	t        Transform
	typ      byte
	buf      []byte
	ev       event.Event
	evErr    error
	at       uint64
	consumed int64
	lastTick int64
	progress func(int64)
	err      error
	end      bool
}

// NewRecords starts reading the events pass of r through t. A recording
// whose header cannot be read gives Records whose Next is false at once
// and whose Err says why.
func NewRecords(r io.Reader, t Transform) *Records { return newRecords(r, t, 1<<20) }

func newRecords(r io.Reader, t Transform, bufSize int) *Records {
	rs := &Records{br: bufio.NewReaderSize(r, bufSize), rp: &Replay{}, t: t}
	rs.consumed, rs.err = readPrelude(rs.br, rs.rp)
	return rs
}

// Header is the recording's header.
func (rs *Records) Header() Header { return rs.rp.Header }

// Count is the number of records read so far, of both passes (the end
// record excluded).
func (rs *Records) Count() uint64 { return rs.rp.Records }

// Err is why Next stopped: nil at the end record, ErrTruncated when the
// file ends before it, ErrFormat for garbage.
func (rs *Records) Err() error { return rs.err }

// Time is when the current record happened on the timeline, for
// interleaving recordings: an event's return (its start when only the
// entry was probed), else the time of the event before it, which a note or
// a GPU time follows.
func (rs *Records) Time() uint64 { return rs.at }

// Next reads the next record of the events pass; false at the end of the
// recording or at an error (Err).
func (rs *Records) Next() bool {
	if rs.err != nil || rs.end {
		return false
	}
	rp := rs.rp
	for {
		typ, err := rs.br.ReadByte()
		if err != nil {
			rs.err = fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
			return false
		}
		n, err := binary.ReadUvarint(rs.br)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			rs.err = fmt.Errorf("%w after %d records: record length cut short", ErrTruncated, rp.Records)
			return false
		}
		if err != nil || n > maxRecord {
			rs.err = fmt.Errorf("%w: bad record length after %d records", ErrFormat, rp.Records)
			return false
		}
		rs.consumed += int64(1+uvarintLen(n)) + int64(n)
		if rs.progress != nil && rs.consumed-rs.lastTick > 64<<10 {
			rs.progress(rs.consumed)
			rs.lastTick = rs.consumed
		}
		// Records of the names pass (and unknown ones) are skipped unread.
		if !eventPass(typ) && typ != recEnd {
			if _, err := rs.br.Discard(int(n)); err != nil {
				rs.err = fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
				return false
			}
			rp.Records++
			continue
		}
		if rs.buf, err = readN(rs.br, rs.buf, int(n)); err != nil {
			rs.err = fmt.Errorf("%w after %d records", ErrTruncated, rp.Records)
			return false
		}
		if typ == recEnd {
			if rs.progress != nil {
				rs.progress(rs.consumed)
			}
			rs.typ, rs.end = 0, true
			return false
		}
		if err := rs.prepare(typ); err != nil {
			rs.err = err
			return false
		}
		rp.Records++
		return true
	}
}

// prepare checks the record just read, puts it on the timeline and
// decodes an event.
func (rs *Records) prepare(typ byte) error {
	rs.typ = typ
	b, t := rs.buf, &rs.t
	switch typ {
	case recEvent:
		if len(b) >= 28 && !t.identity() {
			t.patchTime(b[0:])
			t.patchTime(b[8:])
			t.patchPID(b[24:])
		}
		if rs.evErr = event.Decode(b, &rs.ev); rs.evErr == nil {
			rs.at = max(rs.ev.Start, rs.ev.End)
		}
	case recProcess:
		if len(b) < 12 {
			return fmt.Errorf("%w: short name record", ErrFormat)
		}
		t.patchPID(b)
	case recNote:
		if len(b) < 25 {
			return fmt.Errorf("%w: short note record", ErrFormat)
		}
		t.patchPID(b[1:])
		if b[0] == noteHold {
			t.patchTime(b[9:])
			t.patchTime(b[17:])
		}
	case recGPUTime:
		if len(b) < gpuTimeSize {
			return fmt.Errorf("%w: short GPU time record", ErrFormat)
		}
		t.patchPID(b[1:])
		switch b[0] {
		case GPUTimesMark, GPUTimesStart, GPUTimesHandOver:
			t.patchTime(b[5:])
		case GPUTimesMeasure, GPUTimesMeasureStream:
			for off := 17; off <= 41; off += 8 { // APIStart, APIEnd, Start, End
				t.patchTime(b[off:])
			}
		}
	}
	return nil
}

// Apply hands the current record to m.
func (rs *Records) Apply(m *model.Model) {
	le := binary.LittleEndian
	buf := rs.buf
	switch rs.typ {
	case recEvent:
		if rs.evErr != nil {
			m.DecodeError()
		} else if event.Auxiliary(rs.ev.API()) {
			m.Auxiliary()
		} else {
			m.Handle(&rs.ev)
		}
	case recProcess:
		// The recorder names a process when it first sees it, which for
		// an attached process that never calls CUDA is all it sees.
		m.AddProcess(le.Uint32(buf))
	case recNote:
		pid, tid := le.Uint32(buf[1:]), le.Uint32(buf[5:])
		a, b := le.Uint64(buf[9:]), le.Uint64(buf[17:])
		switch buf[0] {
		case noteHold:
			m.AddHold(pid, tid, a, b)
		case notePinned:
			m.AddPinned(pid, a, b)
		case noteAttachedLate:
			m.AttachedLate(pid)
		}
	case recGPUTime:
		pid, t := le.Uint32(buf[1:]), le.Uint64(buf[5:])
		switch buf[0] {
		case GPUTimesStart:
			m.StartMeasuringSince(pid, t)
		case GPUTimesHandOver:
			m.HandedOver(pid, t)
		case GPUTimesRefused:
			m.NotMeasured(pid)
		case GPUTimesMeasure, GPUTimesMeasureStream:
			b := buf[13:]
			ms := model.Measurement{TID: le.Uint32(b), APIStart: le.Uint64(b[4:]), APIEnd: le.Uint64(b[12:]),
				Start: le.Uint64(b[20:]), End: le.Uint64(b[28:]), Kind: model.OpKind(b[36]), Device: int8(b[37]), Bytes: le.Uint64(b[38:])}
			b = b[46:]
			if buf[0] == GPUTimesMeasureStream && len(b) >= gpuTimeStreamSize {
				ms.CUPTIStream, ms.GraphNode, ms.CopyKind = le.Uint32(b), le.Uint64(b[4:]), event.MemcpyKind(b[12])
				b = b[gpuTimeStreamSize:]
			}
			ms.Name = string(b)
			m.Measure(pid, &ms)
		case GPUTimesMark:
			m.MeasuredUntil(pid, t)
		case GPUTimesStop:
			m.AddGPUTimesLost(t)
			m.StopMeasuring(pid)
		}
	}
}

// ReadEvents feeds every event of a recording to m in file order (the
// order they were read from the ring buffer), and registers every named
// process with it. progress, if non-nil, is called with the bytes consumed
// so far every 64 KiB or so.
func ReadEvents(r io.Reader, m *model.Model, progress func(int64)) (*Replay, error) {
	rs := NewRecords(r, Transform{})
	rs.progress = progress
	for rs.Next() {
		rs.Apply(m)
	}
	return rs.rp, rs.err
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
	res, rp, _, err := LoadInputs([]Input{{R: r}}, newSink, LoadOptions{Progress: progress})
	return res, rp, err
}

// Input is one recording of a replay, and how it goes on the replay's
// timeline.
type Input struct {
	R         io.ReadSeeker
	Transform Transform
}

// LoadOptions tune LoadInputs.
type LoadOptions struct {
	// Progress is called with the bytes of the events pass consumed so
	// far, over all inputs, every 64 KiB or so of each.
	Progress func(int64)
	// Record, if set, sees every record of the events pass once the model
	// has it, in replay order, transformed: to write a merged recording
	// (Writer.Copy).
	Record func(input int, rs *Records)
}

// InputError is what went wrong with one input of LoadInputs.
type InputError struct {
	Input int
	Err   error
}

func (e *InputError) Error() string { return fmt.Sprintf("input %d: %v", e.Input, e.Err) }
func (e *InputError) Unwrap() error { return e.Err }

// LoadInputs replays several recordings, each through its Transform, as
// one: names first (all of them), then the events of all inputs into one
// model, interleaved by time (each input's records stay in file order), so
// that what the sinks match across processes (meetings of NCCL ranks)
// arrives together whatever the recordings' lengths. newSink gets the
// combined replay: the first input's header, the union of the name
// tables, every NVML series (in time order), the GPU reports joined, the
// drop counters summed. It returns the result, that combined replay and
// each input's own. The error joins one InputError per input that failed
// (the error itself with a single input); a truncated input still
// contributes what it holds. Memory is bounded by the name tables, the
// model's state and one record per input.
func LoadInputs(ins []Input, newSink func(*Replay) model.Sink, opts LoadOptions) (*model.Result, *Replay, []*Replay, error) {
	fail := func(i int, err error) error {
		if len(ins) == 1 {
			return err
		}
		return &InputError{Input: i, Err: err}
	}
	rps := make([]*Replay, len(ins))
	var errs []error
	for i, in := range ins {
		rp, err := ReadNamesWith(in.R, in.Transform)
		if err != nil && !errors.Is(err, ErrTruncated) {
			return nil, nil, nil, fail(i, err)
		}
		if _, serr := in.R.Seek(0, io.SeekStart); serr != nil {
			return nil, nil, nil, fail(i, fmt.Errorf("rewind recording: %w", serr))
		}
		rps[i] = rp
	}
	all := combine(rps)
	var sink model.Sink
	if newSink != nil {
		sink = newSink(all)
	}
	m := model.New(sink)

	// Many inputs share the read buffers' memory.
	bufSize := 1 << 20
	if len(ins) > 8 {
		bufSize = max(64<<10, (8<<20)/len(ins))
	}
	var total int64
	rss := make([]*Records, len(ins))
	q := make(replayQueue, 0, len(ins))
	for i, in := range ins {
		rs := newRecords(in.R, in.Transform, bufSize)
		if opts.Progress != nil {
			var last int64
			rs.progress = func(n int64) {
				total += n - last
				last = n
				opts.Progress(total)
			}
		}
		rss[i] = rs
		if rs.Next() {
			q = append(q, replayHead{i, rs})
		}
	}
	heap.Init(&q)
	for len(q) > 0 {
		h := q[0]
		h.rs.Apply(m)
		if opts.Record != nil {
			opts.Record(h.input, h.rs)
		}
		if h.rs.Next() {
			heap.Fix(&q, 0)
		} else {
			heap.Pop(&q)
		}
	}
	for i, rs := range rss {
		rps[i].Records = rs.rp.Records
		if rs.err != nil {
			errs = append(errs, fail(i, rs.err))
		}
	}
	if d := all.Drops; d != nil {
		m.SetKernelStats(d.Submitted, d.RingbufFull, d.InflightFull, d.OrphanReturns, d.ReadFaults)
		m.SetAttachFailures(d.AttachFailures)
		m.SetNested(d.Nested)
		m.SetProgramSkips(d.ProgramSkips)
		m.SetPyCodeLost(d.PyCodeLost)
		m.SetGPUTimesLost(d.GPUTimesLost) // the session's own losses too
	}
	res := m.Finish()
	res.WallOffsetNs = all.Header.WallOffsetNs - ins[0].Transform.ShiftNs
	res.Counters = all.Counters
	res.Drops.Limits.Names, res.Drops.Limits.Samples, res.Drops.Limits.GPUReport = all.NamesNotKept, all.CountersThinned, all.GPUNotKept
	if all.GPU != nil {
		res.GPU = *all.GPU
	} else {
		res.GPU.Status = "unknown: the recording ends before its GPU record"
	}
	// Records the recorder could not decode were counted but not written.
	if d := all.Drops; d != nil && d.DecodeErrors > res.Drops.DecodeErrors {
		missing := d.DecodeErrors - res.Drops.DecodeErrors
		res.Drops.DecodeErrors += missing
		res.Drops.Received += missing
	}
	res.Name(all.Names)
	if len(ins) > 1 {
		all.Records = 0
		for _, rp := range rps {
			all.Records += rp.Records
		}
	}
	return res, all, rps, errors.Join(errs...)
}

// union adds src's names to dst, all's table, within the bounds (limit
// names in dst).
func union[K comparable, V any](all *Replay, dst, src map[K]V, cmpK func(a, b K) int, size func(V) int, limit int) {
	for _, k := range slices.SortedFunc(maps.Keys(src), cmpK) {
		keepName(all, dst, k, src[k], size(src[k]), limit)
	}
}

// combine joins the replays of several inputs (the replay itself for one).
func combine(rps []*Replay) *Replay {
	if len(rps) == 1 {
		return rps[0]
	}
	all := &Replay{Header: rps[0].Header, Names: model.NewNames()}
	var gpus []*model.GPUReport
	for _, rp := range rps {
		n := rp.Names
		// The union within the bounds too, in a fixed order: which names
		// do not fit must not change from one run to the next.
		union(all, all.Names.Procs, n.Procs, cmp.Compare[uint32], func(v model.ProcessInfo) int { return len(v.Comm) + len(v.Cmdline) }, maxProcNames)
		union(all, all.Names.Threads, n.Threads, cmpKey, func(v string) int { return len(v) }, maxThreadNames)
		union(all, all.Names.Kernels, n.Kernels, cmpKey, func(v string) int { return len(v) }, maxNames)
		union(all, all.Names.Frames, n.Frames, cmpKey, func(v string) int { return len(v) }, maxNames)
		union(all, all.Names.Py, n.Py, cmpPyKey, func(v string) int { return len(v) }, maxNames)
		union(all, all.Names.Mappings, n.Mappings, cmpKey, func(v model.Mapping) int { return len(v.File) + len(v.BuildID) }, maxMappings)
		all.NamesNotKept += rp.NamesNotKept
		all.CountersThinned += rp.CountersThinned
		all.GPUNotKept += rp.GPUNotKept
		all.Processes = append(all.Processes, rp.Processes...)
		for _, c := range rp.Counters {
			all.counters.add(c)
		}
		if rp.GPU != nil {
			gpus = append(gpus, rp.GPU)
		}
		if d := rp.Drops; d != nil {
			if all.Drops == nil {
				all.Drops = &model.Drops{}
			}
			addDrops(all.Drops, d)
		}
	}
	all.Counters = all.counters.sorted()
	all.CountersThinned += all.counters.thinned
	if all.GPU = joinGPU(gpus); all.GPU != nil {
		all.GPUNotKept += boundGPU(all.GPU)
	}
	return all
}

func addDrops(a, d *model.Drops) {
	a.Submitted += d.Submitted
	a.Received += d.Received
	a.RingbufFull += d.RingbufFull
	a.InflightFull += d.InflightFull
	a.OrphanReturns += d.OrphanReturns
	a.ReadFaults += d.ReadFaults
	a.DecodeErrors += d.DecodeErrors
	a.UnknownAPI += d.UnknownAPI
	a.AttachFailures += d.AttachFailures
	a.Nested += d.Nested
	a.ProgramSkips += d.ProgramSkips
	a.WindowFull += d.WindowFull
	a.StacksDropped += d.StacksDropped
	a.PyCodeLost += d.PyCodeLost
	a.GPUTimesLost += d.GPUTimesLost
	a.GPUTimesUnmatched += d.GPUTimesUnmatched
	a.GPUTimesLate += d.GPUTimesLate
	a.GPUTimesUnmeasured += d.GPUTimesUnmeasured
	a.GPUOpsCUPTIOnly += d.GPUOpsCUPTIOnly
}

// joinGPU joins GPU reports (already on one timeline, devices apart): the
// devices, processes and events of each; "not sampled" only when none
// was.
func joinGPU(gs []*model.GPUReport) *model.GPUReport {
	if len(gs) == 0 {
		return nil
	}
	out := &model.GPUReport{}
	var statuses []string
	sampled := false
	for _, g := range gs {
		out.ClockErrorNs = max(out.ClockErrorNs, g.ClockErrorNs)
		out.GPUs = append(out.GPUs, g.GPUs...)
		out.Traced = append(out.Traced, g.Traced...)
		out.Events = append(out.Events, g.Events...)
		out.Moments = append(out.Moments, g.Moments...)
		out.Devices = append(out.Devices, g.Devices...)
		out.Verdicts = append(out.Verdicts, g.Verdicts...)
		if g.Status != "" {
			statuses = append(statuses, g.Status)
		} else {
			sampled = true
		}
	}
	if !sampled {
		out.Status = strings.Join(statuses, "; ")
	}
	slices.SortStableFunc(out.Events, func(a, b model.GPUEvent) int { return cmp.Compare(a.TS, b.TS) })
	slices.SortStableFunc(out.Moments, func(a, b model.GPUMoment) int { return cmp.Compare(a.TS, b.TS) })
	return out
}

// replayQueue orders the inputs of a replay by the time of their current
// record (then by input: ties keep the inputs' order).
type replayHead struct {
	input int
	rs    *Records
}

type replayQueue []replayHead

func (q replayQueue) Len() int { return len(q) }
func (q replayQueue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if ta, tb := a.rs.Time(), b.rs.Time(); ta != tb {
		return ta < tb
	}
	return a.input < b.input
}
func (q replayQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *replayQueue) Push(x any)   { *q = append(*q, x.(replayHead)) }
func (q *replayQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
