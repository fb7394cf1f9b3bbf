// Package replay replays recordings (tracer/recording) into a stream
// model: a recording's names, NVML series, GPU report and drop counters
// first (ReadNames), then its events (Records, ReadEvents), or all of it
// into a model and its sink (Load). Several recordings replay as one, each
// put on a common timeline by a Transform (LoadInputs): `cudatap merge`
// aligns ranks recorded on several hosts so.
package replay

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

// Replay is what a recording holds besides its events.
type Replay struct {
	Header    recording.Header
	Names     *model.Names
	Processes []uint32        // every process the recorder named, in file order
	Counters  []model.Counter // in time order
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

// timeline is what a recording.Reader rewrites records through: nil for
// the zero Transform, so records are not rewritten at all.
func (t *Transform) timeline() recording.Timeline {
	if t.identity() {
		return nil
	}
	return t
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

func (t *Transform) counter(c *model.Counter) {
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
// the records in the file. Truncated files return recording.ErrTruncated
// with what was read before the cut; garbage returns recording.ErrFormat;
// it never panics.
func ReadNames(r io.Reader) (*Replay, error) { return ReadNamesWith(r, Transform{}) }

// ReadNamesWith is ReadNames through t: names are keyed by the pids t
// gives, samples and the GPU report are on its timeline.
func ReadNamesWith(r io.Reader, t Transform) (*Replay, error) {
	rp := &Replay{Names: model.NewNames()}
	err := scanNames(r, rp, &t)
	rp.Counters, rp.CountersThinned = rp.counters.sorted(), rp.counters.thinned
	return rp, err
}

// scanNames reads the names pass of a recording into rp.
func scanNames(r io.Reader, rp *Replay, t *Transform) error {
	rd := recording.NewReader(r, recording.NamesPass, t.timeline())
	for rd.Next() {
		rp.name(rd.Record(), t)
	}
	rp.Header, rp.Records = rd.Header(), rd.Count()
	return rd.Err()
}

// name keeps one record of the names pass.
func (rp *Replay) name(rec *recording.Record, t *Transform) {
	n := rp.Names
	k := model.NameKey{PID: rec.PID, Key: rec.Key}
	switch rec.Type {
	case recording.RecProcess:
		// A process may be named twice (again at its first call, once
		// it had exec'd): the last name stands.
		_, seen := n.Procs[rec.PID]
		if !rp.keepName(seen, rec.Size, len(n.Procs), maxProcNames) {
			break
		}
		if rec.InfoOK {
			n.Procs[rec.PID] = rec.Info
		}
		if !seen {
			rp.Processes = append(rp.Processes, rec.PID)
		}
	case recording.RecThread:
		keepName(rp, n.Threads, k, rec.Name, rec.Size, maxThreadNames)
	case recording.RecKernel:
		keepName(rp, n.Kernels, k, rec.Name, rec.Size, maxNames)
	case recording.RecFrame:
		keepName(rp, n.Frames, k, rec.Name, rec.Size, maxNames)
	case recording.RecPyFrame:
		keepName(rp, n.Py, model.PyNameKey{PID: rec.PID, PyKey: rec.Py}, rec.Name, rec.Size, maxNames)
	case recording.RecMapping:
		keepName(rp, n.Mappings, model.NameKey{PID: rec.PID, Key: rec.Mapping.Start}, rec.Mapping, rec.Size, maxMappings)
	case recording.RecDrops:
		d := rec.Drops
		rp.Drops = &d
	case recording.RecCounter:
		c := rec.Counter
		t.counter(&c)
		rp.counters.add(c)
	case recording.RecGPU:
		g := rec.GPU
		t.gpu(&g)
		rp.GPUNotKept += boundGPU(&g)
		rp.GPU = &g
	}
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
// Transform. Apply hands the current record to a model;
// recording.Writer.Copy(rs.Reader) writes it to another recording. Several Records interleaved by Time
// replay several recordings as one (LoadInputs).
type Records struct {
	*recording.Reader
}

// NewRecords starts reading the events pass of r through t. A recording
// whose header cannot be read gives Records whose Next is false at once
// and whose Err says why.
func NewRecords(r io.Reader, t Transform) *Records { return newRecords(r, t, 1<<20) }

func newRecords(r io.Reader, t Transform, bufSize int) *Records {
	return &Records{recording.NewReaderSize(r, recording.EventsPass, t.timeline(), bufSize)}
}

// Apply hands the current record to m.
func (rs *Records) Apply(m *model.Model) {
	rec := rs.Record()
	switch rec.Type {
	case recording.RecEvent:
		if rec.EventErr != nil {
			m.DecodeError()
		} else if event.Auxiliary(rec.Event.API()) {
			m.Auxiliary()
		} else {
			m.Handle(&rec.Event)
		}
	case recording.RecProcess:
		// The recorder names a process when it first sees it, which for
		// an attached process that never calls CUDA is all it sees.
		m.AddProcess(rec.PID)
	case recording.RecNote:
		switch rec.Note {
		case recording.NoteHold:
			m.AddHold(rec.PID, rec.TID, rec.A, rec.B)
		case recording.NotePinned:
			m.AddPinned(rec.PID, rec.A, rec.B)
		case recording.NoteAttachedLate:
			m.AttachedLate(rec.PID)
		}
	case recording.RecGPUTime:
		pid, t := rec.PID, rec.T
		switch rec.GPUTimes {
		case recording.GPUTimesStart:
			m.StartMeasuringSince(pid, t)
		case recording.GPUTimesHandOver:
			m.HandedOver(pid, t)
		case recording.GPUTimesRefused:
			m.NotMeasured(pid)
		case recording.GPUTimesMeasure, recording.GPUTimesMeasureStream:
			ms := rec.Measurement
			m.Measure(pid, &ms)
		case recording.GPUTimesMark:
			m.MeasuredUntil(pid, t)
		case recording.GPUTimesStop:
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
	rs.Progress = progress
	for rs.Next() {
		rs.Apply(m)
	}
	return &Replay{Header: rs.Header(), Records: rs.Count()}, rs.Err()
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
		if err != nil && !errors.Is(err, recording.ErrTruncated) {
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
			rs.Progress = func(n int64) {
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
		rps[i].Records = rs.Count()
		if err := rs.Err(); err != nil {
			errs = append(errs, fail(i, err))
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
		union(all, all.Names.Threads, n.Threads, recording.KeyOrder, func(v string) int { return len(v) }, maxThreadNames)
		union(all, all.Names.Kernels, n.Kernels, recording.KeyOrder, func(v string) int { return len(v) }, maxNames)
		union(all, all.Names.Frames, n.Frames, recording.KeyOrder, func(v string) int { return len(v) }, maxNames)
		union(all, all.Names.Py, n.Py, recording.PyKeyOrder, func(v string) int { return len(v) }, maxNames)
		union(all, all.Names.Mappings, n.Mappings, recording.KeyOrder, func(v model.Mapping) int { return len(v.File) + len(v.BuildID) }, maxMappings)
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
