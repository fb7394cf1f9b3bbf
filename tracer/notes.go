package tracer

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/objfile"
)

// A note is a fact the control loop learnt outside the ring buffer (a
// hold ended, pinned memory found at attach) that the model must see in
// order with the events: the control loop queues it, the reader applies
// and records it before the next record it handles.
type note struct {
	kind       noteKind
	pid, tid   uint32
	start, end uint64 // hold: [start, end); pinned: start and size
}

type noteKind uint8

const (
	noteHold noteKind = iota + 1
	notePinned
	noteAttachedLate
	noteCut   // cut.go: retire the exited, hand the interval to the Observer (start: now)
	noteFlush // hand the recording's buffer to its file: a killed cudatap leaves it readable to here
)

// queueNote hands n to the reader.
func (s *Session) queueNote(n note) {
	s.notesMu.Lock()
	s.notes = append(s.notes, n)
	s.notesMu.Unlock()
	s.notesQueued.Store(true)
}

// applyNotes runs on the reader goroutine (or after it ended).
func (s *Session) applyNotes() {
	if !s.notesQueued.Load() {
		return
	}
	s.notesMu.Lock()
	ns, gs := s.notes, s.gpuNotes
	s.notes, s.gpuNotes = nil, nil
	s.notesQueued.Store(false)
	s.notesMu.Unlock()
	if len(gs) > 0 {
		s.applyGPUNotes(gs)
	}
	for _, n := range ns {
		switch n.kind {
		case noteCut:
			s.handCut(n.start)
			continue
		case noteFlush:
			if s.rec != nil {
				s.rec.Flush()
			}
			continue
		}
		s.modelMu.Lock()
		switch n.kind {
		case noteHold:
			s.model.AddHold(n.pid, n.tid, n.start, n.end)
		case notePinned:
			s.model.AddPinned(n.pid, n.start, n.end)
		case noteAttachedLate:
			s.model.AttachedLate(n.pid)
		}
		s.modelMu.Unlock()
		if n.kind == noteAttachedLate {
			// Kernels it loaded before: their handles, while it lives.
			s.names.prefetchHandles(n.pid)
		}
		if s.rec != nil {
			switch n.kind {
			case noteHold:
				s.rec.Hold(n.pid, n.tid, n.start, n.end)
			case notePinned:
				s.rec.Pinned(n.pid, n.start, n.end)
			case noteAttachedLate:
				s.rec.AttachedLate(n.pid)
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

// recoverPinned notes the pinned host memory a process already had when
// cudatap attached: the CUDA driver maps it as shared anonymous memory
// ("/dev/zero (deleted)", rw-s in /proc/PID/maps; seen on the H200 with
// PyTorch's pin_memory() and cudaHostAlloc), which ordinary allocations
// never are. Memory pinned in place with cudaHostRegister before the attach
// cannot be told apart from any other and stays unknown.
func (s *Session) recoverPinned(pid int) {
	maps, err := objfile.ReadMaps(pid)
	if err != nil {
		return
	}
	for _, m := range maps {
		if m.Deleted && m.Path == "/dev/zero" && strings.HasPrefix(m.Perms, "rw") && strings.HasSuffix(m.Perms, "s") {
			s.queueNote(note{kind: notePinned, pid: uint32(pid), start: m.Start, end: m.End - m.Start})
		}
	}
}
