package html

import (
	"cmp"
	"slices"
)

// Categories of GPU work for the overlap analysis, as bits of a mask.
const (
	catCompute = 1 << iota // kernels, graph launches
	catCopy                // memcpy, memset
	catComm                // NCCL collectives and point-to-point
	numMasks   = 8
)

// interval is one op's time on the device, with its category bit.
type interval struct {
	start, end uint64
	cat        uint8
}

// concurrency measures, over a set of intervals arriving in any order, how
// long each combination of categories was active at once (time[mask]).
// Intervals are kept until maxIntervals; then those before a cut (the
// median start of the kept ones) are settled: swept into time[] and
// dropped, what crosses the cut kept from the cut on. An interval that
// arrives later and begins before the last cut is clipped there and the
// part cut off counted in late (ops become final in bounded disorder,
// so this is rare, and counted where it happens).
type concurrency struct {
	kept    []interval
	time    [numMasks]uint64
	settled uint64 // everything before it is settled
	late    uint64 // ns of intervals clipped at the settled cut
	first   uint64
	last    uint64
	max     int
}

func newConcurrency(maxIntervals int) *concurrency { return &concurrency{max: maxIntervals} }

func (c *concurrency) add(start, end uint64, cat uint8) {
	if end <= start {
		return
	}
	if c.first == 0 || start < c.first {
		c.first = start
	}
	c.last = max(c.last, end)
	if start < c.settled {
		if end <= c.settled {
			c.late += end - start
			return
		}
		c.late += c.settled - start
		start = c.settled
	}
	c.kept = append(c.kept, interval{start, end, cat})
	if len(c.kept) >= c.max {
		starts := make([]uint64, len(c.kept))
		for i, iv := range c.kept {
			starts[i] = iv.start
		}
		slices.Sort(starts)
		c.settle(starts[len(starts)/2])
	}
}

// settle sweeps [c.settled, cut) into time[] and keeps what lies after.
func (c *concurrency) settle(cut uint64) {
	if cut <= c.settled {
		return
	}
	type edge struct {
		t     uint64
		cat   uint8
		delta int
	}
	edges := make([]edge, 0, 2*len(c.kept))
	rest := c.kept[:0]
	// What crosses the cut is kept from the cut on: one interval per
	// category, to the latest end ([cut, a) ∪ [cut, b) = [cut, max)), so
	// that a settle always frees about half, however many ops one late
	// synchronization bounded.
	var across [8]uint64
	for _, iv := range c.kept {
		if iv.start < cut {
			edges = append(edges, edge{iv.start, iv.cat, +1}, edge{min(iv.end, cut), iv.cat, -1})
			if iv.end > cut {
				across[iv.cat] = max(across[iv.cat], iv.end)
			}
		} else {
			rest = append(rest, iv)
		}
	}
	for cat, end := range across {
		if end > 0 {
			rest = append(rest, interval{cut, end, uint8(cat)})
		}
	}
	c.kept = rest
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(a.t, b.t) })
	var active [8]int // per category bit index
	prev := uint64(0)
	for _, e := range edges {
		if prev != 0 && e.t > prev {
			mask := 0
			for b := 0; b < 3; b++ {
				if active[b] > 0 {
					mask |= 1 << b
				}
			}
			c.time[mask] += e.t - prev
		}
		b := 0
		for e.cat>>b != 1 {
			b++
		}
		active[b] += e.delta
		prev = e.t
	}
	c.settled = cut
}

// finish settles everything.
func (c *concurrency) finish() {
	if len(c.kept) == 0 {
		return
	}
	end := uint64(0)
	for _, iv := range c.kept {
		end = max(end, iv.end)
	}
	c.settle(end)
}

// busy is the time at least one category in want was active.
func (c *concurrency) busy(want int) uint64 {
	var t uint64
	for m := 1; m < numMasks; m++ {
		if m&want != 0 {
			t += c.time[m]
		}
	}
	return t
}

// both is the time every category of want was active at once.
func (c *concurrency) both(want int) uint64 {
	var t uint64
	for m := 1; m < numMasks; m++ {
		if m&want == want {
			t += c.time[m]
		}
	}
	return t
}
