package agent

import (
	"math"
	"testing"
	"time"

	"github.com/cudatap/cudatap/tracer/model"
)

func TestWaterLevel(t *testing.T) {
	for _, tc := range []struct {
		rates  []float64
		afford float64
		want   float64
	}{
		{[]float64{10, 100, 1000}, 310, 200}, // 10 + 100 + 200
		{[]float64{10, 100, 1000}, 1110, -1}, // everything fits
		{[]float64{10, 100, 1000}, -1, -1},   // no budget
		{[]float64{500, 500}, 100, 50},
		{nil, 0, -1},
	} {
		if got := waterLevel(tc.rates, tc.afford); got != tc.want {
			t.Errorf("waterLevel(%v, %v) = %v, want %v", tc.rates, tc.afford, got, tc.want)
		}
	}
}

// window feeds the sampler one window: calls per PID traced, then what it cost.
func window(s *processSampler, calls map[uint32]int, cost, budget time.Duration, alive func(int) (uint64, bool)) {
	for pid, n := range calls {
		for range n {
			s.Call(&model.Process{PID: pid}, nil)
		}
	}
	s.windowEnded(cost, budget, alive)
}

// TestProcessSampler: over budget, the busy process is traced with the
// probability that makes the expected calls fit, the quiet one always; the
// busy one's weighted counts estimate its calls without bias; a process
// that exits, or whose PID is reused, is forgotten.
func TestProcessSampler(t *testing.T) {
	starts := map[int]uint64{1: 100, 2: 200}
	alive := func(pid int) (uint64, bool) { s, ok := starts[pid]; return s, ok }
	s := newProcessSampler(1)
	// A window of few calls and a large fixed cost (a new process's
	// symbols, the host scan): over budget, but not for the calls:
	// nobody is sampled.
	window(s, map[uint32]int{1: 5, 2: 1}, 60*time.Millisecond, 50*time.Millisecond, alive)
	if s.procs[1].p != 1 || s.procs[2].p != 1 {
		t.Errorf("few calls, fixed cost over budget: p = %v, %v, want 1, 1", s.procs[1].p, s.procs[2].p)
	}
	// 1,010 calls cost 10.1 ms; the budget affords 1.1 ms: 110 calls a
	// window, τ = 100: the busy process is traced one window in ten.
	window(s, map[uint32]int{1: 1000, 2: 10}, 10100*time.Microsecond, 1100*time.Microsecond, alive)
	if p := s.procs[1].p; math.Abs(p-0.1) > 1e-9 {
		t.Errorf("busy process: p = %v, want 0.1", p)
	}
	if p := s.procs[2].p; p != 1 {
		t.Errorf("quiet process: p = %v, want 1", p)
	}
	const windows = 5000
	var traced, estimate float64
	for range windows {
		out, prob := s.draw()
		if _, ok := out[2]; ok {
			t.Fatal("the quiet process sat a window out")
		}
		if _, ok := out[1]; !ok {
			traced++
			estimate += 1000 / prob[1] // its calls in the window, weighted 1/p
		}
	}
	if share := traced / windows; math.Abs(share-0.1) > 0.02 {
		t.Errorf("busy process traced in %.3f of the windows, want 0.1", share)
	}
	if mean := estimate / windows; math.Abs(mean-1000)/1000 > 0.15 {
		t.Errorf("weighted calls per window %.0f, want about 1000 (unbiased)", mean)
	}

	// Never rarer than minProbability.
	window(s, map[uint32]int{1: 100000, 2: 10}, time.Second, 100*time.Microsecond, alive)
	if p := s.procs[1].p; p != minProbability {
		t.Errorf("p = %v, want the floor %v", p, minProbability)
	}
	// Within budget again: everyone traced.
	window(s, map[uint32]int{1: 10, 2: 10}, time.Millisecond, time.Second, alive)
	if s.procs[1].p != 1 || s.procs[2].p != 1 {
		t.Errorf("within budget: p = %v, %v, want 1, 1", s.procs[1].p, s.procs[2].p)
	}
	// Exited, and a PID reused by another process: forgotten.
	delete(starts, 2)
	starts[1] = 101
	window(s, nil, time.Millisecond, time.Second, alive)
	if len(s.procs) != 0 {
		t.Errorf("%d processes remembered after they exited", len(s.procs))
	}
}
