package tracer

// The reader stage: ring-buffer record → decode → stack → model → names
// → recording, on one goroutine.

import (
	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/symbolize/unwind"
	"github.com/cudatap/cudatap/tracer/event"
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
	s.names.pollKernels(false)
	if event.IsPyCode(raw) {
		// Not an event: a copy of a Python code object the record before
		// it refers to. Used for naming only, never recorded.
		s.names.pyCode(raw)
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
			s.names.comm(ev)
			s.queueRescan(int(ev.PID), rescan{held: ev.Cookie&event.CookieStop != 0, tid: ev.TID, at: ev.Start})
		case event.CUPTIClient, event.CUPTIReleased:
			s.cuptiCall(ev)
		default:
			s.treeRecord(ev)
		}
		return
	}
	if ev.Caller != 0 && s.names.viaRuntime(ev) {
		ev.Flags |= event.FlagViaRuntime
		event.SetFlags(raw, ev.Flags) // recorded with the event
	}
	if ev.NStack > 0 || len(ev.Copy) > 0 {
		s.prepareStack(ev)
	}
	s.modelMu.Lock()
	s.model.Handle(ev)
	fn := s.model.Last().Args.Func // all the resolver needs of the decoded call
	s.modelMu.Unlock()
	if ev.Spec() != nil {
		s.names.event(ev, fn)
	}
	if s.rec != nil {
		if event.CookieHasStack(ev.Cookie) && len(raw) > event.CopyOffset {
			// The stack copy served its purpose (unwinding, done above while
			// the process lives): keep recordings small without it. A copy
			// that failed (length 0) still left its 8 KiB in the record.
			ev.Copy = nil
			s.encBuf = event.Encode(s.encBuf[:0], ev)
			s.rec.Event(s.encBuf)
		} else {
			s.rec.Event(raw)
		}
	}
	s.events.Add(1)
}

// prepareStack cuts a frame-pointer walk at the first address outside every
// executable mapping: code built without frame pointers sends the walk into
// data, and what follows is noise.
func (s *Session) prepareStack(ev *event.Event) {
	p := s.symProcess(ev.PID)
	if p == nil {
		return
	}
	if len(ev.Copy) > 0 {
		// Code without frame pointers (CPython, PyTorch) ends the BPF walk
		// early: unwind the stack copy with .eh_frame instead.
		if pcs := s.unwind.Unwind(p, unwind.Regs(ev.Regs), ev.Copy, event.MaxStack); len(pcs) > ev.NStack {
			ev.NStack = copy(ev.Stack[:], pcs)
		}
	}
	maps := p.Mappings()
	n := 0
	refreshed := false
	for n < ev.NStack {
		if executable(maps, ev.Stack[n]) {
			n++
			continue
		}
		if refreshed || p.Refresh() != nil {
			break
		}
		// A library loaded since the last look may hold the frame.
		refreshed, maps = true, p.Mappings()
	}
	ev.NStack = n
}

func executable(maps []objfile.Mapping, addr uint64) bool {
	for i := range maps {
		if maps[i].Contains(addr) {
			return maps[i].Exec()
		}
	}
	return false
}

// symProcess returns the symbolizer of a live target, nil if unknown.
func (s *Session) symProcess(pid uint32) *symbolize.Process {
	s.mu.Lock()
	t := s.targets[int(pid)]
	s.mu.Unlock()
	if t == nil {
		return nil
	}
	t.symMu.Lock()
	defer t.symMu.Unlock()
	if t.symbolize == nil {
		p, err := symbolize.NewProcess(int(pid), s.cache)
		if err != nil {
			return nil
		}
		t.symbolize = p
	}
	return t.symbolize
}

// symbolizeAddr resolves an address of a live process; it refreshes the
// process's mappings once when the address falls outside every known one
// (a library loaded since the last look).
func (s *Session) symbolizeAddr(pid uint32, addr uint64) symbolize.Frame {
	p := s.symProcess(pid)
	if p == nil {
		return symbolize.Frame{Addr: addr}
	}
	f := p.Symbolize(addr)
	if f.Raw == "" && f.Object == "" {
		if p.Refresh() == nil {
			f = p.Symbolize(addr)
		}
	}
	return f
}
