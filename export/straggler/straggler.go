// Package straggler finds the slow rank of an NCCL job from the host side:
// every rank calls the same collectives in the same order, so the k-th
// collective of a communicator is one meeting; the rank that arrives last
// at it holds the others up (DDP equalizes backward wall time, so the slow
// rank shows only in the order of arrival). It is a model sink over the
// ranks traced in one recording (one host's --all: one clock).
//
// A communicator is known across processes by its unique id's first word
// (event.Args.CommID, the random magic every rank receives from rank 0);
// a rank's collectives on it are numbered in call order.
package straggler

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// maxPending bounds the collectives of one communicator waiting for ranks
// still to arrive; beyond, the oldest is given up (counted as Incomplete).
const maxPending = 4096

type commKey struct {
	pid    uint32
	handle uint64
}

type comm struct {
	id     uint64
	nranks int
}

// member is one rank's place in a communicator.
type member struct {
	comm *group
	rank int
	next int // sequence number of its next collective
}

// group is one communicator across the processes of its ranks.
type group struct {
	id      uint64
	nranks  int
	pids    map[int]uint32 // by rank
	pending map[int]*meeting
	oldest  int // meetings before this one were given up
	stats   []RankStats
	done    int
	spread  time.Duration // summed over complete meetings
	lost    int
}

type meeting struct {
	arrivals []uint64 // by rank, 0 = not yet
	n        int
	api      event.API
}

// RankStats is one rank's record over a communicator's meetings.
type RankStats struct {
	PID  uint32
	Rank int
	// Last: meetings it arrived at last (held everyone up). WaitedNs: time
	// it waited at meetings for the last rank; HeldNs: time the others
	// waited for it (sum over meetings it was last at of its lateness
	// behind the first arrival).
	Last             int
	WaitedNs, HeldNs uint64
}

// Collector is the sink.
type Collector struct {
	members map[commKey]*member
	groups  map[uint64]*group
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{members: map[commKey]*member{}, groups: map[uint64]*group{}}
}

func (c *Collector) Call(p *model.Process, x *model.Call) {
	spec := x.Spec()
	if spec == nil || spec.Layer != event.NCCL {
		return
	}
	a := &x.Args
	switch spec.Class {
	case event.ClassCommInit:
		if !x.HasRet || x.Ret != 0 || a.CommID == 0 || a.Size < 2 || a.Peer < 0 || int(a.Size) > 1<<16 {
			return
		}
		g := c.groups[a.CommID]
		if g == nil {
			g = &group{id: a.CommID, nranks: int(a.Size), pids: map[int]uint32{}, pending: map[int]*meeting{},
				stats: make([]RankStats, int(a.Size))}
			c.groups[a.CommID] = g
		}
		if int(a.Peer) >= g.nranks {
			return
		}
		g.pids[int(a.Peer)] = p.PID
		g.stats[a.Peer].PID, g.stats[a.Peer].Rank = p.PID, int(a.Peer)
		c.members[commKey{p.PID, a.Comm}] = &member{comm: g, rank: int(a.Peer)}
	case event.ClassCollective:
		m := c.members[commKey{p.PID, a.Comm}]
		if m == nil {
			return
		}
		m.comm.arrive(m, x.Start, spec.API)
	}
}

func (g *group) arrive(m *member, at uint64, api event.API) {
	k := m.next
	m.next++
	if k < g.oldest {
		return // a meeting given up already
	}
	mt := g.pending[k]
	if mt == nil {
		if len(g.pending) >= maxPending {
			// Give up the oldest meeting still waiting for a rank.
			oldest := k
			for seq := range g.pending {
				oldest = min(oldest, seq)
			}
			delete(g.pending, oldest)
			g.oldest = oldest + 1
			g.lost++
		}
		mt = &meeting{arrivals: make([]uint64, g.nranks), api: api}
		g.pending[k] = mt
	}
	if mt.arrivals[m.rank] != 0 {
		return
	}
	mt.arrivals[m.rank] = at
	mt.n++
	if mt.n < g.nranks {
		return
	}
	delete(g.pending, k)
	first, last := slices.Min(mt.arrivals), slices.Max(mt.arrivals)
	lastRank := slices.Index(mt.arrivals, last)
	for r, t := range mt.arrivals {
		g.stats[r].WaitedNs += last - t
	}
	g.stats[lastRank].Last++
	g.stats[lastRank].HeldNs += last - first
	g.done++
	g.spread += time.Duration(last - first)
}

func (c *Collector) Sync(*model.Process, *model.Sync)             {}
func (c *Collector) GPUOp(*model.Process, *model.GPUOp)           {}
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

// Comms lists the communicators with meetings, most meetings first.
func (c *Collector) Comms() []Comm {
	var out []Comm
	for _, g := range c.groups {
		if g.done == 0 {
			continue
		}
		cm := Comm{ID: g.id, Ranks: g.nranks, Meetings: g.done, MeanSpread: g.spread / time.Duration(g.done),
			Incomplete: g.lost, Stats: slices.Clone(g.stats)}
		out = append(out, cm)
	}
	slices.SortFunc(out, func(a, b Comm) int { return b.Meetings - a.Meetings })
	return out
}

// Report writes the stragglers section of the summary; nothing when no
// collective was met by every rank of its communicator.
func (c *Collector) Report(w io.Writer) {
	comms := c.Comms()
	if len(comms) == 0 {
		return
	}
	fmt.Fprintln(w, "\nNCCL ranks (the k-th collective of a communicator is one meeting; the last rank to arrive holds the others up)")
	for _, cm := range comms {
		fmt.Fprintf(w, "  communicator %016x: %d ranks, %d meetings, mean arrival spread %v", cm.ID, cm.Ranks, cm.Meetings, cm.MeanSpread.Round(time.Microsecond))
		if cm.Incomplete > 0 {
			fmt.Fprintf(w, ", %d given up waiting", cm.Incomplete)
		}
		fmt.Fprintln(w)
		if s := cm.Straggler(); s >= 0 {
			st := cm.Stats[s]
			fmt.Fprintf(w, "  straggler: rank %d (pid %d), last at %d of %d meetings, the others waited %v for it\n",
				s, st.PID, st.Last, cm.Meetings, time.Duration(st.HeldNs).Round(time.Microsecond))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  RANK\tPID\tLAST\tWAITED FOR OTHERS\tOTHERS WAITED FOR IT")
		for _, st := range cm.Stats {
			fmt.Fprintf(tw, "  %d\t%d\t%d\t%v\t%v\n", st.Rank, st.PID, st.Last,
				time.Duration(st.WaitedNs).Round(time.Microsecond), time.Duration(st.HeldNs).Round(time.Microsecond))
		}
		tw.Flush()
	}
}
