// Package straggler finds the slow rank of an NCCL job from the host side:
// every rank calls the same collectives in the same order, so the k-th
// collective of a communicator is one meeting; the rank that arrives last
// at it holds the others up (DDP equalizes backward wall time, so the slow
// rank shows only in the order of arrival). Its Collector is a model sink
// over ranks on one clock: one host's --all, or several hosts' recordings
// merged onto one timeline (export/merge, which takes what it needs to
// align their clocks from a Series).
//
// A communicator is known across processes by its unique id's first word
// (event.Args.CommID, the random magic every rank receives from rank 0);
// a rank's collectives on it are numbered in call order. Point-to-point
// calls (ncclSend, ncclRecv) are not meetings of every rank and are not
// numbered.
//
// The straggler is named by arrival order; what it cost the others is
// counted from what they really blocked. A collective call is
// asynchronous: a rank that arrives early loses nothing until a thread of
// it blocks on the result (a synchronization, or the collective call
// itself when NCCL's queue is full). So a rank waited at a meeting while a
// blocking call of its process that returned only after the last rank's
// arrival was blocked, from its own arrival on; with measured GPU times,
// its GPU waited while its collective kernel ran before the last rank's
// had started. Each rank's waits are a union of intervals, so they never
// exceed the time its process was recorded.
package straggler

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// maxPending bounds the collectives of one communicator waiting for ranks
// still to arrive; beyond, the oldest is given up (counted as Incomplete).
// Replayed interleaved by time (replay.LoadInputs), a job's ranks reach
// a meeting within moments of each other: only a rank that stopped or a
// recording that ended early leaves meetings waiting.
const maxPending = 4096

// maxOps bounds the collective ops followed to their completion (they go
// to the sink once a synchronization proves them done); beyond, an op is
// not followed, counted.
const maxOps = 1 << 18

// maxThreads bounds the threads whose last CUDA call is remembered (what
// a late rank did before it arrived).
const maxThreads = 1 << 16

// maxSites bounds the distinct places stragglers were found at.
const maxSites = 4096

// worstKept is how many meetings with the widest arrival spread are kept.
const worstKept = 5

type commKey struct {
	pid    uint32
	handle uint64
}

type opKey struct {
	pid uint32
	op  int
}

// member is one rank's place in a communicator, in one process.
type member struct {
	id     uint64 // the communicator's unique id
	nranks int
	rank   int
	next   int // sequence number of its next collective
}

// Bounds on the communicators followed. Whoever follows them keeps state
// per rank of each (its arrival at each meeting waiting for the others),
// and a recording can make up any number of communicators of up to
// 65,536 ranks: past maxComms communicators, maxRanks ranks of them all
// or maxMembers ranks made in the recorded processes, a communicator is
// not followed (counted: comms.ignored).
const (
	maxComms   = 1024
	maxRanks   = 1 << 18
	maxMembers = 4096
)

// comms numbers each rank's collectives per communicator.
type comms struct {
	members map[commKey]*member
	sizes   map[uint64]int // the communicators followed, by id: their ranks
	ranks   int            // their sum
	ignored int            // communicators made past the bounds
}

func newComms() comms {
	return comms{members: map[commKey]*member{}, sizes: map[uint64]int{}}
}

// call follows ncclCommInitRank and the collectives: it returns the
// member that made communicator or collective x, for a collective the
// number of its meeting (-1 for a communicator made), nil for any other
// call.
func (cs *comms) call(p *model.Process, x *model.Call) (*member, int) {
	spec := x.Spec()
	if spec == nil || spec.Layer != event.NCCL {
		return nil, 0
	}
	a := &x.Args
	switch spec.Class {
	case event.ClassCommInit:
		if !x.HasRet || x.Ret != 0 || a.CommID == 0 || a.Size < 2 || a.Peer < 0 || a.Size > 1<<16 || uint64(a.Peer) >= a.Size {
			return nil, 0
		}
		k := commKey{p.PID, a.Comm}
		size, known := cs.sizes[a.CommID]
		switch {
		case known && size != int(a.Size):
			return nil, 0 // the same communicator cannot have two sizes
		case !known && (len(cs.sizes) >= maxComms || cs.ranks+int(a.Size) > maxRanks),
			cs.members[k] == nil && len(cs.members) >= maxMembers:
			cs.ignored++
			return nil, 0
		case !known:
			cs.sizes[a.CommID] = int(a.Size)
			cs.ranks += int(a.Size)
		}
		m := &member{id: a.CommID, nranks: int(a.Size), rank: int(a.Peer)}
		cs.members[k] = m
		return m, -1
	case event.ClassCollective:
		if Meeting(spec.API) {
			if m := cs.members[commKey{p.PID, a.Comm}]; m != nil {
				m.next++
				return m, m.next - 1
			}
		}
	}
	return nil, 0
}

// Meeting reports whether a call of api is a meeting of every rank of its
// communicator (a collective, not a send or receive).
func Meeting(api event.API) bool {
	s := event.Lookup(api)
	return s != nil && s.Class == event.ClassCollective && api != event.NcclSend && api != event.NcclRecv
}

// group is one communicator's statistics.
type group struct {
	id     uint64
	nranks int
	stats  []RankStats
	ranks  []*rankState // by rank, made as its meetings complete
	done   int
	spread time.Duration // summed over complete meetings (for the mean)
	worst  []Worst       // widest spreads, widest first
	// gpu gathers the measured GPU times of each meeting's collectives
	// until every rank's are in (--gpu-times); bounded by maxPending,
	// the oldest given up beyond (gpuLost).
	gpu     map[int]*gpuMeeting
	gpuLost int
}

// rankState is what a rank's waits are counted from: the meetings it
// waited at, recently, and the unions of what was counted.
type rankState struct {
	proc *procState
	// windows: its recent waits for a later rank, from its arrival to
	// the last rank's: a ring of maxWindows.
	windows []window
	next    int
	// lost: windows that left the ring while a blocking call could still
	// have covered their end (none of its process had returned after it).
	lost                              int
	waited, gpuWaited, late, inFlight spans
}

// window is a wait of one rank at one meeting: from its arrival to the
// last rank's (culprit).
type window struct {
	from, to uint64
	culprit  int
	site     *site // the culprit's, nil when not placed
}

// maxWindows bounds the meetings of a rank a blocking call is matched
// with: a call that blocked across more meetings than that counts the
// last maxWindows (the others are counted, rankState.lost).
const maxWindows = 256

// procState is a process's span and, for a process holding ranks, its
// recent blocked intervals.
type procState struct {
	first, last uint64
	members     []membership
	blocked     [][2]uint64 // ring of maxWindows, for a process holding ranks
	next        int
	blockedEnd  uint64 // the latest end of a blocked interval
}

type membership struct {
	g    *group
	rank int
}

// maxProcs bounds the processes whose span is followed.
const maxProcs = 1 << 16

type gpuMeeting struct {
	start, end []uint64 // by rank, 0 = not yet
	n          int
}

// arrival is what a rank did as it arrived: the Matcher keeps the latest
// arrival's of each meeting (the last rank's, once complete).
type arrival struct {
	pid, tid     uint32
	api, prevAPI event.API
	py, prevPy   int32  // Python stacks (index in the process), -1 none
	start        uint64 // the collective's start
	prevEnd      uint64 // the end of the thread's call before it
	hasPrev      bool
}

// RankStats is one rank's record over a communicator's meetings. Every
// time in it is a union of intervals, never a sum of overlapping ones: a
// rank's waits never exceed the time its process was recorded.
type RankStats struct {
	PID  uint32 `json:"pid"`
	Rank int    `json:"rank"`
	// Last: meetings it arrived at last. LateNs: the time it arrived
	// behind the first rank at those (by arrival order: not a wait
	// anyone blocked in).
	Last   int    `json:"last"`
	LateNs uint64 `json:"late_ns"`
	// WaitedNs: the time its threads were blocked waiting for a later
	// rank: in a synchronization (or the collective call itself) that
	// returned only after the last rank arrived, from its own arrival to
	// the last rank's. A collective is asynchronous: arriving early costs
	// the host nothing until it blocks on the result.
	WaitedNs uint64 `json:"waited_ns"`
	// GPUWaitedNs: with measured GPU times (--gpu-times), the time its
	// collectives' kernels ran before the last rank's had started: its
	// GPU waiting for the others. 0 without them.
	GPUWaitedNs uint64 `json:"gpu_waited_ns"`
	// CausedNs and GPUCausedNs: the other ranks' WaitedNs and GPUWaitedNs
	// at meetings it arrived at last (summed over those ranks).
	CausedNs    uint64 `json:"caused_ns"`
	GPUCausedNs uint64 `json:"gpu_caused_ns"`
	// InFlightNs is the time some collective of its was in flight: from
	// arriving to the moment its host learnt it complete (the measured
	// end with --gpu-times), over the Collectives where that is known.
	InFlightNs  uint64 `json:"in_flight_ns"`
	Collectives int    `json:"collectives"`
	// RecordedNs is the time its process was recorded: its first call to
	// its last.
	RecordedNs uint64 `json:"recorded_ns"`
}

// Worst is one meeting with a wide arrival spread.
type Worst struct {
	Seq      int           `json:"seq"`
	API      event.API     `json:"-"`
	Spread   time.Duration `json:"spread_ns"`
	LastRank int           `json:"last_rank"`
	At       uint64        `json:"at_ns"` // when the last rank arrived, ns on the trace clock
}

// MarshalJSON names the collective.
func (w Worst) MarshalJSON() ([]byte, error) {
	type plain Worst
	return json.Marshal(struct {
		plain
		API string `json:"api"`
	}{plain(w), w.API.String()})
}

// site is a place a straggler was at: its process, what it called before
// the collective and the collective, with their Python stacks.
type siteKey struct {
	pid          uint32
	api, prevAPI event.API
	py, prevPy   int32
	rank         int
	comm         uint64
}

type site struct {
	count    int
	late     spans  // behind the first arrival
	caused   uint64 // the others' waits for it
	gap      uint64 // host time from the previous call's end to the collective, summed
	withPrev int
}

type lastCall struct {
	end uint64
	api event.API
	py  int32
}

type opRef struct {
	g     *group
	rank  int
	seq   int
	start uint64
}

// Collector is the sink.
type Collector struct {
	match     *Matcher[arrival]
	groups    map[uint64]*group
	threads   map[[2]uint32]lastCall
	procs     map[uint32]*procState
	ops       map[opKey]opRef
	opsLost   int
	gpuSlots  int // rank times kept by the GPU meetings waiting, over all communicators (maxSlots)
	sites     map[siteKey]*site
	sitesLost int
	// threadsLost: calls of threads past the bound, whose last call is
	// not remembered (a straggler among them shows no call before).
	threadsLost int
	procsLost   int
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{match: NewMatcher[arrival](), groups: map[uint64]*group{}, threads: map[[2]uint32]lastCall{},
		procs: map[uint32]*procState{}, ops: map[opKey]opRef{}, sites: map[siteKey]*site{}}
}

func (c *Collector) Call(p *model.Process, x *model.Call) {
	key := [2]uint32{p.PID, x.TID}
	prev, hasPrev := c.threads[key]
	if hasPrev || len(c.threads) < maxThreads {
		c.threads[key] = lastCall{end: max(x.End, x.Start), api: x.API, py: x.PyStack}
	} else {
		c.threadsLost++
	}
	ps := c.procs[p.PID]
	if ps == nil && len(c.procs) < maxProcs {
		ps = &procState{first: x.Start}
		c.procs[p.PID] = ps
	} else if ps == nil {
		c.procsLost++
	}
	if ps != nil {
		ps.first, ps.last = min(ps.first, x.Start), max(ps.last, x.Start, x.End)
	}
	if spec := x.Spec(); spec != nil && spec.Layer == event.NCCL {
		a := arrival{pid: p.PID, tid: x.TID, api: x.API, py: x.PyStack, prevPy: -1, start: x.Start}
		if hasPrev {
			a.prevAPI, a.prevPy, a.prevEnd, a.hasPrev = prev.api, prev.py, prev.end, true
		}
		c.collective(p, x, ps, a)
	}
	// What the call blocked counts as waiting at the meetings whose last
	// rank arrived while it blocked.
	if ps != nil && len(ps.members) > 0 {
		switch {
		case x.BlockedNs > 0 && x.End >= x.BlockedNs:
			c.blocked(ps, x.End-x.BlockedNs, x.End)
		case Meeting(x.API) && x.End > x.Start:
			c.blocked(ps, x.Start, x.End) // NCCL blocks in the call when its queue is full
		}
	}
}

func (c *Collector) collective(p *model.Process, x *model.Call, ps *procState, a arrival) {
	at, ok, met := c.match.Call(p, x, a)
	if !ok {
		return
	}
	g := c.groups[at.Comm]
	if at.Seq < 0 {
		if g == nil {
			g = &group{id: at.Comm, nranks: at.Ranks, stats: make([]RankStats, at.Ranks), ranks: make([]*rankState, at.Ranks),
				gpu: map[int]*gpuMeeting{}}
			c.groups[at.Comm] = g
		}
		if at.Rank < g.nranks {
			g.stats[at.Rank].PID, g.stats[at.Rank].Rank = p.PID, at.Rank
			if ps != nil && !slices.Contains(ps.members, membership{g, at.Rank}) {
				ps.members = append(ps.members, membership{g, at.Rank})
			}
		}
		return
	}
	if g == nil || at.Rank >= g.nranks {
		return
	}
	if x.GPUOp >= 0 {
		if len(c.ops) < maxOps {
			c.ops[opKey{p.PID, x.GPUOp}] = opRef{g: g, rank: at.Rank, seq: at.Seq, start: x.Start}
		} else {
			c.opsLost++
		}
	}
	if met != nil {
		c.meet(g, met)
	}
}

// rank is rank r's state, made on first use; nil for a rank whose
// process is not followed.
func (c *Collector) rank(g *group, r int) *rankState {
	if rs := g.ranks[r]; rs != nil {
		return rs
	}
	ps := c.procs[g.stats[r].PID]
	if ps == nil {
		return nil
	}
	g.ranks[r] = &rankState{proc: ps}
	return g.ranks[r]
}

// meet counts a complete meeting: the last rank's lateness, and for
// every earlier rank a window to match with what its process blocked.
func (c *Collector) meet(g *group, mt *Met[arrival]) {
	first, last := mt.First, mt.Last
	st := &g.stats[mt.LastRank]
	st.Last++
	if rs := c.rank(g, mt.LastRank); rs != nil {
		st.LateNs += rs.late.add(first, last)
	}
	g.done++
	g.spread += time.Duration(last - first)
	g.keepWorst(Worst{Seq: mt.Seq, API: mt.API, Spread: time.Duration(last - first), LastRank: mt.LastRank, At: last})
	var s *site
	if last > first {
		s = c.site(g, mt.LastRank, &mt.LastInfo, first, last)
	}
	for r, t := range mt.Arrivals {
		rs := c.rank(g, r)
		if r == mt.LastRank || t >= last || rs == nil {
			continue
		}
		w := window{from: t, to: last, culprit: mt.LastRank, site: s}
		for _, b := range rs.proc.blocked {
			c.wait(g, r, rs, &w, b[0], b[1])
		}
		rs.push(w)
	}
}

// push keeps w among the rank's recent windows.
func (rs *rankState) push(w window) {
	if len(rs.windows) < maxWindows {
		rs.windows = append(rs.windows, w)
		return
	}
	if old := rs.windows[rs.next]; old.to > rs.proc.blockedEnd {
		rs.lost++
	}
	rs.windows[rs.next] = w
	rs.next = (rs.next + 1) % maxWindows
}

// blocked: a thread of process ps blocked from a to b. It waited at every
// meeting of its ranks whose last rank arrived in between, from its own
// arrival (or a) on.
func (c *Collector) blocked(ps *procState, a, b uint64) {
	for _, m := range ps.members {
		rs := m.g.ranks[m.rank]
		if rs == nil {
			continue
		}
		for i := range rs.windows {
			c.wait(m.g, m.rank, rs, &rs.windows[i], a, b)
		}
	}
	ps.blockedEnd = max(ps.blockedEnd, b)
	if len(ps.blocked) < maxWindows {
		ps.blocked = append(ps.blocked, [2]uint64{a, b})
		return
	}
	ps.blocked[ps.next] = [2]uint64{a, b}
	ps.next = (ps.next + 1) % maxWindows
}

// wait counts what blocking from a to b waited at w: from w's start (or
// a) to the last arrival, when the blocking outlasted that arrival.
func (c *Collector) wait(g *group, r int, rs *rankState, w *window, a, b uint64) {
	if a >= w.to || b < w.to {
		return
	}
	n := rs.waited.add(max(a, w.from), w.to)
	if n == 0 {
		return
	}
	g.stats[r].WaitedNs += n
	g.stats[w.culprit].CausedNs += n
	if w.site != nil {
		w.site.caused += n
	}
}

func (g *group) keepWorst(w Worst) {
	i, _ := slices.BinarySearchFunc(g.worst, w, func(a, b Worst) int { return cmp.Compare(b.Spread, a.Spread) })
	if i >= worstKept {
		return
	}
	g.worst = slices.Insert(g.worst, i, w)
	if len(g.worst) > worstKept {
		g.worst = g.worst[:worstKept]
	}
}

// site counts a meeting the last rank arrived at from a; nil when past
// the bound.
func (c *Collector) site(g *group, rank int, a *arrival, first, last uint64) *site {
	k := siteKey{pid: a.pid, api: a.api, py: a.py, prevPy: -1, rank: rank, comm: g.id}
	if a.hasPrev {
		k.prevAPI, k.prevPy = a.prevAPI, a.prevPy
	}
	s := c.sites[k]
	if s == nil {
		if len(c.sites) >= maxSites {
			c.sitesLost++
			return nil
		}
		s = &site{}
		c.sites[k] = s
	}
	s.count++
	s.late.add(first, last)
	if a.hasPrev && a.start > a.prevEnd {
		s.gap += a.start - a.prevEnd
		s.withPrev++
	} else if a.hasPrev {
		s.withPrev++
	}
	return s
}

// GPUOp completes a collective's time in flight: from its arrival to the
// moment its host learnt it complete (its measured end when CUPTI timed
// it); measured, it also counts the GPU's wait for the other ranks.
func (c *Collector) GPUOp(p *model.Process, op *model.GPUOp) {
	if len(c.ops) == 0 || op.Kind != model.OpCollective {
		return
	}
	k := opKey{p.PID, op.ID}
	ref, ok := c.ops[k]
	if !ok {
		return
	}
	delete(c.ops, k)
	end := uint64(0)
	switch {
	case op.Measured:
		end = op.End
	case op.Bounded:
		end = op.ProvenBy()
	}
	if rs := c.rank(ref.g, ref.rank); rs != nil && end > ref.start {
		st := &ref.g.stats[ref.rank]
		st.InFlightNs += rs.inFlight.add(ref.start, end)
		st.Collectives++
	}
	if op.Measured && op.End > op.Start && op.Start > 0 {
		c.gpuMeet(ref.g, ref.seq, ref.rank, op.Start, op.End)
	}
}

// gpuMeet gathers the measured GPU times of meeting seq; once every
// rank's are in, each rank's kernel waited from its start to the last
// rank's kernel's start (no rank's can finish before every rank's began).
func (c *Collector) gpuMeet(g *group, seq, rank int, start, end uint64) {
	gm := g.gpu[seq]
	if gm == nil {
		// Each waits with two times per rank: within maxPending of the
		// communicator's and maxSlots of all.
		for len(g.gpu) > 0 && (len(g.gpu) >= maxPending || c.gpuSlots+g.nranks > maxSlots) {
			oldest := seq
			for k := range g.gpu {
				oldest = min(oldest, k)
			}
			delete(g.gpu, oldest)
			c.gpuSlots -= g.nranks
			g.gpuLost++
		}
		if c.gpuSlots+g.nranks > maxSlots {
			g.gpuLost++
			return
		}
		gm = &gpuMeeting{start: make([]uint64, g.nranks), end: make([]uint64, g.nranks)}
		g.gpu[seq] = gm
		c.gpuSlots += g.nranks
	}
	if gm.start[rank] != 0 {
		return
	}
	gm.start[rank], gm.end[rank] = start, end
	if gm.n++; gm.n < g.nranks {
		return
	}
	delete(g.gpu, seq)
	c.gpuSlots -= g.nranks
	lastStart := slices.Max(gm.start)
	culprit := slices.Index(gm.start, lastStart)
	for r, s := range gm.start {
		rs := c.rank(g, r)
		if s >= lastStart || rs == nil {
			continue
		}
		n := rs.gpuWaited.add(s, min(gm.end[r], lastStart))
		g.stats[r].GPUWaitedNs += n
		g.stats[culprit].GPUCausedNs += n
	}
}

func (c *Collector) Sync(*model.Process, *model.Sync)             {}
func (c *Collector) Dependency(*model.Process, *model.Dependency) {}
func (c *Collector) Hold(*model.Process, *model.Hold)             {}

// Comm is what one communicator's meetings showed.
type Comm struct {
	ID         uint64
	Ranks      int
	Meetings   int           // collectives every rank arrived at
	MeanSpread time.Duration // mean time from the first to the last arrival
	Incomplete int           // given up waiting for a rank (bounded memory)
	Stats      []RankStats   // by rank
	Worst      []Worst       // the meetings with the widest arrival spread, widest first
	Pending    int           // meetings some rank never arrived at (the recording ended first)
	// WindowsLost: meetings whose wait left a rank's recent ones before
	// a blocking call could cover it (rankState.lost), summed over ranks.
	WindowsLost int
	// GPUMeetingsLost: meetings whose GPU times were given up, waiting
	// for a rank's (more than maxPending waited).
	GPUMeetingsLost int
}

// MarshalJSON writes the communicator in the summary's schema
// (docs/merge.md, "stragglers").
func (c Comm) MarshalJSON() ([]byte, error) {
	stats, worst := c.Stats, c.Worst
	if stats == nil {
		stats = []RankStats{}
	}
	if worst == nil {
		worst = []Worst{}
	}
	return json.Marshal(struct {
		CommID          string      `json:"comm_id"`
		Ranks           int         `json:"ranks"`
		Meetings        int         `json:"meetings"`
		MeanSpreadNs    int64       `json:"mean_arrival_spread_ns"`
		Straggler       int         `json:"straggler"`
		WaitedNs        uint64      `json:"waited_ns"`
		GPUWaitedNs     uint64      `json:"gpu_waited_ns"`
		RankStats       []RankStats `json:"rank_stats"`
		Widest          []Worst     `json:"widest_meetings"`
		Pending         int         `json:"pending"`
		GivenUp         int         `json:"given_up"`
		WindowsLost     int         `json:"waits_not_matched"`
		GPUMeetingsLost int         `json:"gpu_meetings_given_up"`
	}{fmt.Sprintf("%016x", c.ID), c.Ranks, c.Meetings, int64(c.MeanSpread), c.Straggler(), c.WaitedNs(), c.GPUWaitedNs(),
		stats, worst, c.Pending, c.Incomplete, c.WindowsLost, c.GPUMeetingsLost})
}

// Straggler is the rank that arrived last most often (-1 for none).
func (c *Comm) Straggler() int {
	best := -1
	for r, s := range c.Stats {
		if s.Last > 0 && (best < 0 || s.Last > c.Stats[best].Last) {
			best = r
		}
	}
	return best
}

// WaitedNs is the time the ranks' threads were blocked waiting for later
// ranks, summed over the ranks.
func (c *Comm) WaitedNs() uint64 {
	var n uint64
	for _, s := range c.Stats {
		n += s.WaitedNs
	}
	return n
}

// GPUWaitedNs is the time the ranks' GPUs waited for later ranks, summed
// over the ranks (0 without measured GPU times).
func (c *Comm) GPUWaitedNs() uint64 {
	var n uint64
	for _, s := range c.Stats {
		n += s.GPUWaitedNs
	}
	return n
}

// Comms lists the communicators with meetings, most meetings first.
func (c *Collector) Comms() []Comm {
	var out []Comm
	for _, g := range c.groups {
		if g.done == 0 {
			continue
		}
		lost, pending := c.match.Waiting(g.id)
		cm := Comm{ID: g.id, Ranks: g.nranks, Meetings: g.done, MeanSpread: g.spread / time.Duration(g.done),
			Incomplete: lost, Stats: slices.Clone(g.stats), Worst: slices.Clone(g.worst), Pending: pending, GPUMeetingsLost: g.gpuLost}
		for r := range cm.Stats {
			if ps := c.procs[cm.Stats[r].PID]; ps != nil && cm.Stats[r].PID != 0 {
				cm.Stats[r].RecordedNs = ps.last - ps.first
			}
			if rs := g.ranks[r]; rs != nil {
				cm.WindowsLost += rs.lost
			}
		}
		out = append(out, cm)
	}
	slices.SortFunc(out, func(a, b Comm) int { return cmp.Or(b.Meetings-a.Meetings, cmp.Compare(a.ID, b.ID)) })
	return out
}

// Site is one place a straggler was when the others waited for it: the
// last CUDA call its thread made before the collective, and the
// collective, each with the innermost user frame of its Python stack.
type Site struct {
	Comm     uint64
	Rank     int
	PID      uint32
	Meetings int    // meetings it arrived at last from here
	LateNs   uint64 // the time it arrived behind the first rank at those
	CausedNs uint64 // the other ranks' blocked waits for it (RankStats.WaitedNs), summed over them
	// Before: the call before the collective ("" when the thread made
	// none); GapNs the mean host time from its return to the collective.
	Before, BeforeLine string
	GapNs              uint64
	At, AtLine         string // the collective
}

// Sites lists the places stragglers were at, most waiting caused first;
// r names their Python lines (nil: none).
func (c *Collector) Sites(r *model.Result) []Site {
	procs := map[uint32]*model.Process{}
	var names *model.Names
	if r != nil {
		names = r.Names
		for _, p := range r.Processes {
			procs[p.PID] = p
		}
	}
	type merged struct {
		Site
		gap      uint64
		withPrev int
	}
	idx := map[Site]*merged{}
	var order []*merged
	for k, s := range c.sites {
		st := Site{Comm: k.comm, Rank: k.rank, PID: k.pid, At: k.api.String()}
		p := procs[k.pid]
		st.AtLine = userLine(names, p, k.py)
		if k.prevAPI != 0 || k.prevPy >= 0 {
			st.Before = k.prevAPI.String()
			st.BeforeLine = userLine(names, p, k.prevPy)
		}
		m := idx[st]
		if m == nil {
			m = &merged{Site: st}
			idx[st] = m
			order = append(order, m)
		}
		m.Meetings += s.count
		m.LateNs += s.late.total
		m.CausedNs += s.caused
		m.gap += s.gap
		m.withPrev += s.withPrev
	}
	out := make([]Site, 0, len(order))
	for _, m := range order {
		if m.withPrev > 0 {
			m.GapNs = m.gap / uint64(m.withPrev)
		}
		out = append(out, m.Site)
	}
	slices.SortFunc(out, func(a, b Site) int {
		return cmp.Or(cmp.Compare(b.CausedNs, a.CausedNs), cmp.Compare(b.Meetings, a.Meetings), cmp.Compare(a.Comm, b.Comm),
			cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.PID, b.PID), cmp.Compare(a.Before, b.Before), cmp.Compare(a.BeforeLine, b.BeforeLine),
			cmp.Compare(a.At, b.At), cmp.Compare(a.AtLine, b.AtLine))
	})
	return out
}

// userLine is the innermost frame of p's Python stack idx that is the
// program's own (not the interpreter's library nor an installed package),
// else its innermost frame; "" without a stack.
func userLine(n *model.Names, p *model.Process, idx int32) string {
	if p == nil || idx < 0 {
		return ""
	}
	frames := describe.PyStack(n, p, idx)
	if len(frames) == 0 {
		return ""
	}
	for _, f := range frames {
		if !syncs.LibraryPyFrame(f) { // the rule the sync sites use: one line is named alike in both
			return f
		}
	}
	return frames[0]
}

// Naming says how a report names processes and lines.
type Naming struct {
	// Result names Python lines (its processes' stacks and name tables);
	// nil: the report shows none.
	Result *model.Result
	// Origins names a process where its trace pid is not its pid: "pid 4123
	// on nodeB" (a merged trace); absent: "pid N".
	Origins map[uint32]string
}

func (n *Naming) pid(pid uint32) string {
	if s, ok := n.Origins[pid]; ok {
		return s
	}
	return fmt.Sprintf("pid %d", pid)
}

// topSites is how many straggler sites the report details.
const topSites = 5

// Report writes the stragglers section of the summary; nothing when no
// collective was met by every rank of its communicator. It shows no
// Python lines (ReportNamed does).
func (c *Collector) Report(w io.Writer) { c.ReportNamed(w, Naming{}) }

// ReportNamed writes the stragglers section: per communicator, its
// meetings, the rank that arrived last most often, each rank's waits and
// the waits it caused, the widest meetings; then the places the
// stragglers were at, most waiting caused first, `cudatap syncs`-style.
func (c *Collector) ReportNamed(w io.Writer, n Naming) {
	comms := c.Comms()
	if len(comms) == 0 {
		return
	}
	fmt.Fprintln(w, "\nNCCL ranks (the k-th collective of a communicator is one meeting; the last rank to arrive holds the others up)")
	fmt.Fprintln(w, "  (a rank waited while its threads blocked, in a synchronization or collective call that returned only after the last rank arrived;")
	fmt.Fprintln(w, "  collectives are asynchronous: arriving early costs a rank nothing until it blocks on the result)")
	for _, cm := range comms {
		fmt.Fprintf(w, "  communicator %016x: %d ranks, %d meetings, mean arrival spread %s", cm.ID, cm.Ranks, cm.Meetings, dur(uint64(cm.MeanSpread)))
		if cm.Incomplete > 0 {
			fmt.Fprintf(w, ", %d given up waiting (more than %d meetings waited for a rank)", cm.Incomplete, maxPending)
		}
		if cm.Pending > 0 {
			fmt.Fprintf(w, ", %d not met by every rank (a rank's recording began late or ended early)", cm.Pending)
		}
		fmt.Fprintln(w)
		if cm.WindowsLost > 0 {
			fmt.Fprintf(w, "  %d wait(s) at meetings not matched: more than %d meetings of a rank passed before it blocked on them (its waits are undercounted)\n", cm.WindowsLost, maxWindows)
		}
		if cm.GPUMeetingsLost > 0 {
			fmt.Fprintf(w, "  %d meeting(s) left out of the GPU waits: more than %d waited for a rank's GPU times\n", cm.GPUMeetingsLost, maxPending)
		}
		if s := cm.Straggler(); s >= 0 {
			st := cm.Stats[s]
			fmt.Fprintf(w, "  straggler: rank %d (%s), last at %d of %d meetings, %s behind the first arrival in all; the others were blocked %s waiting for it",
				s, n.pid(st.PID), st.Last, cm.Meetings, dur(st.LateNs), dur(st.CausedNs))
			if st.GPUCausedNs > 0 {
				fmt.Fprintf(w, ", their GPUs %s", dur(st.GPUCausedNs))
			}
			fmt.Fprintln(w)
		}
		total, gpu := cm.WaitedNs(), cm.GPUWaitedNs()
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		head := "  RANK\tPROCESS\tLAST\tLATE\tBLOCKED WAITING FOR OTHERS\tWAITING IT CAUSED"
		if gpu > 0 {
			head += "\tGPU WAITED"
		}
		fmt.Fprintln(tw, head)
		for _, st := range cm.Stats {
			waited := dur(st.WaitedNs)
			if st.RecordedNs > 0 {
				waited += fmt.Sprintf(" (%.0f%% of its %s recorded)", 100*float64(st.WaitedNs)/float64(st.RecordedNs), dur(st.RecordedNs))
			}
			caused := dur(st.CausedNs)
			if total > 0 {
				caused += fmt.Sprintf(" (%.0f%%)", 100*float64(st.CausedNs)/float64(total))
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%s\t%s", st.Rank, n.pid(st.PID), st.Last, dur(st.LateNs), waited, caused)
			if gpu > 0 {
				fmt.Fprintf(tw, "\t%s", dur(st.GPUWaitedNs))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		if len(cm.Worst) > 0 && cm.Worst[0].Spread > 0 {
			fmt.Fprintf(w, "  widest meetings:")
			for _, m := range cm.Worst {
				fmt.Fprintf(w, " #%d %s %s (rank %d last);", m.Seq, m.API, dur(uint64(m.Spread)), m.LastRank)
			}
			fmt.Fprintln(w)
		}
	}
	sites := c.Sites(n.Result)
	if len(sites) == 0 {
		return
	}
	fmt.Fprintf(w, "\nStragglers: where the last rank was while the others waited (%d place(s))\n", len(sites))
	for i, s := range sites {
		if i == topSites {
			fmt.Fprintf(w, "  ... %d more\n", len(sites)-topSites)
			break
		}
		fmt.Fprintf(w, "#%d rank %d (%s) of communicator %016x arrived last at %d meeting(s) from here, %s behind the first arrival in all (the others blocked %s waiting)\n",
			i+1, s.Rank, n.pid(s.PID), s.Comm, s.Meetings, dur(s.LateNs), dur(s.CausedNs))
		if s.Before != "" {
			fmt.Fprintf(w, "    before: %s at %s, then %s on the host before the collective (mean)\n", s.Before, orNoStack(s.BeforeLine), dur(s.GapNs))
		} else {
			fmt.Fprintf(w, "    before: no CUDA call on its thread\n")
		}
		fmt.Fprintf(w, "    at:     %s at %s\n", s.At, orNoStack(s.AtLine))
	}
	if c.sitesLost > 0 {
		fmt.Fprintf(w, "  %d straggler meeting(s) not placed (more than %d places)\n", c.sitesLost, maxSites)
	}
	if c.threadsLost > 0 {
		fmt.Fprintf(w, "  %d calls of threads past the first %d not followed: a straggler among them shows no call before its collective\n", c.threadsLost, maxThreads)
	}
	if c.opsLost > 0 {
		fmt.Fprintf(w, "  %d collectives not followed to their completion (more than %d pending): left out of the ranks' time in flight and GPU waits\n", c.opsLost, maxOps)
	}
	if c.procsLost > 0 {
		fmt.Fprintf(w, "  %d calls of processes past the first %d not followed: their ranks' waits and recorded time are not counted\n", c.procsLost, maxProcs)
	}
	if n := c.match.comms.ignored; n > 0 {
		fmt.Fprintf(w, "  %d communicator(s) made past the bounds (%d communicators, %d ranks in all, %d ranks in the recorded processes) not followed\n", n, maxComms, maxRanks, maxMembers)
	}
}

func orNoStack(line string) string {
	if line == "" {
		return "(no Python stack)"
	}
	return line
}

func dur(ns uint64) string { return units.Duration(ns) }
