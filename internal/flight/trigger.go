package flight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/gpusample"
	"github.com/cudatap/cudatap/tracer/model"
)

// The triggers, as dumps and metrics name them.
const (
	kindOOM      = "oom"          // a device allocation failed for want of memory
	kindXid      = "gpu_xid"      // NVML: an Xid (or a double-bit ECC error, a GPU lost) on the process's GPU
	kindThrottle = "gpu_throttle" // NVML: the process's GPU slowed down (hardware, thermal, power brake)
	kindNCCL     = "nccl_stall"   // NCCL ranks waited in a collective for one that stopped arriving
	kindSync     = "sync"         // a synchronization blocked the host longer than SyncAfter
	kindSignal   = "signal"       // the process died of a signal
	kindDemand   = "on_demand"    // someone asked (POST /dump, cudatap dump, SIGUSR2)
)

// Kinds lists the triggers.
var Kinds = []string{kindOOM, kindXid, kindThrottle, kindNCCL, kindSync, kindSignal, kindDemand}

// ErrNotTraced: a dump was asked of a process the recorder holds nothing of.
var ErrNotTraced = errors.New("not traced")

// triggers is the recorder's trigger state (under its lock).
type triggers struct {
	pending []*dump
	// cool: when each trigger last fired for each process (CLOCK_MONOTONIC
	// ns); the same again within Cooldown writes nothing.
	cool map[coolKey]uint64
	// NVML: the traced processes each device had at its last sample, and
	// whether it was throttled then.
	devices   map[int][]uint32
	throttled map[int]bool
	ended     bool // the session is over
}

type coolKey struct {
	kind string
	pid  uint32
}

func (t *triggers) init() {
	t.cool = map[coolKey]uint64{}
	t.devices = map[int][]uint32{}
	t.throttled = map[int]bool{}
}

// fire asks for a dump of pids (pid the one it is about, 0 for several):
// what happened at at, in words; it is written once the recorder has read
// past at+after (or the processes exited). The processes for which the
// same trigger fired within Cooldown, or is waiting to be written, are
// left out; none left: nothing is written, counted. Asked dumps are never
// left out. Under r.mu.
func (r *Recorder) fire(kind string, pids []uint32, pid uint32, at uint64, detail string, after time.Duration) *dump {
	now := monoNow()
	var keep []uint32
	for _, q := range pids {
		if r.procs[q] == nil {
			continue
		}
		if kind != kindDemand {
			if last, ok := r.cool[coolKey{kind, q}]; ok && now-last < uint64(r.o.Cooldown) {
				continue
			}
		}
		keep = append(keep, q)
	}
	if len(keep) == 0 {
		r.stats.suppressed[kind]++
		return nil
	}
	for _, q := range keep {
		r.cool[coolKey{kind, q}] = now
	}
	d := &dump{kind: kind, detail: detail, pid: pid, pids: keep, at: at, deadline: at + uint64(after), done: make(chan struct{})}
	r.log.Info("flight recorder: trigger", "trigger", kind, "pids", keep, "detail", detail)
	if r.ended {
		r.seal(d) // nothing more will come
	} else {
		r.pending = append(r.pending, d)
	}
	return d
}

// sealDue hands the dumps due to the writer: those past whose deadline the
// recorder has read, whose processes all exited before it, or (timed)
// whose deadline passed grace ago. Under r.mu.
func (r *Recorder) sealDue(timed bool) {
	var now uint64
	if timed {
		now = monoNow()
	}
	keep := r.pending[:0]
	for _, d := range r.pending {
		deadline := d.deadline
		if exit, ok := r.allExited(d.pids); ok {
			deadline = min(deadline, exit)
		}
		if r.latest > deadline || r.ended || (timed && now > deadline+uint64(grace)) {
			r.seal(d)
		} else {
			keep = append(keep, d)
		}
	}
	clear(r.pending[len(keep):])
	r.pending = keep
}

// sealAll hands every pending dump to the writer (the session ended).
func (r *Recorder) sealAll() {
	r.ended = true
	for _, d := range r.pending {
		r.seal(d)
	}
	r.pending = nil
}

// allExited reports whether every process of pids has exited, and the
// last of their exits.
func (r *Recorder) allExited(pids []uint32) (uint64, bool) {
	var last uint64
	for _, q := range pids {
		p := r.procs[q]
		if p == nil || !p.exited {
			return 0, false
		}
		last = max(last, p.exitedAt)
	}
	return last, true
}

// Exited tells the recorder that pid ended at (CLOCK_MONOTONIC ns; 0:
// unknown, its last call is taken) with wait status status: a signal that
// killed it triggers a dump. The process connector says it of every
// process; record says it of the command it launched, once it was reaped
// (the second word of an exit changes nothing).
func (r *Recorder) Exited(pid, status uint32, at uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[pid]
	if p == nil || p.exitKnown {
		return
	}
	if at == 0 {
		at = p.latest
	}
	p.exited, p.exitKnown, p.exitedAt, p.exitedSeen = true, true, at, time.Now()
	if sig := unix.WaitStatus(status); sig.Signaled() {
		detail := fmt.Sprintf("process %d was killed by %s", pid, unix.SignalName(sig.Signal()))
		if sig.CoreDump() {
			detail += " (core dumped)"
		}
		r.fire(kindSignal, []uint32{pid}, pid, at, detail, 0)
	}
}

// GPUSample takes an NVML sample (the agent's sampler): which traced
// processes use the device, and whether it began to slow down (hardware
// slowdown, thermal, power brake), which triggers a dump of them.
func (r *Recorder) GPUSample(s gpusample.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var on []uint32
	for _, ps := range s.Processes {
		if r.procs[ps.PID] != nil {
			on = append(on, ps.PID)
		}
	}
	r.devices[s.Device] = on
	var bad []string
	for _, reason := range s.ThrottleReasons {
		switch reason {
		case "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown":
			bad = append(bad, reason)
		}
	}
	was := r.throttled[s.Device]
	r.throttled[s.Device] = len(bad) > 0
	if len(bad) > 0 && !was {
		pids, who := r.onDevice(s.Device)
		r.fire(kindThrottle, pids, onlyPID(pids), s.TS, fmt.Sprintf("GPU %d (%s) slowed down: %s; %s", s.Device, s.Name, strings.Join(bad, ", "), who), r.o.After)
	}
}

// GPUEvent takes an NVML event (the agent's sampler): an Xid, a
// double-bit ECC error or a GPU lost triggers a dump of the traced
// processes on that GPU.
func (r *Recorder) GPUEvent(e gpusample.Event) {
	var what string
	switch e.Kind {
	case "xid":
		what = fmt.Sprintf("Xid %d", e.Data)
	case "ecc_double_bit":
		what = "a double-bit ECC error"
	case "gpu_lost":
		what = "GPU lost"
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pids, who := r.onDevice(e.Device)
	r.fire(kindXid, pids, onlyPID(pids), e.TS, fmt.Sprintf("NVML reported %s on GPU %d; %s", what, e.Device, who), r.o.After)
}

// onDevice lists the traced processes NVML last saw on device d, or every
// traced process when it named none (said in who).
func (r *Recorder) onDevice(d int) ([]uint32, string) {
	if pids := r.devices[d]; len(pids) > 0 {
		return pids, "the traced processes on it"
	}
	var all []uint32
	for pid, p := range r.procs {
		if !p.exited {
			all = append(all, pid)
		}
	}
	slices.Sort(all)
	return all, "NVML named no traced process on it: every traced process"
}

func onlyPID(pids []uint32) uint32 {
	if len(pids) == 1 {
		return pids[0]
	}
	return 0
}

// checkNCCL fires for the communicators whose ranks have waited longer
// than NCCLAfter for ranks that stopped arriving: a dump of every traced
// rank, the ones behind first.
func (r *Recorder) checkNCCL() {
	if r.o.NCCLAfter < 0 {
		return
	}
	now := monoNow()
	for _, s := range r.progress.Stalls(now, r.o.NCCLAfter) {
		var pids []uint32
		for _, rk := range append(slices.Clone(s.Behind), s.Waiting...) {
			pids = append(pids, rk.PID)
		}
		var pid uint32
		if len(s.Behind) > 0 {
			pid = s.Behind[0].PID
		}
		r.mu.Lock()
		r.fire(kindNCCL, pids, pid, now, "NCCL communicator "+fmt.Sprintf("%016x", s.Comm)+": "+s.String(now), 0)
		r.mu.Unlock()
	}
}

// Dump writes a dump of pids (every process held when empty: those that
// exited a few seconds ago too) now, asked
// for the reason given ("POST /dump", "SIGUSR2"), and waits until it is
// written or ctx ends. It covers what the recorder read until it passed
// the moment of the request.
func (r *Recorder) Dump(ctx context.Context, pids []uint32, reason string) (*Result, error) {
	r.mu.Lock()
	if len(pids) == 0 {
		for pid := range r.procs { // those gone a moment ago too
			pids = append(pids, pid)
		}
		slices.Sort(pids)
		if len(pids) == 0 {
			r.mu.Unlock()
			return nil, fmt.Errorf("%w: no process has made a CUDA call since the flight recorder started", ErrNotTraced)
		}
	}
	for _, pid := range pids {
		if r.procs[pid] == nil {
			r.mu.Unlock()
			return nil, fmt.Errorf("process %d: %w: the flight recorder holds no CUDA call of it (is it a CUDA process? has it made a call since cudatap started?)", pid, ErrNotTraced)
		}
	}
	what := "every traced process"
	if len(pids) == 1 {
		what = fmt.Sprintf("process %d", pids[0])
	}
	d := r.fire(kindDemand, pids, onlyPID(pids), monoNow(), fmt.Sprintf("asked (%s) for %s", reason, what), 0)
	r.mu.Unlock()
	select {
	case <-d.done:
		return d.result, d.err
	case <-ctx.Done():
		return nil, fmt.Errorf("the dump is still being written (it will be in %s): %w", r.o.Dir, ctx.Err())
	}
}

// watch runs what comes with time: dumps due, NCCL stalls, processes
// gone (when exits are not watched, or missed), the cool-down's memory.
func (r *Recorder) watch() {
	defer r.wg.Done()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-r.quit:
			return
		case <-tick.C:
		}
		n++
		r.mu.Lock()
		r.sealDue(true)
		r.mu.Unlock()
		if n%4 == 0 { // once a second
			r.checkNCCL()
			r.mu.Lock()
			r.sweep()
			r.mu.Unlock()
		}
	}
}

// sweep notes the processes gone that no exit said, forgets those gone
// for a while that no dump waits for, and the cool-downs past.
func (r *Recorder) sweep() {
	if r.ended {
		return // what the session left stays until Close: dumps may still be asked of it
	}
	now := monoNow()
	for pid, p := range r.procs {
		if !p.exited && !procfs.Alive(int(pid)) {
			p.exited, p.exitedAt, p.exitedSeen = true, now, time.Now()
		}
		if p.exited && time.Since(p.exitedSeen) > 4*grace && !r.waitedFor(pid) {
			delete(r.procs, pid)
			r.windows -= p.window.bytes
			if r.cached == p {
				r.cached = nil
			}
		}
	}
	for k, at := range r.cool {
		if now-at >= uint64(r.o.Cooldown) {
			delete(r.cool, k)
		}
	}
}

func (r *Recorder) waitedFor(pid uint32) bool {
	for _, d := range r.pending {
		if slices.Contains(d.pids, pid) {
			return true
		}
	}
	return false
}

func oomDetail(c *model.Call) string {
	return fmt.Sprintf("%s of %s failed (out of memory)", c.SymbolName(), units.Bytes(c.Args.Size))
}

func syncDetail(s *model.Sync) string {
	api := s.API.String()
	if sp := event.Lookup(s.API); sp != nil {
		api = sp.Symbol(int(s.Symbol))
	}
	return fmt.Sprintf("%s blocked the host %s (%s, %d GPU ops queued)", api, units.Duration(s.BlockedNs), s.Kind, s.QueuedOps)
}

// monoNow is CLOCK_MONOTONIC in ns, the clock of every event.
func monoNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
