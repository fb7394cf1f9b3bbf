package tracer

import (
	"slices"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/model"
)

// Cuts: a session that runs for ever (the agent's --continuous) hands out
// what it has every Config.Cut (Observer.Cut: the processes so far, for a profile
// per interval) and forgets the processes that exited, so that its memory
// follows the live processes rather than every process it ever saw.
//
// The cut runs on the reader goroutine (a note: in order with the records).
// A process of the model found gone is retired at the next cut, not at
// once: its last records may still wait in the ring buffer. Retiring
// concludes it in the model (what it had pending goes to the sinks), the
// cut includes it one last time, and then its names are dropped. Every
// process the model saw counts, also one the shared probes traced that
// was gone before discovery made it a target.

// cut asks the reader for a cut (control loop).
func (s *Session) cut() { s.queueNote(note{kind: noteCut, at: monoNow()}) }

// handCut retires the processes found gone at the cut before, gives the Observer
// the processes of the interval that ends at now, named, and forgets the
// names of the retired (reader goroutine).
func (s *Session) handCut(now uint64) {
	s.modelMu.Lock()
	var retired []*model.Process
	gone := map[uint32]bool{}
	for _, pid := range s.model.PIDs() {
		if procfs.Alive(int(pid)) {
			continue
		}
		if !s.goneAtCut[pid] {
			gone[pid] = true // retired at the next cut
		} else if p := s.model.Retire(pid); p != nil {
			retired = append(retired, p)
		}
	}
	s.goneAtCut = gone
	r := s.model.Interim()
	r.Processes = append(r.Processes, retired...)
	slices.SortFunc(r.Processes, func(a, b *model.Process) int { return int(a.PID) - int(b.PID) })
	r.Start, r.End = max(r.Start, s.lastCut), now
	r.WallOffsetNs = WallOffset()
	r.Name(s.resolver.Names())
	s.obs.Cut(r)
	s.modelMu.Unlock()
	s.lastCut = now
	if out := s.obs.Resample(); out != nil {
		if err := s.targets.SampleOut(out); err != nil {
			s.log.Warn("per-process sampling: every process is traced in this interval", "err", err)
			s.targets.SampleOut(nil)
		}
	}
	if len(retired) > 0 {
		pids := make(map[uint32]bool, len(retired))
		for _, p := range retired {
			pids[p.PID] = true
		}
		s.resolver.Forget(pids)
	}
}
