package straggler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Progress follows, live, how far each rank of each communicator got: the
// collectives it arrived at (called) and those its host saw complete. A
// rank that stops arriving leaves the others waiting in the next
// collective, whose completion their host never sees: Stalls names both
// while it lasts. It is a model sink, safe to read from another goroutine
// (a status line) while the model feeds it.
type Progress struct {
	mu      sync.Mutex
	comms   comms
	ranks   map[uint64][]*RankProgress // by communicator id, by rank
	pending map[opKey]pendingOp
	lost    int // collectives whose completion could not be followed (bound)
}

type pendingOp struct {
	r   *RankProgress
	seq int
}

// RankProgress is one rank's progress in one communicator.
type RankProgress struct {
	Rank     int
	PID      uint32
	Arrived  int // collectives called
	Complete int // of those, the ones its host saw complete (in order)
	// LastArrival and LastComplete are when (CLOCK_MONOTONIC ns).
	LastArrival, LastComplete uint64
	// LastAPI is the collective it arrived at last.
	LastAPI event.API
}

// Waiting reports whether the rank arrived at a collective its host has
// not seen complete yet.
func (r *RankProgress) Waiting() bool { return r.Arrived > r.Complete }

// maxCommsFollowed bounds the communicators Progress follows.
const maxCommsFollowed = 1024

// NewProgress returns an empty Progress.
func NewProgress() *Progress {
	return &Progress{comms: newComms(), ranks: map[uint64][]*RankProgress{}, pending: map[opKey]pendingOp{}}
}

func (p *Progress) Call(mp *model.Process, x *model.Call) {
	if spec := x.Spec(); spec == nil || spec.Layer != event.NCCL {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m, seq := p.comms.call(mp, x)
	if m == nil {
		return
	}
	ranks := p.ranks[m.id]
	if ranks == nil {
		if len(p.ranks) >= maxCommsFollowed {
			return
		}
		ranks = make([]*RankProgress, m.nranks)
		p.ranks[m.id] = ranks
	}
	if m.rank >= len(ranks) {
		return
	}
	r := ranks[m.rank]
	if r == nil || r.PID != mp.PID {
		r = &RankProgress{Rank: m.rank, PID: mp.PID}
		ranks[m.rank] = r
	}
	if seq < 0 {
		return
	}
	r.Arrived = max(r.Arrived, seq+1)
	r.LastArrival, r.LastAPI = x.Start, x.API
	if x.GPUOp >= 0 {
		if len(p.pending) < maxOps {
			p.pending[opKey{mp.PID, x.GPUOp}] = pendingOp{r: r, seq: seq}
		} else {
			p.lost++
		}
	}
}

// GPUOp: a collective seen complete (proven by a synchronization, or
// measured).
func (p *Progress) GPUOp(mp *model.Process, op *model.GPUOp) {
	if op.Kind != model.OpCollective {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := opKey{mp.PID, op.ID}
	po, ok := p.pending[k]
	if !ok {
		return
	}
	delete(p.pending, k)
	r := po.r
	r.Complete = max(r.Complete, po.seq+1)
	switch {
	case op.Measured:
		r.LastComplete = max(r.LastComplete, op.End)
	case op.Bounded:
		r.LastComplete = max(r.LastComplete, op.ProvenBy())
	}
}

func (*Progress) Sync(*model.Process, *model.Sync)             {}
func (*Progress) Dependency(*model.Process, *model.Dependency) {}
func (*Progress) Hold(*model.Process, *model.Hold)             {}

// CommProgress is one communicator's ranks, as far as they got.
type CommProgress struct {
	Comm  uint64
	Ranks []RankProgress // by rank; PID 0 for a rank not traced
}

// Snapshot copies every communicator's progress.
func (p *Progress) Snapshot() []CommProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]CommProgress, 0, len(p.ranks))
	for id, ranks := range p.ranks {
		c := CommProgress{Comm: id, Ranks: make([]RankProgress, len(ranks))}
		for i, r := range ranks {
			c.Ranks[i] = RankProgress{Rank: i}
			if r != nil {
				c.Ranks[i] = *r
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b CommProgress) int { return cmp.Compare(a.Comm, b.Comm) })
	return out
}

// Stall is a communicator whose ranks have waited in a collective for
// long: those that arrived wait for those that did not.
type Stall struct {
	Comm  uint64
	Seq   int       // the collective waited in (0-based): the first one a rank behind has not called
	Last  int       // the latest collective the waiting ranks called (0-based)
	API   event.API // what they called last
	Since uint64    // the latest of the waiting ranks' last collective calls
	// Waiting: traced ranks past Seq. Behind: traced ranks that have not
	// called Seq.
	Waiting []RankProgress
	Behind  []RankProgress
	// Untraced ranks are not in this recording (another host): when every
	// rank traced waits, they may be the ones behind.
	Untraced []int
}

// Stalls lists the communicators in which some rank has waited in a
// collective for more than after, at now (CLOCK_MONOTONIC ns).
func (p *Progress) Stalls(now uint64, after time.Duration) []Stall {
	var out []Stall
	for _, c := range p.Snapshot() {
		least, most, traced := -1, 0, 0
		for _, r := range c.Ranks {
			if r.PID == 0 {
				continue
			}
			traced++
			most = max(most, r.Arrived)
			if least < 0 || r.Arrived < least {
				least = r.Arrived
			}
		}
		if traced == 0 || most == 0 {
			continue
		}
		s := Stall{Comm: c.Comm, Seq: least, Last: most - 1}
		for _, r := range c.Ranks {
			switch {
			case r.PID == 0:
				s.Untraced = append(s.Untraced, r.Rank)
			case least < most && r.Arrived == least:
				s.Behind = append(s.Behind, r)
			case r.Waiting():
				// Past the collective the others have not reached, or
				// (all traced ranks level) in one its host never saw end.
				s.Waiting = append(s.Waiting, r)
				if r.LastArrival >= s.Since {
					s.Since, s.API = r.LastArrival, r.LastAPI
				}
			}
		}
		if least == most {
			s.Seq = most - 1 // level: waiting in their latest, for an untraced rank
		}
		stuck := len(s.Behind) > 0 || (len(s.Untraced) > 0 && len(s.Waiting) == traced)
		if stuck && len(s.Waiting) > 0 && now > s.Since && time.Duration(now-s.Since) > after {
			out = append(out, s)
		}
	}
	return out
}

// String names the ranks behind and those waiting for them.
func (s Stall) String(now uint64) string {
	var b strings.Builder
	api := "collective"
	if sp := event.Lookup(s.API); sp != nil {
		api = sp.Name
	}
	ranks := func(rs []RankProgress) string {
		var parts []string
		for _, r := range rs {
			parts = append(parts, fmt.Sprintf("%d (pid %d)", r.Rank, r.PID))
		}
		if len(parts) == 1 {
			return "rank " + parts[0]
		}
		return "ranks " + strings.Join(parts, ", ")
	}
	switch {
	case len(s.Behind) > 0:
		fmt.Fprintf(&b, "%s stopped arriving after collective #%d", ranks(s.Behind), s.Seq)
	default:
		fmt.Fprintf(&b, "a rank not traced here (%v) has not arrived", s.Untraced)
	}
	fmt.Fprintf(&b, "; %s waiting for collective #%d", ranks(s.Waiting), s.Seq+1)
	if s.Last > s.Seq {
		fmt.Fprintf(&b, " (called up to %s #%d)", api, s.Last+1)
	} else {
		fmt.Fprintf(&b, " (%s)", api)
	}
	fmt.Fprintf(&b, " for %s", dur(now-s.Since))
	return b.String()
}
