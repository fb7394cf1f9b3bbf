package targets

import (
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/objfile"
)

// A Note is a fact the targets learnt outside the ring buffer that the
// session must pass on: the model must see a hold or pinned memory in
// order with the events, so the session's reader drains the notes (Notes)
// before each record it handles.
type Note struct {
	Kind       NoteKind
	PID, TID   uint32
	Start, End uint64 // Hold: [Start, End); Pinned: Start and size
}

// NoteKind says what a Note tells.
type NoteKind uint8

const (
	// Hold: thread TID of PID was held at a library load while cudatap
	// hooked it, from Start to End: cudatap's time, not the call's.
	Hold NoteKind = iota + 1
	// Pinned: PID had pinned host memory [Start, Start+End) when cudatap
	// attached.
	Pinned
	// AttachedLate: PID ran before cudatap attached; what it set up
	// before is unknown.
	AttachedLate
	// Adopted: the shared probes took in PID, running with a CUDA
	// runtime or driver before cudatap found it (and not launched by it).
	Adopted
)

// outbox holds the notes not drained yet.
type outbox struct {
	mu     sync.Mutex
	queued atomic.Bool // a cheap look for the reader, before each record
	notes  []Note
}

// note queues n (any goroutine).
func (s *Set) note(n Note) {
	o := &s.out
	o.mu.Lock()
	o.notes = append(o.notes, n)
	o.mu.Unlock()
	o.queued.Store(true)
}

// Notes returns the notes queued since the last call, in order (nil
// when none, cheaply: the reader asks before every record).
func (s *Set) Notes() []Note {
	o := &s.out
	if !o.queued.Load() {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	ns := o.notes
	o.notes = nil
	o.queued.Store(false)
	return ns
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
func (s *Set) recoverPinned(pid int) {
	maps, err := objfile.ReadMaps(pid)
	if err != nil {
		return
	}
	for _, m := range maps {
		if m.Deleted && m.Path == "/dev/zero" && strings.HasPrefix(m.Perms, "rw") && strings.HasSuffix(m.Perms, "s") {
			s.note(Note{Kind: Pinned, PID: uint32(pid), Start: m.Start, End: m.End - m.Start})
		}
	}
}
