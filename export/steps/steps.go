// Package steps finds a program's training steps in what the model
// concludes, without the program's code changed, so that traces carry
// Kineto's ProfilerStep#N slices (which HTA's per-step analyses read) and
// the summary a step-time table.
//
// A training loop repeats itself once per iteration, and so does a place
// where it makes the host wait for the GPU: loss.item(), a logging
// .cpu(), GradScaler's inf check. The Detector, a model.Sink, logs every
// synchronization of every process by site (thread, API, kind, stack) and
// picks, at the end, the site that repeats most regularly on a thread that
// launches GPU work: most occurrences among the sites whose intervals are
// regular (three quarters within a factor of two of their median, in time
// or in the GPU work enqueued between them: a host slow to run the
// program, busy or stalled on data, makes a step long, not different) and
// between whose first and last occurrence most of the GPU work was
// enqueued; a tie goes to the site that blocked
// longest (the wait for the iteration's work, not a small copy's). Each
// step ends where the host went on after one of its occurrences. An NVTX
// range named like a step ("step", "iteration", "batch", numbers aside)
// wins over any site: its ranges are the steps. Either may find nothing:
// a loop that never waits for the GPU has no site that marks it, and
// Found says why.
//
// GPU time per step: every GPU op CUPTI measured is counted in the step of
// the call that enqueued it, by the order of calls (the log splits the
// process's calls at each synchronization).
//
// Memory is bounded: the log keeps maxLog entries of a process (and
// maxLogTotal of all), 48 bytes each; synchronizations past it are counted
// (Found.NotSearched), and no step is found among them.
package steps

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// By says what marked the steps.
const (
	ByNVTX = "nvtx" // an NVTX range named like a step
	BySync = "sync" // the synchronization site that repeats once per iteration
)

// Step is one training step.
type Step struct {
	N       int    `json:"n"` // 1, 2, ... as ProfilerStep#N names it
	StartNs uint64 `json:"start_ns"`
	EndNs   uint64 `json:"end_ns"`
	// GPUNs is the GPU time CUPTI measured of the ops enqueued in the
	// step (GPUOps of them); Unmeasured counts those it did not time.
	GPUNs      uint64 `json:"gpu_ns"`
	GPUOps     int    `json:"gpu_ops"`
	Unmeasured int    `json:"gpu_ops_unmeasured"`
}

// Dur is the step's time.
func (s Step) Dur() uint64 { return s.EndNs - s.StartNs }

// Found is what the detector found in one process: its steps, and what
// marked them; or why none were found.
type Found struct {
	PID uint32 `json:"pid"`
	TID uint32 `json:"tid,omitempty"` // the thread the steps are drawn on
	By  string `json:"by,omitempty"`  // ByNVTX, BySync; "" when none was found
	// Marker is what marks the steps: the NVTX range's name (numbers as
	// #), or the sync site: its user line, the call and the kind.
	Marker string `json:"marker,omitempty"`
	Why    string `json:"why,omitempty"` // no steps: why not
	Steps  []Step `json:"steps"`
	// Step times, and the measured GPU time per step (GPUMeasured: every
	// op of the steps measured; else what was, a lower bound).
	MeanNs      uint64 `json:"mean_ns"`
	MedianNs    uint64 `json:"median_ns"`
	P90Ns       uint64 `json:"p90_ns"`
	GPUMeasured bool   `json:"gpu_measured"`
	GPUMeanNs   uint64 `json:"gpu_mean_ns"`
	GPUMedianNs uint64 `json:"gpu_median_ns"`
	// Sites: the synchronization sites looked at (of threads that launch
	// work); NotSearched: synchronizations past the log's bound.
	Sites       int    `json:"sites"`
	NotSearched uint64 `json:"not_searched,omitempty"`
}

// Bounds of what the detector keeps.
const (
	maxLog       = 1 << 17 // log entries per process
	maxLogTotal  = 1 << 19 // over all processes
	maxSites     = 4096    // sites told apart per process
	maxNames     = 64      // NVTX range names, like a step's, per process
	maxNameSteps = 1 << 16 // ranges kept per name
)

// Thresholds of the choice of a site.
const (
	minOccurrences = 3    // two intervals at least
	minRegular     = 0.75 // share of intervals within a factor of two of their median (time or work)
	// The share of the process's GPU work (calls that enqueue it) made
	// between a site's first and last occurrence: a training loop is
	// most of a job's work however long its imports and set-up took,
	// where a burst of waits while loading is little of it.
	minWorkShare = 0.5
)

// stepName is what a range named like a step matches.
var stepName = regexp.MustCompile(`(?i)step|iteration|iter\b|iter[ _#:-]|batch`)

// entry is one synchronization, or one NVTX call of a range named like a
// step, in the order of the process's calls.
type entry struct {
	time  uint64 // a sync: when the host went on; an NVTX call: its start
	next  uint64 // the start of its thread's next call, 0 until seen
	gpuNs uint64 // measured GPU time of the ops enqueued since the entry before
	seq   int32  // the call
	tid   uint32
	ops   uint32 // GPU ops enqueued since the entry before: measured
	unm   uint32 // and not
	work  uint32 // calls that enqueued GPU work since the entry before
	site  uint16 // index into proc.sites; noSite for an NVTX call
}

const noSite = ^uint16(0)

type siteKey struct {
	tid         uint32
	api         event.API
	symbol      uint8
	kind        model.SyncKind
	stack, py   int32
	blockedTime bool
}

type site struct {
	key     siteKey
	n       int
	blocked uint64
}

type thread struct {
	first   uint64
	pending int32 // its last entry whose next call is not seen yet, -1 none
	work    int64 // calls that enqueued GPU work
}

type nameKey struct {
	tid  uint32
	name string // numbers as #
}

type named struct {
	ranges []Range
	total  uint64
}

type proc struct {
	log       []entry
	notLogged uint64
	sites     []site
	siteIdx   map[siteKey]uint16
	threads   map[uint32]*thread
	open      struct{ gpuNs, ops, unm, work uint64 } // ops and work calls after the last entry
	work      uint64                                 // calls that enqueued GPU work, all of them
	names     map[nameKey]*named
}

// Detector finds steps; a model.Sink. Not safe for concurrent use.
type Detector struct {
	procs  map[uint32]*proc
	ranges *Ranges
	logged int  // entries over all processes
	gpu    bool // count GPU ops into the steps
	last   *proc
	lastID uint32
}

var _ model.Sink = (*Detector)(nil)

// NewDetector returns a detector; with gpu it counts each step's GPU ops
// (the summary's), which a trace does not need.
func NewDetector(gpu bool) *Detector {
	return &Detector{procs: map[uint32]*proc{}, ranges: NewRanges(), gpu: gpu}
}

func (d *Detector) proc(pid uint32) *proc {
	if d.last != nil && d.lastID == pid {
		return d.last
	}
	p := d.procs[pid]
	if p == nil {
		p = &proc{siteIdx: map[siteKey]uint16{}, threads: map[uint32]*thread{}, names: map[nameKey]*named{}}
		d.procs[pid] = p
	}
	d.last, d.lastID = p, pid
	return p
}

// Call notes the thread's first call, the next call after its last entry,
// the work it enqueues and its NVTX ranges.
func (d *Detector) Call(mp *model.Process, c *model.Call) {
	p := d.proc(mp.PID)
	t := p.threads[c.TID]
	if t == nil {
		t = &thread{first: c.Start, pending: -1}
		p.threads[c.TID] = t
	}
	if t.pending >= 0 {
		p.log[t.pending].next = c.Start
		t.pending = -1
	}
	if c.GPUOp >= 0 || c.Captured {
		t.work++
		p.work++
		p.open.work++
	}
	if !Annotation(c) {
		return
	}
	r, ok := d.ranges.Call(mp, c)
	switch {
	case c.API == event.NvtxRangePushA || c.API == event.NvtxRangeStartA:
		if stepName.MatchString(mp.Message(c.Args.Ptr)) {
			d.add(p, entry{time: c.Start, seq: int32(c.Seq), tid: c.TID, site: noSite})
		}
	case ok && !r.Mark && stepName.MatchString(r.Name):
		d.add(p, entry{time: c.Start, seq: int32(c.Seq), tid: c.TID, site: noSite})
		k := nameKey{r.TID, numbered(r.Name)}
		n := p.names[k]
		if n == nil {
			if len(p.names) >= maxNames {
				return
			}
			n = &named{}
			p.names[k] = n
		}
		if len(n.ranges) < maxNameSteps {
			n.ranges = append(n.ranges, r)
			n.total += r.End - r.Start
		}
	}
}

// numbered is name with every run of digits as "#": "step 12" and
// "step 13" are one range's name.
func numbered(name string) string {
	var b strings.Builder
	digits := false
	for _, c := range name {
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(c)
	}
	return b.String()
}

// Sync logs a synchronization of a thread. A query poll loop's, which the
// model hands over once the loop is over, is not a site.
func (d *Detector) Sync(mp *model.Process, s *model.Sync) {
	if s.Kind == model.SyncQueryPoll {
		return
	}
	p := d.proc(mp.PID)
	k := siteKey{tid: s.TID, api: s.API, symbol: s.Symbol, kind: s.Kind, stack: s.Stack, py: s.PyStack}
	idx, ok := p.siteIdx[k]
	if !ok {
		if len(p.sites) < maxSites {
			idx = uint16(len(p.sites))
			p.sites = append(p.sites, site{key: k})
			p.siteIdx[k] = idx
		} else {
			idx = noSite - 1 // past the bound: logged, never a candidate
		}
	}
	if int(idx) < len(p.sites) {
		p.sites[idx].n++
		p.sites[idx].blocked += s.BlockedNs
	}
	if i, added := d.add(p, entry{time: s.Start + s.BlockedNs, seq: int32(s.Call), tid: s.TID, site: idx}); added {
		if t := p.threads[s.TID]; t != nil {
			t.pending = i
		}
	}
}

// add appends e to p's log, with the GPU ops enqueued since the entry
// before; false past the bounds.
func (d *Detector) add(p *proc, e entry) (int32, bool) {
	if len(p.log) >= maxLog || d.logged >= maxLogTotal {
		p.notLogged++
		return -1, false
	}
	if n := len(p.log); n > 0 && e.seq < p.log[n-1].seq {
		return -1, false // the log stays in the order of calls: GPU ops are counted by it
	}
	e.gpuNs, e.ops, e.unm, e.work = p.open.gpuNs, uint32(min(p.open.ops, 1<<32-1)), uint32(min(p.open.unm, 1<<32-1)), uint32(min(p.open.work, 1<<32-1))
	p.open.gpuNs, p.open.ops, p.open.unm, p.open.work = 0, 0, 0, 0
	p.log = append(p.log, e)
	d.logged++
	return int32(len(p.log) - 1), true
}

// GPUOp counts a GPU op into the log entry that ends the interval of its
// enqueue call: ops come when final, in about the order of their calls.
func (d *Detector) GPUOp(mp *model.Process, op *model.GPUOp) {
	if !d.gpu {
		return
	}
	if op.CUPTIOnly() {
		return // no traced call enqueued it: its step is unknown
	}
	p := d.proc(mp.PID)
	var ns uint64
	if op.Measured && op.End > op.Start {
		ns = op.End - op.Start
	}
	if len(p.log) == 0 || int32(op.Call) > p.log[len(p.log)-1].seq {
		if p.notLogged > 0 {
			return // past the log: in no step found
		}
		p.open.gpuNs += ns
		if op.Measured {
			p.open.ops++
		} else {
			p.open.unm++
		}
		return
	}
	i, _ := slices.BinarySearchFunc(p.log, int32(op.Call), func(e entry, seq int32) int { return cmp.Compare(e.seq, seq) })
	e := &p.log[i]
	e.gpuNs += ns
	if op.Measured {
		e.ops++
	} else {
		e.unm++
	}
}

func (d *Detector) Dependency(*model.Process, *model.Dependency) {}
func (d *Detector) Hold(*model.Process, *model.Hold)             {}

// Find says, for every process of r, what steps were found, or why none
// (nil for a nil Detector).
func (d *Detector) Find(r *model.Result) []Found {
	if d == nil {
		return nil
	}
	out := []Found{}
	for _, mp := range r.Processes {
		if mp.Other {
			continue
		}
		p := d.procs[mp.PID]
		if p == nil {
			continue
		}
		out = append(out, p.find(r, mp))
	}
	return out
}

// Of is what Find found for process pid, nil when it has nothing.
func Of(found []Found, pid uint32) *Found {
	for i := range found {
		if found[i].PID == pid {
			return &found[i]
		}
	}
	return nil
}

func (p *proc) find(r *model.Result, mp *model.Process) Found {
	f := Found{PID: mp.PID, NotSearched: p.notLogged, Steps: []Step{}}
	if p.fromNVTX(&f) {
		f.stats()
		return f
	}
	p.fromSyncs(r, mp, &f)
	f.stats()
	return f
}

// fromNVTX makes the steps of the range named like a step that took the
// most time, if any.
func (p *proc) fromNVTX(f *Found) bool {
	var best *named
	var bestKey nameKey
	for k, n := range p.names {
		if best == nil || n.total > best.total || n.total == best.total && (len(n.ranges) > len(best.ranges) ||
			len(n.ranges) == len(best.ranges) && k.name < bestKey.name) {
			best, bestKey = n, k
		}
	}
	if best == nil {
		return false
	}
	rs := slices.Clone(best.ranges)
	sortRanges(rs)
	f.By, f.TID, f.Marker = ByNVTX, bestKey.tid, bestKey.name
	for _, rg := range rs {
		s := Step{N: len(f.Steps) + 1, StartNs: rg.Start, EndNs: rg.End}
		if from, to := p.entryOf(rg.StartSeq), p.entryOf(rg.EndSeq); from >= 0 && to >= 0 {
			p.count(&s, from, to)
		}
		f.Steps = append(f.Steps, s)
	}
	return true
}

// entryOf is the index of the log entry of call seq, -1 when not logged.
func (p *proc) entryOf(seq int) int {
	i, ok := slices.BinarySearchFunc(p.log, int32(seq), func(e entry, s int32) int { return cmp.Compare(e.seq, s) })
	if !ok {
		return -1
	}
	return i
}

// count adds the GPU ops of the log entries (from, to] to s (from -1:
// from the first).
func (p *proc) count(s *Step, from, to int) {
	for _, e := range p.log[from+1 : to+1] {
		s.GPUNs += e.gpuNs
		s.GPUOps += int(e.ops)
		s.Unmeasured += int(e.unm)
	}
}

// candidate is a site's case for marking the steps.
type candidate struct {
	site    int
	at      []int // its log entries
	regular float64
	work    float64 // share of the process's GPU work between its first and last occurrence
}

// qualifies: the site repeats regularly through most of the work.
func (c *candidate) qualifies() bool { return c.regular >= minRegular && c.work >= minWorkShare }

// workShare is the share of the process's GPU work enqueued between log
// entries from and to.
func (p *proc) workShare(from, to int) float64 {
	var n uint64
	for _, e := range p.log[from+1 : to+1] {
		n += uint64(e.work)
	}
	return float64(n) / float64(max(p.work, 1))
}

func (p *proc) fromSyncs(r *model.Result, mp *model.Process, f *Found) {
	at := make([][]int, len(p.sites))
	for i, e := range p.log {
		if int(e.site) < len(p.sites) {
			at[e.site] = append(at[e.site], i)
		}
	}
	var cands []candidate
	for i, s := range p.sites {
		t := p.threads[s.key.tid]
		if s.key.kind == model.SyncQueryPoll || t == nil || t.work == 0 {
			continue // a poll loop, or a thread that waits for others' work (NCCL's watchdog)
		}
		f.Sites++
		if len(at[i]) < minOccurrences {
			continue
		}
		c := candidate{site: i, at: at[i]}
		c.regular = regularity(p.log, c.at)
		c.work = p.workShare(c.at[0], c.at[len(c.at)-1])
		cands = append(cands, c)
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		ra, rb := a.qualifies(), b.qualifies()
		switch {
		case ra != rb:
			if ra {
				return -1
			}
			return 1
		case len(a.at) != len(b.at):
			return cmp.Compare(len(b.at), len(a.at))
		case p.sites[a.site].blocked != p.sites[b.site].blocked:
			return cmp.Compare(p.sites[b.site].blocked, p.sites[a.site].blocked)
		}
		return cmp.Compare(a.site, b.site)
	})
	switch {
	case f.Sites == 0:
		f.Why = "no NVTX range named like a step, and no thread that launches GPU work waited for the GPU: nothing repeats once per iteration that cudatap can see"
		return
	case len(cands) == 0:
		f.Why = fmt.Sprintf("no NVTX range named like a step, and none of the %d places where a thread that launches work waited for the GPU did so %d times or more", f.Sites, minOccurrences)
		return
	}
	c := cands[0]
	s := p.sites[c.site]
	f.Marker = p.describe(r, mp, s.key)
	if !c.qualifies() {
		f.Why = fmt.Sprintf("no NVTX range named like a step, and no place where the host waited for the GPU repeats regularly through most of the work: the likeliest, %s, waited %d times, %.0f%% of the intervals within a factor of two of their median (in time or work), around %.0f%% of the process's GPU work",
			f.Marker, len(c.at), 100*c.regular, 100*c.work)
		f.Marker = ""
		return
	}
	f.By, f.TID = BySync, s.key.tid
	first := p.firstStart(c, mp)
	prev, start := first.entry, first.time
	for _, i := range c.at {
		st := Step{N: len(f.Steps) + 1, StartNs: start, EndNs: p.log[i].time}
		p.count(&st, prev, i)
		f.Steps = append(f.Steps, st)
		prev, start = i, p.log[i].time
	}
}

// begin is where the first step begins: after entry (the sync before it,
// -1 none), at time.
type begin struct {
	entry int
	time  uint64
}

// firstStart finds where the first step begins. The steps after it begin
// where the one before ended; the first begins with its thread's first
// call after the synchronization that precedes the iteration's own: walking
// back from the site's first occurrence over the thread's syncs at sites
// the later steps have (at most as many as a step has), the first other
// one ends the setup. Without one, the thread's first call.
func (p *proc) firstStart(c candidate, mp *model.Process) begin {
	tid := p.sites[c.site].key.tid
	pattern := map[uint16]bool{}
	most := 0
	for k := 1; k < len(c.at); k++ {
		n := 0
		for _, e := range p.log[c.at[k-1]+1 : c.at[k]] {
			if e.tid == tid && e.site != noSite {
				pattern[e.site] = true
				n++
			}
		}
		most = max(most, n)
	}
	walked := 0
	for i := c.at[0] - 1; i >= 0; i-- {
		e := p.log[i]
		if e.tid != tid || e.site == noSite {
			continue
		}
		if pattern[e.site] && e.site != uint16(c.site) && walked < most {
			walked++
			continue
		}
		if e.next != 0 {
			return begin{entry: i, time: e.next}
		}
		return begin{entry: i, time: e.time}
	}
	if t := p.threads[tid]; t != nil {
		return begin{entry: -1, time: t.first}
	}
	return begin{entry: -1, time: mp.FirstSeen}
}

// regularity is the share of a site's intervals within a factor of two of
// their median: in time, or in the calls that enqueued GPU work between
// its occurrences where that share is larger. Time alone made a loop on a
// busy host (steps of a millisecond, the program descheduled for tens)
// look irregular, though every step enqueued the same work.
func regularity(log []entry, at []int) float64 {
	times := make([]uint64, 0, len(at)-1)
	work := make([]uint64, 0, len(at)-1)
	for k := 1; k < len(at); k++ {
		times = append(times, log[at[k]].time-log[at[k-1]].time)
		var n uint64
		for _, e := range log[at[k-1]+1 : at[k]+1] {
			n += uint64(e.work)
		}
		work = append(work, n)
	}
	return max(nearMedian(times), nearMedian(work))
}

// nearMedian is the share of d within a factor of two of its median; 0
// when the median is 0 (a site that repeats with no work between).
func nearMedian(d []uint64) float64 {
	m := slices.Sorted(slices.Values(d))[len(d)/2]
	if m == 0 {
		return 0
	}
	in := 0
	for _, x := range d {
		if 2*x >= m && x <= 2*m {
			in++
		}
	}
	return float64(in) / float64(len(d))
}

// describe names a site: the user's line, the call and the kind.
func (p *proc) describe(r *model.Result, mp *model.Process, k siteKey) string {
	py := describe.PyStack(r.Names, mp, k.py)
	native := describe.NativeStack(r.Names, mp, k.stack, k.api, k.symbol, 8)
	where, _, _ := syncs.UserSite(py, native)
	c := model.Call{API: k.api, Symbol: k.symbol}
	what := c.SymbolName() + " (" + k.kind.String() + ")"
	if where == "" {
		return what
	}
	return where + ": " + what
}

// stats fills the step times and GPU times.
func (f *Found) stats() {
	if len(f.Steps) == 0 {
		return
	}
	durs := make([]uint64, len(f.Steps))
	gpus := make([]uint64, len(f.Steps))
	var sum, gsum uint64
	measured := true
	for i, s := range f.Steps {
		durs[i], gpus[i] = s.Dur(), s.GPUNs
		sum += durs[i]
		gsum += s.GPUNs
		measured = measured && s.Unmeasured == 0 && s.GPUOps > 0
	}
	slices.Sort(durs)
	slices.Sort(gpus)
	n := uint64(len(durs))
	f.MeanNs, f.MedianNs, f.P90Ns = sum/n, durs[len(durs)/2], durs[min(len(durs)-1, len(durs)*9/10)]
	f.GPUMeasured, f.GPUMeanNs, f.GPUMedianNs = measured, gsum/n, gpus[len(gpus)/2]
}

func sortRanges(rs []Range) {
	slices.SortStableFunc(rs, func(a, b Range) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.PID, b.PID), cmp.Compare(a.TID, b.TID), cmp.Compare(a.Depth, b.Depth))
	})
}

// Names is the ProfilerStep#N name of a step, as Kineto writes it.
func Name(s Step) string { return fmt.Sprintf("ProfilerStep#%d", s.N) }
