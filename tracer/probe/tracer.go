// Package tracer loads cudatap's BPF programs, attaches them to the CUDA
// libraries of target processes and reads the events they write. It is the
// only package that touches cilium/ebpf.
package probe

import (
	"encoding"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/cudatap/cudatap/tracer/event"
)

// StackMode says on which calls the user stack is captured.
type StackMode uint8

const (
	StacksNone StackMode = iota
	StacksSync           // on calls that may block the host (the default)
	StacksAll            // on every call
)

// Config of a Tracer.
type Config struct {
	RingBufferBytes int // power of two, ≥ page size; 0 = 16 MiB
	Stacks          StackMode
	Logger          *slog.Logger
	// PerSymbolUprobes uses one perf-event uprobe per symbol even where the
	// kernel has uprobe_multi (the path kernels before 6.6 take; tests).
	PerSymbolUprobes bool
	// PollInterval bounds how long a record waits in the ring buffer
	// before the reader looks (0: 20 ms). The BPF side wakes the reader
	// early only when an eighth of the ring is pending; longer intervals
	// cost fewer wakeups (the agent), shorter ones keep live views fresh.
	PollInterval time.Duration
	// Follow loads the programs that keep the followed tree in the kernel
	// (a process started by one of it joins it before it runs): see
	// StartFollow and AddToTree.
	Follow bool
	// KernelArgs has each launch record carry its kernel's parameter
	// values (event.KernelArgs): the pointers the kernel was given, for
	// the race lint.
	KernelArgs bool
	// Aggregate and LaunchTimes size the launch counters and the launch
	// time tables (aggregate mode, event.CookieAggregate and
	// event.CookieAggregateTime): without them the tables hold one entry,
	// not 16,384 per CPU.
	Aggregate, LaunchTimes bool
}

// Stats are the BPF side's counters, summed over CPUs.
type Stats struct {
	Submitted     uint64
	RingbufFull   uint64
	InflightFull  uint64
	OrphanReturns uint64
	ReadFaults    uint64
	Nested        uint64 // launches both layers saw, counted once
	EntryReplaced uint64 // entries saved over one still waiting (nested same-API calls)
	// ProgramSkips counts runs of our programs the kernel skipped to avoid
	// recursion (another BPF program was running on that CPU): each is a
	// lost entry or return.
	ProgramSkips uint64
	// PyCodeLost counts Python code objects whose copy found no room in
	// the ring buffer: their frames are named from the live process.
	PyCodeLost uint64
	// AggregateFull counts launches that found no room in the launch
	// counters (aggregate mode) and went to the ring buffer instead.
	AggregateFull uint64
	// LaunchTimesLost counts counted launches whose time found no room
	// (a start per thread, or a histogram bucket).
	LaunchTimesLost uint64
	// TreeFull counts processes of the followed tree that found no room
	// in its table: they are not traced.
	TreeFull uint64
}

// programs is the set of programs one kernel variant uses. The object
// carries two: for uprobe_multi links, and for one perf-event uprobe per
// symbol (kernels before 6.6). New loads only the one it attaches.
type programs struct {
	entry, ret, ldso *ebpf.Program
	fork, exec, exit *ebpf.Program // the followed tree's (Config.Follow), else nil
}

func (p *programs) Close() error {
	return errors.Join(p.entry.Close(), p.ret.Close(), p.ldso.Close(), p.fork.Close(), p.exec.Close(), p.exit.Close())
}

// Tracer owns the loaded BPF objects and the ring-buffer reader.
type Tracer struct {
	cfg    Config
	log    *slog.Logger
	maps   cudatapMaps
	progs  programs
	multi  bool // uprobe_multi links available
	reader *ringbuf.Reader

	pairingMu sync.Mutex
	pairingN  int

	sampleMu   sync.Mutex
	sampledOut map[int]bool // processes SampleOut keeps out

	treeLinks []link.Link // the fork and exec tracepoints (StartFollow)
}

// New loads the BPF programs. It fails with an explanation when the process
// lacks privileges or the kernel lacks BTF/uprobe support.
func New(cfg Config) (*Tracer, error) {
	if cfg.RingBufferBytes == 0 {
		cfg.RingBufferBytes = 16 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if err := CheckArch(); err != nil {
		return nil, err
	}
	if note := StackNote(); note != "" && cfg.Stacks != StacksNone {
		cfg.Logger.Warn(note)
	}
	if err := CheckPrivileges(); err != nil {
		return nil, err
	}
	feat := Features()
	if problems := feat.Problems(); len(problems) > 0 {
		return nil, fmt.Errorf("this kernel cannot run cudatap: %s", strings.Join(problems, "; "))
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		cfg.Logger.Debug("raise RLIMIT_MEMLOCK", "err", err)
	}
	spec, err := loadCudatap()
	if err != nil {
		return nil, fmt.Errorf("parse embedded BPF object: %w", err)
	}
	var specs cudatapSpecs
	if err := spec.Assign(&specs); err != nil {
		return nil, fmt.Errorf("parse embedded BPF object: %w", err)
	}
	specs.Events.MaxEntries = uint32(cfg.RingBufferBytes)
	if !cfg.Aggregate {
		specs.LaunchCounts.MaxEntries = 1
	}
	if !cfg.LaunchTimes {
		specs.LaunchTimes.MaxEntries, specs.LaunchStarted.MaxEntries = 1, 1
	}
	// Force a wakeup each time another eighth of the ring is pending
	// (once, not for every record past it); otherwise the reader's poll
	// timer picks records up.
	if err := specs.WakeupBytes.Set(uint64(cfg.RingBufferBytes / 8)); err != nil {
		return nil, fmt.Errorf("configure BPF programs: %w", err)
	}

	t := &Tracer{cfg: cfg, log: cfg.Logger, multi: !cfg.PerSymbolUprobes && feat.UprobeMulti}
	want := [3]*ebpf.ProgramSpec{specs.CudaEntry, specs.CudaReturn, specs.Ldso}
	if t.multi {
		want = [3]*ebpf.ProgramSpec{specs.CudaEntryMulti, specs.CudaReturnMulti, specs.LdsoMulti}
	}
	spec.Programs = map[string]*ebpf.ProgramSpec{}
	for _, p := range want {
		spec.Programs[p.Name] = p
	}
	if cfg.Follow {
		spec.Programs[specs.TreeFork.Name] = specs.TreeFork
		spec.Programs[specs.TreeExec.Name] = specs.TreeExec
		spec.Programs[specs.TreeExit.Name] = specs.TreeExit
	}
	specs.Tree.MaxEntries = treeWords()
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load BPF programs (verifier): %+v", ve)
		}
		return nil, fmt.Errorf("load BPF programs: %w (run `cudatap doctor` to check kernel support)", err)
	}
	defer coll.Close() // nothing once the maps and programs are taken
	if err := coll.Assign(&t.maps); err != nil {
		return nil, fmt.Errorf("load BPF maps: %w", err)
	}
	t.progs = programs{
		entry: coll.DetachProgram(want[0].Name),
		ret:   coll.DetachProgram(want[1].Name),
		ldso:  coll.DetachProgram(want[2].Name),
	}
	if cfg.Follow {
		t.progs.fork = coll.DetachProgram(specs.TreeFork.Name)
		t.progs.exec = coll.DetachProgram(specs.TreeExec.Name)
		t.progs.exit = coll.DetachProgram(specs.TreeExit.Name)
	}

	t.reader, err = ringbuf.NewReader(t.maps.Events)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("open ring buffer: %w", err)
	}
	return t, nil
}

// OrphansByAPI returns, per API id (low 8 bits), how many returns came
// without their entry: a diagnostic for the orphan-returns total.
func (t *Tracer) OrphansByAPI() map[uint8]uint64 {
	out := map[uint8]uint64{}
	for i := uint32(0); i < 256; i++ {
		var perCPU []uint64
		if t.maps.Orphans.Lookup(i, &perCPU) != nil {
			continue
		}
		for _, v := range perCPU {
			if v != 0 {
				out[uint8(i)] += v
			}
		}
	}
	return out
}

// PruneInflight deletes the saved entries of threads that no longer exist
// (killed inside a call: their return never comes), and their launch
// starts (aggregate mode with launch times), and returns how many.
func (t *Tracer) PruneInflight(alive func(tid uint32) bool) (int, error) {
	n, err := deleteKeys[cudatapInflightKey, cudatapInflight](t.maps.Inflight, func(k *cudatapInflightKey) bool { return !alive(k.Tid) })
	if err != nil {
		return 0, fmt.Errorf("read entry table: %w", err)
	}
	m, err := deleteKeys[uint32, cudatapLaunchStart](t.maps.LaunchStarted, func(tid *uint32) bool { return !alive(*tid) })
	if err != nil {
		return n, fmt.Errorf("read launch starts: %w", err)
	}
	return n + m, nil
}

// deleteKeys deletes the keys of m that match, collected first (deleting
// while iterating a hash map skips keys), and returns how many. V is the
// value type (a slice of it for a per-CPU map).
func deleteKeys[K, V any](m *ebpf.Map, match func(*K) bool) (int, error) {
	var (
		k    K
		v    V
		dead []K
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if match(&k) {
			dead = append(dead, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	for _, k := range dead {
		m.Delete(k)
	}
	return len(dead), nil
}

// SetPython gives the BPF side the CPython layout of a process, so that its
// stack records carry the Python frames (see bpf/python.h). cfg must encode
// to struct py_config.
func (t *Tracer) SetPython(pid int, cfg encoding.BinaryMarshaler) error {
	if err := t.maps.PyConfigs.Put(uint32(pid), cfg); err != nil {
		return fmt.Errorf("set Python layout of process %d: %w", pid, err)
	}
	return nil
}

// PairingStart and PairingStop count the runtime launch attachments (see
// AttachRuntimeLaunches): while there are none, driver launch probes skip
// the per-thread stub hand-over entirely.
// StubPending reports whether one of the threads tids has a runtime
// launch in flight that was counted itself (emitted while the driver was
// not hooked): the driver launch it makes must still find the hand-over on.
func (t *Tracer) StubPending(tids []int) bool {
	for _, tid := range tids {
		var v uint64
		if t.maps.PendingStub.Lookup(uint32(tid), &v) == nil && v&stubEmitted != 0 {
			return true
		}
	}
	return false
}

// stubEmitted is STUB_EMITTED (bpf/cudatap.bpf.c).
const stubEmitted = 1 << 63

func (t *Tracer) PairingStart() { t.addPairing(1) }
func (t *Tracer) PairingStop()  { t.addPairing(-1) }

func (t *Tracer) addPairing(d int) {
	t.pairingMu.Lock()
	defer t.pairingMu.Unlock()
	t.pairingN = max(t.pairingN+d, 0)
	t.maps.Pairing.Put(uint32(0), uint32(t.pairingN))
}

// SetRuntime tells the shared probes that process pid has a CUDA runtime:
// its driver calls other than launches and kernel loads are the runtime's
// and do not count (the BPF side also learns it from the first runtime call).
func (t *Tracer) SetRuntime(pid int) error {
	if err := t.setProcFlag(pid, procHasRuntime); err != nil {
		return fmt.Errorf("mark process %d as using the CUDA runtime: %w", pid, err)
	}
	return nil
}

// SampleOut keeps process pid out of the shared probes until SampleIn
// (the agent's per-process sampling): none of its calls count. The mark
// goes with the process: ForgetProcess and PruneProcesses drop it with the
// rest of what is known of it. While no process is out, probes do not look
// their process up for it.
func (t *Tracer) SampleOut(pid int) error {
	t.sampleMu.Lock()
	defer t.sampleMu.Unlock()
	if err := t.maps.SampledOut.Put(uint32(pid), uint8(1)); err != nil {
		return fmt.Errorf("sample process %d out: %w", pid, err)
	}
	if t.sampledOut == nil {
		t.sampledOut = map[int]bool{}
	}
	t.sampledOut[pid] = true
	return t.setSampling()
}

// SampleIn counts process pid's calls again.
func (t *Tracer) SampleIn(pid int) error {
	t.sampleMu.Lock()
	defer t.sampleMu.Unlock()
	t.maps.SampledOut.Delete(uint32(pid))
	delete(t.sampledOut, pid)
	return t.setSampling()
}

// setSampling tells the probes whether any process is sampled out
// (sampleMu held).
func (t *Tracer) setSampling() error {
	on := uint32(0)
	if len(t.sampledOut) > 0 {
		on = 1
	}
	if err := t.maps.Sampling.Put(uint32(0), on); err != nil {
		return fmt.Errorf("per-process sampling: %w", err)
	}
	return nil
}

// The bits of proc_flags (bpf/cudatap.bpf.c, PROC_*).
const procHasRuntime = 1

// setProcFlag adds a bit to a process's flags, keeping the others (the BPF
// side may set PROC_HAS_RUNTIME at the same time: it too only adds).
func (t *Tracer) setProcFlag(pid int, bit uint8) error {
	var v uint8
	t.maps.ProcFlags.Lookup(uint32(pid), &v)
	return t.maps.ProcFlags.Put(uint32(pid), v|bit)
}

// ForgetProcess drops what the shared probes know of an exited process.
func (t *Tracer) ForgetProcess(pid int) {
	t.maps.ProcFlags.Delete(uint32(pid))
	t.sampleMu.Lock()
	defer t.sampleMu.Unlock()
	if t.sampledOut[pid] {
		t.maps.SampledOut.Delete(uint32(pid))
		delete(t.sampledOut, pid)
		t.setSampling()
	}
}

// PruneProcesses drops what the shared probes know of processes that are
// gone (those that exited before user space saw them): a new process under
// a reused PID must not inherit it.
func (t *Tracer) PruneProcesses(alive func(pid int) bool) int {
	n, _ := deleteKeys[uint32, uint8](t.maps.ProcFlags, func(pid *uint32) bool { return !alive(int(*pid)) })
	t.sampleMu.Lock()
	defer t.sampleMu.Unlock()
	m, _ := deleteKeys[uint32, uint8](t.maps.SampledOut, func(pid *uint32) bool {
		if alive(int(*pid)) {
			return false
		}
		delete(t.sampledOut, int(*pid))
		return true
	})
	t.setSampling()
	return n + m
}

// Follow flags (bpf/cudatap.bpf.c).
const (
	followOn       = 1
	followHoldExec = 2
)

// StartFollow attaches the followed tree's tracepoints (Config.Follow): a
// process the tree starts joins it; with holdExec, one of the tree that
// executes a program is stopped there (a ProcessExec record with
// CookieStop) until it is continued, so that what it maps is hooked before
// it runs.
func (t *Tracer) StartFollow(holdExec bool) error {
	if t.progs.fork == nil {
		return errors.New("the tracer was not loaded to follow processes (Config.Follow)")
	}
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{{"sched_process_fork", t.progs.fork}, {"sched_process_exec", t.progs.exec}, {"sched_process_exit", t.progs.exit}} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp.name, Program: tp.prog})
		if err != nil {
			return fmt.Errorf("follow the processes the command starts: attach to the %s tracepoint: %w", tp.name, err)
		}
		t.treeLinks = append(t.treeLinks, l)
	}
	flags := uint32(followOn)
	if holdExec {
		flags |= followHoldExec
	}
	return t.maps.Follow.Put(uint32(0), flags)
}

// treeWords is how many 64-bit words the tree's bitmap needs for every
// pid the kernel may hand out (kernel.pid_max: 4M at most, 512 KiB).
func treeWords() uint32 {
	max := 1 << 22 // PID_MAX_LIMIT on 64-bit
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 && n < max {
			max = n
		}
	}
	return uint32((max + 63) / 64)
}

// AddToTree makes pid a root of the followed tree: it and every process it
// starts from now on count for the probes that filter on the tree. (The
// BPF side sets bits of the same words as processes start: a root is
// added while the processes that share its word are not forking, in
// practice the case; a bit set meanwhile would be lost, and that child
// counted nowhere.)
func (t *Tracer) AddToTree(pid int) error {
	word := uint32(pid) / 64
	var w uint64
	if err := t.maps.Tree.Lookup(word, &w); err != nil {
		return fmt.Errorf("follow process %d: pid beyond the tree's table (%w)", pid, err)
	}
	if err := t.maps.Tree.Put(word, w|1<<(uint32(pid)%64)); err != nil {
		return fmt.Errorf("follow process %d: %w", pid, err)
	}
	return nil
}

// TreeMapID is the kernel's id of the tree's table: the guardian opens it
// too, to continue the tree's processes that are stopped should cudatap
// die while holding them.
func (t *Tracer) TreeMapID() (ebpf.MapID, error) {
	info, err := t.maps.Tree.Info()
	if err != nil {
		return 0, err
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("this kernel gives BPF maps no id")
	}
	return id, nil
}

// AllowCgroup makes shared probes attached with CgroupProcesses count the
// processes of cgroup id (the cgroup v2 directory's inode number).
func (t *Tracer) AllowCgroup(id uint64) error {
	if err := t.maps.Cgroups.Put(id, uint8(1)); err != nil {
		return fmt.Errorf("trace cgroup %d: %w", id, err)
	}
	return nil
}

// ForgetPython removes a process's CPython layout (it exited).
func (t *Tracer) ForgetPython(pid int) {
	t.maps.PyConfigs.Delete(uint32(pid))
}

// counters maps the BPF side's stat indexes (enum stat in bpf/cudatap.h)
// to the fields of s.
func (s *Stats) counters() [cudatapStatSTAT_MAX]*uint64 {
	return [...]*uint64{
		cudatapStatSTAT_SUBMITTED:      &s.Submitted,
		cudatapStatSTAT_RINGBUF_FULL:   &s.RingbufFull,
		cudatapStatSTAT_INFLIGHT_FULL:  &s.InflightFull,
		cudatapStatSTAT_ORPHAN_RETURN:  &s.OrphanReturns,
		cudatapStatSTAT_READ_FAULT:     &s.ReadFaults,
		cudatapStatSTAT_NESTED:         &s.Nested,
		cudatapStatSTAT_ENTRY_REPLACED: &s.EntryReplaced,
		cudatapStatSTAT_PY_CODE_LOST:   &s.PyCodeLost,
		cudatapStatSTAT_AGG_FULL:       &s.AggregateFull,
		cudatapStatSTAT_AGG_TIME_LOST:  &s.LaunchTimesLost,
		cudatapStatSTAT_TREE_FULL:      &s.TreeFull,
	}
}

// LaunchCounts are the launches counted in BPF (aggregate mode:
// event.Spec.AggregateCookie) since the tracer was loaded, per process, API
// and stream, summed over CPUs.
func (t *Tracer) LaunchCounts() (map[uint32]map[event.LaunchKey]uint64, error) {
	out := map[uint32]map[event.LaunchKey]uint64{}
	var k cudatapAggKey
	var perCPU []uint64
	it := t.maps.LaunchCounts.Iterate()
	for it.Next(&k, &perCPU) {
		var n uint64
		for _, v := range perCPU {
			n += v
		}
		if out[k.Tgid] == nil {
			out[k.Tgid] = map[event.LaunchKey]uint64{}
		}
		out[k.Tgid][event.LaunchKey{API: event.API(k.Api), Stream: k.Stream}] += n
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the launch counters: %w", err)
	}
	return out, nil
}

// ForgetAggregates deletes the launch counters and times of processes
// (exited, their counts read for the last time).
func (t *Tracer) ForgetAggregates(pids []uint32) {
	gone := make(map[uint32]bool, len(pids))
	for _, p := range pids {
		gone[p] = true
	}
	deleteKeys[cudatapAggKey, []uint64](t.maps.LaunchCounts, func(k *cudatapAggKey) bool { return gone[k.Tgid] })
	deleteKeys[cudatapLaunchTimeKey, []cudatapLaunchTime](t.maps.LaunchTimes, func(k *cudatapLaunchTimeKey) bool { return gone[k.Tgid] })
}

// LaunchTimes are the launch times kept in BPF (aggregate mode with
// event.CookieAggregateTime) since the tracer was loaded, per process and
// API, summed over CPUs.
func (t *Tracer) LaunchTimes() (map[uint32]map[event.API]*event.TimeHistogram, error) {
	out := map[uint32]map[event.API]*event.TimeHistogram{}
	var k cudatapLaunchTimeKey
	var perCPU []cudatapLaunchTime
	it := t.maps.LaunchTimes.Iterate()
	for it.Next(&k, &perCPU) {
		if k.Bucket >= 64 {
			continue
		}
		if out[k.Tgid] == nil {
			out[k.Tgid] = map[event.API]*event.TimeHistogram{}
		}
		h := out[k.Tgid][event.API(k.Api)]
		if h == nil {
			h = &event.TimeHistogram{}
			out[k.Tgid][event.API(k.Api)] = h
		}
		for _, v := range perCPU {
			h.Count[k.Bucket] += v.Count
			h.Ns[k.Bucket] += v.Ns
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the launch times: %w", err)
	}
	return out, nil
}

// Stats reads the per-CPU counters.
func (t *Tracer) Stats() (Stats, error) {
	var s Stats
	for i, f := range s.counters() {
		var perCPU []uint64
		if err := t.maps.Stats.Lookup(uint32(i), &perCPU); err != nil {
			return s, fmt.Errorf("read BPF stats: %w", err)
		}
		for _, v := range perCPU {
			*f += v
		}
	}
	for _, p := range []*ebpf.Program{t.progs.entry, t.progs.ret, t.progs.ldso} {
		if st, err := p.Stats(); err == nil {
			s.ProgramSkips += st.RecursionMisses
		}
	}
	return s, nil
}

// Read calls fn with every record until Drain or Close. The slice passed to
// fn is reused: fn must not keep it. idle, if set, runs on the reader's goroutine each time the reader found
// the ring empty and its wait timed out (every Config.PollInterval while
// idle): work that must run in order with the records, and soon, even on
// a quiet host.
func (t *Tracer) Read(fn func(raw []byte), idle func()) error {
	var rec ringbuf.Record
	// The reader waits only once it has emptied the ring, and then until
	// this deadline; records that came without a wakeup are read at the
	// latest then. So the deadline moves only when it has passed, not at
	// every record.
	t.reader.SetDeadline(time.Now().Add(t.cfg.PollInterval))
	for {
		err := t.reader.ReadInto(&rec)
		switch {
		case err == nil:
			fn(rec.RawSample)
		case errors.Is(err, os.ErrDeadlineExceeded):
			if idle != nil {
				idle()
			}
			t.reader.SetDeadline(time.Now().Add(t.cfg.PollInterval))
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		case errors.Is(err, ringbuf.ErrFlushed):
			return nil
		default:
			return fmt.Errorf("read ring buffer: %w", err)
		}
	}
}

// Drain makes Read return once every record already in the ring buffer has
// been delivered. Detach all probes first so that nothing new arrives.
func (t *Tracer) Drain() error { return t.reader.Flush() }

// Close releases the reader and the BPF objects (links are closed by their
// Attachments).
func (t *Tracer) Close() error {
	var errs []error
	for _, l := range t.treeLinks {
		errs = append(errs, l.Close())
	}
	if t.reader != nil {
		errs = append(errs, t.reader.Close())
	}
	errs = append(errs, t.progs.Close(), t.maps.Close())
	return errors.Join(errs...)
}
