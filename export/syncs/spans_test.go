package syncs

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSpanSet(t *testing.T) {
	var x spanSet
	for _, s := range []span{{10, 20}, {30, 40}, {20, 25}, {0, 5}, {38, 50}, {60, 70}, {4, 31}} {
		x.add(s.from, s.to)
	}
	if want := []span{{0, 50}, {60, 70}}; !slices.Equal(x.s, want) {
		t.Errorf("spans %v, want %v", x.s, want)
	}
	if total(x.s) != 60 {
		t.Errorf("total %d", total(x.s))
	}

	// Past its maximum it joins the closest spans: the union only grows.
	y := spanSet{max: 8}
	for i := range uint64(100) {
		y.add(i*10_000, i*10_000+100)
	}
	if len(y.s) > 8 || y.s[0].from != 0 || y.s[len(y.s)-1].to != 990_100 || total(y.s) < 100*100 {
		t.Errorf("limited set %v (slack %d)", y.s, y.slack)
	}
}

func TestSpanAlgebra(t *testing.T) {
	a := []span{{0, 10}, {20, 30}, {40, 50}}
	b := []span{{5, 25}, {45, 60}}
	if got, want := intersect(a, b), []span{{5, 10}, {20, 25}, {45, 50}}; !slices.Equal(got, want) {
		t.Errorf("intersect %v, want %v", got, want)
	}
	if got, want := subtract(a, b), []span{{0, 5}, {25, 30}, {40, 45}}; !slices.Equal(got, want) {
		t.Errorf("subtract %v, want %v", got, want)
	}
	if got, want := union(a, b), []span{{0, 30}, {40, 60}}; !slices.Equal(got, want) {
		t.Errorf("union %v, want %v", got, want)
	}
	if got, want := clip(a, 8, 42), []span{{8, 10}, {20, 30}, {40, 42}}; !slices.Equal(got, want) {
		t.Errorf("clip %v, want %v", got, want)
	}
	if got := subtract(a, nil); !slices.Equal(got, a) {
		t.Errorf("subtract nothing: %v", got)
	}
}

// A thread's blocked time counts each nanosecond once: nested and
// overlapping syncs add only what was not counted yet, in whatever order
// they come.
func TestWindow(t *testing.T) {
	var w window
	for _, c := range []struct {
		from, to, fresh uint64
	}{
		{100, 200, 100}, // a runtime sync
		{110, 190, 0},   // the driver sync inside it
		{300, 400, 100}, // a poll loop
		{250, 350, 50},  // another one, begun earlier, ended first
		{50, 120, 50},   // older, partly counted
		{400, 400, 0},
	} {
		if got := w.add(c.from, c.to); got != c.fresh {
			t.Errorf("add [%d, %d) = %d, want %d", c.from, c.to, got, c.fresh)
		}
	}
	// Past the spans it keeps, older time is taken as counted: whatever
	// the order, the sum never exceeds the union, and in time order it is
	// the union.
	var w2 window
	var all spanSet
	var sum uint64
	for i := range uint64(4 * windowSpans) {
		from := 1000 + (i*37%(4*windowSpans))*10 // out of order
		sum += w2.add(from, from+25)
		all.add(from, from+25)
	}
	if sum > total(all.s) {
		t.Errorf("counted %d, more than the %d covered", sum, total(all.s))
	}
	var w3 window
	sum = 0
	for i := range uint64(4 * windowSpans) {
		sum += w3.add(i*10, i*10+25)
	}
	if want := uint64(4*windowSpans-1)*10 + 25; sum != want {
		t.Errorf("in order: counted %d, want %d", sum, want)
	}
}

// TestThreadGapsBounded: past maxGaps a thread keeps the longer half of its
// long gaps and counts the rest, also when every gap is as long (the list
// stays bounded), and kept plus counted is every gap.
func TestThreadGapsBounded(t *testing.T) {
	for name, length := range map[string]func(i int) uint64{
		"equal":   func(int) uint64 { return 2 * LongGap },
		"growing": func(i int) uint64 { return LongGap + uint64(i) },
	} {
		var th thread
		const n = 3*maxGaps + 7
		var want uint64
		at := uint64(1)
		for i := range n {
			th.gap(at, at+length(i))
			want += length(i)
			at += length(i) + 1
			if len(th.gaps) > maxGaps {
				t.Fatalf("%s: %d gaps kept, bound %d", name, len(th.gaps), maxGaps)
			}
		}
		var kept uint64
		for i, g := range th.gaps {
			kept += g.len()
			if i > 0 && g.from < th.gaps[i-1].from {
				t.Fatalf("%s: gaps out of time order", name)
			}
		}
		if int64(len(th.gaps))+th.notKept != n || kept+th.notKeptNs != want {
			t.Errorf("%s: %d kept + %d counted of %d gaps; %d + %d ns of %d", name, len(th.gaps), th.notKept, n, kept, th.notKeptNs, want)
		}
	}
}

// intersect is the time both a and b cover; both sorted and disjoint.
// (idleSpans used it; the test keeps it as the reference.)
func intersect(a, b []span) []span {
	var out []span
	for i, j := 0, 0; i < len(a) && j < len(b); {
		from, to := max(a[i].from, b[j].from), min(a[i].to, b[j].to)
		if from < to {
			out = append(out, span{from, to})
		}
		if a[i].to < b[j].to {
			i++
		} else {
			j++
		}
	}
	return out
}

// TestIdleSpans: the time every thread was away, from one sort of their
// busy spans, is what intersecting each thread's time away gives.
func TestIdleSpans(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for trial := range 500 {
		start, end := uint64(0), uint64(1000)
		var work []*Thread
		for range 1 + rnd.IntN(6) {
			first := rnd.Uint64N(1000)
			last := first + rnd.Uint64N(1000-first+1)
			th := &Thread{first: first, last: last}
			for at := first; ; {
				from := at + rnd.Uint64N(200)
				to := from + 1 + rnd.Uint64N(100)
				if to > last {
					break
				}
				th.gaps = append(th.gaps, span{from, to})
				at = to
			}
			work = append(work, th)
		}
		want := []span{{start, end}}
		for _, th := range work {
			away := append([]span{{start, th.first}}, th.gaps...)
			want = intersect(want, union(append(away, span{th.last, end}), nil))
		}
		if got := idleSpans(start, end, work); !slices.Equal(got, want) {
			t.Fatalf("trial %d: idle %v, want %v", trial, got, want)
		}
	}
}
