package syncs

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// LongGap is the shortest time between two CUDA calls of a thread that
// counts as the thread being away from CUDA (waiting for its input, say)
// rather than issuing work: the launches of a busy loop come microseconds
// apart, and the Python between two launches of an eager model rarely
// takes a millisecond; a batch that is late takes tens.
const LongGap = 5_000_000 // ns

// Bounds on what the collector keeps per thread and per process.
const (
	maxGaps     = 4096  // long gaps kept per thread (the longest, when more)
	maxPending  = 16384 // spans of queued GPU work kept per process (joined, when more)
	maxMeasured = 4096  // recent spans of measured GPU work kept per process
)

// Role is what a thread did for the work of its process.
type Role string

const (
	// RoleWork: it enqueued GPU work (launches, copies, collectives).
	RoleWork Role = "launches work"
	// RolePoller: a background thread that polls for completion
	// (cudaEventQuery/cudaStreamQuery), as NCCL's watchdog does.
	RolePoller Role = "background poller"
	// RoleBackground: a background thread that waits in blocking syncs
	// but enqueues no work.
	RoleBackground Role = "background"
	// RoleOther: neither work nor syncs (device queries, allocations).
	RoleOther Role = "other"
)

// Background reports whether r is a background role: its waits did not
// hold up the threads that launch work.
func (r Role) Background() bool { return r == RolePoller || r == RoleBackground }

// backgroundNames are thread names (as the kernel truncates them to 15
// bytes) of threads that only watch the work of others: PyTorch's NCCL
// watchdog and heartbeat monitor.
var backgroundNames = []string{"pt_nccl_", "watchdog", "watchdg", "heartbt", "heartbeat"}

// Thread is what one thread of a process did, as far as CUDA saw it.
type Thread struct {
	PID       uint32 `json:"pid"`
	TID       uint32 `json:"tid"`
	Name      string `json:"name,omitempty"`
	Role      Role   `json:"role"`
	Why       string `json:"why,omitempty"` // what made a thread background
	Calls     int64  `json:"calls"`
	WorkCalls int64  `json:"work_calls"` // calls that enqueued GPU work
	Launches  int64  `json:"launches"`   // kernel and graph launches among them
	Syncs     int64  `json:"syncs"`
	Polls     int64  `json:"poll_loops"` // query poll loops among them
	// WallNs runs from its first call to the end of its last, less HeldNs,
	// the time cudatap held it within (its own, not the program's: an
	// attach, a library load); BlockedNs is its time in syncs, each
	// nanosecond once however they overlap, never more than WallNs;
	// SyncNs is the syncs' times added up.
	WallNs    uint64 `json:"wall_ns"`
	HeldNs    uint64 `json:"held_ns"`
	BlockedNs uint64 `json:"blocked_ns"`
	SyncNs    uint64 `json:"sync_ns"`
	// Gaps ≥ LongGap between its calls (the longest maxGaps of them);
	// those past the bound are counted, not kept (time away understated).
	LongGaps      int    `json:"long_gaps"`
	LongGapNs     uint64 `json:"long_gap_ns"`
	GapsNotKept   int64  `json:"long_gaps_not_kept,omitempty"`
	GapsNotKeptNs uint64 `json:"long_gap_ns_not_kept,omitempty"`

	first, last uint64
	gaps        []span
}

// Label is "name (tid N)".
func (t *Thread) Label() string {
	if t.Name == "" {
		return fmt.Sprintf("tid %d", t.TID)
	}
	return fmt.Sprintf("%s (tid %d)", t.Name, t.TID)
}

type threadKey struct{ pid, tid uint32 }

// thread is what the collector keeps of one thread.
type thread struct {
	calls, work, launches int64
	syncs, polls          int64
	first, lastEnd        uint64
	blocked, raw          uint64
	window                window
	gaps                  []span // ≥ gapMin, in time order
	gapMin                uint64
	notKept               int64 // long gaps shorter than gapMin, and their time
	notKeptNs             uint64
	holds                 []span // times cudatap held it, the first maxHolds
	heldOver              uint64 // held time past maxHolds, not clipped to its calls
}

// maxHolds bounds the holds kept per thread: a few are usual (one per
// library hooked, an attach).
const maxHolds = 16

// hold notes a stretch cudatap held the thread.
func (t *thread) hold(from, to uint64) {
	if to <= from {
		return
	}
	if len(t.holds) < maxHolds {
		t.holds = append(t.holds, span{from, to})
	} else {
		t.heldOver += to - from
	}
}

// held is the time cudatap held the thread within its calls' time.
func (t *thread) held() uint64 {
	if t.calls == 0 || t.lastEnd <= t.first {
		return 0
	}
	n := t.heldOver
	for _, h := range t.holds {
		if lo, hi := max(h.from, t.first), min(h.to, t.lastEnd); hi > lo {
			n += hi - lo
		}
	}
	return min(n, t.lastEnd-t.first)
}

// call adds c to the thread.
func (t *thread) call(c *model.Call) {
	end := max(c.End, c.Start)
	if t.calls == 0 {
		t.first = c.Start
	} else if c.Start > t.lastEnd && c.Start-t.lastEnd >= LongGap {
		t.gap(t.lastEnd, c.Start)
	}
	t.lastEnd = max(t.lastEnd, end)
	t.calls++
	if c.GPUOp >= 0 || c.Captured {
		t.work++
		if s := c.Spec(); s != nil && (s.Class == event.ClassLaunch || s.Class == event.ClassGraphLaunch) {
			t.launches++
		}
	}
}

// gap keeps a long gap; past maxGaps it keeps the longer half, and from
// then on only gaps as long. What it does not keep it counts.
func (t *thread) gap(from, to uint64) {
	if to-from < t.gapMin {
		t.notKept++
		t.notKeptNs += to - from
		return
	}
	t.gaps = append(t.gaps, span{from, to})
	if len(t.gaps) < maxGaps {
		return
	}
	// The longer half, ties by time: exactly half goes, however many
	// gaps are equally long, so this runs once every maxGaps/2 gaps.
	byLen := slices.Clone(t.gaps)
	slices.SortStableFunc(byLen, func(a, b span) int { return cmp.Compare(b.len(), a.len()) })
	keep, drop := byLen[:maxGaps/2], byLen[maxGaps/2:]
	for _, g := range drop {
		t.notKept++
		t.notKeptNs += g.len()
	}
	t.gapMin = keep[len(keep)-1].len()
	slices.SortFunc(keep, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	t.gaps = append(t.gaps[:0], keep...)
}

// sync adds s's blocked time to the thread and returns the part of it not
// counted before on this thread.
func (t *thread) sync(s *model.Sync) uint64 {
	t.syncs++
	if s.Kind == model.SyncQueryPoll {
		t.polls++
	}
	t.raw += s.BlockedNs
	fresh := t.window.add(s.Start, s.Start+s.BlockedNs)
	t.blocked += fresh
	return fresh
}

// gpu is what the collector keeps of one process's GPU work.
type gpu struct {
	queued     spanSet // some op queued or running: from its enqueue until proven complete
	measured   window  // some op running, as CUPTI measured it
	measuredNs uint64
	ops        int64
	timed      int64 // ops measured
}

func newGPU() *gpu {
	return &gpu{queued: spanSet{max: maxPending}, measured: window{max: maxMeasured}}
}

func (g *gpu) op(op *model.GPUOp) {
	g.ops++
	end := max(op.End, op.ProvenAt())
	if op.Measured {
		g.timed++
		end = op.End
		g.measuredNs += g.measured.add(op.Start, op.End)
	}
	g.queued.add(op.Enqueued, max(end, op.Enqueued))
}

// backgroundName reports whether a thread's name is one of a watcher.
func backgroundName(name string) bool {
	for _, s := range backgroundNames {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// threads lists the threads of process pid with their roles: those that
// launch work first (most work first), then background ones, then the
// others, each by tid.
func (c *Collector) threads(r *model.Result, pid uint32) []Thread {
	var out []Thread
	anyWork := false
	for tid, t := range c.threadState[pid] {
		if t.calls == 0 {
			continue // only held so far: its calls will come
		}
		th := Thread{PID: pid, TID: tid, Calls: t.calls, WorkCalls: t.work, Launches: t.launches,
			Syncs: t.syncs, Polls: t.polls, BlockedNs: t.blocked, SyncNs: t.raw, first: t.first, last: t.lastEnd, gaps: t.gaps}
		if t.calls > 0 {
			th.HeldNs = t.held()
			th.WallNs = t.lastEnd - t.first - th.HeldNs
			th.BlockedNs = min(th.BlockedNs, th.WallNs) // a sync cudatap held the thread in
		}
		if r != nil && r.Names != nil {
			th.Name = r.Names.Thread(pid, tid)
		}
		for _, g := range t.gaps {
			th.LongGaps++
			th.LongGapNs += g.len()
		}
		th.GapsNotKept, th.GapsNotKeptNs = t.notKept, t.notKeptNs
		anyWork = anyWork || t.work > 0
		out = append(out, th)
	}
	for i := range out {
		t := &out[i]
		switch {
		case backgroundName(t.Name) && t.WorkCalls == 0:
			t.Role, t.Why = RoleBackground, "named "+t.Name+", a thread that watches the work of others"
		case t.WorkCalls > 0 || !anyWork && t.Syncs > 0:
			// With no thread seen enqueuing work, none is called background.
			t.Role = RoleWork
		case t.Syncs > 0:
			t.Role, t.Why = RoleBackground, "it enqueued no GPU work"
		default:
			t.Role = RoleOther
		}
		if t.Role == RoleBackground && t.Polls > 0 && 2*t.Polls >= t.Syncs {
			t.Role = RolePoller
		}
	}
	rank := func(r Role) int {
		switch {
		case r == RoleWork:
			return 0
		case r.Background():
			return 1
		}
		return 2
	}
	slices.SortFunc(out, func(a, b Thread) int {
		return cmp.Or(cmp.Compare(rank(a.Role), rank(b.Role)), cmp.Compare(b.WorkCalls, a.WorkCalls), cmp.Compare(a.TID, b.TID))
	})
	return out
}

// Host is how the threads of one process that launch work spent their
// time and how much GPU work they kept queued: the numbers behind the
// summary's host verdicts.
type Host struct {
	PID     uint32
	Threads []Thread // every thread seen: those that launch work first, then background, then the others
	// Over the threads that launch work: how many, their launches and
	// calls that enqueued work, from the first one's first call to the
	// last one's last (Start, End, WallNs), their walls and blocked times
	// added up (each thread's blocked time counted once).
	WorkThreads         int
	Launches, WorkCalls int64
	Start, End, WallNs  uint64
	ThreadWallNs        uint64
	BlockedNs           uint64
	// IdleNs is the time every thread that launches work was away from
	// CUDA, in gaps of at least LongGap between its calls (IdleGaps of
	// them); StallNs the part of it when no GPU work was queued or running
	// either, proven by the syncs (StallGaps gaps, the longest
	// LongestStallNs).
	IdleNs   uint64
	IdleGaps int
	// GapsNotKept: long gaps of those threads past the per-thread bound,
	// counted but not kept: IdleNs and StallNs leave them out.
	GapsNotKept    int64
	GapsNotKeptNs  uint64
	StallNs        uint64
	StallGaps      int
	LongestStallNs uint64
	// QueuedNs is the time between Start and End some GPU work was queued
	// or running: an upper bound of the GPU's busy time. MeasuredNs is the
	// time it ran, when CUPTI timed every op (AllMeasured), each
	// nanosecond once however the streams overlapped.
	GPUOps      int64
	QueuedNs    uint64
	MeasuredNs  uint64
	AllMeasured bool
}

// Blocked is the share of the wall time of the threads that launch work
// they spent blocked in syncs; 0 without such threads.
func (h *Host) Blocked() float64 { return share(h.BlockedNs, h.ThreadWallNs) }

// Background lists the background threads.
func (h *Host) Background() []Thread {
	var out []Thread
	for _, t := range h.Threads {
		if t.Role.Background() {
			out = append(out, t)
		}
	}
	return out
}

func share(part, whole uint64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// idleSpans is the time within [start, end) every thread of work was away
// from CUDA: in a long gap, or not yet or no longer calling. That is the
// time none of them was busy, so it takes one sort of their busy spans
// (intersecting each thread's time away in turn took time quadratic in
// the threads).
func idleSpans(start, end uint64, work []*Thread) []span {
	var busy []span
	for _, t := range work {
		from := t.first
		for _, g := range t.gaps {
			busy = append(busy, span{from, g.from})
			from = g.to
		}
		busy = append(busy, span{from, t.last})
	}
	slices.SortFunc(busy, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	return subtract([]span{{start, end}}, union(busy, nil))
}

// HostOf is the host side of process pid; nil when it made no call.
func HostOf(r *model.Result, c *Collector, pid uint32) *Host {
	if c == nil {
		return nil
	}
	h := &Host{PID: pid, Threads: c.threads(r, pid)}
	if len(h.Threads) == 0 {
		return nil
	}
	var work []*Thread
	for i := range h.Threads {
		t := &h.Threads[i]
		if t.Role != RoleWork || t.Calls == 0 {
			continue
		}
		work = append(work, t)
		if h.WorkThreads == 0 || t.first < h.Start {
			h.Start = t.first
		}
		h.End = max(h.End, t.last)
		h.WorkThreads++
		h.Launches += t.Launches
		h.WorkCalls += t.WorkCalls
		h.ThreadWallNs += t.WallNs
		h.BlockedNs += t.BlockedNs
		h.GapsNotKept += t.GapsNotKept
		h.GapsNotKeptNs += t.GapsNotKeptNs
	}
	if h.WorkThreads == 0 {
		return h
	}
	h.WallNs = h.End - h.Start
	idle := slices.DeleteFunc(idleSpans(h.Start, h.End, work), func(s span) bool { return s.len() < LongGap })
	h.IdleNs, h.IdleGaps = total(idle), len(idle)

	var queued []span
	if g := c.gpuState[pid]; g != nil {
		queued = clip(g.queued.s, h.Start, h.End)
		h.GPUOps, h.QueuedNs = g.ops, total(queued)
		if g.ops > 0 && g.timed == g.ops {
			h.AllMeasured, h.MeasuredNs = true, g.measuredNs
		}
	}
	for _, s := range subtract(idle, queued) {
		if s.len() >= LongGap {
			h.StallNs += s.len()
			h.StallGaps++
			h.LongestStallNs = max(h.LongestStallNs, s.len())
		}
	}
	return h
}
