package model

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
)

// A process's streams: each handle a call passes mapped to a stream, the
// model's bookkeeping of the ops pending on each, and the calls that
// create and destroy them (streams_test.go).

// Stream handles with a fixed meaning in the CUDA runtime.
const (
	handleLegacy    = 0x1 // cudaStreamLegacy
	handlePerThread = 0x2 // cudaStreamPerThread
)

// streamState is the model's private per-stream bookkeeping.
type streamState struct {
	queue       []int // pending GPU ops (IDs), enqueue order
	head        int
	gpuClock    uint64 // inferred end of the last laid-out op
	lastOp      int
	lastEnqueue uint64
	waitAfter   int // op a cudaStreamWaitEvent made the next op wait for, -1 = none
	busy        busyBounds
	measured    spanUnion // the measured ops' GPU time (measured.go)
}

// busyBounds accumulates the upper bound of a stream's GPU busy time that is
// known without kernel timings (StreamStats.BusyMaxNs): each op ran within
// [earliest start, latest end] — it could not start before its enqueue nor
// before the stream's previous op could, and it had ended by the
// synchronization that proved it complete (by the end of the recording if
// none did) — so the union of those intervals holds all of the stream's
// work. No lower bound is known without timings: a host blocked in a
// synchronization also waits for its own wake-up after the GPU finished
// (81 µs blocked for 20 µs of work on the simulated GPU, TestBusyBounds).
type busyBounds struct {
	earliest         uint64 // earliest start of the stream's last op
	maxStart, maxEnd uint64 // the union's current interval
	maxNs            uint64 // closed intervals of the union
}

// op adds an op that could start no earlier than enqueued and had ended by
// latest.
func (b *busyBounds) op(enqueued, latest uint64) {
	b.earliest = max(b.earliest, enqueued)
	latest = max(latest, b.earliest)
	if b.maxEnd == 0 || b.earliest > b.maxEnd {
		b.maxNs += b.maxEnd - b.maxStart
		b.maxStart, b.maxEnd = b.earliest, latest
		return
	}
	b.maxEnd = max(b.maxEnd, latest)
}

func (b *busyBounds) max() uint64 { return b.maxNs + b.maxEnd - b.maxStart }

func (s *streamState) pending() []int { return s.queue[s.head:] }

func (s *streamState) pop(n int) {
	s.head += n
	if s.head == len(s.queue) {
		s.queue, s.head = s.queue[:0], 0
	} else if s.head > 1024 && s.head*2 > len(s.queue) {
		s.queue, s.head = s.queue[:copy(s.queue, s.queue[s.head:])], 0
	}
}

// dequeue removes op id from the stream's pending ops.
func (s *streamState) dequeue(id int) {
	if pend := s.pending(); len(pend) > 0 && pend[0] == id {
		s.pop(1)
	} else if i := slices.Index(pend, id); i >= 0 {
		s.queue = slices.Delete(s.queue, s.head+i, s.head+i+1)
	}
}

func (ps *procState) addStream(s *Stream) int {
	s.ID = len(ps.p.Streams)
	ps.p.Streams = append(ps.p.Streams, s)
	ps.st = append(ps.st, &streamState{lastOp: -1, waitAfter: -1})
	return s.ID
}

// streamID maps a handle as passed to a call to the process's stream id.
// A stream merged into the other-streams stream is not remembered: each
// of its calls finds it so again.
func (m *Model) streamID(ps *procState, handle uint64, perThreadDefault bool, tid uint32, now uint64) int {
	if (handle == 0 && perThreadDefault) || handle == handlePerThread {
		if id, ok := ps.perThread[tid]; ok {
			return id
		}
		id := m.newStream(ps, &Stream{Kind: StreamPerThread, Handle: handlePerThread, OwnerTID: tid, CreatedAt: now},
			streamKey{ps.p.PID, tid, handlePerThread})
		if id != ps.other {
			ps.perThread[tid] = id
		}
		return id
	}
	if handle == 0 || handle == handleLegacy {
		return 0
	}
	if id, ok := ps.byHandle[handle]; ok {
		return id
	}
	id := m.newStream(ps, &Stream{Kind: StreamPreExisting, Handle: handle, Device: DeviceUnknown}, streamKey{ps.p.PID, 0, handle})
	if id != ps.other {
		ps.byHandle[handle] = id
	}
	return id
}

// createStream follows cudaStreamCreate*: a handle reused after destroy is
// a new stream.
func (m *Model) createStream(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	a := &call.Args
	if call.failed() || a.Stream == 0 {
		return
	}
	id := m.newStream(ps, &Stream{Kind: StreamCreated, Handle: a.Stream, NonBlocking: a.Flags&1 != 0,
		Priority: a.Priority, CreatedAt: call.Start, Device: ps.currentDevice(call.TID)}, streamKey{ps.p.PID, 0, a.Stream})
	if id != ps.other {
		ps.byHandle[a.Stream] = id
	} else {
		delete(ps.byHandle, a.Stream)
	}
	call.Stream = int32(id)
}

// destroyStream follows cudaStreamDestroy; the default streams and the
// other-streams stream are never destroyed.
func (m *Model) destroyStream(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	if call.Stream > 0 && int(call.Stream) != ps.other {
		ps.p.Streams[call.Stream].DestroyedAt = call.Start
		delete(ps.byHandle, call.Args.Stream)
	}
}
