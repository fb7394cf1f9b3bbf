package model

import "github.com/cudatap/cudatap/tracer/event"

// CUDA events: where each was recorded, and the dependencies a stream
// waiting for one makes (deps_test.go). A synchronization on an event is
// in syncs.go.

// eventPos is where an event was last recorded.
type eventPos struct {
	stream  int
	op      int      // ID of the last GPU op on the stream at record time, -1 if none
	call    int      // Seq of the record call
	capture *capture // the capture its stream recorded into, nil if none: a wait on it joins the capture
}

// recordEvent follows cudaEventRecord: the event stands for the work its
// stream has enqueued so far.
func (m *Model) recordEvent(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	sid, e := int(call.Stream), call.Args.Event
	if _, known := ps.events[e]; known || len(ps.events) < maxEvents {
		ps.events[e] = eventPos{stream: sid, op: ps.st[sid].lastOp, call: call.Seq, capture: ps.capturing[sid]}
	} else {
		m.drops.Limits.Events++
	}
	// A record enqueues a marker on the stream: it gets a correlation
	// id of its own, as CUPTI gives it (Kineto traces, and HTA's
	// critical path, match waits to records by it).
	m.corr++
	call.Correlation = m.corr
}

// waitEvent follows cudaStreamWaitEvent: the stream's next op waits for
// the work the event was recorded after.
func (m *Model) waitEvent(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	a := &call.Args
	pos, found := ps.events[a.Event]
	if !found {
		return
	}
	m.sink.Dependency(ps.p, &Dependency{Event: a.Event, RecordCall: pos.call, WaitCall: call.Seq,
		FromStream: pos.stream, ToStream: int(call.Stream)})
	if c := pos.capture; c != nil && ps.capturing[pos.stream] == c {
		ps.capturing[int(call.Stream)] = c // forked into the capture: its work is the graph's
	} else if pos.op >= 0 && ps.capturing[int(call.Stream)] == nil {
		ps.st[call.Stream].waitAfter = pos.op
	}
}

// forgetEvent follows cudaEventCreate and cudaEventDestroy: a new or
// destroyed event has no recorded position (handles are reused).
func (m *Model) forgetEvent(ps *procState, _ *event.Spec, _ *event.Event) {
	delete(ps.events, m.call.Args.Event)
}
