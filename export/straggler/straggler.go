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
package straggler

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// maxPending bounds the collectives of one communicator waiting for ranks
// still to arrive; beyond, the oldest is given up (counted as Incomplete).
// Replayed interleaved by time (recording.LoadInputs), a job's ranks reach
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

// comms numbers each rank's collectives per communicator.
type comms map[commKey]*member

// call follows ncclCommInitRank and the collectives: it returns the
// member that made communicator or collective x, for a collective the
// number of its meeting (-1 for a communicator made), nil for any other
// call.
func (cs comms) call(p *model.Process, x *model.Call) (*member, int) {
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
		m := &member{id: a.CommID, nranks: int(a.Size), rank: int(a.Peer)}
		cs[commKey{p.PID, a.Comm}] = m
		return m, -1
	case event.ClassCollective:
		if Meeting(spec.API) {
			if m := cs[commKey{p.PID, a.Comm}]; m != nil {
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
	done   int
	spread time.Duration // summed over complete meetings
	worst  []Worst       // widest spreads, widest first
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

// RankStats is one rank's record over a communicator's meetings.
type RankStats struct {
	PID  uint32
	Rank int
	// Last: meetings it arrived at last (held everyone up). WaitedNs: time
	// it waited at meetings for the last rank; HeldNs: time the others
	// waited for it (sum over meetings it was last at of its lateness
	// behind the first arrival); CausedNs: the waits it caused (sum over
	// those meetings of every other rank's wait for it).
	Last             int
	WaitedNs, HeldNs uint64
	CausedNs         uint64
	// CollectiveNs is its time in collectives: from arriving to the moment
	// its host learnt the collective complete (the measured end with
	// --gpu-times), over the collectives where that is known (Collectives).
	CollectiveNs uint64
	Collectives  int
}

// WaitShare is the share of its time in collectives the rank spent waiting
// for others (NaN-free: 0 when unknown, at most 1).
func (s *RankStats) WaitShare() float64 {
	if s.CollectiveNs == 0 {
		return 0
	}
	return min(1, float64(s.WaitedNs)/float64(s.CollectiveNs))
}

// Worst is one meeting with a wide arrival spread.
type Worst struct {
	Seq      int
	API      event.API
	Spread   time.Duration
	LastRank int
	At       uint64 // when the last rank arrived, ns on the trace clock
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
	held     uint64 // lateness behind the first arrival, summed
	caused   uint64
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
	start uint64
}

// Collector is the sink.
type Collector struct {
	match     *Matcher[arrival]
	groups    map[uint64]*group
	threads   map[[2]uint32]lastCall
	ops       map[opKey]opRef
	opsLost   int
	sites     map[siteKey]*site
	sitesLost int
	// threadsLost: calls of threads past the bound, whose last call is
	// not remembered (a straggler among them shows no call before).
	threadsLost int
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{match: NewMatcher[arrival](), groups: map[uint64]*group{}, threads: map[[2]uint32]lastCall{},
		ops: map[opKey]opRef{}, sites: map[siteKey]*site{}}
}

func (c *Collector) Call(p *model.Process, x *model.Call) {
	key := [2]uint32{p.PID, x.TID}
	prev, hasPrev := c.threads[key]
	if hasPrev || len(c.threads) < maxThreads {
		c.threads[key] = lastCall{end: max(x.End, x.Start), api: x.API, py: x.PyStack}
	} else {
		c.threadsLost++
	}
	if spec := x.Spec(); spec == nil || spec.Layer != event.NCCL {
		return
	}
	a := arrival{pid: p.PID, tid: x.TID, api: x.API, py: x.PyStack, prevPy: -1, start: x.Start}
	if hasPrev {
		a.prevAPI, a.prevPy, a.prevEnd, a.hasPrev = prev.api, prev.py, prev.end, true
	}
	at, ok, met := c.match.Call(p, x, a)
	if !ok {
		return
	}
	g := c.groups[at.Comm]
	if at.Seq < 0 {
		if g == nil {
			g = &group{id: at.Comm, nranks: at.Ranks, stats: make([]RankStats, at.Ranks)}
			c.groups[at.Comm] = g
		}
		if at.Rank < g.nranks {
			g.stats[at.Rank].PID, g.stats[at.Rank].Rank = p.PID, at.Rank
		}
		return
	}
	if g == nil || at.Rank >= g.nranks {
		return
	}
	if x.GPUOp >= 0 {
		if len(c.ops) < maxOps {
			c.ops[opKey{p.PID, x.GPUOp}] = opRef{g: g, rank: at.Rank, start: x.Start}
		} else {
			c.opsLost++
		}
	}
	if met != nil {
		c.meet(g, met)
	}
}

// meet counts a complete meeting.
func (c *Collector) meet(g *group, mt *Met[arrival]) {
	first, last := mt.First, mt.Last
	var caused uint64
	for r, t := range mt.Arrivals {
		g.stats[r].WaitedNs += last - t
		caused += last - t
	}
	st := &g.stats[mt.LastRank]
	st.Last++
	st.HeldNs += last - first
	st.CausedNs += caused
	g.done++
	g.spread += time.Duration(last - first)
	g.keepWorst(Worst{Seq: mt.Seq, API: mt.API, Spread: time.Duration(last - first), LastRank: mt.LastRank, At: last})
	if last > first {
		c.site(g, mt.LastRank, &mt.LastInfo, last-first, caused)
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

func (c *Collector) site(g *group, rank int, a *arrival, held, caused uint64) {
	k := siteKey{pid: a.pid, api: a.api, py: a.py, prevPy: -1, rank: rank, comm: g.id}
	if a.hasPrev {
		k.prevAPI, k.prevPy = a.prevAPI, a.prevPy
	}
	s := c.sites[k]
	if s == nil {
		if len(c.sites) >= maxSites {
			c.sitesLost++
			return
		}
		s = &site{}
		c.sites[k] = s
	}
	s.count++
	s.held += held
	s.caused += caused
	if a.hasPrev && a.start > a.prevEnd {
		s.gap += a.start - a.prevEnd
		s.withPrev++
	} else if a.hasPrev {
		s.withPrev++
	}
}

// GPUOp completes a collective's time: from its arrival to the moment its
// host learnt it complete (its measured end when CUPTI timed it).
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
	if end > ref.start {
		st := &ref.g.stats[ref.rank]
		st.CollectiveNs += end - ref.start
		st.Collectives++
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

// WaitedNs is the time all ranks waited at the meetings.
func (c *Comm) WaitedNs() uint64 {
	var n uint64
	for _, s := range c.Stats {
		n += s.WaitedNs
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
			Incomplete: lost, Stats: slices.Clone(g.stats), Worst: slices.Clone(g.worst), Pending: pending}
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
	HeldNs   uint64 // its lateness behind the first arrival, summed
	CausedNs uint64 // the others' waits for it, summed
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
		m.HeldNs += s.held
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
	for _, cm := range comms {
		fmt.Fprintf(w, "  communicator %016x: %d ranks, %d meetings, mean arrival spread %v", cm.ID, cm.Ranks, cm.Meetings, cm.MeanSpread.Round(time.Microsecond))
		if cm.Incomplete > 0 {
			fmt.Fprintf(w, ", %d given up waiting (more than %d meetings waited for a rank)", cm.Incomplete, maxPending)
		}
		if cm.Pending > 0 {
			fmt.Fprintf(w, ", %d not met by every rank (a rank's recording began late or ended early)", cm.Pending)
		}
		fmt.Fprintln(w)
		if s := cm.Straggler(); s >= 0 {
			st := cm.Stats[s]
			fmt.Fprintf(w, "  straggler: rank %d (%s), last at %d of %d meetings, the others waited %v for it\n",
				s, n.pid(st.PID), st.Last, cm.Meetings, time.Duration(st.HeldNs).Round(time.Microsecond))
		}
		total := cm.WaitedNs()
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  RANK\tPROCESS\tLAST\tWAITED FOR OTHERS\tOTHERS WAITED FOR IT\tWAITING CAUSED")
		for _, st := range cm.Stats {
			waited := dur(st.WaitedNs)
			if st.Collectives > 0 {
				waited += fmt.Sprintf(" (%.0f%% of %s in collectives)", 100*st.WaitShare(), dur(st.CollectiveNs))
			}
			caused := "0%"
			if total > 0 {
				caused = fmt.Sprintf("%.0f%%", 100*float64(st.CausedNs)/float64(total))
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%s\t%s\n", st.Rank, n.pid(st.PID), st.Last, waited, dur(st.HeldNs), caused)
		}
		tw.Flush()
		if len(cm.Worst) > 0 && cm.Worst[0].Spread > 0 {
			fmt.Fprintf(w, "  widest meetings:")
			for _, m := range cm.Worst {
				fmt.Fprintf(w, " #%d %s %v (rank %d last);", m.Seq, m.API, m.Spread.Round(time.Microsecond), m.LastRank)
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
		fmt.Fprintf(w, "#%d rank %d (%s) of communicator %016x arrived last at %d meeting(s) from here, %s behind the first arrival in all (%s of the other ranks' time)\n",
			i+1, s.Rank, n.pid(s.PID), s.Comm, s.Meetings, dur(s.HeldNs), dur(s.CausedNs))
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
		fmt.Fprintf(w, "  %d collectives not followed to their completion (more than %d pending): left out of the ranks' time in collectives\n", c.opsLost, maxOps)
	}
}

func orNoStack(line string) string {
	if line == "" {
		return "(no Python stack)"
	}
	return line
}

func dur(ns uint64) string { return time.Duration(ns).Round(time.Microsecond).String() }
