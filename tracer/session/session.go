// Package session runs one recording: it starts or finds the target
// processes, attaches the tracer to their CUDA libraries (also those loaded
// later), feeds every event to the stream model and the raw recording, and
// stops cleanly at a deadline, a signal or when every target has exited.
package session

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/symbolize/python"
	"github.com/cudatap/cudatap/symbolize/unwind"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

// Config of a recording session.
type Config struct {
	PIDs             []int
	Command          []string // launch this command and trace it from its first instruction
	All              bool     // every process on the host that maps CUDA, now or later
	Container        string   // every process of this container (id prefix or cgroup name), now or later
	Duration         time.Duration
	Stacks           tracer.StackMode
	RingBufferBytes  int
	PerSymbolUprobes bool      // never use uprobe_multi (what kernels before 6.6 get)
	WaitForCUDA      bool      // a target without CUDA yet is watched instead of refused
	Recording        io.Writer // optional .cudatap stream
	Stdin            io.Reader // for the launched command
	Stdout, Stderr   io.Writer
	Logger           *slog.Logger
	// NVMLInterval is the GPU sampling period (0 = 100 ms; negative = off).
	NVMLInterval time.Duration
	// NameWindow is how long, after attaching to a running process, runtime
	// launches are also probed to name kernels loaded before cudatap came
	// (two traps per launch meanwhile). 0 = 5 s; negative = never.
	NameWindow time.Duration
	// OnAttached is called once, when probes are live in every target.
	OnAttached func(processes int)
	// OnStatus is called about once a second while recording.
	OnStatus func(Status)
	// OnLive, if set, receives (once probes are live) a function that
	// returns every traced stream's counters so far, safe to call at any
	// time while the session runs (cudatap top).
	OnLive func(snapshot func() []model.StreamSnap)
}

// Status is a snapshot for the live status line.
type Status struct {
	Elapsed      time.Duration
	Processes    int
	Events       uint64
	EventsPerSec float64
	Lost         uint64
	Bytes        int64
}

// Attached describes the probes of one process.
type Attached struct {
	PID       int
	Libraries []tracer.Library
	Hooked    int
	Missing   []string
}

// Outcome is everything a session produced.
type Outcome struct {
	Result   *model.Result
	Attached []Attached
	ExitCode int // of the launched command, -1 if none or killed
}

type target struct {
	pid      int
	attached map[string]*tracer.Attachment // by library key and layer
	policy   map[string]policy             // what each attachment hooks
	// The runtime's launch probes: they count launches until libcuda is
	// hooked and name CUfunctions created before cudatap attached.
	rtLaunch      *tracer.Attachment
	rtLaunchUntil time.Time // when to close rtLaunch; zero = not scheduled
	rtLaunchDone  bool
	pyMu          sync.Mutex          // guards py and pyTried (reader goroutine and control loop)
	py            *python.Interpreter // nil until a CPython runtime is found
	pyTried       bool                // detection gave a final answer
	pyResolved    bool                // some Python frame was named (reader goroutine only)
	layers        uint8               // bit per event.Layer seen in the process
	loader        *tracer.Attachment
	stopOnLd      bool
	mapsHash      uint64
	exited        bool
	symbolize     *symbolize.Process
}

// Session state shared between the reader and the control loop.
type Session struct {
	cfg    Config
	log    *slog.Logger
	tr     *tracer.Tracer
	cache  *symbolize.Cache
	rec    *recording.Writer
	model  *model.Model
	events atomic.Uint64
	lost   atomic.Uint64

	mu      sync.Mutex // guards targets
	targets map[int]*target
	rescan  chan int
	encBuf  []byte     // re-encoded records (reader goroutine only)
	modelMu sync.Mutex // the model is fed by the reader and read by OnLive snapshots
	unwind  *unwind.Unwinder
	gpu     *gpuSampler

	// Watch mode (control loop only).
	loaders     map[string]*tracer.Attachment // host-wide dynamic-linker hooks, by file
	seenMaps    map[int]uint64                // maps hash of processes looked at
	plain       map[string]bool               // files ("dev:inode") that hold no CUDA layer
	newTargets  int
	attachFails atomic.Uint64 // probe sets that could not be attached (shown as "attach failures")
	finished    []Attached    // targets forgotten after they exited
}

// Run records until ctx is done, the duration passes, or every target exits.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	return run(ctx, cfg, nil)
}

// run is Run; inspect, if set, sees the session before it starts (tests).
func run(ctx context.Context, cfg Config, inspect func(*Session)) (*Outcome, error) {
	if len(cfg.PIDs) == 0 && len(cfg.Command) == 0 && !cfg.All && cfg.Container == "" {
		return nil, errors.New("nothing to trace: give -p PID, --container ID, --all, or a command after --")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	// Validate targets before loading anything.
	for _, pid := range cfg.PIDs {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) || pid <= 0 {
			return nil, fmt.Errorf("process %d does not exist: check the PID (ps -ef | grep ...)", pid)
		}
	}
	tr, err := tracer.New(tracer.Config{RingBufferBytes: cfg.RingBufferBytes, Stacks: cfg.Stacks, Logger: cfg.Logger,
		PerSymbolUprobes: cfg.PerSymbolUprobes})
	if err != nil {
		return nil, err
	}
	defer tr.Close()

	s := &Session{cfg: cfg, log: cfg.Logger, tr: tr, cache: symbolize.NewCache(512),
		targets: map[int]*target{}, rescan: make(chan int, 1024), unwind: unwind.New(),
		loaders: map[string]*tracer.Attachment{}, seenMaps: map[int]uint64{}, plain: map[string]bool{}}
	if cfg.Recording != nil {
		s.rec, err = recording.NewWriter(cfg.Recording, recordingHeader(cfg))
		if err != nil {
			return nil, err
		}
	}
	s.model = model.New(s.modelOptions())
	if inspect != nil {
		inspect(s)
	}
	return s.run(ctx)
}

func recordingHeader(cfg Config) recording.Header {
	h := recording.NewHeader("cudatap", WallOffset())
	h.Host, _ = os.Hostname()
	h.Kernel = readTrim("/proc/sys/kernel/osrelease")
	h.Command = cfg.Command
	return h
}

// WallOffset measures unix_ns - monotonic_ns now.
func WallOffset() int64 {
	var ts unix.Timespec
	// CLOCK_MONOTONIC, as bpf_ktime_get_ns reads it.
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	wall := time.Now().UnixNano()
	return wall - ts.Nano()
}

func (s *Session) modelOptions() model.Options {
	return model.Options{
		ProcessInfo: func(pid uint32) model.ProcessInfo {
			info := readProcessInfo(pid)
			s.mu.Lock()
			if t := s.targets[int(pid)]; t != nil {
				seen := map[string]bool{}
				for _, a := range t.attached {
					if !seen[a.Library.Path] {
						seen[a.Library.Path] = true
						info.Libraries = append(info.Libraries, a.Library.Path)
					}
				}
				sort.Strings(info.Libraries)
			}
			s.mu.Unlock()
			if s.rec != nil {
				s.rec.Process(pid, info)
			}
			return info
		},
		ThreadName: func(pid, tid uint32) string {
			name := readThreadName(pid, tid)
			if s.rec != nil {
				s.rec.Thread(pid, tid, name)
			}
			return name
		},
		KernelName: func(pid uint32, addr uint64) string {
			f := s.symbolizeAddr(pid, addr)
			if s.rec != nil {
				s.rec.Kernel(pid, addr, f.Raw)
			}
			return f.Raw
		},
		PyFrameName: func(pid uint32, code, instr uint64) string {
			name := ""
			s.mu.Lock()
			t := s.targets[int(pid)]
			s.mu.Unlock()
			in := t.python()
			if in != nil {
				f, err := in.Frame(code, instr)
				if err != nil && !in.Started() && !t.pyResolved {
					// Found before it ran and nothing resolved yet: look
					// again now that it runs.
					s.detectPython(t)
					f, err = t.python().Frame(code, instr)
				}
				if err == nil {
					t.pyResolved = true
					name = f.String()
				} else {
					s.log.Debug("python frame", "pid", pid, "err", err)
				}
			}
			if s.rec != nil {
				s.rec.PyFrame(pid, code, instr, name)
			}
			return name
		},
		FrameName: func(pid uint32, addr uint64) string {
			f := s.symbolizeAddr(pid, addr)
			name := ""
			if f.Raw != "" {
				name = f.Function
				if f.Object != "" {
					name += " (" + filepath.Base(f.Object) + ")"
				}
			}
			if s.rec != nil {
				s.rec.Frame(pid, addr, name)
			}
			return name
		},
	}
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

func executable(maps []symbolize.Mapping, addr uint64) bool {
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

func (s *Session) run(ctx context.Context) (*Outcome, error) {
	out := &Outcome{ExitCode: -1}
	var child *launched
	if len(s.cfg.Command) > 0 {
		var err error
		child, err = s.launch()
		if err != nil {
			s.closeAll()
			return nil, err
		}
	}
	for _, pid := range s.cfg.PIDs {
		if err := s.attachProcess(pid, false, true); err != nil {
			s.closeAll()
			return nil, err
		}
	}
	if s.watching() {
		s.discoverAll()
	}
	// Processes that make no call while traced still appear in every output.
	for _, pid := range s.livePIDs() {
		s.model.AddProcess(uint32(pid))
	}
	s.gpu = startGPU(ctx, s.cfg.NVMLInterval)
	if s.gpu.status != "" {
		s.log.Info("GPU counters omitted", "reason", s.gpu.status) // the summary says it once
	}
	for _, pid := range s.livePIDs() {
		s.gpu.markCPU(uint32(pid))
	}
	if s.cfg.OnAttached != nil {
		s.cfg.OnAttached(len(s.targets))
	}
	if s.cfg.OnLive != nil {
		s.cfg.OnLive(func() []model.StreamSnap {
			s.modelMu.Lock()
			defer s.modelMu.Unlock()
			return s.model.Snapshot()
		})
	}

	readerDone := make(chan error, 1)
	go func() { readerDone <- s.tr.Read(s.handleRecord) }()

	var deadline <-chan time.Time
	if s.cfg.Duration > 0 {
		tm := time.NewTimer(s.cfg.Duration)
		defer tm.Stop()
		deadline = tm.C
	}
	var childExited <-chan struct{}
	if child != nil {
		childExited = child.done
	}
	liveness := time.NewTicker(100 * time.Millisecond)
	defer liveness.Stop()
	status := time.NewTicker(time.Second)
	defer status.Stop()
	start := time.Now()
	var lastEvents uint64
	lastStatus, lastPrune := start, start

loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-deadline:
			break loop
		case <-childExited:
			childExited = nil
			s.markExited(child.pid)
			if s.allExited() {
				break loop
			}
		case pid := <-s.rescan:
			s.handleRescan(pid)
			if s.watching() {
				s.consider(pid)
			}
		case now := <-liveness.C:
			s.endPairings(now)
			for _, pid := range s.livePIDs() {
				if child != nil && pid == child.pid {
					continue // reaped by its own waiter
				}
				if !alive(pid) {
					s.markExited(pid)
				}
			}
			if s.allExited() && !s.watching() {
				break loop
			}
		case now := <-status.C:
			s.sweep()
			if now.Sub(lastPrune) >= 10*time.Second {
				lastPrune = now
				if n, err := s.tr.PruneInflight(threadAlive); err == nil && n > 0 {
					s.log.Debug("pruned entries of dead threads", "n", n)
				}
			}
			if s.watching() {
				s.discoverAll()
			}
			if s.cfg.OnStatus != nil {
				ev := s.events.Load()
				dt := now.Sub(lastStatus).Seconds()
				st := Status{Elapsed: now.Sub(start), Processes: len(s.livePIDs()), Events: ev,
					EventsPerSec: float64(ev-lastEvents) / dt, Lost: s.lostNow()}
				if s.rec != nil {
					st.Bytes = s.rec.Size()
				}
				s.cfg.OnStatus(st)
				lastEvents, lastStatus = ev, now
			}
		}
	}

	// Stop: detach first so nothing new arrives, then drain what is queued.
	s.closeAll()
	s.closeLoaders()
	s.tr.Drain()
	if err := <-readerDone; err != nil {
		return nil, err
	}
	if st, err := s.tr.Stats(); err == nil {
		s.model.SetKernelStats(st.Submitted, st.RingbufFull, st.InflightFull, st.OrphanReturns, st.ReadFaults)
		s.model.SetNested(st.Nested)
		s.model.SetProgramSkips(st.ProgramSkips)
		if st.OrphanReturns > 0 {
			s.log.Debug("entries replaced while waiting", "n", st.EntryReplaced)
			for api, n := range s.tr.OrphansByAPI() {
				s.log.Debug("returns without their entry", "api", event.API(api).String(), "n", n)
			}
		}
		s.model.SetAttachFailures(s.attachFails.Load())
	}
	if child != nil {
		out.ExitCode = child.stop()
	}
	res := s.model.Finish()
	res.WallOffsetNs = WallOffset()
	s.gpu.finish(res)
	out.Result = res
	s.mu.Lock()
	out.Attached = s.attachedSummary()
	s.mu.Unlock()
	if s.rec != nil {
		// The reader is done: the NVML series go in after the events.
		for _, c := range res.Counters {
			s.rec.Counter(c)
		}
		s.rec.GPU(res.GPU)
		s.rec.Drops(res.Drops)
		if err := s.rec.Close(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// handleRecord runs on the reader goroutine, the only one touching the model.
func (s *Session) handleRecord(raw []byte) {
	var ev event.Event
	if err := event.Decode(raw, &ev); err != nil {
		s.modelMu.Lock()
		s.model.DecodeError()
		s.modelMu.Unlock()
		s.lost.Add(1)
		return
	}
	if ev.API() == event.LibraryLoad {
		s.modelMu.Lock()
		s.model.Auxiliary()
		s.modelMu.Unlock()
		if s.rec != nil {
			s.rec.Event(raw)
		}
		select {
		case s.rescan <- int(ev.PID):
		default:
			// The control loop is behind; its periodic sweep catches up.
			if ev.Cookie&event.CookieStop != 0 {
				syscall.Kill(int(ev.PID), syscall.SIGCONT)
			}
		}
		return
	}
	if ev.NStack > 0 || len(ev.Copy) > 0 {
		s.prepareStack(&ev)
	}
	s.modelMu.Lock()
	s.model.Handle(&ev)
	s.modelMu.Unlock()
	if s.rec != nil {
		if event.CookieHasStack(ev.Cookie) && len(ev.Copy) > 0 {
			// The stack copy served its purpose (unwinding, done above while
			// the process lives): keep recordings small without it.
			ev.Copy = nil
			s.encBuf = event.Encode(s.encBuf[:0], &ev)
			s.rec.Event(s.encBuf)
		} else {
			s.rec.Event(raw)
		}
	}
	s.events.Add(1)
}

func (s *Session) lostNow() uint64 {
	st, err := s.tr.Stats()
	if err != nil {
		return s.lost.Load()
	}
	return s.lost.Load() + st.RingbufFull + st.InflightFull + st.ProgramSkips
}

// attachProcess discovers and hooks the CUDA libraries of pid. With
// required, a process without CUDA is an error (unless WaitForCUDA).
func (s *Session) attachProcess(pid int, stopOnLoad, required bool) error {
	d, err := tracer.Discover(pid, s.cache, nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	t := s.targets[pid]
	if t == nil {
		// A process asked for that has no CUDA yet (--wait-for-cuda) is held
		// at each library load until what it loaded is hooked, like a
		// launched one, so its first CUDA calls are not missed.
		stop := stopOnLoad || (required && len(d.Libraries) == 0 && s.cfg.WaitForCUDA)
		t = &target{pid: pid, attached: map[string]*tracer.Attachment{}, policy: map[string]policy{}, stopOnLd: stop}
		s.targets[pid] = t
	}
	s.mu.Unlock()
	if d.LdSo != nil && t.loader == nil {
		a, err := s.tr.AttachLoader(pid, d.LdSo, t.stopOnLd)
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
			if errors.Is(err, tracer.ErrNoProcess) {
				t.exited = true
				return nil // exited while we attached: trace what was seen
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
	t.mapsHash = mapsHash(pid)
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
	default:
		t.pyTried = true
		s.log.Warn("Python frames unavailable, native stacks only", "pid", t.pid, "err", err)
	}
}

// runtimeLaunches manages the runtime's launch probes of a target (see
// tracer.AttachRuntimeLaunches). They are attached while the process has a
// runtime and no hooked driver (launches are counted there meanwhile), and
// after attaching to a running process for NameWindow (kernel names). Once
// the driver is hooked they go: at once in a process cudatap launched (it is
// stopped at the library load, and every kernel load is seen), after the
// window otherwise.
func (s *Session) runtimeLaunches(t *target, d *tracer.Discovery, launched bool) {
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
	s.mu.Lock()
	t.rtLaunchUntil = time.Now().Add(window)
	s.mu.Unlock()
}

// endPairings closes runtime launch probes whose naming window is over.
func (s *Session) endPairings(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.targets {
		if t.rtLaunch != nil && !t.rtLaunchUntil.IsZero() && now.After(t.rtLaunchUntil) {
			t.closeRuntimeLaunches(s.tr)
		}
	}
}

// attachFailed counts a failed attach, unless the process was simply gone.
func (s *Session) attachFailed(err error) {
	if !errors.Is(err, tracer.ErrNoProcess) {
		s.attachFails.Add(1)
	}
}

// handleRescan reacts to the dynamic linker hook.
func (s *Session) handleRescan(pid int) {
	s.mu.Lock()
	t := s.targets[pid]
	s.mu.Unlock()
	if t == nil || t.exited {
		return
	}
	start := time.Now()
	if err := s.attachProcess(pid, t.stopOnLd, false); err != nil {
		s.attachFailed(err)
		s.log.Warn("rescan after library load failed", "pid", pid, "err", err)
	}
	s.log.Debug("rescan", "pid", pid, "took", time.Since(start))
	if t.stopOnLd {
		syscall.Kill(pid, syscall.SIGCONT)
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
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
		// The probes die with the process's memory; release the links now.
		t.closeProbes(s.tr)
	}
}

func (s *Session) allExited() bool {
	return len(s.livePIDs()) == 0
}

func (s *Session) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.targets {
		t.closeProbes(s.tr)
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
	for _, a := range t.attached {
		at.Libraries = append(at.Libraries, a.Library)
		at.Hooked += len(a.Hooked)
		at.Missing = append(at.Missing, a.Missing...)
	}
	sort.Slice(at.Libraries, func(i, j int) bool { return at.Libraries[i].Path < at.Libraries[j].Path })
	sort.Strings(at.Missing)
	return at
}

func (t *target) closeRuntimeLaunches(tr *tracer.Tracer) {
	t.rtLaunch.Close()
	tr.PairingStop()
	t.rtLaunch, t.rtLaunchDone = nil, true
}

func (t *target) closeProbes(tr *tracer.Tracer) {
	for _, a := range t.attached {
		a.Close()
	}
	if t.loader != nil {
		t.loader.Close()
	}
	if t.rtLaunch != nil {
		t.closeRuntimeLaunches(tr)
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

// threadAlive reports whether a (host) thread id still exists.
func threadAlive(tid uint32) bool {
	_, err := os.Stat("/proc/" + strconv.FormatUint(uint64(tid), 10))
	return err == nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the last ')' of the comm field.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
		}
	}
	return true
}
