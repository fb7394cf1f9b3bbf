package straggler

import "slices"

// maxSpans bounds the intervals a spans keeps.
const maxSpans = 64

// spans is a union of time intervals that counts each moment once: what a
// rank waited is the union of its waits, never their sum, so it cannot
// exceed the time they lie in. Memory is bounded: past maxSpans intervals
// the oldest is dropped and nothing before its end is added any more (a
// later interval reaching back there is clipped: undercounted, never
// counted twice).
type spans struct {
	iv    [][2]uint64 // sorted, disjoint, not touching
	floor uint64
	total uint64
}

// add adds [a, b) and returns how much of it was not in the union yet.
func (s *spans) add(a, b uint64) uint64 {
	a = max(a, s.floor)
	if b <= a {
		return 0
	}
	// The intervals [i, j) touch or overlap [a, b).
	i, _ := slices.BinarySearchFunc(s.iv, a, func(x [2]uint64, t uint64) int {
		if x[1] < t {
			return -1
		}
		return 1
	})
	j := i
	covered := uint64(0)
	lo, hi := a, b
	for ; j < len(s.iv) && s.iv[j][0] <= b; j++ {
		x := s.iv[j]
		covered += min(x[1], b) - max(x[0], a)
		lo, hi = min(lo, x[0]), max(hi, x[1])
	}
	s.iv = slices.Replace(s.iv, i, j, [2]uint64{lo, hi})
	if len(s.iv) > maxSpans {
		s.floor = s.iv[0][1]
		s.iv = slices.Delete(s.iv, 0, 1)
	}
	added := (b - a) - covered
	s.total += added
	return added
}
