package straggler

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Matcher matches the collectives of each communicator's ranks into
// meetings as a model hands the calls over: the Collector's statistics and
// the Chrome trace's communicator tracks (export/chrome) both rest on it.
// T is what a caller attaches to an arrival; a meeting keeps the one of
// its latest arrival. Meetings waiting for a rank are bounded per
// communicator (maxPending): beyond, the oldest is given up, counted.
type Matcher[T any] struct {
	comms  comms
	groups map[uint64]*matchGroup[T]
	slots  int // arrivals kept by the meetings pending, over all communicators (maxSlots)
}

// maxSlots bounds the arrivals the pending meetings keep, one per rank of
// each: many meetings of a large communicator waiting for ranks a
// recording does not hold (one host's of a large job) would keep millions.
const maxSlots = 1 << 22

type matchGroup[T any] struct {
	id      uint64
	nranks  int
	pids    []uint32 // by rank
	pending map[int]*pendingMeeting[T]
	oldest  int // meetings before this one were given up
	lost    int
	met     Met[T] // the last meeting completed (its Arrivals reused)
}

type pendingMeeting[T any] struct {
	arrivals []uint64 // by rank, 0 = not yet
	n        int
	latest   uint64
	api      event.API
	last     T
}

// Arrival is what a call meant to its communicator.
type Arrival struct {
	Comm        uint64 // the communicator's unique id
	Ranks, Rank int
	Seq         int // the collective's meeting; -1 for ncclCommInitRank
}

// Met is a meeting every rank arrived at, complete with its last arrival.
type Met[T any] struct {
	Comm     uint64
	Seq      int
	API      event.API
	Arrivals []uint64 // by rank; valid until the next Call
	PIDs     []uint32 // by rank
	First    uint64
	Last     uint64
	LastRank int
	LastInfo T // what the last arrival's caller attached
}

// NewMatcher returns an empty matcher.
func NewMatcher[T any]() *Matcher[T] {
	return &Matcher[T]{comms: newComms(), groups: map[uint64]*matchGroup[T]{}}
}

// Call follows call x of p: for a communicator made or a collective it
// returns what x was (ok), and the meeting x completed, if any.
func (m *Matcher[T]) Call(p *model.Process, x *model.Call, info T) (a Arrival, ok bool, met *Met[T]) {
	mb, seq := m.comms.call(p, x)
	if mb == nil {
		return Arrival{}, false, nil
	}
	a = Arrival{Comm: mb.id, Ranks: mb.nranks, Rank: mb.rank, Seq: seq}
	g := m.groups[mb.id]
	if seq < 0 {
		if g == nil {
			g = &matchGroup[T]{id: mb.id, nranks: mb.nranks, pids: make([]uint32, mb.nranks), pending: map[int]*pendingMeeting[T]{}}
			m.groups[mb.id] = g
		}
		if mb.rank < g.nranks {
			g.pids[mb.rank] = p.PID
		}
		return a, true, nil
	}
	if g == nil || mb.rank >= g.nranks {
		return a, true, nil
	}
	return a, true, g.arrive(mb.rank, seq, x.API, x.Start, info, &m.slots)
}

// arrive adds rank's arrival at meeting k; slots counts the arrivals the
// matcher's pending meetings keep.
func (g *matchGroup[T]) arrive(rank, k int, api event.API, at uint64, info T, slots *int) *Met[T] {
	if k < g.oldest {
		return nil // a meeting given up already
	}
	mt := g.pending[k]
	if mt == nil {
		for len(g.pending) > 0 && (len(g.pending) >= maxPending || *slots+g.nranks > maxSlots) {
			// Give up the oldest meeting still waiting for a rank.
			oldest := k
			for seq := range g.pending {
				oldest = min(oldest, seq)
			}
			delete(g.pending, oldest)
			*slots -= g.nranks
			g.oldest = oldest + 1
			g.lost++
		}
		if k < g.oldest {
			return nil
		}
		if *slots+g.nranks > maxSlots {
			g.lost++ // the other communicators' pending meetings hold the room
			return nil
		}
		mt = &pendingMeeting[T]{arrivals: make([]uint64, g.nranks), api: api}
		g.pending[k] = mt
		*slots += g.nranks
	}
	if mt.arrivals[rank] != 0 {
		return nil
	}
	if at >= mt.latest {
		mt.latest, mt.last = at, info
	}
	mt.arrivals[rank] = at
	mt.n++
	if mt.n < g.nranks {
		return nil
	}
	delete(g.pending, k)
	*slots -= g.nranks
	first, last := slices.Min(mt.arrivals), slices.Max(mt.arrivals)
	g.met = Met[T]{Comm: g.id, Seq: k, API: mt.api, Arrivals: mt.arrivals, PIDs: g.pids, First: first, Last: last,
		LastRank: slices.Index(mt.arrivals, last), LastInfo: mt.last}
	return &g.met
}

// Waiting says, for communicator comm, how many meetings were given up
// (more than maxPending waited for a rank) and how many still wait.
func (m *Matcher[T]) Waiting(comm uint64) (givenUp, pending int) {
	if g := m.groups[comm]; g != nil {
		return g.lost, len(g.pending)
	}
	return 0, 0
}
