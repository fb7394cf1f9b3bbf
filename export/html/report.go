package html

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/oom"
	"github.com/cudatap/cudatap/export/report"
	"github.com/cudatap/cudatap/export/steps"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Report is what the page and the terminal report show, computed once.
type Report struct {
	Title, Version string
	Start, End     uint64 // ns, CLOCK_MONOTONIC
	WallOffsetNs   int64
	Result         *model.Result
	Syncs          *syncs.Collector
	Lint           *lint.Collector
	Steps          *steps.Detector

	// Lints are the lints' findings, ranked (errors, warnings, then
	// notes; the costliest first); notes cost less than NoteBelow of
	// their process's traced time.
	Lints     []lint.Finding
	NoteBelow float64

	Findings   []Finding // most severe first
	Processes  []ProcessReport
	Devices    []DeviceOverlap
	TopByCount []OpRow
	TopByTime  []OpRow // measured ops only
	Verdicts   []report.Verdict
	// HostVerdicts: host-bound, input-pipeline stall (the summary's).
	HostVerdicts []report.HostVerdict
	Bounds       []string // what was aggregated or capped, in words
	Account      string   // the loss account
	Summary      string   // the terminal summary (export/report)

	timeline  timeline
	maxSlices int
	bucket    uint64
}

// Severity of a finding.
const (
	SevHigh   = "high"
	SevMedium = "medium"
	SevInfo   = "info"
)

// Finding is one verdict: what is wrong (or fine), the numbers, where, and
// what to change.
type Finding struct {
	Severity string
	Title    string
	Detail   string
	Where    string // the line to change, when there is one
	Fix      string
	Lines    []string // details a line each (an out-of-memory failure's holders)
}

// ProcessReport is one process's analyses.
type ProcessReport struct {
	PID      uint32
	Label    string
	WallNs   uint64 // traced span less the time cudatap held its threads
	HeldNs   uint64
	Calls    int64
	GPUOps   int64
	Measured bool // CUPTI timed its GPU ops

	BlockedNs    uint64 // host time blocked in synchronizations: each thread's once, added over threads
	Syncs        int64
	BlockedTID   uint32  // the thread blocked longest
	ThreadNs     uint64  // its blocked time
	ThreadWallNs uint64  // its first call to its last, less the time cudatap held it
	BlockedShare float64 // ThreadNs / ThreadWallNs
	Sites        []syncs.Site

	Launches       int64
	LaunchPeakPerS float64 // over a sliding window of at least windowNs
	LaunchMeanPerS float64

	Streams []StreamReport
	Memory  MemoryReport
}

// StreamReport is one stream's gaps, queue and launch rate.
type StreamReport struct {
	ID       int
	Label    string
	Devices  string
	Ops      int64
	Measured int64
	Merged   int // threads or streams folded into this row ("other")

	Gaps          int64  // proven idle gaps
	CertainIdleNs uint64 // their total
	DrawnIdleNs   uint64 // gaps as the timeline draws them
	TopGaps       []Gap

	MaxQueue       int
	QueueSaturated bool // MaxQueue is a lower bound
	QueueBound     bool // ops not measured: pending means "not yet proven complete", an upper bound
	MeanQueue      float64
	ActiveNs       uint64 // first enqueue to last completion

	Launches       int64
	LaunchPeakPerS float64
}

// DeviceOverlap is how copy, compute and communication ran together on
// one device: as drawn (measured, or where the model laid bounded ops
// out) and at most (each op anywhere within its bounds).
type DeviceOverlap struct {
	Device        int8
	Label         string
	Ops, Measured int64
	SpanNs        uint64 // first op start to last op end
	Drawn, AtMost Overlap
	LateNs        uint64 // op time that arrived after its stretch was settled (not measured)
}

// Overlap is time with each category, and each pair, active.
type Overlap struct {
	Compute, Copy, Comm uint64
	Any                 uint64
	CopyCompute         uint64
	CommCompute         uint64
	CopyComm            uint64
	All                 uint64
}

func overlapOf(c *concurrency) Overlap {
	return Overlap{
		Compute: c.busy(catCompute), Copy: c.busy(catCopy), Comm: c.busy(catComm),
		Any:         c.busy(catCompute | catCopy | catComm),
		CopyCompute: c.both(catCopy | catCompute), CommCompute: c.both(catComm | catCompute),
		CopyComm: c.both(catCopy | catComm), All: c.both(catCompute | catCopy | catComm),
	}
}

// MemoryReport is a process's device memory reserved through CUDA.
type MemoryReport struct {
	Seen           bool
	Allocs, Frees  int64
	AllocBytes     uint64
	Peak, PeakAt   uint64
	InUseEnd       uint64
	SnapBytes      uint64 // in use when AtPeak was taken (within 1/256 of the peak)
	SnapAt         uint64
	NeverFreed     []Holder // largest first
	NeverFreedN    uint64
	NeverFreedB    uint64
	AtPeak         []Holder
	Untracked      int64
	UntrackedBytes uint64
	UnknownFrees   int64
	AttachedLate   bool
	groups         []Holder // every place, for the profile
}

// OpRow is one kind of GPU operation: a kernel, a copy direction, a
// collective.
type OpRow struct {
	PID        uint32
	Name       string
	Kind       string
	Count      int64
	Measured   int64
	MeasuredNs uint64
	MaxNs      uint64
	Bytes      uint64
	HostNs     uint64 // host time of the launch calls
}

const (
	topHolders = 20
	topOps     = 20
	topSites   = 20
	windowNs   = 1_000_000 // launch rates are over windows of at least 1 ms
)

// Build makes the report from what the collector saw and the finished
// model r (the same recording).
func (c *Collector) Build(r *model.Result) *Report {
	rep := &Report{Title: c.opts.Title, Version: c.opts.Version, Start: r.Start, End: r.End,
		WallOffsetNs: r.WallOffsetNs, Result: r, Syncs: c.Syncs, Lint: c.Lints, Steps: c.Steps, Account: describe.Account(r),
		Lints: lint.Findings(r, c.Lints), NoteBelow: c.Lints.Options().NoteBelow}
	if rep.Start == 0 {
		rep.Start, rep.End = c.firstT, c.lastT
	}
	if rep.Title == "" {
		var names []string
		for _, p := range r.Processes {
			names = append(names, p.Label())
		}
		rep.Title = strings.Join(names, ", ")
	}
	byPID := map[uint32]*model.Process{}
	for _, p := range r.Processes {
		byPID[p.PID] = p
	}
	for _, p := range r.Processes {
		rep.Processes = append(rep.Processes, c.process(r, p))
	}
	rep.Devices = c.overlaps()
	rep.TopByCount, rep.TopByTime = c.topOps(r, byPID)
	rep.HostVerdicts = report.AllHostVerdicts(r, c.Syncs)
	judged := map[uint32]bool{}
	for _, v := range rep.HostVerdicts {
		judged[v.PID] = true
	}
	rep.Verdicts = report.UnjudgedVerdicts(&r.GPU, judged) // as the summary shows them
	var sum bytes.Buffer
	report.Summary(&sum, r, c.Syncs, report.Options{Steps: c.Steps.Find(r)})
	rep.Summary = sum.String()
	rep.findings()
	// The timeline shows everything seen: also holds that began before
	// the first call, and ops proven complete after the last.
	from, to := rep.Start, max(rep.End, c.lastT)
	if c.firstT != 0 {
		from = min(from, c.firstT)
	}
	rep.timeline = c.timeline(r, byPID, from, to)
	rep.maxSlices, rep.bucket = c.opts.MaxSlices, c.clock.width
	rep.bounds(c) // times on the timeline's axis
	return rep
}

func (c *Collector) process(r *model.Result, p *model.Process) ProcessReport {
	pr := ProcessReport{PID: p.PID, Label: p.Label(), HeldNs: p.HeldNs, Calls: p.NCalls, GPUOps: p.NGPUOps, Measured: p.Measured}
	if p.LastSeen > p.FirstSeen {
		pr.WallNs = p.LastSeen - p.FirstSeen
		pr.WallNs -= min(pr.WallNs, p.HeldNs)
	}
	ps := c.procs[p.PID]
	if ps == nil {
		return pr
	}
	pr.BlockedNs, pr.Syncs = ps.blocked, ps.syncs
	// The thread blocked longest among those that launch work, as the
	// summary judges them: a background thread (NCCL's watchdog, a poller)
	// waits without holding up the work.
	// Its blocked time counts each nanosecond once however its syncs
	// overlap, and its wall time leaves out the time cudatap held it
	// (syncs.Thread), as the summary's.
	if h := syncs.HostOf(r, c.Syncs, p.PID); h != nil {
		anyWork := h.WorkThreads > 0
		pr.BlockedNs = 0
		for _, t := range h.Threads {
			pr.BlockedNs += t.BlockedNs
			if anyWork && t.Role != syncs.RoleWork {
				continue
			}
			if t.BlockedNs > pr.ThreadNs || t.BlockedNs == pr.ThreadNs && t.BlockedNs > 0 && t.TID < pr.BlockedTID {
				pr.BlockedTID, pr.ThreadNs, pr.ThreadWallNs = t.TID, t.BlockedNs, t.WallNs
			}
		}
	}
	if pr.ThreadWallNs > 0 {
		pr.BlockedShare = float64(pr.ThreadNs) / float64(pr.ThreadWallNs)
	}
	pr.Sites = syncs.ProcessSites(r, c.Syncs, p.PID)
	if len(pr.Sites) > topSites {
		pr.Sites = pr.Sites[:topSites]
	}
	pr.Launches = ps.launchN
	if ps.launches != nil {
		pr.LaunchPeakPerS = c.peakRate(ps.launches.v)
	}
	if pr.WallNs > 0 {
		pr.LaunchMeanPerS = float64(ps.launchN) * 1e9 / float64(pr.WallNs)
	}
	for i, rw := range c.rows {
		if rw.key.pid != p.PID || rw.key.kind != rowGPU {
			continue
		}
		pr.Streams = append(pr.Streams, c.stream(i, p))
	}
	slices.SortFunc(pr.Streams, func(a, b StreamReport) int {
		if (a.ID < 0) != (b.ID < 0) {
			return cmp.Compare(b.ID, a.ID) // "other" last
		}
		return cmp.Compare(a.ID, b.ID)
	})
	pr.Memory = c.memoryReport(r, p, ps)
	return pr
}

// peakRate is the most per second over any window of at least windowNs.
func (c *Collector) peakRate(v []uint64) float64 {
	w := c.clock.width
	k := int(max(1, (windowNs+w-1)/w))
	var sum, best uint64
	for i := range v {
		sum += v[i]
		if i >= k {
			sum -= v[i-k]
		}
		best = max(best, sum)
	}
	return float64(best) * 1e9 / float64(uint64(k)*w)
}

func (c *Collector) stream(i int, p *model.Process) StreamReport {
	rw := c.rows[i]
	sr := StreamReport{ID: int(rw.key.id), Ops: rw.ops, Measured: rw.measured, Merged: rw.merged,
		Gaps: rw.gaps.n, CertainIdleNs: rw.gaps.certainNs, DrawnIdleNs: rw.gaps.drawnNs, TopGaps: rw.gaps.top,
		MaxQueue: rw.depth.max, QueueSaturated: rw.depth.saturated, QueueBound: rw.depth.bound}
	sr.Label = streamLabel(p, rw)
	var devs []string
	for _, d := range model.DeviceBits(rw.devices) {
		devs = append(devs, deviceName(d))
	}
	sr.Devices = strings.Join(devs, ", ")
	if rw.lastDone > rw.firstEnq {
		sr.ActiveNs = rw.lastDone - rw.firstEnq
		var total uint64
		for _, v := range rw.queue.values() {
			total += v
		}
		sr.MeanQueue = float64(total) / float64(sr.ActiveNs)
	}
	for _, v := range rw.launches.v {
		sr.Launches += int64(v)
	}
	sr.LaunchPeakPerS = c.peakRate(rw.launches.v)
	return sr
}

func streamLabel(p *model.Process, rw *row) string {
	if rw.key.id == otherID {
		return fmt.Sprintf("other streams (%d)", rw.merged)
	}
	if id := int(rw.key.id); p != nil && id < len(p.Streams) && p.Streams[id] != nil {
		return p.Streams[id].Label()
	}
	return fmt.Sprintf("stream %d", rw.key.id)
}

func deviceName(d int8) string {
	if d < 0 {
		return "GPU ?"
	}
	return fmt.Sprintf("GPU %d", d)
}

func (c *Collector) overlaps() []DeviceOverlap {
	var out []DeviceOverlap
	for d, s := range c.devices {
		s.drawn.finish()
		s.bound.finish()
		o := DeviceOverlap{Device: d, Label: deviceName(d), Ops: s.ops, Measured: s.measured,
			Drawn: overlapOf(s.drawn), AtMost: overlapOf(s.bound), LateNs: s.drawn.late + s.bound.late}
		if s.drawn.last > s.drawn.first {
			o.SpanNs = s.drawn.last - s.drawn.first
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b DeviceOverlap) int {
		if (a.Device < 0) != (b.Device < 0) {
			return cmp.Compare(b.Device, a.Device)
		}
		return cmp.Compare(a.Device, b.Device)
	})
	return out
}

// opName names a GPU operation as the trace does.
func opName(r *model.Result, p *model.Process, k opKey) (name, kind string) {
	switch k.kind {
	case model.OpKernel:
		if p == nil {
			return fmt.Sprintf("kernel@0x%x", k.fn), "kernel"
		}
		return describe.KernelOf(r.Names, p, k.fn).Display, "kernel"
	case model.OpMemcpy:
		n := "Memcpy " + k.copy.String()
		if k.copy != event.DeviceToDevice {
			if k.pageable {
				n += " (Pageable)"
			} else {
				n += " (Pinned)"
			}
		}
		return n, "memcpy"
	case model.OpMemset:
		return "Memset", "memset"
	case model.OpGraph:
		return "Graph launch", "graph"
	case model.OpCollective:
		if s := event.Lookup(k.api); s != nil {
			return s.Name, "collective"
		}
		return "nccl", "collective"
	case model.OpHostFunc:
		return "Host function", "host function"
	}
	return "(other operations)", "other"
}

func (c *Collector) topOps(r *model.Result, byPID map[uint32]*model.Process) (byCount, byTime []OpRow) {
	var all []OpRow
	for k, st := range c.ops {
		if st.count == 0 {
			continue // a launch call whose op was captured into a graph
		}
		name, kind := opName(r, byPID[k.pid], k)
		all = append(all, OpRow{PID: k.pid, Name: name, Kind: kind, Count: st.count, Measured: st.measured,
			MeasuredNs: st.measuredNs, MaxNs: st.maxNs, Bytes: st.bytes, HostNs: st.hostNs})
	}
	byCount = slices.Clone(all)
	slices.SortFunc(byCount, func(a, b OpRow) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(b.MeasuredNs, a.MeasuredNs), cmp.Compare(a.PID, b.PID), cmp.Compare(a.Name, b.Name))
	})
	for _, o := range all {
		if o.Measured > 0 {
			byTime = append(byTime, o)
		}
	}
	slices.SortFunc(byTime, func(a, b OpRow) int {
		return cmp.Or(cmp.Compare(b.MeasuredNs, a.MeasuredNs), cmp.Compare(b.Count, a.Count), cmp.Compare(a.PID, b.PID), cmp.Compare(a.Name, b.Name))
	})
	return byCount[:min(topOps, len(byCount))], byTime[:min(topOps, len(byTime))]
}

func (c *Collector) memoryReport(r *model.Result, p *model.Process, ps *procState) MemoryReport {
	m := &ps.mem
	mr := MemoryReport{Seen: m.seen, Allocs: m.allocs, Frees: m.frees, AllocBytes: m.allocBytes, Peak: max(m.peak, p.DeviceMemPeak),
		PeakAt: m.peakAt, InUseEnd: p.DeviceMemInUse, SnapBytes: m.snapBytes, SnapAt: m.snapAt, Untracked: m.untracked,
		UntrackedBytes: m.untrackedBytes, UnknownFrees: m.unknownFrees, AttachedLate: p.AttachedLate}
	for i := range m.groups {
		g := &m.groups[i]
		h := Holder{Bytes: g.liveBytes, Count: g.liveN, AllocBytes: g.allocBytes, AllocCount: g.allocN,
			PeakBytes: g.peakBytes, PeakCount: g.peakN, FirstAlloc: g.firstAlloc, LastAlloc: g.lastAlloc}
		if g.key == otherStacks {
			h.API, h.OtherStacks = "(other allocation sites)", true
		} else {
			h.API = g.key.api.String()
			if s := event.Lookup(g.key.api); s != nil {
				h.API = s.Symbol(int(g.key.sym))
			}
			h.Python = describe.PyStack(r.Names, p, g.key.py)
			h.Native = describe.NativeStack(r.Names, p, g.key.stack, g.key.api, g.key.sym, nativeFrames)
		}
		switch {
		case len(h.Python) > 0:
			h.Where = h.Python[0]
		case len(h.Native) > 0:
			h.Where = h.Native[0]
		}
		mr.groups = append(mr.groups, h)
		mr.NeverFreedN += h.Count
		mr.NeverFreedB += h.Bytes
	}
	mr.NeverFreed = topHoldersBy(mr.groups, func(h *Holder) uint64 { return h.Bytes })
	mr.AtPeak = topHoldersBy(mr.groups, func(h *Holder) uint64 { return h.PeakBytes })
	return mr
}

// nativeFrames kept per allocation place.
const nativeFrames = 8

func topHoldersBy(hs []Holder, by func(*Holder) uint64) []Holder {
	var out []Holder
	for i := range hs {
		if by(&hs[i]) > 0 {
			out = append(out, hs[i])
		}
	}
	slices.SortStableFunc(out, func(a, b Holder) int { return cmp.Compare(by(&b), by(&a)) })
	return out[:min(topHolders, len(out))]
}

// share formats a/b as a percentage.
func share(a, b uint64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(a)/float64(b))
}

func (rep *Report) findings() {
	var out []Finding
	// A failed allocation is what the run came to: first.
	for _, rec := range oom.Records(rep.Result) {
		out = append(out, Finding{Severity: SevHigh, Title: "out of memory: " + rec.Verdict(), Where: rec.Site, Fix: oom.Fix, Lines: rec.Lines()})
	}
	if n := oom.Count(rep.Result) - int64(len(out)); n > 0 {
		out = append(out, Finding{Severity: SevHigh, Title: fmt.Sprintf("out of memory: %d more failed allocations, past those kept per process", n)})
	}
	if lost := rep.Result.Drops.Lost(); lost > 0 {
		out = append(out, Finding{Severity: SevHigh, Title: fmt.Sprintf("the recording lost %d events", lost),
			Detail: "counts and times below are lower bounds: " + rep.Account,
			Fix:    "record with a bigger --ring-buffer-size, or trace fewer processes"})
	}
	if rep.Result.Truncated != "" {
		out = append(out, Finding{Severity: SevHigh, Title: "the recording is truncated", Detail: rep.Result.Truncated})
	}
	for _, pr := range rep.Processes {
		if pr.Syncs > 0 && pr.ThreadWallNs > 0 {
			f := Finding{Severity: SevInfo, Title: fmt.Sprintf("%s waited for the GPU %.0f%% of its wall time", pr.Label, 100*pr.BlockedShare),
				Detail: fmt.Sprintf("thread %d blocked %s of its %s in synchronizations (all threads: %s in %d)",
					pr.BlockedTID, units.Duration(pr.ThreadNs), units.Duration(pr.ThreadWallNs), units.Duration(pr.BlockedNs), pr.Syncs)}
			switch {
			case pr.BlockedShare >= 0.2:
				f.Severity = SevHigh
			case pr.BlockedShare >= 0.05:
				f.Severity = SevMedium
			}
			if len(pr.Sites) > 0 {
				s := pr.Sites[0]
				f.Detail += fmt.Sprintf("; the top site: %s in %s, %d× for %s", s.Kind, s.API, s.Count, units.Duration(s.BlockedNs))
				f.Where, f.Fix = s.Where(), s.Hint
			}
			out = append(out, f)
		}
		if m := pr.Memory; m.Seen {
			f := Finding{Severity: SevInfo, Title: fmt.Sprintf("%s reserved up to %s of device memory through CUDA", pr.Label, units.Bytes(m.Peak)),
				Detail: fmt.Sprintf("%d allocations (%s), %d frees; %s in %d allocations never freed",
					m.Allocs, units.Bytes(m.AllocBytes), m.Frees, units.Bytes(m.NeverFreedB), m.NeverFreedN)}
			if len(m.NeverFreed) > 0 {
				f.Where = m.NeverFreed[0].Where
				f.Detail += fmt.Sprintf("; the largest holder: %s (%s)", m.NeverFreed[0].API, units.Bytes(m.NeverFreed[0].Bytes))
			}
			out = append(out, f)
		}
	}
	for _, d := range rep.Devices {
		if d.SpanNs == 0 {
			continue
		}
		how := "as drawn, inferred"
		if d.Measured == d.Ops {
			how = "measured"
		}
		idle := d.SpanNs - min(d.SpanNs, d.AtMost.Any)
		if float64(idle) >= 0.3*float64(d.SpanNs) {
			out = append(out, Finding{Severity: SevMedium,
				Title:  fmt.Sprintf("%s had nothing queued at least %s of the %s it was in use", d.Label, share(idle, d.SpanNs), units.Duration(d.SpanNs)),
				Detail: fmt.Sprintf("%s with no op enqueued and not yet proven complete", units.Duration(idle)),
				Fix:    "the GPU waits for the host: enqueue work earlier (fewer synchronizations, CUDA graphs, a bigger batch)"})
		}
		f := Finding{Severity: SevInfo}
		switch {
		case d.Drawn.Copy > 0 && d.Drawn.Compute > 0:
			f.Title = fmt.Sprintf("%s: copies overlapped compute %s of copy time (%s; at most %s)", d.Label,
				share(d.Drawn.CopyCompute, d.Drawn.Copy), how, share(d.AtMost.CopyCompute, d.AtMost.Copy))
		case d.Drawn.Copy > 0:
			f.Title = fmt.Sprintf("%s: copies only, no compute", d.Label)
		default:
			f.Title = fmt.Sprintf("%s: no copies to overlap with compute", d.Label)
		}
		if d.Drawn.Comm > 0 {
			f.Detail = fmt.Sprintf("communication overlapped compute %s of its time (%s; at most %s); ", share(d.Drawn.CommCompute, d.Drawn.Comm),
				how, share(d.AtMost.CommCompute, d.AtMost.Comm))
		}
		f.Detail += fmt.Sprintf("in use %s, nothing queued at least %s of it", units.Duration(d.SpanNs), share(idle, d.SpanNs))
		out = append(out, f)
	}
	for _, v := range rep.Verdicts {
		out = append(out, Finding{Severity: SevHigh, Title: v.String()})
	}
	if raised := rep.RaisedLints(); len(raised) > 0 {
		top := raised[0]
		f := Finding{Severity: SevMedium, Title: "lints raised: " + lint.LevelCounts(raised) + " (see Lints)",
			Detail: fmt.Sprintf("the first: [%s] %s in %s; cost: %s", top.ID, top.Title, top.Process, top.Cost), Fix: top.Fix}
		if top.Level == lint.LevelError {
			f.Severity = SevHigh
		}
		if len(top.Examples) > 0 && len(top.Examples[0].Calls) > 0 {
			f.Where = top.Examples[0].Calls[0].Site
		}
		out = append(out, f)
	}
	for _, v := range rep.HostVerdicts {
		label := fmt.Sprintf("pid %d", v.PID)
		for _, p := range rep.Result.Processes {
			if p.PID == v.PID {
				label = p.Label()
			}
		}
		out = append(out, Finding{Severity: SevHigh, Title: label + ": " + v.Kind, Detail: v.Detail})
	}
	rank := map[string]int{SevHigh: 0, SevMedium: 1, SevInfo: 2}
	slices.SortStableFunc(out, func(a, b Finding) int { return cmp.Compare(rank[a.Severity], rank[b.Severity]) })
	rep.Findings = out
}

// RaisedLints are the lints' findings that are not notes.
func (rep *Report) RaisedLints() []lint.Finding {
	i := slices.IndexFunc(rep.Lints, func(f lint.Finding) bool { return f.Level == lint.LevelNote })
	if i < 0 {
		return rep.Lints
	}
	return rep.Lints[:i]
}

// LintNotes are the lints' notes: listed, not raised.
func (rep *Report) LintNotes() []lint.Finding { return rep.Lints[len(rep.RaisedLints()):] }

func (rep *Report) bounds(c *Collector) {
	var b []string
	add := func(format string, args ...any) { b = append(b, fmt.Sprintf(format, args...)) }
	if l := c.Lints.Limits(); l != (lint.Limits{}) {
		add("lints: %s", l)
	}
	add("time series: %d buckets of %s", c.opts.Buckets, units.Duration(c.clock.width))
	if c.detail.over || c.detail.to != 0 {
		add("timeline: %d of %d slices in full detail, in the busiest window that holds at most %d (%s to %s); the rest drawn as occupancy per bucket",
			c.detail.n, c.nSlices, c.opts.MaxSlices, rep.at(c.detail.from), rep.at(c.detail.to))
		if c.detail.dropped > 0 {
			add("timeline: %d slices of that window past the limit not drawn", c.detail.dropped)
		}
	} else {
		add("timeline: all %d slices in full detail (limit %d)", c.nSlices, c.opts.MaxSlices)
	}
	if c.merged > 0 {
		add("timeline: %d threads or streams past the limit of %d rows share an \"other\" row per process", c.merged, c.opts.MaxRows)
	}
	if c.clock.early > 0 {
		add("%d timestamps before the first one seen were drawn at the start", c.clock.early)
	}
	var untracked int64
	var untrackedB uint64
	for _, ps := range c.procs {
		untracked += ps.mem.untracked
		untrackedB += ps.mem.untrackedBytes
	}
	if untracked > 0 {
		add("device memory: %d allocations (%s) past the limit of %d live allocations are counted in use but not attributed to a stack", untracked, units.Bytes(untrackedB), c.opts.MaxLive)
	}
	if c.opsOver > 0 {
		add("top operations: %d calls and operations of kernels or copies past the limit of %d distinct ones are counted as \"other\"", c.opsOver, c.opts.MaxOps)
	}
	var late uint64
	for _, d := range rep.Devices {
		late += d.LateNs
	}
	if late > 0 {
		add("overlap: %s of GPU op time came after its stretch was measured and is left out", units.Duration(late))
	}
	partial := 0
	for _, pr := range rep.Processes {
		for _, s := range pr.Streams {
			for _, g := range s.TopGaps {
				if !g.HostComplete {
					partial++
				}
			}
			if s.QueueSaturated {
				add("%s, %s: more than %d ops pending at once; deeper queues are not followed", pr.Label, s.Label, maxDepth)
			}
		}
	}
	if partial > 0 {
		add("idle gaps: for %d gaps the last %d calls kept per process did not reach back to the gap's start (or the process was past the first %d): what the host did is partial", partial, ringSize, ringProcs)
	}
	rep.Bounds = b
}
