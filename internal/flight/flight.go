// Package flight is cudatap's flight recorder (`agent --flight-recorder`,
// `record --flight-recorder`): it keeps the last seconds of every traced
// process's events in bounded memory and, when something goes wrong,
// writes them out as a recording of their own (a dump) with its HTML
// report, automatically.
//
// It takes the session's records as a recording would get them: the
// Recorder is a recording.Tap (the session's Config.Recording) and a
// model.Sink (Config.Sink) at once. The sink says what each call meant
// (an allocation that failed, a synchronization that blocked, GPU work
// still pending, NCCL ranks that stopped arriving); the tap gets the raw
// records, the same ones a .cudatap holds. Per process it keeps:
//
//   - a window: its events and the records timed with them, the last
//     Window of its own activity (a process that stops calling keeps its
//     last seconds), within a byte budget; when the budget is full the
//     oldest go first, counted (Dropped);
//   - the state the window needs from before it (state.go): the records
//     of live allocations, streams, communicators, kernel names, each
//     thread's device, and calls whose GPU work is still pending;
//   - its names (process, threads, kernels, frames, mappings).
//
// A trigger (trigger.go) makes a dump of the processes it concerns: an
// allocation failed for want of memory, NVML reported an Xid or a
// throttle on their GPU, NCCL ranks stopped arriving, a synchronization
// blocked longer than SyncAfter, the process died of a signal, or someone
// asked (Dump). The same trigger again for the same process within
// Cooldown writes nothing (counted). Dumps go to Dir, bounded in bytes,
// the oldest removed first (dump.go).
package flight

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

// Defaults of the options left zero.
const (
	DefaultMaxBytes = 32 << 20
	// DefaultHostMaxBytes bounds the windows of all processes together:
	// two processes' at the default budget, the rest of the agent's
	// memory limit (deploy/daemonset.yaml) left to the rest of it.
	DefaultHostMaxBytes = 48 << 20
	DefaultDirMaxBytes  = 512 << 20
	DefaultSyncAfter    = 5 * time.Second
	DefaultNCCLAfter    = 5 * time.Second
	DefaultCooldown     = 10 * time.Minute
	// DefaultAfter: how long after an automatic trigger the dump waits
	// for what follows (an out-of-memory error recovered from, or not),
	// unless the process exits first.
	DefaultAfter = 2 * time.Second
	// MinMaxBytes: the smallest per-process budget.
	MinMaxBytes = 64 << 10
)

// grace is how long a dump waits, past the moment it must cover, for
// records still on their way (in the ring buffer, in the reader) when no
// later record shows that the reader has passed that moment.
const grace = time.Second

// Options configure a Recorder; the flags of record and agent are named
// beside each.
type Options struct {
	Window   time.Duration // --flight-recorder: each process's last seconds kept
	MaxBytes int64         // --flight-max-bytes: per process (0: DefaultMaxBytes)
	// HostMaxBytes bounds the windows of all processes together
	// (--flight-host-max-bytes; 0: DefaultHostMaxBytes, or MaxBytes when
	// larger): past it the largest window gives up its oldest calls,
	// counted as dropped.
	HostMaxBytes int64
	// Dir receives the dumps (--dumps-dir; created), at most DirMaxBytes
	// of them (--dumps-max-bytes; 0: DefaultDirMaxBytes), the oldest
	// removed first.
	Dir         string
	DirMaxBytes int64
	// SyncAfter: a synchronization that blocks this long triggers a dump
	// (--flight-sync; 0: DefaultSyncAfter; negative: never). NCCLAfter:
	// ranks waiting this long in a collective for one that stopped
	// arriving do (--flight-nccl; 0: DefaultNCCLAfter; negative: never).
	SyncAfter time.Duration
	NCCLAfter time.Duration
	// Cooldown: a trigger firing again for a process within it writes no
	// second dump (--flight-cooldown; 0: DefaultCooldown).
	Cooldown time.Duration
	// After: how long an automatic dump waits for what follows its
	// trigger, unless the process exits first (0: DefaultAfter).
	After time.Duration
	// NoReport: no HTML report beside each dump.
	NoReport bool
	// NoExitWatch: process deaths are not watched through the kernel's
	// process connector (tests of the other triggers); exits are then
	// found by polling /proc, without their signal.
	NoExitWatch bool
	// Also, if set, gets the whole recording too (record -o x.cudatap
	// --flight-recorder).
	Also io.Writer
	// OnDump, if set, hears of each dump written, on the writer's
	// goroutine (record says it on stderr).
	OnDump func(*Result)
	// Version names the build in the reports.
	Version string
	Logger  *slog.Logger
}

func (o *Options) defaults() error {
	if o.Window <= 0 {
		return fmt.Errorf("--flight-recorder %v: want how much of each process's activity to keep, e.g. 30s", o.Window)
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxBytes < MinMaxBytes {
		return fmt.Errorf("--flight-max-bytes %d: want at least %d (64 KiB) per process, e.g. %d (32 MiB)", o.MaxBytes, MinMaxBytes, DefaultMaxBytes)
	}
	if o.HostMaxBytes == 0 {
		o.HostMaxBytes = max(DefaultHostMaxBytes, o.MaxBytes)
	}
	if o.HostMaxBytes < o.MaxBytes {
		return fmt.Errorf("--flight-host-max-bytes %d is less than one process's budget (--flight-max-bytes %d): raise it or lower --flight-max-bytes", o.HostMaxBytes, o.MaxBytes)
	}
	if o.DirMaxBytes == 0 {
		o.DirMaxBytes = DefaultDirMaxBytes
	}
	if o.DirMaxBytes < o.MaxBytes {
		return fmt.Errorf("--dumps-max-bytes %d is less than one process's budget (--flight-max-bytes %d): a dump would not fit; raise it or lower --flight-max-bytes", o.DirMaxBytes, o.MaxBytes)
	}
	if o.Dir == "" {
		return errors.New("the flight recorder needs a directory for its dumps: give --dumps-dir DIR")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return fmt.Errorf("--dumps-dir %s: %w (give a directory cudatap can write)", o.Dir, err)
	}
	f, err := os.CreateTemp(o.Dir, ".cudatap-flight-check-*")
	if err != nil {
		return fmt.Errorf("--dumps-dir %s cannot be written: %w (give a directory cudatap can write)", o.Dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	if o.SyncAfter == 0 {
		o.SyncAfter = DefaultSyncAfter
	}
	if o.NCCLAfter == 0 {
		o.NCCLAfter = DefaultNCCLAfter
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	if o.After <= 0 {
		o.After = DefaultAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Recorder is the flight recorder. It is a recording.Tap and a model.Sink
// for one session at a time; its other methods are safe from any
// goroutine.
type Recorder struct {
	o         Options
	log       *slog.Logger
	chunkSize int
	// names hands out the chunks of the processes' names (never reused:
	// names leave with their process).
	names chunkPool
	// What each process may hold, of MaxBytes: an eighth for its names, an
	// eighth for its lasting state, an eighth for its pending GPU work (so
	// that a process that never synchronizes cannot crowd out its
	// allocations), the rest for its window.
	namesMax, stateMax, windowMax int
	// hostMax bounds windows, the bytes of every process's window.
	hostMax, windows int

	mu     sync.Mutex
	hdr    recording.Header
	begun  bool
	procs  map[uint32]*proc
	cached *proc // the last proc asked for
	// chunks hands out the windows' chunks and reuses those that left.
	chunks chunkPool
	seq    uint64 // records read
	latest uint64 // the latest event time read, CLOCK_MONOTONIC ns
	ev     event.Event
	args   event.Args
	// last is the call the model handed the sink last: the record the
	// tap gets next for that process is that call's.
	last     lastCall
	also     *recording.Writer
	progress *straggler.Progress

	triggers
	stats counters
	jobs  chan *dump
	// written: dumps written (the writer's own).
	written int
	// onRecord, if set, sees the process after each of its records
	// (tests: the bound at every record).
	onRecord func(*proc)
	quit     chan struct{}
	closing  sync.Once
	wg       sync.WaitGroup
	exits    func() // stops the exit watch
}

type lastCall struct {
	pid uint32
	op  int
	set bool
}

// proc is what the recorder holds of one process.
type proc struct {
	pid    uint32
	window log
	names  log
	// namesUsed: the bytes of its name records.
	namesUsed int
	state     map[stateKey]*stateRecord
	// stBytes: what its state records take, lasting state [0] and
	// pending GPU work [1] apart.
	stBytes [2]int
	// live: the record that made each piece of state still alive, by
	// sequence number, while it is in the window (liveSeq: the other way).
	live    map[stateKey]uint64
	liveSeq map[uint64]stateKey
	// GPU work the model has not seen complete (pending.go).
	pending  pendingOps
	latest   uint64 // its latest event time
	oomCount int64
	// exited: the process is gone (exitKnown: its status was told, not
	// only found by polling /proc).
	exited, exitKnown bool
	exitedAt          uint64    // CLOCK_MONOTONIC ns
	exitedSeen        time.Time // when the recorder learnt it
	counts            procCounts
}

// procCounts: where a process's events went. Read = Held + Dropped +
// Expired.
type procCounts struct {
	Read    uint64 // events read
	Held    uint64 // in the window now
	Dropped uint64 // left the window early: the budget was full
	Expired uint64 // left it older than Window
	// StateDropped: calls of lasting state and names that did not fit
	// what the budget leaves them.
	StateDropped uint64
}

// New starts a flight recorder: its directory is made and checked, its
// dump writer and its watch (triggers that come with time: NCCL stalls,
// dumps due, exits) run until Close.
func New(o Options) (*Recorder, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	r := &Recorder{o: o, log: o.Logger, procs: map[uint32]*proc{}, progress: straggler.NewProgress(),
		jobs: make(chan *dump, 8), quit: make(chan struct{})}
	r.namesMax, r.stateMax = int(o.MaxBytes/8), int(o.MaxBytes/8)
	r.windowMax = int(o.MaxBytes) - r.namesMax - 2*r.stateMax
	r.hostMax = int(o.HostMaxBytes)
	r.chunkSize = int(min(256<<10, o.MaxBytes/32))
	r.chunks.size, r.names.size = r.chunkSize, min(r.chunkSize, 16<<10)
	r.triggers.init()
	r.stats.dumps, r.stats.suppressed = map[string]uint64{}, map[string]uint64{}
	if err := r.enforceDir(""); err != nil {
		return nil, err
	}
	if !o.NoExitWatch {
		stop, err := watchExits(r.Exited)
		if err != nil {
			r.log.Warn("flight recorder: process deaths by a signal are not seen (exits are found by polling /proc, without their signal)", "err", err)
		} else {
			r.exits = stop
		}
	}
	r.wg.Add(2)
	go r.writer()
	go r.watch()
	return r, nil
}

// Close ends the session's windows: the exits the kernel had queued are
// read (a death by a signal just before a session's end is dumped), the
// dumps due are written (those waiting for what follows their trigger,
// with what came), then the recorder stops.
func (r *Recorder) Close() error {
	r.closing.Do(func() {
		if r.exits != nil {
			r.exits() // the exits queued already are told first
		}
		r.mu.Lock()
		r.sealAll()
		r.mu.Unlock()
		close(r.quit)
		r.wg.Wait()
	})
	return nil
}

// Begin implements recording.Tap.
func (r *Recorder) Begin(h recording.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hdr, r.begun = h, true
	if r.o.Also != nil && r.also == nil {
		w, err := recording.NewWriter(r.o.Also, h)
		if err != nil {
			r.log.Error("flight recorder: the whole recording cannot be written", "err", err)
			return
		}
		r.also = w
	}
}

// Write implements recording.Tap (never called: records come through
// Record).
func (r *Recorder) Write([]byte) (int, error) { return 0, recording.ErrTapWrite }

// Flush implements recording.Tap.
func (r *Recorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.also != nil {
		r.also.Flush()
	}
}

// AlsoErr is the whole recording's first write error (Options.Also).
func (r *Recorder) AlsoErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.also == nil {
		return nil
	}
	return r.also.Err()
}

// Record implements recording.Tap: one record of the session, on the
// reader goroutine.
func (r *Recorder) Record(typ byte, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, role, ok := recording.Classify(typ, payload)
	if r.also != nil {
		if ok && role == recording.RoleEnd {
			r.also.Close() // its own end record, with its own count
		} else {
			r.also.Raw(typ, payload)
		}
	}
	if !ok {
		return
	}
	switch role {
	case recording.RoleEnd:
		r.sealAll() // the session is over: nothing more will come
		return
	case recording.RoleGlobal:
		return
	}
	r.seq++
	p := r.proc(pid)
	switch role {
	case recording.RoleEvent:
		r.event(p, payload)
	case recording.RoleTimed:
		r.keep(p, r.seq, typ, payload, 0, -1)
	case recording.RoleName:
		if p.namesUsed+recHeader+len(payload) > r.namesMax {
			p.counts.StateDropped++
			r.stats.stateDropped++
			return
		}
		p.namesUsed += recHeader + len(payload)
		p.names.add(&r.names, r.seq, typ, payload, 0, -1)
	case recording.RoleState:
		r.keepState(p, stateKey{stateFact, r.seq}, r.seq, typ, payload)
	}
	if len(r.pending) > 0 {
		r.sealDue(false)
	}
	if r.onRecord != nil {
		r.onRecord(p)
	}
}

// event takes an event record into p's window.
func (r *Recorder) event(p *proc, b []byte) {
	le := binary.LittleEndian
	t := max(le.Uint64(b[0:]), le.Uint64(b[8:]))
	r.latest = max(r.latest, t)
	p.latest = max(p.latest, t)
	seq := r.seq
	// The call the model handed the sink last is this one: its GPU work
	// is pending until the model releases it.
	op := int32(-1)
	if l := r.last; l.set && l.pid == p.pid {
		if l.op >= 0 && p.pending.add(l.op, seq) {
			op = int32(l.op)
		}
		r.last.set = false
	}
	p.pending.early = p.pending.early[:0]
	r.keep(p, seq, 0x01, b, max(t, 1), op)
	p.counts.Read++
	p.counts.Held++
	if spec := event.Lookup(event.CookieAPI(le.Uint64(b[16:]))); spec != nil && statefulClass(spec.Class) {
		if event.Decode(b, &r.ev) == nil {
			if c, ok := changes(&r.ev, &r.args); ok {
				r.change(p, c, seq)
			}
		}
	}
	r.trim(p)
}

// statefulClass: calls that may make or end lasting state (changes).
func statefulClass(c event.Class) bool {
	switch c {
	case event.ClassMalloc, event.ClassFree, event.ClassHostAlloc, event.ClassHostRegister, event.ClassHostFree,
		event.ClassHostUnregister, event.ClassStreamCreate, event.ClassStreamDestroy, event.ClassSetDevice,
		event.ClassCommInit, event.ClassFuncName:
		return true
	}
	return false
}

// change follows a call that made or ended lasting state.
func (r *Recorder) change(p *proc, c stateChange, seq uint64) {
	if old, ok := p.live[c.key]; ok {
		delete(p.liveSeq, old)
		delete(p.live, c.key)
	}
	r.dropState(p, c.key)
	if c.make {
		p.live[c.key] = seq
		p.liveSeq[seq] = c.key
	}
}

// keep appends a record to p's window.
func (r *Recorder) keep(p *proc, seq uint64, typ byte, payload []byte, t uint64, op int32) {
	held := p.window.bytes
	p.window.add(&r.chunks, seq, typ, payload, t, op)
	r.windows += p.window.bytes - held
}

// trim makes p's window fit: the oldest chunks go while it is over its
// budget, or older than Window before p's latest event. Then the windows
// fit the host's bound: the largest gives up its oldest chunk while they
// are over it (a process's share shrinks as more are busy).
func (r *Recorder) trim(p *proc) {
	window := uint64(r.o.Window)
	for len(p.window.chunks) > 1 {
		c := p.window.chunks[0]
		full := p.window.bytes > r.windowMax
		if !full && (p.latest < window || c.last >= p.latest-window) {
			break
		}
		r.evict(p, p.window.front())
	}
	for r.windows > r.hostMax {
		q := r.largestWindow()
		if q == nil {
			return
		}
		r.evict(q, q.window.front())
	}
}

// largestWindow is the process whose window holds the most, of those
// with more than the chunk being filled; nil if none.
func (r *Recorder) largestWindow() *proc {
	var q *proc
	for _, p := range r.procs {
		if len(p.window.chunks) > 1 && (q == nil || p.window.bytes > q.window.bytes) {
			q = p
		}
	}
	return q
}

// evict takes a chunk out of p's window: its events are counted gone
// (dropped when still within Window, expired otherwise); the calls whose
// state lives on go to the state table.
func (r *Recorder) evict(p *proc, c *chunk) {
	r.windows -= len(c.buf)
	le := binary.LittleEndian
	var cutoff uint64
	if w := uint64(r.o.Window); p.latest > w {
		cutoff = p.latest - w
	}
	each(c.buf[:c.n], func(seq uint64, typ byte, op int32, payload []byte) {
		if typ != 0x01 {
			return
		}
		p.counts.Held--
		if max(le.Uint64(payload[0:]), le.Uint64(payload[8:])) >= cutoff {
			p.counts.Dropped++
			r.stats.dropped++
		} else {
			p.counts.Expired++
		}
		if k, ok := p.liveSeq[seq]; ok {
			delete(p.liveSeq, seq)
			if !r.keepState(p, k, seq, typ, payload) {
				delete(p.live, k) // not kept: nothing to end later
			}
			return
		}
		if op >= 0 && p.pending.still(int(op), seq) {
			r.keepState(p, stateKey{statePending, seq}, seq, typ, payload)
		}
	})
	r.chunks.put(c)
}

// stateOverhead: what a state record costs beside its payload (the map
// entry and the record), counted against the budget.
const stateOverhead = 96

// keepState copies record seq into p's state table under k; false when it
// does not fit (counted).
func (r *Recorder) keepState(p *proc, k stateKey, seq uint64, typ byte, payload []byte) bool {
	r.dropState(p, k)
	b := k.budget()
	if p.stBytes[b]+len(payload)+stateOverhead > r.stateMax {
		p.counts.StateDropped++
		r.stats.stateDropped++
		return false
	}
	p.state[k] = &stateRecord{seq: seq, typ: typ, payload: append([]byte(nil), payload...)}
	p.stBytes[b] += len(payload) + stateOverhead
	return true
}

func (r *Recorder) dropState(p *proc, k stateKey) {
	if s, ok := p.state[k]; ok {
		p.stBytes[k.budget()] -= len(s.payload) + stateOverhead
		delete(p.state, k)
	}
}

// proc returns pid's, made at its first record.
func (r *Recorder) proc(pid uint32) *proc {
	if c := r.cached; c != nil && c.pid == pid {
		return c // a process's calls come in runs
	}
	p := r.procs[pid]
	if p == nil {
		p = &proc{pid: pid, state: map[stateKey]*stateRecord{}, live: map[stateKey]uint64{}, liveSeq: map[uint64]stateKey{}}
		r.procs[pid] = p
	}
	r.cached = p
	return p
}

// The model.Sink half: what the calls meant.

// Call implements model.Sink.
func (r *Recorder) Call(mp *model.Process, c *model.Call) {
	r.progress.Call(mp, c)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = lastCall{pid: mp.PID, op: c.GPUOp, set: true}
	p := r.proc(mp.PID)
	if mp.OOMCount > p.oomCount {
		p.oomCount = mp.OOMCount
		r.fire(kindOOM, []uint32{mp.PID}, mp.PID, c.End, oomDetail(c), r.o.After)
	}
}

// Sync implements model.Sink.
func (r *Recorder) Sync(mp *model.Process, s *model.Sync) {
	r.progress.Sync(mp, s)
	if r.o.SyncAfter < 0 || s.BlockedNs < uint64(r.o.SyncAfter) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fire(kindSync, []uint32{mp.PID}, mp.PID, s.Start+s.BlockedNs, syncDetail(s), r.o.After)
}

// GPUOp implements model.Sink: the op is final (proven complete, or
// given up on), its call no longer pending.
func (r *Recorder) GPUOp(mp *model.Process, op *model.GPUOp) {
	r.progress.GPUOp(mp, op)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[mp.PID] == nil {
		return
	}
	p := r.proc(mp.PID)
	if seq, ok := p.pending.done(op.ID); ok {
		r.dropState(p, stateKey{statePending, seq})
	}
}

// Dependency implements model.Sink.
func (r *Recorder) Dependency(*model.Process, *model.Dependency) {}

// Hold implements model.Sink.
func (r *Recorder) Hold(*model.Process, *model.Hold) {}
