package html

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestConcurrencyBounded: with few intervals kept (settles all along), the
// time per combination of categories equals a brute-force count, and the
// intervals kept never exceed the bound, also when one late end bounds
// every interval (a synchronization that proved thousands of ops done).
// Intervals come by start, as ops do (one arriving before what was
// settled counts as late, not in time[]); times start above 0, as
// CLOCK_MONOTONIC does.
func TestConcurrencyBounded(t *testing.T) {
	cats := []uint8{catCompute, 2, 4}
	for name, gen := range map[string]func(i int, r *rand.Rand) (uint64, uint64){
		"random": func(i int, r *rand.Rand) (uint64, uint64) {
			s := uint64(1 + i + r.IntN(50))
			return s, s + uint64(1+r.IntN(200))
		},
		"one late end": func(i int, r *rand.Rand) (uint64, uint64) { return uint64(1 + i), 100000 },
	} {
		r := rand.New(rand.NewPCG(1, 2))
		c := newConcurrency(64)
		var want [numMasks]uint64
		active := make([][3]int, 100001)
		type iv struct{ s, e uint64 }
		ivs := make([]iv, 3000)
		for i := range ivs {
			ivs[i].s, ivs[i].e = gen(i, r)
		}
		slices.SortStableFunc(ivs, func(a, b iv) int { return cmp.Compare(a.s, b.s) })
		for i, v := range ivs {
			s, e := v.s, v.e
			cat := cats[i%3]
			c.add(s, e, cat)
			if len(c.kept) > 64 {
				t.Fatalf("%s: %d intervals kept, bound 64", name, len(c.kept))
			}
			for x := s; x < e; x++ {
				active[x][i%3]++
			}
		}
		c.finish()
		for _, a := range active {
			m := 0
			for b, n := range a {
				if n > 0 {
					m |= 1 << b
				}
			}
			if m != 0 {
				want[m]++
			}
		}
		for m := 1; m < numMasks; m++ {
			if c.time[m] != want[m] {
				t.Errorf("%s: time[%03b] = %d, want %d", name, m, c.time[m], want[m])
			}
		}
	}
}
