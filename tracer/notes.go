package tracer

import (
	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/tracer/targets"
)

// A note is a request from the control loop that the reader carries out
// in order with the records, before the next record it handles: a cut, or
// a flush of the recording. The targets' own notes (a hold ended, pinned
// memory found at attach, ...) come from their outbox, drained at the
// same place (applyNotes).
type note struct {
	kind noteKind
	at   uint64 // cut: when
}

type noteKind uint8

const (
	noteCut   noteKind = iota + 1 // cut.go: retire the exited, hand the interval to the Observer
	noteFlush                     // hand the recording's buffer to its file: a killed cudatap leaves it readable to here
)

// queueNote hands n to the reader.
func (s *Session) queueNote(n note) {
	s.notesMu.Lock()
	s.notes = append(s.notes, n)
	s.notesMu.Unlock()
	s.notesQueued.Store(true)
}

// applyNotes runs on the reader goroutine (or after it ended): the GPU
// times measured, what the targets noted, then the control loop's
// requests.
func (s *Session) applyNotes() {
	var ns []note
	if s.notesQueued.Load() {
		s.notesMu.Lock()
		var gs []gpuNote
		ns, gs = s.notes, s.gpuNotes
		s.notes, s.gpuNotes = nil, nil
		s.notesQueued.Store(false)
		s.notesMu.Unlock()
		if len(gs) > 0 {
			s.applyGPUNotes(gs)
		}
	}
	for _, n := range s.targets.Notes() {
		s.applyTargetNote(n)
	}
	s.applyRequests(ns)
}

// applyTargetNote hands a target's note to the model and the recording.
func (s *Session) applyTargetNote(n targets.Note) {
	if n.Kind == targets.Adopted {
		// Found running under --all/--container: GPU times come by
		// ptrace (a launched tree's from its environment).
		if s.cfg.GPUTimes {
			s.gpuTimesAdopted(int(n.PID))
		}
		return
	}
	s.modelMu.Lock()
	switch n.Kind {
	case targets.Hold:
		s.model.AddHold(n.PID, n.TID, n.Start, n.End)
	case targets.Pinned:
		s.model.AddPinned(n.PID, n.Start, n.End)
	case targets.AttachedLate:
		s.model.AttachedLate(n.PID)
	}
	s.modelMu.Unlock()
	if n.Kind == targets.AttachedLate {
		// Kernels it loaded before: their handles, while it lives.
		s.resolver.PrefetchHandles(n.PID)
	}
	if s.rec != nil {
		switch n.Kind {
		case targets.Hold:
			s.rec.Hold(n.PID, n.TID, n.Start, n.End)
		case targets.Pinned:
			s.rec.Pinned(n.PID, n.Start, n.End)
		case targets.AttachedLate:
			s.rec.AttachedLate(n.PID)
		}
	}
}

// applyRequests carries out the control loop's requests.
func (s *Session) applyRequests(ns []note) {
	for _, n := range ns {
		switch n.kind {
		case noteCut:
			s.handCut(n.at)
		case noteFlush:
			if s.rec != nil {
				s.rec.Flush()
			}
		}
	}
}

// monoNow is CLOCK_MONOTONIC in ns, the clock of every event.
func monoNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
