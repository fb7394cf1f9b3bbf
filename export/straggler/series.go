package straggler

import (
	"cmp"
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Point is one rank's side of one meeting, on its own host's clock.
type Point struct {
	Seq int
	API event.API
	// Arrive: the collective call began. Complete: the earliest moment
	// its host knew the collective's GPU work complete (the return of the
	// synchronization or query that proved it), 0 when nothing proved it.
	// GPUEnd: its end on the GPU as CUPTI measured it (--gpu-times), 0
	// when not measured.
	Arrive, Complete, GPUEnd uint64
	Captured                 bool // recorded into a CUDA graph, not run
}

// RankSeries is what one rank did at its communicator's meetings.
type RankSeries struct {
	Comm  uint64 // the communicator's unique id
	Ranks int    // its size
	Rank  int
	PID   uint32
	Calls int // meetings it arrived at
	// Points: its first and its last meetings (at most Keep of each), by
	// Seq.
	Points []Point
}

// series is one rank's RankSeries being filled: the first keep points,
// then a ring of the last keep.
type series struct {
	RankSeries
	first []Point
	ring  []Point
}

func (s *series) point(seq int) *Point {
	keep := cap(s.first)
	if seq < keep {
		if seq < len(s.first) {
			return &s.first[seq]
		}
		return nil
	}
	if len(s.ring) == 0 {
		return nil
	}
	p := &s.ring[(seq-keep)%len(s.ring)]
	if p.Seq != seq {
		return nil
	}
	return p
}

type seriesKey struct {
	comm uint64
	rank int
	pid  uint32
}

type pointRef struct {
	s   *series
	seq int
}

// Series is a model sink that keeps, for every rank of every communicator
// it sees, what aligning clocks across hosts needs (export/merge): when
// the rank arrived at each meeting, when its host learnt the collective
// complete, and when its GPU ended it. Memory is bounded: the first and
// the last Keep meetings of each rank, and the collective ops not yet
// final (counted past a bound).
type Series struct {
	comms comms
	keep  int
	ranks map[seriesKey]*series
	ops   map[opKey]pointRef
	// OpsLost counts collective ops not followed to their completion (more
	// than the bound were pending).
	OpsLost int
}

// NewSeries keeps the first and the last keep meetings of each rank.
func NewSeries(keep int) *Series {
	return &Series{comms: newComms(), keep: max(keep, 1), ranks: map[seriesKey]*series{}, ops: map[opKey]pointRef{}}
}

func (s *Series) Call(p *model.Process, x *model.Call) {
	m, seq := s.comms.call(p, x)
	if m == nil {
		return
	}
	k := seriesKey{m.id, m.rank, p.PID}
	r := s.ranks[k]
	if r == nil {
		r = &series{RankSeries: RankSeries{Comm: m.id, Ranks: m.nranks, Rank: m.rank, PID: p.PID},
			first: make([]Point, 0, s.keep)}
		s.ranks[k] = r
	}
	if seq < 0 {
		return
	}
	r.Calls++
	pt := Point{Seq: seq, API: x.API, Arrive: x.Start, Captured: x.Captured}
	switch {
	case seq < s.keep:
		r.first = append(r.first, pt)
	case len(r.ring) < s.keep:
		r.ring = append(r.ring, pt)
	default:
		// The oldest of the last: its op, if still pending, finds no
		// point (point checks Seq).
		r.ring[(seq-s.keep)%s.keep] = pt
	}
	if x.GPUOp >= 0 {
		if len(s.ops) < maxOps {
			s.ops[opKey{p.PID, x.GPUOp}] = pointRef{r, seq}
		} else {
			s.OpsLost++
		}
	}
}

// GPUOp fills in when a collective was known complete.
func (s *Series) GPUOp(p *model.Process, op *model.GPUOp) {
	if op.Kind != model.OpCollective {
		return
	}
	k := opKey{p.PID, op.ID}
	ref, ok := s.ops[k]
	if !ok {
		return
	}
	delete(s.ops, k)
	pt := ref.s.point(ref.seq)
	if pt == nil {
		return // left the kept meetings meanwhile
	}
	if op.Bounded {
		pt.Complete = op.ProvenBy()
	}
	if op.Measured {
		pt.GPUEnd = op.End
	}
}

func (*Series) Sync(*model.Process, *model.Sync)             {}
func (*Series) Dependency(*model.Process, *model.Dependency) {}
func (*Series) Hold(*model.Process, *model.Hold)             {}

// Ranks lists every rank seen, by communicator, rank and pid; a rank
// that made its communicator and no collective has no points.
func (s *Series) Ranks() []RankSeries {
	out := make([]RankSeries, 0, len(s.ranks))
	for _, r := range s.ranks {
		rs := r.RankSeries
		rs.Points = append(slices.Clone(r.first), r.ring...)
		slices.SortFunc(rs.Points, func(a, b Point) int { return cmp.Compare(a.Seq, b.Seq) })
		out = append(out, rs)
	}
	slices.SortFunc(out, func(a, b RankSeries) int {
		return cmp.Or(cmp.Compare(a.Comm, b.Comm), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.PID, b.PID))
	})
	return out
}
