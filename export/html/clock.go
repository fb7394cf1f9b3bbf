package html

// The report's time series share one clock: a fixed number of buckets
// from the first timestamp seen, each bucket width wide. When a timestamp
// falls past the last bucket the width doubles (as often as needed) and
// every series merges its buckets pairwise, so memory stays at n values
// per series whatever the length of the recording, and bucket i means the
// same time range in every series.

type clock struct {
	t0, width uint64
	n         int
	started   bool
	early     uint64 // timestamps before t0, counted in bucket 0
	series    []growable
}

// growable is a series that merges its buckets when the clock widens.
type growable interface{ grow(oldWidth uint64) }

// initialWidth is the first bucket width: fine enough for a recording of
// a millisecond, doubled as the recording grows.
const initialWidth = 1000 // ns

func newClock(n int) *clock { return &clock{n: n, width: initialWidth} }

// see starts the clock at t if it has not started.
func (c *clock) see(t uint64) {
	if !c.started && t != 0 {
		c.t0, c.started = t, true
	}
}

// index is the bucket of t, widening the clock when t lies past its end.
func (c *clock) index(t uint64) int {
	c.see(t)
	if t < c.t0 {
		c.early++
		return 0
	}
	for (t-c.t0)/c.width >= uint64(c.n) {
		old := c.width
		c.width *= 2
		for _, s := range c.series {
			s.grow(old)
		}
	}
	return int((t - c.t0) / c.width)
}

// start of bucket i.
func (c *clock) start(i int) uint64 { return c.t0 + uint64(i)*c.width }

// sumSeries adds counts or durations per bucket.
type sumSeries struct{ v []uint64 }

func (c *clock) newSum() *sumSeries {
	s := &sumSeries{v: make([]uint64, c.n)}
	c.series = append(c.series, s)
	return s
}

func (s *sumSeries) grow(uint64) {
	n := len(s.v)
	for i := 0; i < n/2; i++ {
		s.v[i] = s.v[2*i] + s.v[2*i+1]
	}
	clear(s.v[n/2:])
}

func (s *sumSeries) add(c *clock, t, v uint64) { s.v[c.index(t)] += v }

// maxSeries keeps the largest value per bucket and the last one set
// (stored +1, so that 0 means none): a step function such as memory in
// use.
type maxSeries struct{ max, last []uint64 }

func (c *clock) newMax() *maxSeries {
	s := &maxSeries{max: make([]uint64, c.n), last: make([]uint64, c.n)}
	c.series = append(c.series, s)
	return s
}

func (s *maxSeries) grow(uint64) {
	n := len(s.max)
	for i := 0; i < n/2; i++ {
		s.max[i] = max(s.max[2*i], s.max[2*i+1])
		s.last[i] = s.last[2*i+1]
		if s.last[i] == 0 {
			s.last[i] = s.last[2*i]
		}
	}
	clear(s.max[n/2:])
	clear(s.last[n/2:])
}

func (s *maxSeries) set(c *clock, t, v uint64) {
	i := c.index(t)
	s.max[i] = max(s.max[i], v)
	s.last[i] = v + 1
}

// spanSeries adds the time intervals cover in each bucket (occupancy, or
// with many intervals, their count integrated over time: queue depth) in
// O(1) per interval: the partial buckets at both ends directly, the
// buckets in between as a coverage count (a difference array) that is
// folded in when the clock widens or the series is read.
type spanSeries struct {
	ns   []uint64
	diff []int64
	c    *clock
}

func (c *clock) newSpan() *spanSeries {
	s := &spanSeries{ns: make([]uint64, c.n), diff: make([]int64, c.n+1), c: c}
	c.series = append(c.series, s)
	return s
}

func (s *spanSeries) fold(width uint64) {
	var cover int64
	for i := range s.ns {
		cover += s.diff[i]
		if cover > 0 {
			s.ns[i] += uint64(cover) * width
		}
	}
	clear(s.diff)
}

func (s *spanSeries) grow(old uint64) {
	s.fold(old)
	n := len(s.ns)
	for i := 0; i < n/2; i++ {
		s.ns[i] = s.ns[2*i] + s.ns[2*i+1]
	}
	clear(s.ns[n/2:])
}

// add covers [a, b).
func (s *spanSeries) add(a, b uint64) {
	c := s.c
	if b <= a {
		return
	}
	c.see(a)
	if a < c.t0 {
		a = c.t0
		if b <= a {
			return
		}
	}
	jb := c.index(b - 1) // widens first: ia is then on the final width
	ia := c.index(a)
	if ia == jb {
		s.ns[ia] += b - a
		return
	}
	s.ns[ia] += c.start(ia+1) - a
	s.ns[jb] += b - c.start(jb)
	if jb > ia+1 {
		s.diff[ia+1]++
		s.diff[jb]--
	}
}

// values folds the coverage in and returns ns per bucket.
func (s *spanSeries) values() []uint64 {
	s.fold(s.c.width)
	return s.ns
}
