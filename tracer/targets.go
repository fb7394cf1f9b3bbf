package tracer

// Targets: finding the CUDA libraries of each traced process, attaching
// and detaching its probes, following library loads and exits.

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/symbolize/python"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/probe"
	"golang.org/x/sys/unix"
)

type target struct {
	pid      int
	attached map[string]*probe.Attachment // by library key and layer
	shared   map[string]*probe.Attachment // shared probes of the files it maps (not its own: never closed with it)
	// driverReady: shared probes wait on a driver the process has not
	// loaded yet (see prehookDriver).
	driverReady bool
	policy      map[string]policy // what each attachment hooks
	// The runtime's launch probes: they count launches until libcuda is
	// hooked and name CUfunctions created before cudatap attached.
	rtLaunch      *probe.Attachment
	rtLaunchUntil time.Time // when to close rtLaunch at the latest; zero = not scheduled
	// When the naming window began, on the trace clock.
	rtLaunchFromMono uint64
	rtLaunchDone     bool
	pairingHeld      time.Time           // the probes closed then, the stub hand-over not yet (releasePairings)
	pyMu             sync.Mutex          // guards py and pyTried (reader goroutine and control loop)
	py               *python.Interpreter // nil until a CPython runtime is found
	pyTried          bool                // detection gave a final answer
	pyResolved       bool                // some Python frame was named (reader goroutine only)
	layers           uint8               // bit per event.Layer seen in the process
	loader           *probe.Attachment
	stopOnLd         bool
	recovered        bool // what existed before the attach was looked for
	detached         bool // its probes were handed over for closing
	mapsHash         uint64
	exited           bool
	symMu            sync.Mutex         // guards symbolize (reader goroutine and control loop)
	symbolize        *symbolize.Process // the process's mappings, from when it was first needed
}

// attachProcess discovers and hooks the CUDA libraries of pid. With
// required, a process without CUDA is an error (unless WaitForCUDA).
func (s *Session) attachProcess(pid int, stopOnLoad, required bool) error {
	d, err := probe.Discover(pid, s.cache, nil)
	if err != nil {
		return err
	}
	if s.sharedProbes() {
		return s.adopt(pid, d)
	}
	s.mu.Lock()
	t := s.targets[pid]
	if t == nil {
		// A process asked for that has no CUDA yet (--wait-for-cuda) is held
		// at each library load until what it loaded is hooked, like a
		// launched one, so its first CUDA calls are not missed.
		stop := stopOnLoad || (required && len(d.Libraries) == 0 && s.cfg.WaitForCUDA)
		t = &target{pid: pid, attached: map[string]*probe.Attachment{}, policy: map[string]policy{}, stopOnLd: stop}
		s.targets[pid] = t
	}
	s.mu.Unlock()
	if d.LdSo != nil && t.loader == nil {
		if t.stopOnLd {
			s.guard.Hold(pid) // before the hook can stop it
		}
		a, err := s.tr.AttachLoader(pid, d.LdSo, t.stopOnLd, probe.AllProcesses)
		if err != nil {
			s.attachFailed(err)
			s.log.Warn("cannot watch library loads; new CUDA libraries are found by the once-a-second sweep", "pid", pid, "err", err)
		} else {
			t.loader = a
		}
	}
	if len(d.Libraries) == 0 && required && !s.cfg.WaitForCUDA && len(s.cfg.Command) == 0 {
		return d.NoCUDAError()
	}
	// Which layer hooks what depends on every layer the process maps.
	for _, lib := range d.Libraries {
		t.layers |= 1 << lib.Layer
	}
	for i := range d.Libraries {
		lib := &d.Libraries[i]
		key := lib.Key() + lib.Layer.String()
		pol := policyFor(lib.Layer, t.layers)
		if old, ok := t.attached[key]; ok {
			if t.policy[key] == pol {
				continue
			}
			// A layer appeared (cudart loads libcuda lazily): hook anew.
			old.Close()
			s.mu.Lock()
			delete(t.attached, key)
			s.mu.Unlock()
		}
		a, err := s.tr.Attach(pid, lib, pol.want)
		if err != nil {
			if errors.Is(err, probe.ErrNoProcess) {
				// Exited while we attached: trace what was seen, and
				// release the probes already attached (markExited skips
				// a target already marked).
				s.mu.Lock()
				t.exited = true
				t.closeProbes(s.tr)
				s.mu.Unlock()
				return nil
			}
			return err
		}
		s.log.Info("attached", "pid", pid, "library", lib.Path, "layer", lib.Layer.String(), "symbols", len(a.Hooked), "missing", len(a.Missing))
		s.mu.Lock()
		t.attached[key] = a
		t.policy[key] = pol
		s.mu.Unlock()
	}
	s.runtimeLaunches(t, d, t.stopOnLd)
	s.detectPython(t)
	if required && !t.stopOnLd && !t.recovered {
		// A running process: what it set up before cudatap came.
		t.recovered = true
		s.queueNote(note{kind: noteAttachedLate, pid: uint32(pid)})
		s.recoverPinned(pid)
	}
	t.mapsHash = mapsHash(pid)
	// Its mappings now, while it lives: a short-lived process may be gone
	// by the time the reader names its kernels.
	s.symProcess(uint32(pid))
	return nil
}

// detectPython finds the CPython interpreter of a target and hands its
// layout to the BPF side, so blocking calls carry their Python lines.
func (s *Session) detectPython(t *target) {
	t.pyMu.Lock()
	defer t.pyMu.Unlock()
	if t.pyTried || (t.py != nil && t.py.Started()) {
		return
	}
	cfg, in, err := python.DetectCache(t.pid, s.cache)
	switch {
	case err == nil:
		s.log.Debug("python detected", "pid", t.pid, "started", in.Started(), "config", fmt.Sprintf("%+v", *cfg))
		if err := s.tr.SetPython(t.pid, cfg); err != nil {
			s.log.Warn("Python frames unavailable", "pid", t.pid, "err", err)
		}
		// An interpreter found before it started (a launched python) is
		// looked at again once it runs: its layout is checked then.
		t.py = in
		if in.Started() {
			s.log.Info("Python frames", "pid", t.pid, "python", in.Version(), "interpreter", in.Path())
		}
	case errors.Is(err, python.ErrNotPython):
		// Not (yet) Python: a launched interpreter maps libpython later.
	case !procfs.Alive(t.pid):
		t.pyTried = true // exited meanwhile: nothing to say
	default:
		t.pyTried = true
		s.log.Warn("Python frames unavailable, native stacks only", "pid", t.pid, "err", err)
	}
}

// runtimeLaunches manages the runtime's launch probes of a target (see
// probe.AttachRuntimeLaunches). They are attached while the process has a
// runtime and no hooked driver (launches are counted there meanwhile), and
// after attaching to a running process for NameWindow (kernel names). Once
// the driver is hooked they go: at once in a process cudatap launched (it is
// stopped at the library load, and every kernel load is seen), after the
// window otherwise.
func (s *Session) runtimeLaunches(t *target, d *probe.Discovery, launched bool) {
	hasRT := t.layers&(1<<event.Runtime) != 0
	hasDrv := t.layers&(1<<event.Driver) != 0
	window := s.cfg.NameWindow
	if window == 0 {
		window = 5 * time.Second
	}
	if hasRT && t.rtLaunch == nil && !t.rtLaunchDone && (!hasDrv || (!launched && window > 0)) {
		for i := range d.Libraries {
			if d.Libraries[i].Layer != event.Runtime {
				continue
			}
			// Driver probes must start handing stubs over before the
			// runtime probes count on it.
			s.tr.PairingStart()
			a, err := s.tr.AttachRuntimeLaunches(t.pid, &d.Libraries[i])
			if err != nil {
				s.tr.PairingStop()
				s.attachFailed(err)
				s.log.Warn("cannot probe runtime launches", "pid", t.pid, "err", err)
				break
			}
			s.mu.Lock()
			t.rtLaunch = a
			s.mu.Unlock()
			break
		}
	}
	if t.rtLaunch == nil || !hasDrv || !t.rtLaunchUntil.IsZero() {
		return
	}
	if launched || window < 0 {
		s.mu.Lock()
		t.closeRuntimeLaunches(s.tr)
		s.mu.Unlock()
		return
	}
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	s.mu.Lock()
	t.rtLaunchFromMono = uint64(ts.Nano())
	t.rtLaunchUntil = time.Now().Add(window)
	s.mu.Unlock()
}

// attachFailed counts a failed attach, unless the process was simply gone.
func (s *Session) attachFailed(err error) {
	if !errors.Is(err, probe.ErrNoProcess) {
		s.attachFails.Add(1)
	}
}

// maxRescans bounds the processes waiting for a rescan; more distinct
// processes loading libraries at once than this are left to the
// once-a-second sweep, and counted.
const maxRescans = 1 << 16

// rescan is a library load waiting for the control loop.
type rescan struct {
	held bool   // the process is stopped at the load until the rescan
	tid  uint32 // the thread that loaded, and when: the hold's start
	at   uint64
}

// queueRescan asks the control loop to look at pid again (a library was
// loaded by thread tid at time at); held says the process is stopped at
// the load until then.
func (s *Session) queueRescan(pid int, r rescan) {
	s.rescanMu.Lock()
	old, queued := s.rescans[pid]
	if !queued && len(s.rescans) >= maxRescans {
		s.rescanMu.Unlock()
		s.attachFails.Add(1)
		if r.held {
			syscall.Kill(pid, syscall.SIGCONT)
		}
		return
	}
	if queued && old.held && !r.held {
		r = old // the earlier load is the one holding the process
	}
	s.rescans[pid] = r
	s.rescanMu.Unlock()
	select {
	case s.rescanWake <- struct{}{}:
	default: // a wake-up is pending: it takes this one too
	}
}

// takeRescans returns and clears the processes waiting for a rescan.
func (s *Session) takeRescans() map[int]rescan {
	s.rescanMu.Lock()
	defer s.rescanMu.Unlock()
	out := s.rescans
	s.rescans = make(map[int]rescan, len(out))
	return out
}

// handleRescan reacts to the dynamic linker hook. A process held at the
// load is continued once its new libraries are hooked, and the hold is
// noted: its time is cudatap's, not the call's that loaded the library.
func (s *Session) handleRescan(pid int, r rescan) {
	s.mu.Lock()
	t := s.targets[pid]
	s.mu.Unlock()
	if (t == nil || t.exited) && s.following() && s.inTree(pid) {
		// A process of the tree that maps no CUDA yet (a program it just
		// executed, a library it just loaded): hooked if it does now,
		// before it goes on.
		s.consider(pid)
		if r.held {
			syscall.Kill(pid, syscall.SIGCONT)
			if r.at != 0 {
				s.queueNote(note{kind: noteHold, pid: uint32(pid), tid: r.tid, start: r.at, end: monoNow()})
			}
		}
		return
	}
	if t == nil || t.exited {
		if r.held {
			syscall.Kill(pid, syscall.SIGCONT)
		}
		return
	}
	start := time.Now()
	if err := s.attachProcess(pid, t.stopOnLd, false); err != nil {
		s.attachFailed(err)
		if errors.Is(err, probe.ErrNoProcess) {
			// Gone since the load: short-lived processes do that.
			s.log.Debug("rescan after library load: the process exited", "pid", pid)
		} else {
			s.log.Warn("rescan after library load failed", "pid", pid, "err", err)
		}
	}
	s.log.Debug("rescan", "pid", pid, "took", time.Since(start))
	if t.stopOnLd || r.held {
		syscall.Kill(pid, syscall.SIGCONT)
		if r.held && r.at != 0 {
			s.queueNote(note{kind: noteHold, pid: uint32(pid), tid: r.tid, start: r.at, end: monoNow()})
		}
	}
}

// sweep rescans targets whose memory map changed: a backstop for loads the
// linker hook cannot see (a process without ld.so, a missed record).
func (s *Session) sweep() {
	for _, pid := range s.livePIDs() {
		s.mu.Lock()
		t := s.targets[pid]
		s.mu.Unlock()
		if h := mapsHash(pid); h != 0 && h != t.mapsHash {
			if err := s.attachProcess(pid, t.stopOnLd, false); err != nil {
				s.log.Debug("sweep", "pid", pid, "err", err)
			}
		}
	}
}

func mapsHash(pid int) uint64 {
	b, err := procfs.Maps(pid)
	if err != nil {
		return 0
	}
	return hashMaps(b)
}

// hashMaps hashes a memory map's text (never 0: 0 means gone).
func hashMaps(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return max(h.Sum64(), 1)
}

func (s *Session) livePIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pids []int
	for pid, t := range s.targets {
		if !t.exited {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids
}

func (s *Session) markExited(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.targets[pid]; t != nil && !t.exited {
		t.exited = true
		s.tr.ForgetPython(pid)
		s.tr.ForgetProcess(pid)
		// The probes die with the process's memory; release the links, off
		// the control loop.
		s.closer.add(t.detach(s.tr)...)
		if t.stopOnLd {
			s.guard.Free(pid)
		}
		if s.cfg.GPUTimes {
			s.gpuTimesExited(pid)
		}
	}
}

func (s *Session) allExited() bool {
	return len(s.livePIDs()) == 0 && !(s.following() && s.treeLives())
}

// closeAll detaches every probe. A target held at a library load right
// now (its rescan not handled yet) is continued: with the hook gone,
// nothing else would. The links are closed outside the session lock: that
// takes the kernel milliseconds per link (seconds on the per-symbol path),
// and the reader, which names processes under that lock, must keep
// draining the ring buffer meanwhile.
func (s *Session) closeAll() {
	s.closer.wait()
	var work []func()
	held := map[int]bool{}
	s.mu.Lock()
	for pid, t := range s.targets {
		work = append(work, t.detach(s.tr)...)
		if t.stopOnLd && !t.exited {
			held[pid] = true
		}
	}
	s.mu.Unlock()
	for _, f := range work {
		f()
	}
	for pid := range held {
		syscall.Kill(pid, syscall.SIGCONT)
		s.guard.Free(pid)
	}
}

// python is the target's interpreter, nil if none was found.
func (t *target) python() *python.Interpreter {
	if t == nil {
		return nil
	}
	t.pyMu.Lock()
	defer t.pyMu.Unlock()
	return t.py
}

func (t *target) summary() Attached {
	at := Attached{PID: t.pid}
	for _, set := range []map[string]*probe.Attachment{t.attached, t.shared} {
		for _, a := range set {
			at.Libraries = append(at.Libraries, a.Library)
			at.Hooked += len(a.Hooked)
			at.Missing = append(at.Missing, a.Missing...)
		}
	}
	sort.Slice(at.Libraries, func(i, j int) bool { return at.Libraries[i].Path < at.Libraries[j].Path })
	sort.Strings(at.Missing)
	return at
}

// closeRuntimeLaunches closes the runtime's launch probes. The stub
// hand-over stays on (PairingStop) until no thread of the process has a
// runtime launch in flight that was counted itself: a launch inside which
// the runtime loaded the driver (a program's first CUDA call) was counted
// by the runtime probe, and the driver probe underneath, hooked meanwhile,
// must stay silent for it (releasePairings).
func (t *target) closeRuntimeLaunches(tr *probe.Tracer) {
	t.rtLaunch.Close()
	t.rtLaunch, t.rtLaunchDone = nil, true
	t.pairingHeld = time.Now()
}

// maxPairingHeld bounds how long the hand-over waits for a launch in
// flight (one whose driver call never came leaves its stub for ever).
const maxPairingHeld = 10 * time.Second

// releasePairings ends the stub hand-over of targets whose runtime launch
// probes are closed and that have no counted launch in flight any more.
func (s *Session) releasePairings() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.targets {
		if t.pairingHeld.IsZero() {
			continue
		}
		if t.exited || time.Since(t.pairingHeld) > maxPairingHeld || !s.tr.StubPending(procfs.TIDs(t.pid)) {
			t.pairingHeld = time.Time{}
			s.tr.PairingStop()
		}
	}
}

// detach hands over the target's probes for closing, once: the returned
// work closes them (the runtime launch probes before the stub hand-over
// stops, as closeRuntimeLaunches does).
func (t *target) detach(tr *probe.Tracer) []func() {
	if t.detached {
		return nil
	}
	t.detached = true
	var work []func()
	for _, a := range t.attached {
		work = append(work, func() { a.Close() })
	}
	if l := t.loader; l != nil {
		work = append(work, func() { l.Close() })
	}
	if rt := t.rtLaunch; rt != nil {
		t.rtLaunch, t.rtLaunchDone = nil, true
		work = append(work, func() { rt.Close(); tr.PairingStop() })
	}
	if !t.pairingHeld.IsZero() {
		t.pairingHeld = time.Time{}
		work = append(work, tr.PairingStop)
	}
	return work
}

// closeProbes closes the target's probes now.
func (t *target) closeProbes(tr *probe.Tracer) {
	for _, f := range t.detach(tr) {
		f()
	}
}

func (s *Session) attachedSummary() []Attached {
	out := append([]Attached(nil), s.finished...)
	for _, t := range s.targets {
		out = append(out, t.summary())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// threadAlive is procfs.ThreadAlive for a thread id as BPF reports it (the
// entry table's keys).
func threadAlive(tid uint32) bool { return procfs.ThreadAlive(int(tid)) }
