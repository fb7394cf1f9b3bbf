// Package tracer runs one recording: it starts or finds the target
// processes, attaches probes (tracer/probe) to their CUDA libraries, also
// those loaded later, and runs the pipeline: ring buffer → decode
// (tracer/event) → stream model (tracer/model) → names → recording
// (tracer/recording) and the caller's sinks. It stops cleanly at a
// deadline, a signal or when every target has exited.
//
// Files: session.go the lifecycle (the processes and their probes are
// tracer/targets'), reader.go the reader stage, names.go the resolver.
package tracer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/guard"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/resolve"
	"github.com/cudatap/cudatap/tracer/targets"
)

// Config of a recording session.
type Config struct {
	PIDs             []int
	Command          []string // launch this command and trace it from its first instruction
	All              bool     // every process on the host that maps CUDA, now or later
	Container        string   // every process of this container (id prefix or cgroup name), now or later
	Duration         time.Duration
	Stacks           probe.StackMode
	RingBufferBytes  int
	PerSymbolUprobes bool // never use uprobe_multi (what kernels before 6.6 get)
	WaitForCUDA      bool // a target without CUDA yet is watched instead of refused
	// Follow traces, besides the command (or the PIDs), every process it
	// starts, at any depth, from its first call (tracer/targets/follow.go).
	Follow bool
	// GPUTimes measures GPU ops with the target's own CUPTI through
	// cudatap's collector (gputime.go); CUPTIPath overrides which CUPTI.
	GPUTimes  bool
	CUPTIPath string
	// KernelArgs copies each launch's kernel parameter values
	// (probe.Config.KernelArgs): the pointers the race lint matches
	// against device allocations.
	KernelArgs bool
	// AggregateLaunches counts launches in BPF maps instead of recording
	// each (--all/--container: shared probes only); the Observer gets the
	// counts so far, per process, API and stream, about once a second and
	// at the end. Aggregated launches reach no model, trace or profile.
	// LaunchTimes also times them (a return probe per launch: a second
	// trap) into log2 histograms per process and API.
	AggregateLaunches bool
	LaunchTimes       bool
	// Cut, when positive, makes a session that runs for ever hold only
	// what its live processes need: every Cut it hands the Observer the
	// processes of the interval, named, on the reader goroutine (the
	// sinks' goroutine: it may read and reset them), asks it which
	// processes sit the next interval out (the agent's per-process
	// sampling under --continuous), and forgets the processes that
	// exited, once concluded and handed out (cut.go). The final Result
	// then holds only the processes not retired.
	Cut time.Duration
	// pruneEvery, when positive, replaces pruneEvery (tests).
	pruneEvery time.Duration
	// aggregateWithoutStream counts aggregated launches without their
	// stream (benchmarks: what the stream read costs).
	aggregateWithoutStream bool
	// SampledOut keeps processes out of this session (--all/--container:
	// the agent's per-process sampling): PID → start time
	// (procfs.ProcessStat.StartTicks), so that a PID reused by a new
	// process does not keep the old one's lot. None of their calls count
	// and none is adopted.
	SampledOut map[int]uint64
	// PollInterval: how long a record may wait in the ring buffer before
	// it is read (probe.Config.PollInterval; 0: 20 ms).
	PollInterval time.Duration
	Recording    io.Writer // optional .cudatap stream
	// Guardian, if set, is the guardian the session uses (the caller
	// closes it); else the session starts its own when it needs one.
	Guardian *guard.Guardian
	// Sink, if set, receives every call, sync and GPU op as the model
	// concludes them (aggregates for profiles and summaries, live traces):
	// the session keeps none of them.
	Sink model.Sink
	// Names, if set, are the tables the session names into as it goes
	// (tracer/resolve), for a Sink that names what it writes (a live
	// trace); the Result's Names at the end. nil: tables of its own.
	Names *model.Names
	// Interrupts are the signals cudatap got (Ctrl-C, kill): the first
	// is passed to a launched command (as it would have got it without
	// cudatap), which is traced until it exits; the next ends the session.
	// Without a command, the first ends it.
	Interrupts     <-chan os.Signal
	Stdin          io.Reader // for the launched command
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
	// NVMLInterval is the GPU sampling period (0 = 100 ms; negative = off).
	NVMLInterval time.Duration
	// NameWindow is how long, after attaching to a running process, runtime
	// launches are also probed to name kernels loaded before cudatap came
	// (two traps per launch meanwhile). 0 = 5 s; negative = never.
	NameWindow time.Duration
	// Observer hears what the session reports as it runs (nil: nothing
	// hears it).
	Observer Observer
	// SkipNVTX hooks no NVTX library in running processes (the agent); a
	// launched command's ranges still come through the injection library.
	SkipNVTX bool
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
type Attached = targets.Attached

// Outcome is everything a session produced.
type Outcome struct {
	Result   *model.Result
	Attached []Attached
	ExitCode int  // of the launched command: its status, 128+N if signal N killed it; -1 if none
	Exit     Exit // how the launched command ended
}

// Session state shared between the reader and the control loop.
type Session struct {
	cfg    Config
	log    *slog.Logger
	tr     *probe.Tracer
	cache  *objfile.Cache
	rec    *recording.Writer
	model  *model.Model
	events atomic.Uint64
	lost   atomic.Uint64

	targets  *targets.Set      // the processes traced and their probes
	encBuf   []byte            // re-encoded records (reader goroutine only)
	modelMu  sync.Mutex        // the model is fed by the reader and read by Observer.Live snapshots
	resolver *resolve.Resolver // names what the events refer to, while the processes live
	guard    *guard.Guardian   // continues held targets if cudatap dies (nil: nothing is held)
	obs      Observer          // Config.Observer, or one that hears nothing
	// Notes from the control loop for the reader (see notes.go).
	notesMu     sync.Mutex
	notes       []note
	gpuNotes    []gpuNote // GPU times for the model, applied with the notes
	notesQueued atomic.Bool
	gputimes    gpuTimes
	tracingEnd  atomic.Uint64 // when the probes began to close: later calls are not traced
	ev          event.Event   // the record being handled (reader goroutine only)
	gpu         *gpuSampler

	aggFullSaid uint64          // launch-counter overflows already logged (control loop)
	aggPIDs     map[uint32]bool // the processes in the last aggregates reported
	// Reader goroutine only (cut.go): the processes found gone at the
	// last cut, and when it was.
	goneAtCut map[uint32]bool
	lastCut   uint64
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
	if cfg.Observer == nil {
		cfg.Observer = Funcs{}
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
	tr, err := probe.New(probe.Config{RingBufferBytes: cfg.RingBufferBytes, Stacks: cfg.Stacks, Logger: cfg.Logger,
		PerSymbolUprobes: cfg.PerSymbolUprobes, PollInterval: cfg.PollInterval, KernelArgs: cfg.KernelArgs,
		Aggregate: cfg.AggregateLaunches, LaunchTimes: cfg.AggregateLaunches && cfg.LaunchTimes,
		Follow: cfg.Follow && (len(cfg.Command) > 0 || len(cfg.PIDs) > 0)})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	if len(cfg.SampledOut) > 0 && len(cfg.PIDs)+len(cfg.Command) > 0 {
		return nil, errors.New("SampledOut needs All or Container (shared probes)")
	}

	s := &Session{cfg: cfg, log: cfg.Logger, tr: tr, obs: cfg.Observer, cache: objfile.NewCache(512)}
	if cfg.Recording != nil {
		s.rec, err = recording.NewWriter(cfg.Recording, recordingHeader(cfg))
		if err != nil {
			return nil, err
		}
	}
	s.model = model.New(cfg.Sink)
	if len(cfg.Command) > 0 || cfg.WaitForCUDA || (cfg.GPUTimes && (len(cfg.PIDs) > 0 || cfg.All || cfg.Container != "")) || s.following() {
		// These targets are held at library loads, or borrowed by ptrace to
		// load the GPU-time collector: never without a guardian.
		if s.guard = cfg.Guardian; s.guard == nil {
			if s.guard, err = guard.Start(len(cfg.Command) > 0); err != nil {
				return nil, fmt.Errorf("%w; without it a cudatap killed while a target is held at a library load would leave it stopped: "+
					"make sure the cudatap binary can be run again from where it is (not deleted, not on a noexec mount), or attach with -p instead", err)
			}
			defer s.guard.Close()
		}
	}
	s.targets = targets.New(targets.Config{All: cfg.All, Container: cfg.Container, Follow: s.following(),
		Launching: len(cfg.Command) > 0, WaitForCUDA: cfg.WaitForCUDA, NameWindow: cfg.NameWindow,
		AggregateLaunches: cfg.AggregateLaunches, LaunchTimes: cfg.LaunchTimes,
		AggregateWithoutStream: cfg.aggregateWithoutStream, Cut: cfg.Cut > 0, SkipNVTX: cfg.SkipNVTX}, tr, s.guard, s.cache, cfg.Logger)
	defer s.targets.Close()      // before tr.Close: links go before the BPF objects
	var names resolve.NameWriter // the recording, if any
	if s.rec != nil {
		names = s.rec
	}
	s.resolver = resolve.New(s.targets, names, cfg.Names, cfg.Logger)
	if err := s.targets.SampleOut(cfg.SampledOut); err != nil {
		return nil, err
	}
	if inspect != nil {
		inspect(s)
	}
	return s.run(ctx)
}

func recordingHeader(cfg Config) recording.Header {
	h := recording.NewHeader("cudatap", WallOffset())
	h.Host, _ = os.Hostname()
	h.Kernel, _ = procfs.OSRelease()
	h.BootID, _ = procfs.BootID()
	h.Command = cfg.Command
	return h
}

// pruneEvery is how often the tables BPF keeps per thread and process
// (entries waiting for their return, process flags, aggregates) lose the
// exited (Config.pruneEvery overrides it in tests).
const pruneEvery = 10 * time.Second

// reportAggregates hands what BPF counted (aggregate mode) to
// the Observer. With prune, the counters of processes that had exited
// before this read are deleted once reported: their counts are final, and
// continuous tracing of a host where processes come and go would fill the
// maps with the dead. (The collector keeps a process's last counts.)
func (s *Session) reportAggregates(prune bool) {
	if !s.cfg.AggregateLaunches {
		return
	}
	var dead []uint32
	if prune {
		for pid := range s.aggPIDs {
			if !procfs.Alive(int(pid)) {
				dead = append(dead, pid)
			}
		}
	}
	var agg event.Aggregates
	var err error
	if agg.Launches, err = s.tr.LaunchCounts(); err != nil {
		s.log.Warn("reading the launch counters failed", "err", err)
		return
	}
	if s.cfg.LaunchTimes {
		if agg.Times, err = s.tr.LaunchTimes(); err != nil {
			s.log.Warn("reading the launch times failed", "err", err)
			return
		}
	}
	if st, err := s.tr.Stats(); err == nil {
		agg.TimesLost = st.LaunchTimesLost
		// Not a loss (those launches went to the ring buffer), but a
		// limit that acted: said when it grows, not every second.
		if st.AggregateFull > s.aggFullSaid {
			s.aggFullSaid = st.AggregateFull
			s.log.Warn("launch counters full (16,384 process, API and stream keys): launches recorded one by one instead", "launches", st.AggregateFull)
		}
	}
	agg.Final = dead
	s.obs.Aggregates(agg)
	s.aggPIDs = map[uint32]bool{}
	for pid := range agg.Launches {
		s.aggPIDs[pid] = true
	}
	if len(dead) > 0 {
		s.tr.ForgetAggregates(dead)
		for _, pid := range dead {
			delete(s.aggPIDs, pid)
		}
	}
}

// WallOffset measures unix_ns - monotonic_ns now.
func WallOffset() int64 {
	// The two clocks cannot be read at once: read the wall clock between
	// two reads of the monotonic one, keep the tightest of a few tries (a
	// preemption between the reads, on a loaded machine, was 10 ms of
	// error: as much as merge's alignment then had to undo).
	best, offset := int64(math.MaxInt64), int64(0)
	for range 8 {
		var before, after unix.Timespec
		// CLOCK_MONOTONIC, as bpf_ktime_get_ns reads it.
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &before)
		var wall unix.Timespec
		unix.ClockGettime(unix.CLOCK_REALTIME, &wall)
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &after)
		if gap := after.Nano() - before.Nano(); gap < best {
			best, offset = gap, wall.Nano()-(before.Nano()+gap/2)
		}
	}
	return offset
}

func (s *Session) run(ctx context.Context) (*Outcome, error) {
	out := &Outcome{ExitCode: -1}
	var child *launched
	if s.following() {
		if err := s.targets.StartFollowing(); err != nil {
			s.targets.CloseAll()
			return nil, err
		}
	}
	if len(s.cfg.Command) > 0 {
		var err error
		child, err = s.launch()
		if err != nil {
			s.targets.CloseAll()
			return nil, err
		}
	}
	for _, pid := range s.cfg.PIDs {
		if s.following() {
			if err := s.targets.FollowRunning(pid); err != nil {
				s.targets.CloseAll()
				return nil, err
			}
		}
		if err := s.targets.Attach(pid); err != nil {
			s.targets.CloseAll()
			return nil, err
		}
		if s.cfg.GPUTimes {
			if err := s.gpuTimesAttach(pid); err != nil {
				s.targets.CloseAll()
				return nil, err
			}
		}
	}
	s.targets.Discover()
	s.targets.GoLive()
	// Processes that make no call while traced still appear in every output.
	for _, pid := range s.targets.LivePIDs() {
		s.model.AddProcess(uint32(pid))
		s.resolver.ProcessEarly(uint32(pid))
	}
	for _, pid := range s.targets.TreeRoots() { // with or without CUDA yet
		s.model.AddProcess(pid)
		s.resolver.ProcessEarly(pid)
	}
	s.gpu = startGPU(ctx, s.cfg.NVMLInterval)
	if s.gpu.status != "" {
		s.log.Info("GPU counters omitted", "reason", s.gpu.status) // the summary says it once
	}
	for _, pid := range s.targets.LivePIDs() {
		s.gpu.markCPU(uint32(pid))
	}
	n := s.targets.Count()
	if s.following() {
		n = len(s.targets.TreeRoots()) // the processes followed, CUDA or not
	}
	s.obs.Attached(n)
	s.obs.Live(func() []model.StreamSnap {
		s.modelMu.Lock()
		defer s.modelMu.Unlock()
		return s.model.Snapshot()
	})

	readerDone := make(chan error, 1)
	go func() { readerDone <- s.tr.Read(s.handleRecord, s.applyNotes) }()

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
	lastStatus, lastPrune, lastCut := start, start, start
	prune := pruneEvery
	if s.cfg.pruneEvery > 0 {
		prune = s.cfg.pruneEvery
	}

	interrupted := false
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case sig := <-s.cfg.Interrupts:
			if child == nil || interrupted {
				break loop
			}
			interrupted = true
			if sn, ok := sig.(syscall.Signal); ok && child.pass(sn) {
				fmt.Fprintf(s.cfg.Stderr, "cudatap: passed %s to the command (pid %d); tracing until it exits (again to stop now)\n", unix.SignalName(sn), child.pid)
			} else {
				fmt.Fprintf(s.cfg.Stderr, "cudatap: the command got %v too; tracing until it exits (again to stop now)\n", sig)
			}
		case <-deadline:
			break loop
		case <-childExited:
			childExited = nil
			s.markExited(child.pid)
			if s.targets.AllExited() {
				break loop
			}
		case <-s.targets.RescanWake():
			for pid, r := range s.targets.Rescans() {
				s.targets.Rescan(pid, r)
			}
		case now := <-liveness.C:
			s.targets.EndNamingWindows(now, modelStubs{s})
			for _, pid := range s.targets.LivePIDs() {
				if child != nil && pid == child.pid {
					continue // reaped by its own waiter
				}
				if !procfs.Alive(pid) {
					s.markExited(pid)
				}
			}
			if s.targets.AllExited() && !s.targets.Watching() {
				break loop
			}
		case now := <-status.C:
			if s.rec != nil {
				s.queueNote(note{kind: noteFlush}) // at least every second
			}
			if s.rec != nil && s.rec.Err() != nil {
				// Disk full, file gone: noticed now, not after the run.
				// What was modeled so far still makes every other output.
				s.log.Error("writing the recording failed: stopping the trace here", "err", s.rec.Err())
				break loop
			}
			s.targets.Sweep()
			if s.cfg.Cut > 0 && now.Sub(lastCut) >= s.cfg.Cut {
				lastCut = now
				s.cut()
			}
			if now.Sub(lastPrune) >= prune {
				lastPrune = now
				if n, err := s.tr.PruneInflight(threadAlive); err == nil && n > 0 {
					s.log.Debug("pruned entries of dead threads", "n", n)
				}
				if s.targets.SharedProbes() {
					s.tr.PruneProcesses(procfs.Alive)
				}
				s.reportAggregates(true)
			} else {
				s.reportAggregates(false)
			}
			s.targets.Discover()
			ev := s.events.Load()
			dt := now.Sub(lastStatus).Seconds()
			st := Status{Elapsed: now.Sub(start), Processes: len(s.targets.LivePIDs()), Events: ev,
				EventsPerSec: float64(ev-lastEvents) / dt, Lost: s.lostNow()}
			if s.rec != nil {
				st.Bytes = s.rec.Size()
			}
			s.obs.Status(st)
			lastEvents, lastStatus = ev, now
		}
	}

	// Stop: detach so nothing new arrives, then take the collectors' last
	// GPU times (of the calls traced until now), then drain what is queued.
	s.tracingEnd.Store(monoNow())
	s.targets.CloseAll()
	s.stopGPUTimes()
	s.targets.CloseShared()
	s.tr.Drain()
	if err := <-readerDone; err != nil {
		return nil, err
	}
	s.applyNotes() // noted after the last record
	if st, err := s.tr.Stats(); err == nil {
		s.model.SetKernelStats(st.Submitted, st.RingbufFull, st.InflightFull, st.OrphanReturns, st.ReadFaults)
		s.model.SetNested(st.Nested)
		s.model.SetProgramSkips(st.ProgramSkips)
		s.model.SetPyCodeLost(st.PyCodeLost)
		if st.OrphanReturns > 0 {
			s.log.Debug("entries replaced while waiting", "n", st.EntryReplaced)
			for api, n := range s.tr.OrphansByAPI() {
				s.log.Debug("returns without their entry", "api", event.API(api).String(), "n", n)
			}
		}
		s.model.SetAttachFailures(s.targets.AttachFailures())
	}
	s.model.AddGPUTimesLost(s.gpuTimesLost())
	s.reportAggregates(false) // the last counts, probes closed
	if child != nil {
		out.Exit = child.stop()
		out.ExitCode = out.Exit.Code
	}
	res := s.model.Finish()
	s.resolver.PollKernels(true) // kernels named by files still being decoded
	res.Name(s.resolver.Names())
	res.WallOffsetNs = WallOffset()
	s.gpu.finish(res)
	out.Result = res
	out.Attached = s.targets.Summary()
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

// following reports whether this session follows process trees.
func (s *Session) following() bool {
	return s.cfg.Follow && (len(s.cfg.Command) > 0 || len(s.cfg.PIDs) > 0)
}

// markExited releases what pid held: its probes, and its GPU-time
// collector.
func (s *Session) markExited(pid int) {
	if s.targets.MarkExited(pid) && s.cfg.GPUTimes {
		s.gpuTimesExited(pid)
	}
}

// threadAlive is procfs.ThreadAlive for a thread id as BPF reports it (the
// entry table's keys).
func threadAlive(tid uint32) bool { return procfs.ThreadAlive(int(tid)) }

// modelStubs is the model's LastNewStub under the model lock, for the
// naming windows (control loop).
type modelStubs struct{ s *Session }

func (m modelStubs) LastNewStub(pid uint32) (uint64, int) {
	m.s.modelMu.Lock()
	defer m.s.modelMu.Unlock()
	return m.s.model.LastNewStub(pid)
}

func (s *Session) lostNow() uint64 {
	st, err := s.tr.Stats()
	if err != nil {
		return s.lost.Load()
	}
	return s.lost.Load() + st.RingbufFull + st.InflightFull + st.ProgramSkips
}
