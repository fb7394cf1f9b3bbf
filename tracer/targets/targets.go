// Package targets finds the processes a session traces and keeps their
// probes: discovery of their CUDA libraries, attach and detach, the shared
// probes of --all and --container, the watch for new processes, rescans
// after library loads, and the followed process tree. It runs on the
// session's control loop; what it learns that the session must pass on (a
// hold ended, pinned memory found at attach, a process adopted) it queues
// as typed Notes, which the session's reader drains in order with the
// records. The resolver asks it
// about live processes through the methods in lookup.go.
//
// Files: targets.go attach and detach of one process, watch.go the watch
// (--all, --container), shared.go the shared probes, follow.go the tree,
// window.go the naming window, notes.go the outbox.
package targets

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/symbolize/python"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/guard"
	"github.com/cudatap/cudatap/tracer/probe"
)

// Config says which processes are targets and how they are hooked.
type Config struct {
	All       bool   // every process on the host that maps CUDA, now or later
	Container string // every process of this container, now or later
	// Follow: the launched command or the given processes, and every
	// process they start (follow.go).
	Follow bool
	// Launching: cudatap launches a command, held at each library load
	// from its first instruction.
	Launching   bool
	WaitForCUDA bool // a process asked for without CUDA yet is watched instead of refused
	// NameWindow is how long, after attaching to a running process, runtime
	// launches are also probed to name kernels loaded before cudatap came.
	// 0 = 5 s; negative = never.
	NameWindow time.Duration
	// AggregateLaunches counts launches in BPF maps (shared probes only);
	// LaunchTimes also times them.
	AggregateLaunches, LaunchTimes bool
	// AggregateWithoutStream counts aggregated launches per process and
	// API only, without the stream read: to measure what that read costs.
	AggregateWithoutStream bool
	// Cut: the session retires exited processes itself, so the summary of
	// targets forgotten after they exited is not kept.
	Cut bool
	// SkipNVTX: no NVTX library is hooked (the agent: its metrics and
	// profiles draw no ranges, and each range costs two traps).
	SkipNVTX bool
}

// Attached describes the probes of one process.
type Attached struct {
	PID       int
	Libraries []probe.Library
	Hooked    int
	Missing   []string
}

// Set is the session's targets and every probe attached for them.
type Set struct {
	cfg    Config
	log    *slog.Logger
	tr     *probe.Tracer
	cache  *objfile.Cache
	guard  *guard.Guardian // continues held targets if cudatap dies (nil: nothing is held)
	closer *closer         // closes the probes of exited processes off the control loop

	mu      sync.Mutex // guards targets, sampled, shared and the fields of each target
	targets map[int]*target
	// Library loads reported by the reader, coalesced per process for the
	// control loop (a set, so a burst of loads cannot overflow it).
	rescanMu   sync.Mutex
	rescans    map[int]Rescan
	rescanWake chan struct{}
	out        outbox // notes for the session (notes.go)

	attachFails atomic.Uint64 // probe sets that could not be attached (shown as "attach failures")
	finished    []Attached    // targets forgotten after they exited (not kept with Config.Cut)
	// The processes sampled out now (SetSampledOut), guarded by mu.
	sampled map[int]uint64

	// Watch mode (control loop only).
	loaders  map[string]*probe.Attachment // host-wide dynamic-linker hooks, by file
	seenMaps map[int]uint64               // maps hash of processes looked at
	sweeps   int                          // discoverAll calls, for the full sweep
	plain    map[string]bool              // files ("dev:inode") that hold no CUDA layer
	// Shared probes (see shared.go): by library key and layer, guarded by
	// mu; the cgroups the BPF side counts (control loop only); live is set
	// once the processes running at the start are attached.
	shared  map[string]*probe.Attachment
	cgroups map[uint64]bool
	cgroup2 string // where the cgroup v2 hierarchy is mounted, "" if nowhere
	live    bool
	// The followed tree (follow.go), and the command cudatap launched
	// (traced from its start: nothing to recover).
	treeMu   sync.Mutex
	tree     map[uint32]*treeProc
	treeLost uint64
	launched int
	// nvtxInjected: the launched tree's NVTX calls reach the session
	// through cudatap's injection library (NVTXInjected).
	nvtxInjected atomic.Bool
}

// New returns an empty set that attaches through tr. g continues held
// processes should cudatap die (nil when nothing is held); cache opens
// object files.
func New(cfg Config, tr *probe.Tracer, g *guard.Guardian, cache *objfile.Cache, log *slog.Logger) *Set {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Set{cfg: cfg, log: log, tr: tr, cache: cache, guard: g, closer: newCloser(),
		targets: map[int]*target{}, rescans: map[int]Rescan{}, rescanWake: make(chan struct{}, 1),
		loaders: map[string]*probe.Attachment{}, seenMaps: map[int]uint64{}, plain: map[string]bool{},
		shared: map[string]*probe.Attachment{}, cgroups: map[uint64]bool{}, cgroup2: procfs.Cgroup2Mount(),
		tree: map[uint32]*treeProc{}}
}

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

// Attach discovers and hooks the CUDA libraries of pid, a process asked
// for: one without CUDA is an error (unless WaitForCUDA).
func (s *Set) Attach(pid int) error { return s.attachProcess(pid, false, true) }

// attachProcess discovers and hooks the CUDA libraries of pid. With
// required, a process without CUDA is an error (unless WaitForCUDA).
func (s *Set) attachProcess(pid int, stopOnLoad, required bool) error {
	d, err := probe.Discover(pid, s.cache, nil)
	if err != nil {
		return err
	}
	s.dropUnhooked(d)
	if s.sharedProbes() {
		return s.adopt(pid, d)
	}
	s.mu.Lock()
	t := s.targets[pid]
	if t == nil {
		// A process asked for that has no CUDA yet (--wait-for-cuda) is held
		// at each library load until what it loaded is hooked, like a
		// launched one, so its first CUDA calls are not missed.
		stop := stopOnLoad || (required && !d.HasCUDA() && s.cfg.WaitForCUDA)
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
	if !d.HasCUDA() && required && !s.cfg.WaitForCUDA && !s.cfg.Launching {
		return d.NoCUDAError()
	}
	// Which layer hooks what depends on every layer the process maps.
	for _, lib := range d.Libraries {
		t.layers |= 1 << lib.Layer
	}
	for i := range d.Libraries {
		lib := &d.Libraries[i]
		key := lib.Key() + lib.Layer.String()
		pol := PolicyFor(lib.Layer, t.layers)
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
		a, err := s.tr.Attach(pid, lib, pol.Want)
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
		s.note(Note{Kind: AttachedLate, PID: uint32(pid)})
		s.recoverPinned(pid)
	}
	t.mapsHash = mapsHash(pid)
	// Its mappings now, while it lives: a short-lived process may be gone
	// by the time the reader names its kernels.
	s.Process(uint32(pid))
	return nil
}

// NVTXInjected says that the launched command's NVTX calls reach the
// session through cudatap's injection library (NVTX_INJECTION64_PATH in
// its environment, which its tree inherits): from then on no NVTX library
// is hooked, or every range would be drawn twice. Call it before the
// command starts.
func (s *Set) NVTXInjected() { s.nvtxInjected.Store(true) }

// dropUnhooked leaves out of d the libraries this session does not hook:
// NVTX's, with Config.SkipNVTX or once NVTXInjected.
func (s *Set) dropUnhooked(d *probe.Discovery) {
	if s.cfg.SkipNVTX || s.nvtxInjected.Load() {
		d.Libraries = slices.DeleteFunc(d.Libraries, func(l probe.Library) bool { return l.Layer == event.NVTX })
	}
}

// detectPython finds the CPython interpreter of a target and hands its
// layout to the BPF side, so blocking calls carry their Python lines.
func (s *Set) detectPython(t *target) {
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
func (s *Set) runtimeLaunches(t *target, d *probe.Discovery, launched bool) {
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
func (s *Set) attachFailed(err error) {
	if !errors.Is(err, probe.ErrNoProcess) {
		s.attachFails.Add(1)
	}
}

// AttachFailures counts the probe sets that could not be attached.
func (s *Set) AttachFailures() uint64 { return s.attachFails.Load() }

// maxRescans bounds the processes waiting for a rescan; more distinct
// processes loading libraries at once than this are left to the
// once-a-second sweep, and counted.
const maxRescans = 1 << 16

// Rescan is a library load (or a program executed) waiting for the
// control loop.
type Rescan struct {
	Held bool   // the process is stopped at the load until the rescan
	TID  uint32 // the thread that loaded, and when: the hold's start
	At   uint64
}

// QueueRescan asks the control loop to look at pid again (a library was
// loaded by thread r.TID at time r.At); r.Held says the process is
// stopped at the load until then. Safe from any goroutine (the reader's).
func (s *Set) QueueRescan(pid int, r Rescan) {
	s.rescanMu.Lock()
	old, queued := s.rescans[pid]
	if !queued && len(s.rescans) >= maxRescans {
		s.rescanMu.Unlock()
		s.attachFails.Add(1)
		if r.Held {
			syscall.Kill(pid, syscall.SIGCONT)
		}
		return
	}
	if queued && old.Held && !r.Held {
		r = old // the earlier load is the one holding the process
	}
	s.rescans[pid] = r
	s.rescanMu.Unlock()
	select {
	case s.rescanWake <- struct{}{}:
	default: // a wake-up is pending: it takes this one too
	}
}

// RescanWake receives when rescans are queued: the control loop then
// calls Rescans.
func (s *Set) RescanWake() <-chan struct{} { return s.rescanWake }

// Rescans returns and clears the processes waiting for a rescan.
func (s *Set) Rescans() map[int]Rescan {
	s.rescanMu.Lock()
	defer s.rescanMu.Unlock()
	out := s.rescans
	s.rescans = make(map[int]Rescan, len(out))
	return out
}

// Rescan reacts to the dynamic linker hook (or a program executed in the
// tree). A process held at the load is continued once its new libraries
// are hooked, and the hold is noted (Hold): its time is cudatap's, not
// the call's that loaded the library. Watching, the process is also
// considered as a new one.
func (s *Set) Rescan(pid int, r Rescan) {
	s.handleRescan(pid, r)
	if s.watching() {
		s.consider(pid)
	}
}

func (s *Set) handleRescan(pid int, r Rescan) {
	s.mu.Lock()
	t := s.targets[pid]
	s.mu.Unlock()
	if (t == nil || t.exited) && s.following() && s.inTree(pid) {
		// A process of the tree that maps no CUDA yet (a program it just
		// executed, a library it just loaded): hooked if it does now,
		// before it goes on.
		s.consider(pid)
		if r.Held {
			syscall.Kill(pid, syscall.SIGCONT)
			if r.At != 0 {
				s.note(Note{Kind: Hold, PID: uint32(pid), TID: r.TID, Start: r.At, End: monoNow()})
			}
		}
		return
	}
	if t == nil || t.exited {
		if r.Held {
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
	if t.stopOnLd || r.Held {
		syscall.Kill(pid, syscall.SIGCONT)
		if r.Held && r.At != 0 {
			s.note(Note{Kind: Hold, PID: uint32(pid), TID: r.TID, Start: r.At, End: monoNow()})
		}
	}
}

// Sweep rescans targets whose memory map changed: a backstop for loads the
// linker hook cannot see (a process without ld.so, a missed record).
func (s *Set) Sweep() {
	for _, pid := range s.LivePIDs() {
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

// LivePIDs lists the targets that have not exited, sorted.
func (s *Set) LivePIDs() []int {
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

// Count is how many targets there are.
func (s *Set) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.targets)
}

// MarkExited notes that pid exited: its probes are released (off the
// control loop). It reports whether pid was a live target.
func (s *Set) MarkExited(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[pid]
	if t != nil && !t.exited {
		t.exited = true
		s.tr.ForgetPython(pid)
		s.tr.ForgetProcess(pid)
		// The probes die with the process's memory; release the links, off
		// the control loop.
		s.closer.add(t.detach(s.tr)...)
		if t.stopOnLd {
			s.guard.Free(pid)
		}
		return true
	}
	return false
}

// AllExited reports whether every target (and, following, every process
// of the tree) has exited.
func (s *Set) AllExited() bool {
	return len(s.LivePIDs()) == 0 && !(s.following() && s.treeLives())
}

// CloseAll detaches every probe. A target held at a library load right
// now (its rescan not handled yet) is continued: with the hook gone,
// nothing else would. The links are closed outside the lock: that takes
// the kernel milliseconds per link (seconds on the per-symbol path), and
// the reader, which names processes under that lock, must keep draining
// the ring buffer meanwhile.
func (s *Set) CloseAll() {
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

// Close waits for the probes being closed and stops the goroutine that
// closes them: after CloseAll and CloseShared, before the probe.Tracer
// closes.
func (s *Set) Close() { s.closer.stop() }

// WaitClosed returns once the probes of exited processes handed over for
// closing so far are closed.
func (s *Set) WaitClosed() { s.closer.wait() }

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
func (s *Set) releasePairings() {
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

// Summary describes the probes of every target, also those forgotten
// after they exited (unless Config.Cut), by PID.
func (s *Set) Summary() []Attached {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]Attached(nil), s.finished...)
	for _, t := range s.targets {
		out = append(out, t.summary())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// Hooked reports whether pid's probes are live: its libraries hooked and,
// since a runtime may load libcuda only at its first call, the runtime's
// launch probes that count launches until then (shared probes: the driver
// it will load hooked too).
func (s *Set) Hooked(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[pid]
	if t == nil || t.exited {
		return false
	}
	if len(t.shared) > 0 {
		return t.driverReady || t.layers&(1<<event.Driver) != 0
	}
	return len(t.attached) > 0 && t.rtLaunch != nil
}

// Holds reports whether pid is a target still (exited ones are dropped
// once gone from /proc: see forgetExited).
func (s *Set) Holds(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targets[pid] != nil
}

// NamingWindowOpen reports whether pid's runtime launch probes are
// attached (the naming window, window.go).
func (s *Set) NamingWindowOpen(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[pid]
	return t != nil && t.rtLaunch != nil
}
