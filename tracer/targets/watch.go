package targets

import (
	"os"
	"strings"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/probe"
)

// Watch mode (--all, --container): targets are found, not given. Every
// process that matches is hooked once it maps a CUDA library: at start, on
// a library load seen by a host-wide hook on each dynamic linker, and by a
// once-a-second sweep of /proc as a backstop (static executables).

func (s *Set) watching() bool { return s.cfg.All || s.cfg.Container != "" }

// Watching reports whether targets are found rather than given.
func (s *Set) Watching() bool { return s.watching() }

// matches reports whether pid belongs to the watched set.
func (s *Set) matches(pid int) bool {
	if pid == os.Getpid() {
		return false
	}
	if s.following() {
		return s.inTree(pid)
	}
	if s.cfg.Container == "" {
		return true
	}
	cgroup, err := procfs.Cgroup(pid)
	if err != nil {
		return false
	}
	return CgroupMatches(cgroup, s.cfg.Container)
}

// CgroupMatches reports whether a /proc/PID/cgroup text belongs to the
// container: by container id prefix, or else by a cgroup path component.
func CgroupMatches(cgroup, container string) bool {
	if id, _ := procfs.ContainerFromCgroup(cgroup); id != "" && strings.HasPrefix(id, container) {
		return true
	}
	for _, line := range strings.Split(cgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, seg := range strings.Split(parts[2], "/") {
			if seg == container || strings.TrimSuffix(seg, ".scope") == container {
				return true
			}
		}
	}
	return false
}

// maxPlain bounds the set of files known to hold no CUDA.
const maxPlain = 1 << 16

// fullSweepEvery is how many sweeps pass between two that read the memory
// map of every process: the others look only at processes not seen
// before. Library loads in a process already seen reach cudatap through
// its dynamic linker's hook; the full sweep is the safety net (a loader
// cudatap could not hook), and reading every map each second was most of
// an idle agent's CPU (1.5% of a core on the CI VM).
const fullSweepEvery = 10

// Discover, watching, hooks every matching process that maps CUDA now and
// watches library loads in all of them.
func (s *Set) Discover() {
	if s.watching() {
		s.discoverAll()
	}
}

func (s *Set) discoverAll() {
	pids, err := procfs.PIDs()
	if err != nil {
		return // no /proc to sweep: forget nothing
	}
	s.sweeps++
	full := s.sweeps%fullSweepEvery == 1
	live := make(map[int]bool, len(pids))
	for _, pid := range pids {
		live[pid] = true
		if _, seen := s.seenMaps[pid]; seen && !full {
			continue
		}
		s.consider(pid)
	}
	// Keep state bounded: forget processes that are gone.
	for pid := range s.seenMaps {
		if !live[pid] {
			delete(s.seenMaps, pid)
		}
	}
	s.forgetExited(live)
}

// consider looks at a process not traced yet: watch its dynamic linker,
// and hook it if it maps CUDA.
func (s *Set) consider(pid int) {
	s.mu.Lock()
	t := s.targets[pid]
	s.mu.Unlock()
	if t != nil && !t.exited {
		return
	}
	if !s.matches(pid) {
		return
	}
	s.mu.Lock()
	out := sampledOut(s.sampled, pid)
	s.mu.Unlock()
	if out {
		s.seenMaps[pid] = 1 // looked at: not again each second
		return
	}
	maps, err := procfs.Maps(pid)
	if err != nil {
		return // gone
	}
	h := hashMaps(maps)
	if s.seenMaps[pid] == h {
		return // unchanged since we last looked
	}
	s.seenMaps[pid] = h
	d, err := probe.DiscoverMaps(pid, maps, s.cache, func(key string) bool { return s.plain[key] })
	if err != nil {
		return
	}
	for _, key := range d.Plain {
		if len(s.plain) < maxPlain {
			s.plain[key] = true
		}
	}
	if d.LdSo != nil {
		s.watchLoader(d.LdSo)
	}
	if !d.HasCUDA() {
		return
	}
	if t != nil && t.exited {
		// PID reuse: a new process under an old number.
		s.mu.Lock()
		delete(s.targets, pid)
		s.mu.Unlock()
	}
	if err := s.attachProcess(pid, false, false); err != nil {
		s.attachFailed(err)
		s.log.Warn("cannot trace", "pid", pid, "err", err)
		return
	}
}

// watchLoader hooks a dynamic linker host-wide (once per file): every
// library load in every process using it reaches the rescan channel.
func (s *Set) watchLoader(ldso *probe.Library) {
	key := ldso.Key()
	if _, ok := s.loaders[key]; ok {
		return
	}
	// A followed tree's processes stop at each load until it is hooked,
	// as a launched command does; a watched host's are looked at after.
	a, err := s.tr.AttachLoader(0, ldso, s.following(), s.probeFilter())
	if err != nil {
		s.attachFailed(err)
		s.log.Warn("cannot watch library loads; relying on the /proc sweep", "loader", ldso.Path, "err", err)
		s.loaders[key] = nil
		return
	}
	s.loaders[key] = a
}

func (s *Set) closeLoaders() {
	for _, a := range s.loaders {
		if a != nil {
			a.Close()
		}
	}
}

// forgetExited drops exited targets that are no longer in /proc; their
// calls stay in the model (with Config.Cut, until a cut retires them).
func (s *Set) forgetExited(live map[int]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, t := range s.targets {
		if t.exited && !live[pid] {
			if !s.cfg.Cut { // with cuts, the session forgets it
				s.finished = append(s.finished, t.summary())
			}
			delete(s.targets, pid)
		}
	}
}

// SampleOut keeps the processes of out (PID → start time,
// procfs.ProcessStat.StartTicks) out of the shared probes from now on, and
// lets the ones sampled out before, not in out, back in. Safe from any
// goroutine.
func (s *Set) SampleOut(out map[int]uint64) error {
	s.mu.Lock()
	before := s.sampled
	s.sampled = out
	s.mu.Unlock()
	for pid := range before {
		if _, still := out[pid]; !still {
			if err := s.tr.SampleIn(pid); err != nil {
				return err
			}
		}
	}
	for pid := range out {
		if sampledOut(out, pid) {
			if err := s.tr.SampleOut(pid); err != nil {
				return err
			}
		}
	}
	return nil
}

// sampledOut reports whether pid is the process the sampling left out
// (the same start time: not a new process under its PID).
func sampledOut(out map[int]uint64, pid int) bool {
	start, ok := out[pid]
	if !ok {
		return false
	}
	st, err := procfs.Stat(pid)
	return err == nil && st.StartTicks == start
}
