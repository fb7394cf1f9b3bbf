package model

import "fmt"

// A recording is untrusted input: a file from elsewhere can name any number
// of processes, threads, streams, events, graphs, allocations and kernels,
// one small record each. The model keeps every count it can be made to
// grow within these bounds: past them, a process's work goes to one
// process that stands for all those past the limit (OtherPID), a thread's
// to its process's other-threads bucket (OtherTID), a stream's to its
// process's other-streams stream (StreamOther), and what cannot be merged
// (an event's position, an allocation) is not followed. Each is counted in
// Drops.Limits, which every output shows. Real programs stay far below:
// a PyTorch job has a few processes per GPU, tens of threads and streams.
const (
	maxProcesses    = 1024    // processes modeled apart
	maxThreads      = 1024    // threads of one process modeled apart
	maxThreadsTotal = 1 << 14 // over all processes
	maxStreams      = 1024    // streams of one process (the legacy one included)
	maxStreamsTotal = 1 << 14 // over all processes
	maxEvents       = 1 << 16 // CUDA events of one process with a recorded position
	maxGraphs       = 1 << 16 // captured, and instantiated, graphs of one process
	maxKernelNames  = 1 << 16 // load-time kernel names, and runtime stubs, of one process
	maxRanges       = 1 << 13 // device allocations, and pinned host ranges, of one process
	maxPolls        = 1024    // query poll loops of one process followed at once
	// maxDistinct bounds the sets that count what was merged as distinct
	// processes, threads and streams: past it the counts are lower bounds
	// (Limits.AtLeast).
	maxDistinct = 1 << 16
)

// OtherPID is the pid of the process that stands for every process past
// the limit (Process.Other); no traced process has pid 0. OtherTID is, in
// each process, the thread that stands for its threads past the limit.
const (
	OtherPID uint32 = 0
	OtherTID uint32 = 0
)

// Limits counts what the model's bounds merged or left out. Not losses:
// the calls are all there, in the buckets.
type Limits struct {
	Processes uint64 // processes merged into OtherPID (distinct, up to maxDistinct)
	Threads   uint64 // threads merged into their process's OtherTID (distinct, up to maxDistinct)
	Streams   uint64 // streams merged into their process's other-streams stream (distinct, up to maxDistinct)
	// Not followed: event records whose position was not kept (a wait on
	// them is then not a dependency), graphs (captures, instantiations,
	// and changes to an exec's nodes cudatap cannot place: its launches
	// are one op each, their nodes unknown), kernel names
	// and stubs (the kernels keep their raw address), allocations and
	// pinned ranges (not counted in memory in use; copies from such a
	// range count as pageable), and query poll loops (not reported as a
	// synchronization).
	Events      uint64
	Graphs      uint64
	KernelNames uint64
	Allocations uint64
	Polls       uint64
	// Set by a replay (tracer/recording): names not kept, NVML samples
	// thinned out and entries of the NVML report not kept, past the
	// bounds on what it keeps of a recording besides its events. Names
	// also counts NVTX messages not kept (annotations.go).
	Names     uint64
	Samples   uint64
	GPUReport uint64
}

// Any reports whether a bound acted.
func (l Limits) Any() bool { return l != Limits{} }

// AtLeast reports whether n, a count of distinct processes, threads or
// streams, stopped counting: the true number is n or more.
func AtLeast(n uint64) bool { return n >= maxDistinct }

// Describe says, in one line, which bounds acted and what they merged or
// left out; "" when none did.
func (l Limits) Describe() string {
	var b []byte
	add := func(n uint64, distinct bool, what string) {
		if n == 0 {
			return
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		more := ""
		if distinct && AtLeast(n) {
			more = " or more"
		}
		b = fmt.Appendf(b, "%d%s %s", n, more, what)
	}
	add(l.Processes, true, fmt.Sprintf("processes past %d merged into one (pid %d)", maxProcesses, OtherPID))
	add(l.Threads, true, fmt.Sprintf("threads past %d per process (%d in all) merged into each process's tid %d", maxThreads, maxThreadsTotal, OtherTID))
	add(l.Streams, true, fmt.Sprintf("streams past %d per process (%d in all) merged into one stream", maxStreams, maxStreamsTotal))
	add(l.Events, false, "event records not followed")
	add(l.Graphs, false, "graphs not followed")
	add(l.KernelNames, false, "kernel names not kept")
	add(l.Allocations, false, "allocations not tracked")
	add(l.Polls, false, "query polls not followed")
	add(l.Names, false, "names not kept")
	add(l.Samples, false, "NVML samples thinned out")
	add(l.GPUReport, false, "NVML report entries not kept")
	return string(b)
}

// distinct counts distinct keys, remembering at most maxDistinct of them.
type distinct[K comparable] struct{ seen map[K]struct{} }

// add reports whether k is new (false, once full, for every key not seen).
func (d *distinct[K]) add(k K) bool {
	if d.seen == nil {
		d.seen = map[K]struct{}{}
	}
	if _, ok := d.seen[k]; ok || len(d.seen) >= maxDistinct {
		return false
	}
	d.seen[k] = struct{}{}
	return true
}

// merged are the sets behind the distinct counts of Limits.
type merged struct {
	procs   distinct[uint32]
	threads distinct[[2]uint32]
	streams distinct[streamKey]
}

type streamKey struct {
	pid, tid uint32
	handle   uint64
}

// proc returns the state of process pid, creating it on first sight while
// there is room, else the state of OtherPID.
func (m *Model) proc(pid uint32) *procState {
	if ps, ok := m.procs[pid]; ok {
		return ps
	}
	if pid == OtherPID || len(m.procs) >= maxProcesses {
		if m.merged.procs.add(pid) {
			m.drops.Limits.Processes++
		}
		ps := m.procs[OtherPID]
		if ps == nil {
			ps = m.newProc(OtherPID)
			ps.p.Other, ps.p.Info.Comm = true, "other processes"
		}
		return ps
	}
	return m.newProc(pid)
}

// thread is the thread tid of ps is modeled as: itself while there is
// room, else OtherTID. It adds tid to the process's threads. The threads of
// the merged processes are all OtherTID (their tids are of different
// processes).
func (m *Model) thread(ps *procState, tid uint32) uint32 {
	p := ps.p
	if _, ok := p.Threads[tid]; ok && tid != OtherTID {
		return tid
	}
	if p.Other {
		p.Threads[OtherTID] = struct{}{}
		return OtherTID
	}
	if tid == OtherTID || len(p.Threads) >= maxThreads || m.threads >= maxThreadsTotal {
		if m.merged.threads.add([2]uint32{p.PID, tid}) {
			m.drops.Limits.Threads++
		}
		p.Threads[OtherTID] = struct{}{}
		return OtherTID
	}
	p.Threads[tid] = struct{}{}
	m.threads++
	return tid
}

// newStream adds stream s to ps and returns its id; past the bounds, the
// id of the process's other-streams stream, k naming the stream merged.
func (m *Model) newStream(ps *procState, s *Stream, k streamKey) int {
	if len(ps.p.Streams) >= maxStreams || m.streams >= maxStreamsTotal {
		if m.merged.streams.add(k) {
			m.drops.Limits.Streams++
		}
		if ps.other == 0 {
			ps.other = ps.addStream(&Stream{Kind: StreamOther, Device: DeviceUnknown})
		}
		return ps.other
	}
	m.streams++
	return ps.addStream(s)
}

// track adds [ptr, ptr+size) to r and reports whether it is followed.
func (m *Model) track(r *Ranges, ptr, size uint64) bool {
	if !r.Add(ptr, size, maxRanges) {
		m.drops.Limits.Allocations++
		return false
	}
	return true
}

// removed removes the range at p from r and returns its size (0 when none
// starts there).
func removed(r *Ranges, p uint64) uint64 {
	start, end, _ := r.RemoveAt(p)
	return end - start
}
