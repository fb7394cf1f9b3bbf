package syncs

import (
	"slices"
	"sort"
)

// span is the time [from, to), ns.
type span struct{ from, to uint64 }

func (s span) len() uint64 { return s.to - s.from }

// spanSet is a union of spans, sorted and disjoint. With max > 0 it keeps
// at most max spans: when full, it joins the spans separated by the
// shorter half of the gaps between them, and from then on spans closer than
// that (slack). The union only grows, so what it bounds from above stays
// bounded, and the longest gaps, the ones that tell, are kept.
type spanSet struct {
	s     []span
	max   int
	slack uint64
}

// add adds [from, to) to the set.
func (x *spanSet) add(from, to uint64) {
	if to <= from {
		return
	}
	// Most spans come in time order: at or after the last one.
	n := len(x.s)
	if n == 0 || from > x.s[n-1].to+x.slack {
		x.s = append(x.s, span{from, to})
		x.limit()
		return
	}
	i := sort.Search(n, func(i int) bool { return x.s[i].to+x.slack >= from })
	j := i
	for j < n && x.s[j].from <= to+x.slack {
		from, to = min(from, x.s[j].from), max(to, x.s[j].to)
		j++
	}
	if i == j {
		x.s = slices.Insert(x.s, i, span{from, to})
		x.limit()
		return
	}
	x.s[i] = span{from, to}
	x.s = slices.Delete(x.s, i+1, j)
}

// limit joins the spans separated by the shorter half of the gaps when the
// set is full.
func (x *spanSet) limit() {
	if x.max <= 0 || len(x.s) <= x.max {
		return
	}
	gaps := make([]uint64, len(x.s)-1)
	for i := range gaps {
		gaps[i] = x.s[i+1].from - x.s[i].to
	}
	slices.Sort(gaps)
	x.slack = max(x.slack, gaps[len(gaps)/2])
	out := x.s[:1]
	for _, s := range x.s[1:] {
		if last := &out[len(out)-1]; s.from <= last.to+x.slack {
			last.to = max(last.to, s.to)
		} else {
			out = append(out, s)
		}
	}
	x.s = out
}

// total is the time the spans cover.
func total(s []span) uint64 {
	var n uint64
	for _, x := range s {
		n += x.len()
	}
	return n
}

// clip is s within [from, to).
func clip(s []span, from, to uint64) []span {
	var out []span
	for _, x := range s {
		if x.to > from && x.from < to {
			out = append(out, span{max(x.from, from), min(x.to, to)})
		}
	}
	return out
}

// subtract is the time a covers and b does not; both sorted and disjoint.
func subtract(a, b []span) []span {
	var out []span
	j := 0
	for _, x := range a {
		from := x.from
		for j < len(b) && b[j].to <= from {
			j++
		}
		for k := j; k < len(b) && b[k].from < x.to; k++ {
			if b[k].from > from {
				out = append(out, span{from, b[k].from})
			}
			from = max(from, b[k].to)
		}
		if from < x.to {
			out = append(out, span{from, x.to})
		}
	}
	return out
}

// union of two sorted, disjoint span lists.
func union(a, b []span) []span {
	var x spanSet
	for _, s := range a {
		x.add(s.from, s.to)
	}
	for _, s := range b {
		x.add(s.from, s.to)
	}
	return x.s
}

// windowSpans is how many recent spans of blocked time a thread keeps.
const windowSpans = 32

// window counts each nanosecond once, however the spans added overlap: a
// thread's blocked time (a runtime sync and the driver sync inside it, poll
// loops on several events at once), or the GPU's measured busy time
// (kernels on several streams). Spans come nearly in time order; it keeps
// the latest max and takes all time before them as counted already, so a
// span older than those is undercounted, never counted twice.
type window struct {
	spans spanSet
	floor uint64
	max   int // spans kept; 0: windowSpans
}

// add adds [from, to) and returns how much of it was not counted before.
func (w *window) add(from, to uint64) uint64 {
	from = max(from, w.floor)
	if to <= from {
		return 0
	}
	fresh := to - from
	s := w.spans.s
	for i := sort.Search(len(s), func(i int) bool { return s[i].to > from }); i < len(s) && s[i].from < to; i++ {
		fresh -= min(to, s[i].to) - max(from, s[i].from)
	}
	w.spans.add(from, to)
	limit := w.max
	if limit == 0 {
		limit = windowSpans
	}
	if s := w.spans.s; len(s) > limit {
		// Dropping a quarter at a time keeps the copying rare.
		n := max(1, limit/4)
		w.floor = s[n-1].to
		w.spans.s = append(s[:0], s[n:]...)
	}
	return fresh
}
