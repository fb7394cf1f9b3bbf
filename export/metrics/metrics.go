// Package metrics turns what the model concludes into Prometheus metrics:
// counters cumulative per process (calls and launches, synchronization
// waits by kind, copy bytes by direction and host memory, NCCL bytes and
// operations), and a histogram of CUDA API time. A Collector is both a
// model.Sink (fed by the reader goroutine) and a prometheus.Collector
// (read by scrapes), so a long-running agent can expose a session's
// findings as they happen.
//
// Kernel names and stacks are never labels (cardinality): they live in
// profiles. A process is labelled comm, container, pod and namespace, and
// pid only when asked (Options.PID): without it, the processes that share
// those labels (the ranks of a job in one container) share their series,
// summed, and a series does not die with its process. Streams are labelled
// by a small number per process, in the order they were first seen; the
// API time histograms only when asked (Options.Histograms). SeriesBound
// is what a process can cost at most.
package metrics

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// MaxProcesses bounds the processes with series: beyond it, the series of
// the process seen least recently are dropped (counted in
// cudatap_metrics_processes_evicted_total).
const MaxProcesses = 1024

// apiBucketsNs are the CUDA API time histogram's upper bounds: powers of
// four from 1.024 µs to 1.07 s, in nanoseconds. Powers of two, so that the
// log2 histograms BPF keeps of launch times (event.TimeHistogram) fall
// into them exactly: all of BPF bucket b is below 2^(b+1) ns.
var apiBucketsNs = [...]uint64{1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28, 1 << 30}

// Options choose the labels and series of a Collector.
type Options struct {
	// PID labels each process's series with its pid: a set of series per
	// process (the agent's --pid-label). Without it a set per process
	// group: comm, container, pod and namespace.
	PID bool
	// Histograms exports cudatap_cuda_api_seconds, the API time
	// histograms: 14 series per API timed (the agent's --histograms).
	Histograms bool
	// MaxStreams is how many streams of a process are labelled beside the
	// legacy default stream (0: DefaultMaxStreams); launches on later
	// ones count under stream="other".
	MaxStreams int
}

// DefaultMaxStreams: a PyTorch process launches on its default stream,
// NCCL's streams (one per communicator and device) and a few side streams.
const DefaultMaxStreams = 16

// Collector aggregates what a model reports, per process.
type Collector struct {
	o       Options
	mu      sync.Mutex
	procs   map[uint32]*proc
	seq     uint64 // recency, for eviction
	evicted uint64
	label   Labeler
	weight  float64 // each count counts this much (SetWeight)
	// retired holds, by process group (without Options.PID), the counters
	// of the group's processes that were forgotten while others of it
	// live on: a group's counters never go down.
	retired map[string]seriesSet
	// Launches whose time BPF found no room for: of the sessions that
	// ended, and of the current one.
	timesLost, timesLostLive uint64

	calls, launches, syncs, syncWait, copyBytes, ncclBytes, ncclOps, apiTime, evictedDesc, timesLostDesc *prometheus.Desc
	commCalls, commLast, commDone, commDoneLast                                                          *prometheus.Desc
	sampleProb, sampleWindows, streamLaunches, processes, ooms                                           *prometheus.Desc
}

type proc struct {
	labels []string // its label values: pid (Options.PID), comm, container, pod, namespace
	group  string   // labels, joined: the key of its group
	seen   uint64
	// Counts are weighted (SetWeight): floats.
	calls      map[string]float64 // by API
	launches   float64
	syncs      map[string]float64 // by kind
	syncWaitNs map[string]float64
	copyBytes  map[[2]string]float64 // (direction, host memory)
	ncclBytes  map[string]float64    // by collective
	ncclOps    map[string]float64
	apiTime    map[string]*histogram
	// Launches by stream (label: streamName), weighted; the labels by
	// handle, made once (a launch is the hot path: no allocation per call).
	streamLaunches map[string]float64
	streamNames    map[uint64]string
	// Launches counted in BPF (aggregate mode): of the sessions that
	// ended (folded into calls and launches) and of the current one, by
	// API and by stream.
	aggLive       map[string]uint64
	aggLiveStream map[string]uint64
	// Launch times kept in BPF in the current session, by API (folded into
	// apiTime when it ends).
	aggTimes map[string]*event.TimeHistogram
	// The session's counts as BPF last gave them, and as they were at the
	// last cut (CutAggregates): the live ones above are the difference.
	aggCum, aggBase aggregates
	// The agent's per-process sampling: its probability of being traced
	// in the current window, and the windows it was traced in and sat out.
	// Its counts in a traced window count 1/probability.
	probability           float64
	windowsIn, windowsOut uint64
	// Collectives called whose completion is awaited, by GPU op id.
	pendingColl map[int]*commState
	// NCCL communicators by handle: their collectives, exactly (not
	// weighted: ranks are compared by them).
	comms map[uint64]*commState
	// Device allocations refused for want of memory (exact, not
	// weighted), and the model's count of them when last seen
	// (model.Process.OOMCount, which restarts with each session).
	ooms     uint64
	oomsSeen int64
	// When ForgetExited first found it gone (zero: alive).
	goneSince time.Time
}

// commState is one rank's view of a communicator: which one (its unique
// id's first word, shared by its ranks), its rank, and the collectives it
// called on it. A rank whose count stays behind its communicator's others
// has stopped arriving (hung, or a straggler).
type commState struct {
	id       uint64
	rank     int32
	size     uint64
	calls    uint64
	lastWall float64 // Unix seconds of its last collective call
	// Of those, the ones its host saw complete (a synchronization proved
	// them done): a rank waiting in a collective its others never reach
	// stays calls > completed.
	completed    uint64
	completeWall float64
}

// maxPendingCollectives bounds, per process, the collectives whose
// completion is followed (beyond, they are not counted complete).
const maxPendingCollectives = 4096

// maxComms bounds the communicators kept per process.
const maxComms = 64

// wallOf converts a CLOCK_MONOTONIC ns time to Unix seconds.
func wallOf(mono uint64) float64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return float64(time.Now().UnixNano()-ts.Nano()+int64(mono)) / 1e9
}

type histogram struct {
	count   uint64
	sumNs   uint64
	buckets [len(apiBucketsNs)]uint64 // cumulative per apiBucketsNs
}

// observe adds a call that took d ns.
func (h *histogram) observe(d uint64) {
	h.count++
	h.sumNs += d
	for i, b := range apiBucketsNs {
		if d <= b {
			h.buckets[i]++
		}
	}
}

// addLog2 adds the calls of a BPF log2 histogram: bucket b's, each under
// 2^(b+1) ns, count in every bound from 2^(b+1) up. (A call of exactly a
// bound's 2^(2k) ns counts in the next one up: within a nanosecond.)
func (h *histogram) addLog2(t *event.TimeHistogram) {
	for b, n := range t.Count {
		if n == 0 {
			continue
		}
		h.count += n
		h.sumNs += t.Ns[b]
		for i, bound := range apiBucketsNs {
			if b+1 < 64 && uint64(1)<<(b+1) <= bound {
				h.buckets[i] += n
			}
		}
	}
}

// NewCollector returns an empty collector. Processes are labelled from
// /proc (comm, container) when first seen.
func NewCollector(o Options) *Collector {
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	labels := []string{"comm", "container", "pod", "namespace"}
	if o.PID {
		labels = append([]string{"pid"}, labels...)
	}
	d := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append(slices.Clone(labels), extra...), nil)
	}
	comm := func(name, help string) *prometheus.Desc { return d(name, help, "communicator", "rank", "world_size") }
	return &Collector{
		o:              o,
		commCalls:      comm("cudatap_nccl_comm_collectives", "Collectives this rank called on the communicator (exact). A rank behind the others of its communicator has stopped arriving: hung or late."),
		commDone:       comm("cudatap_nccl_comm_completed_collectives", "Of the collectives this rank called on the communicator, those its host saw complete. Fewer than cudatap_nccl_comm_collectives for long: it waits in a collective (for a rank that has not arrived)."),
		commDoneLast:   comm("cudatap_nccl_comm_last_completed_collective_timestamp_seconds", "When this rank's host last saw one of its collectives complete (Unix time)."),
		commLast:       comm("cudatap_nccl_comm_last_collective_timestamp_seconds", "When this rank last called a collective on the communicator (Unix time)."),
		procs:          map[uint32]*proc{},
		retired:        map[string]seriesSet{},
		weight:         1,
		label:          ProcFSLabels,
		calls:          d("cudatap_cuda_calls_total", "CUDA runtime, driver and NCCL calls traced, by API.", "api"),
		launches:       d("cudatap_kernel_launches_total", "Kernel launch calls traced (a CUDA graph's launch is one cudaGraphLaunch call, in cudatap_cuda_calls_total: the kernels it runs are not launches)."),
		streamLaunches: d("cudatap_stream_launches_total", "Kernel launches traced, by stream: 0 the legacy default stream, then 1, 2, ... in the order the process's streams were first seen (other past the bound, unknown when unreadable).", "stream"),
		syncs:          d("cudatap_syncs_total", "Host-blocking synchronizations, by kind (stream_sync, pageable_memcpy, ...).", "kind"),
		syncWait:       d("cudatap_sync_wait_seconds_total", "Host time blocked in synchronizations, by kind.", "kind"),
		copyBytes:      d("cudatap_memcpy_bytes_total", "Bytes copied, by direction (HtoD, DtoH, DtoD, ...) and host memory (pageable, pinned, device).", "direction", "host_memory"),
		ncclBytes:      d("cudatap_nccl_bytes_total", "NCCL payload bytes, by operation.", "op"),
		ncclOps:        d("cudatap_nccl_operations_total", "NCCL operations, by operation.", "op"),
		apiTime:        d("cudatap_cuda_api_seconds", "Host time in CUDA calls whose return is traced, by API (launches only with the agent's --launch-times).", "api"),
		sampleProb:     d("cudatap_process_sample_probability", "Probability the agent traces this process in a window (1 unless --max-cpu makes it sample the busiest processes; counts of traced windows are weighted 1/p). Of a group of processes: the smallest."),
		sampleWindows:  d("cudatap_process_windows_total", "Windows this process (the processes of the group, added) was traced in (traced=\"true\") or sat out to keep the agent within --max-cpu (traced=\"false\").", "traced"),
		ooms:           d("cudatap_oom_total", "Device allocations refused for want of memory (CUDA out of memory), one per request: the caching allocator's retries of a request and the driver's call inside the runtime's count once. Exact, not weighted: in a window a process sat out (--max-cpu), none is seen."),
		processes:      d("cudatap_processes", "Processes these series are of: 1 with the pid label, else the group's (same comm, container, pod and namespace), exited ones included until their series would go (5 minutes)."),
		evictedDesc:    prometheus.NewDesc("cudatap_metrics_processes_evicted_total", "Processes whose series were dropped to bound cardinality.", nil, nil),
		timesLostDesc:  prometheus.NewDesc("cudatap_launch_times_lost_total", "Launches counted whose host time BPF found no room to keep (--launch-times): missing from cudatap_cuda_api_seconds.", nil, nil),
	}
}

// SeriesBound is the most series one process can have with options o
// (without Options.PID, one group of processes: they share them), counted
// as Prometheus stores them (a histogram's buckets, sum and count each a
// series): the process count; calls by API; launches, and by stream;
// out-of-memory failures;
// sampling; syncs and their wait by kind; bytes copied by direction and
// host memory; NCCL bytes and operations by collective; the four gauges of
// each communicator; with Options.Histograms, the time of each API whose
// time is known.
func SeriesBound(o Options) int {
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	apis, timed, collectives := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, l := range []event.Layer{event.Runtime, event.Driver, event.NCCL} {
		for _, s := range event.Specs(l) {
			apis[s.Name] = true
			timed[s.Name] = timed[s.Name] || s.Return || s.Class == event.ClassLaunch // launches: --launch-times
			collectives[s.Name] = collectives[s.Name] || s.Class == event.ClassCollective
		}
	}
	count := func(m map[string]bool) (n int) {
		for _, v := range m {
			if v {
				n++
			}
		}
		return n
	}
	syncKinds := 0
	for k := model.SyncKind(1); k.String() != "unknown"; k++ {
		syncKinds++
	}
	copies := map[string]int{} // direction → host memories
	for k := range 256 {
		copies[event.MemcpyKind(k).String()] = 2 // pageable, pinned
	}
	copies[event.DeviceToDevice.String()] = 1 // device
	// Streams: MaxStreams, 0, other, unknown; then out of memory;
	// sampling: the probability, the windows in and out.
	n := 1 + len(apis) + 1 + o.MaxStreams + 3 + 1 + 3 + 2*syncKinds + 2*count(collectives) + 4*maxComms
	for _, hosts := range copies {
		n += hosts
	}
	if o.Histograms {
		n += (len(apiBucketsNs) + 3) * count(timed) // the bounds, +Inf, sum, count
	}
	return n
}

// ProcLabels name a process in the series.
type ProcLabels struct {
	Comm, Container, Pod, Namespace string
}

// A Labeler names process pid; gpus, when known, are the UUIDs of GPUs it
// uses (in a pod of several containers they tell which is its).
type Labeler func(pid uint32, gpus ...string) ProcLabels

// ProcFSLabels names a process from /proc alone: its comm, and the
// container id and pod UID of its cgroup path (no namespace).
func ProcFSLabels(pid uint32, _ ...string) ProcLabels {
	var l ProcLabels
	l.Comm, _ = procfs.Comm(int(pid))
	if cg, err := procfs.Cgroup(int(pid)); err == nil {
		l.Container, l.Pod = procfs.ContainerFromCgroup(cg)
	}
	return l
}

// SetLabeler replaces how processes are named (ProcFSLabels by default),
// for processes seen from now on.
func (c *Collector) SetLabeler(l Labeler) {
	c.mu.Lock()
	c.label = l
	c.mu.Unlock()
}

func (c *Collector) proc(pid uint32) *proc {
	c.seq++
	if p := c.procs[pid]; p != nil {
		p.seen = c.seq
		return p
	}
	if len(c.procs) >= MaxProcesses {
		oldest, at := uint32(0), ^uint64(0)
		for id, p := range c.procs {
			if p.seen < at {
				oldest, at = id, p.seen
			}
		}
		c.forget(oldest)
		c.evicted++
	}
	l := c.label(pid)
	labels := []string{l.Comm, l.Container, l.Pod, l.Namespace}
	if c.o.PID {
		labels = append([]string{strconv.FormatUint(uint64(pid), 10)}, labels...)
	}
	p := &proc{labels: labels, group: strings.Join(labels, "\xff"), seen: c.seq, probability: 1,
		calls: map[string]float64{}, syncs: map[string]float64{}, syncWaitNs: map[string]float64{},
		copyBytes: map[[2]string]float64{}, ncclBytes: map[string]float64{}, ncclOps: map[string]float64{},
		apiTime: map[string]*histogram{}, streamLaunches: map[string]float64{}}
	c.procs[pid] = p
	return p
}

// ExitedGrace is how long the series of a process that exited stay: long
// enough for every scraper to read its final values a few times.
const ExitedGrace = 5 * time.Minute

// ForgetExited drops the series of processes that alive says are gone and
// have been for ExitedGrace: on a node where processes come and go, the
// series follow the live ones (MaxProcesses only bounds the worst case).
func (c *Collector) ForgetExited(alive func(pid int) bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid, p := range c.procs {
		switch {
		case alive(int(pid)):
			p.goneSince = time.Time{}
		case p.goneSince.IsZero():
			p.goneSince = now
		case now.Sub(p.goneSince) >= ExitedGrace:
			c.forget(pid)
		}
	}
}

// forget drops process pid. Without Options.PID its counters stay in its
// group's while the group has other processes: a counter of the group
// must not go down (Prometheus would take it for a restart).
func (c *Collector) forget(pid uint32) {
	p := c.procs[pid]
	delete(c.procs, pid)
	if p == nil || c.o.PID {
		return
	}
	for _, q := range c.procs {
		if q.group == p.group {
			set := c.retired[p.group]
			if set == nil {
				set = seriesSet{}
				c.retired[p.group] = set
			}
			c.series(p, func(s sample) {
				if s.kind != prometheus.GaugeValue { // a gauge is the process's own
					set.add(s)
				}
			})
			return
		}
	}
	delete(c.retired, p.group) // the group's last process: its series go
}

// Call counts c.
func (c *Collector) Call(mp *model.Process, x *model.Call) {
	spec := x.Spec()
	if spec == nil {
		return
	}
	name := spec.Name
	if rt := event.Lookup(event.RuntimeLaunch(x.API)); x.ViaRuntime && rt != nil {
		name = rt.Name // as the program called it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc(mp.PID)
	if mp.OOMCount != p.oomsSeen { // the model counted the call's
		if mp.OOMCount < p.oomsSeen {
			p.oomsSeen = 0 // another process under this pid
		}
		p.ooms += uint64(mp.OOMCount - p.oomsSeen)
		p.oomsSeen = mp.OOMCount
	}
	w := c.weightOf(p)
	p.calls[name] += w
	switch spec.Class {
	case event.ClassLaunch:
		if !x.Captured {
			p.launches += w
			if x.Args.HasStream {
				p.streamLaunches[c.streamName(p, x.Args.Stream)] += w
			}
		}
	case event.ClassMemcpy:
		host := "pinned"
		switch {
		case x.Args.Kind == event.DeviceToDevice:
			host = "device"
		case x.Pageable:
			host = "pageable"
		}
		p.copyBytes[[2]string{x.Args.Kind.String(), host}] += float64(x.Args.Bytes) * w
	case event.ClassCollective:
		p.ncclBytes[name] += float64(x.Args.Bytes) * w
		p.ncclOps[name] += w
		if m := p.comms[x.Args.Comm]; m != nil {
			m.calls++
			m.lastWall = wallOf(x.Start)
			if x.GPUOp >= 0 && len(p.pendingColl) < maxPendingCollectives {
				if p.pendingColl == nil {
					p.pendingColl = map[int]*commState{}
				}
				p.pendingColl[x.GPUOp] = m
			}
		}
	case event.ClassCommInit:
		if x.HasRet && x.Ret == 0 && x.Args.CommID != 0 && len(p.comms) < maxComms {
			if p.comms == nil {
				p.comms = map[uint64]*commState{}
			}
			p.comms[x.Args.Comm] = &commState{id: x.Args.CommID, rank: x.Args.Peer, size: x.Args.Size}
		}
	}
	if x.HasRet && c.o.Histograms {
		p.apiHistogram(name).observe(x.Duration())
	}
}

// Sync counts a host-blocking synchronization and its wait.
func (c *Collector) Sync(mp *model.Process, s *model.Sync) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc(mp.PID)
	k := s.Kind.String()
	p.syncs[k] += c.weightOf(p)
	p.syncWaitNs[k] += float64(s.BlockedNs) * c.weightOf(p)
}

// GPUOp, Dependency and Hold add nothing to the metrics.
// GPUOp counts a collective its host saw complete.
func (c *Collector) GPUOp(mp *model.Process, op *model.GPUOp) {
	if op.Kind != model.OpCollective {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[mp.PID]
	if p == nil {
		return
	}
	m := p.pendingColl[op.ID]
	if m == nil {
		return
	}
	delete(p.pendingColl, op.ID)
	m.completed++
	switch {
	case op.Measured:
		m.completeWall = wallOf(op.End)
	case op.Bounded:
		m.completeWall = wallOf(op.ProvenBy())
	}
}
func (c *Collector) Dependency(*model.Process, *model.Dependency) {}
func (c *Collector) Hold(*model.Process, *model.Hold)             {}

// SetWeight makes every count from now on count w times (w ≥ 1): window
// mode traces a share 1/w of the time, and weighted counts estimate the
// totals over all of it. Histograms stay unweighted (distributions).
func (c *Collector) SetWeight(w float64) {
	if w < 1 {
		w = 1
	}
	c.mu.Lock()
	c.weight = w
	c.mu.Unlock()
}

// SetSampling says whether process pid is traced in the window that
// begins, and with which probability (the agent's per-process sampling):
// its counts in it count 1/probability more (on top of SetWeight).
func (c *Collector) SetSampling(pid uint32, probability float64, traced bool) {
	if probability <= 0 || probability > 1 {
		probability = 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc(pid)
	p.probability = probability
	if traced {
		p.windowsIn++
	} else {
		p.windowsOut++
	}
}

// weightOf is what one of p's counts counts for now.
func (c *Collector) weightOf(p *proc) float64 { return c.weight / p.probability }

// Describe sends the metrics' descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.launches, c.syncs, c.syncWait, c.copyBytes, c.ncclBytes, c.ncclOps, c.apiTime, c.evictedDesc, c.commCalls, c.commLast, c.commDone, c.commDoneLast, c.sampleProb, c.sampleWindows, c.streamLaunches, c.processes, c.ooms, c.timesLostDesc} {
		ch <- d
	}
}

// apiHistogram is p's time histogram of API name, made when first needed.
func (p *proc) apiHistogram(name string) *histogram {
	h := p.apiTime[name]
	if h == nil {
		h = &histogram{}
		p.apiTime[name] = h
	}
	return h
}

// SetAggregates takes what BPF counted in the current session (aggregate
// mode), cumulative since it began: launches per process, API and stream,
// and launch times per process and API. A process absent keeps its last
// values (its counters were deleted once it exited).
func (c *Collector) SetAggregates(a event.Aggregates) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timesLostLive = a.TimesLost
	for pid, byAPI := range a.Times {
		if !c.o.Histograms {
			break
		}
		p := c.proc(pid)
		p.aggCum.times = map[string]*event.TimeHistogram{}
		p.aggTimes = map[string]*event.TimeHistogram{}
		for api, h := range byAPI {
			if s := event.Lookup(api); s != nil {
				p.aggCum.times[s.Name] = h
				live := *h
				if base := p.aggBase.times[s.Name]; base != nil {
					live.Sub(base)
				}
				p.aggTimes[s.Name] = &live
			}
		}
	}
	for pid, byKey := range a.Launches {
		p := c.proc(pid)
		p.aggCum.calls, p.aggCum.streams = map[string]uint64{}, map[string]uint64{}
		// Streams first seen in the same counts are numbered in the order
		// of their handles (BPF's counts do not say which came first).
		keys := slices.SortedFunc(maps.Keys(byKey), func(a, b event.LaunchKey) int {
			return cmp.Or(cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.API, b.API))
		})
		for _, k := range keys {
			if s := event.Lookup(k.API); s != nil {
				n := byKey[k]
				p.aggCum.calls[s.Name] += n
				p.aggCum.streams[c.streamName(p, k.Stream)] += n
			}
		}
		p.aggLive, p.aggLiveStream = since(p.aggCum.calls, p.aggBase.calls), since(p.aggCum.streams, p.aggBase.streams)
	}
	// Their last counts: into the totals now, so that a new process under
	// a reused PID counts from zero, not from the old one's baseline.
	for _, pid := range a.Final {
		if p := c.procs[pid]; p != nil {
			c.fold(p)
			p.aggCum, p.aggBase = aggregates{}, aggregates{}
			p.oomsSeen = 0
		}
	}
}

// since is cum - base per key.
func since(cum, base map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(cum))
	for k, n := range cum {
		out[k] = n - min(n, base[k])
	}
	return out
}

// aggregates is what BPF counted of a process in a session, cumulative
// (launches by API and by stream, launch times by API).
type aggregates struct {
	calls, streams map[string]uint64
	times          map[string]*event.TimeHistogram
}

// FoldAggregates ends the current session's aggregates: they become part
// of the totals, and the next session's start from zero.
func (c *Collector) FoldAggregates() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timesLost += c.timesLostLive
	c.timesLostLive = 0
	for _, p := range c.procs {
		c.fold(p)
		p.aggCum, p.aggBase = aggregates{}, aggregates{}
		p.oomsSeen = 0 // the next session's model counts from zero
	}
}

// CutAggregates folds what the current session counted so far into the
// totals, with the weights of now, and goes on counting from there: the
// agent's --continuous, whose one session outlives many sampling intervals.
func (c *Collector) CutAggregates() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		c.fold(p)
		p.aggBase = p.aggCum
	}
}

// fold adds p's live aggregates to its totals (weighted, as its counts of
// now are) and empties them.
func (c *Collector) fold(p *proc) {
	for api, t := range p.aggTimes {
		p.apiHistogram(api).addLog2(t)
	}
	for api, n := range p.aggLive {
		p.calls[api] += float64(n) * c.weightOf(p)
		p.launches += float64(n) * c.weightOf(p)
	}
	for stream, n := range p.aggLiveStream {
		p.streamLaunches[stream] += float64(n) * c.weightOf(p)
	}
	p.aggLive, p.aggLiveStream, p.aggTimes = nil, nil, nil
}

// streamName labels a stream of p by its handle: "0" for the legacy
// default stream (handle 0 or cudaStreamLegacy, 0x1), then "1", "2", ... in
// the order p's streams are first seen, stable for as long as p has series
// (the model's stream ids restart with each session; a handle is a pointer,
// meaningless to a reader and a new series per stream ever created). Past
// Options.MaxStreams, "other". Made once per stream: formatting one on
// every launch would allocate.
func (c *Collector) streamName(p *proc, handle uint64) string {
	switch handle {
	case 0, 1:
		return "0"
	case event.AggregateUnknownStream:
		return "unknown"
	}
	if n, ok := p.streamNames[handle]; ok {
		return n
	}
	if len(p.streamNames) >= c.o.MaxStreams {
		return "other"
	}
	if p.streamNames == nil {
		p.streamNames = map[uint64]string{}
	}
	n := strconv.Itoa(len(p.streamNames) + 1)
	p.streamNames[handle] = n
	return n
}

// sample is one series' value: a counter's or a gauge's v, or a
// histogram's h (kind UntypedValue); merge says how the samples of
// several processes under the same labels make one.
type sample struct {
	desc   *prometheus.Desc
	kind   prometheus.ValueType
	merge  merge
	v      float64
	h      histogram
	labels []string
}

type merge uint8

const (
	mergeSum merge = iota // counters, histograms, process counts
	mergeMax              // a process's own gauges: a rank's collectives, their times
	mergeMin              // the sampling probability: the group's least traced
)

// seriesSet are series by desc and label values, the samples of the
// processes that share them merged.
type seriesSet map[seriesKey]*sample

type seriesKey struct {
	desc   *prometheus.Desc
	labels string // joined
}

func (set seriesSet) add(s sample) {
	key := seriesKey{s.desc, strings.Join(s.labels, "\xff")}
	have := set[key]
	switch {
	case have == nil:
		s.labels = slices.Clone(s.labels)
		set[key] = &s
	case s.kind == prometheus.UntypedValue:
		have.h.add(&s.h)
	case s.merge == mergeSum:
		have.v += s.v
	case s.merge == mergeMin:
		have.v = min(have.v, s.v)
	default:
		have.v = max(have.v, s.v)
	}
}

func (s *sample) metric() prometheus.Metric {
	if s.kind != prometheus.UntypedValue {
		return prometheus.MustNewConstMetric(s.desc, s.kind, s.v, s.labels...)
	}
	buckets := make(map[float64]uint64, len(apiBucketsNs))
	for i, b := range apiBucketsNs {
		buckets[float64(b)/1e9] = s.h.buckets[i]
	}
	return prometheus.MustNewConstHistogram(s.desc, s.h.count, float64(s.h.sumNs)/1e9, buckets, s.labels...)
}

// add adds o's calls to h.
func (h *histogram) add(o *histogram) {
	h.count += o.count
	h.sumNs += o.sumNs
	for i := range h.buckets {
		h.buckets[i] += o.buckets[i]
	}
}

// series hands emit every series of p, with their values of now. The
// labels emit gets are reused: it copies what it keeps.
func (c *Collector) series(p *proc, emit func(sample)) {
	l := p.labels
	buf := make([]string, 0, len(l)+3)
	with := func(extra ...string) []string { return append(append(buf[:0], l...), extra...) }
	counter := func(d *prometheus.Desc, v float64, labels []string) {
		emit(sample{desc: d, kind: prometheus.CounterValue, v: v, labels: labels})
	}
	gauge := func(d *prometheus.Desc, v float64, labels []string) {
		emit(sample{desc: d, kind: prometheus.GaugeValue, merge: mergeMax, v: v, labels: labels})
	}
	emit(sample{desc: c.processes, kind: prometheus.GaugeValue, merge: mergeSum, v: 1, labels: l})
	launches := p.launches
	live := func(api string) float64 { return float64(p.aggLive[api]) * c.weightOf(p) }
	for api := range p.aggLive {
		launches += live(api)
		if _, ok := p.calls[api]; !ok {
			counter(c.calls, live(api), with(api))
		}
	}
	for api, n := range p.calls {
		counter(c.calls, n+live(api), with(api))
	}
	counter(c.launches, launches, l)
	counter(c.ooms, float64(p.ooms), l)
	for stream, n := range p.streamLaunches {
		if _, ok := p.aggLiveStream[stream]; !ok {
			counter(c.streamLaunches, n, with(stream))
		}
	}
	for stream, n := range p.aggLiveStream {
		counter(c.streamLaunches, p.streamLaunches[stream]+float64(n)*c.weightOf(p), with(stream))
	}
	if p.windowsIn+p.windowsOut > 0 {
		emit(sample{desc: c.sampleProb, kind: prometheus.GaugeValue, merge: mergeMin, v: p.probability, labels: l})
		counter(c.sampleWindows, float64(p.windowsIn), with("true"))
		counter(c.sampleWindows, float64(p.windowsOut), with("false"))
	}
	for k, n := range p.syncs {
		counter(c.syncs, n, with(k))
		counter(c.syncWait, p.syncWaitNs[k]/1e9, with(k))
	}
	for k, n := range p.copyBytes {
		counter(c.copyBytes, n, with(k[0], k[1]))
	}
	for op, n := range p.ncclBytes {
		counter(c.ncclBytes, n, with(op))
		counter(c.ncclOps, p.ncclOps[op], with(op))
	}
	for _, m := range p.comms {
		cl := with(fmt.Sprintf("%016x", m.id), strconv.Itoa(int(m.rank)), strconv.FormatUint(m.size, 10))
		gauge(c.commCalls, float64(m.calls), cl)
		gauge(c.commDone, float64(m.completed), cl)
		if m.completeWall > 0 {
			gauge(c.commDoneLast, m.completeWall, cl)
		}
		if m.lastWall > 0 {
			gauge(c.commLast, m.lastWall, cl)
		}
	}
	if !c.o.Histograms {
		return
	}
	for api, h := range p.apiTime {
		all := *h
		if t := p.aggTimes[api]; t != nil {
			all.addLog2(t)
		}
		emit(sample{desc: c.apiTime, kind: prometheus.UntypedValue, h: all, labels: with(api)})
	}
	for api, t := range p.aggTimes {
		if _, ok := p.apiTime[api]; !ok {
			var all histogram
			all.addLog2(t)
			emit(sample{desc: c.apiTime, kind: prometheus.UntypedValue, h: all, labels: with(api)})
		}
	}
}

// Collect sends the current values: each process's series, or without
// Options.PID each group's, its processes' added up (seriesSet).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.o.PID {
		for _, p := range c.procs {
			c.series(p, func(s sample) { ch <- s.metric() })
		}
	} else {
		all := seriesSet{}
		for _, set := range c.retired {
			for _, s := range set {
				all.add(*s)
			}
		}
		for _, p := range c.procs {
			c.series(p, all.add)
		}
		for _, s := range all {
			ch <- s.metric()
		}
	}
	ch <- prometheus.MustNewConstMetric(c.evictedDesc, prometheus.CounterValue, float64(c.evicted))
	ch <- prometheus.MustNewConstMetric(c.timesLostDesc, prometheus.CounterValue, float64(c.timesLost+c.timesLostLive))
}
