package tracer

// The reader stage, on one goroutine: a ring-buffer record is decoded once
// (header and arguments, event.Decode), resolved while its process lives
// (resolve: flags, stack, names), modeled (model → the sinks), and
// recorded as the event now stands (event.AppendRecord).

import (
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/targets"
)

// handleRecord runs on the reader goroutine, the only one feeding the
// model. The model lock is held only while the model handles the event:
// naming and writing happen outside it.
func (s *Session) handleRecord(raw []byte) {
	s.applyNotes()
	s.handleEvent(raw)
}

// handleEvent is handleRecord once the notes are applied; the NVTX calls
// the collector reported come here too (nvtx.go).
func (s *Session) handleEvent(raw []byte) {
	s.resolver.PollKernels(false)
	if event.IsPyCode(raw) {
		// Not an event: a copy of a Python code object the record before
		// it refers to. Used for naming only, never recorded.
		s.resolver.PyCode(raw)
		return
	}
	ev := &s.ev
	if err := event.Decode(raw, ev); err != nil {
		s.modelMu.Lock()
		s.model.DecodeError()
		s.modelMu.Unlock()
		s.lost.Add(1)
		return
	}
	if event.Auxiliary(ev.API()) {
		s.modelMu.Lock()
		s.model.Auxiliary()
		s.modelMu.Unlock()
		if s.rec != nil {
			s.rec.Event(raw)
		}
		switch ev.API() {
		case event.LibraryLoad:
			s.resolver.Comm(ev)
			s.targets.QueueRescan(int(ev.PID), targets.Rescan{Held: ev.Cookie&event.CookieStop != 0, TID: ev.TID, At: ev.Start})
		case event.CUPTIClient, event.CUPTIReleased:
			s.cuptiCall(ev)
		default:
			s.treeRecord(ev)
		}
		return
	}
	s.resolver.Resolve(ev)
	s.modelMu.Lock()
	s.model.Handle(ev)
	s.modelMu.Unlock()
	if s.rec != nil {
		s.encBuf = event.AppendRecord(s.encBuf[:0], raw, ev)
		s.rec.Event(s.encBuf)
	}
	s.events.Add(1)
}

// treeRecord handles a record of the followed tree: a process started,
// or a program executed (the process then stopped until the control loop
// hooked what it maps).
func (s *Session) treeRecord(ev *event.Event) {
	switch ev.API() {
	case event.ProcessFork:
		s.targets.Forked(ev.PID, uint32(ev.Args[0]))
		s.resolver.Forked(ev)
		s.modelMu.Lock()
		s.model.AddProcess(ev.PID) // every process of the tree shows, CUDA or not
		s.modelMu.Unlock()
	case event.ProcessExec:
		s.resolver.Executed(ev)
		s.targets.QueueRescan(int(ev.PID), targets.Rescan{Held: ev.Cookie&event.CookieStop != 0, TID: ev.TID, At: ev.Start})
	}
}
