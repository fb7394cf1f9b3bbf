package agent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// burn spends CPU time until getrusage has seen some.
func burn() {
	start := cpuTime()
	x := 0
	for cpuTime()-start < 5*time.Millisecond {
		for i := range 100000 {
			x += i
		}
	}
	_ = x
}

// TestCPUBudget: a window that cost more than the budget allows pushes the
// next one back so that the cycle's average stays within it; a generous
// budget keeps --every.
func TestCPUBudget(t *testing.T) {
	b := newCPUBudget(0.001, time.Second, prometheus.NewRegistry())
	b.windowStarts()
	burn()
	cost := cpuTime() - b.start
	cycle := b.next(500 * time.Millisecond)
	if cycle < time.Duration(float64(cost)/0.001) || cycle <= time.Second {
		t.Errorf("cycle %v after %v of CPU at a 0.1%% budget: want at least %v", cycle, cost, time.Duration(float64(cost)/0.001))
	}
	if testutil.ToFloat64(b.skipped) != 1 || testutil.ToFloat64(b.cpuUsed) > 0.0011 {
		t.Errorf("delays %v, cycle CPU %v", testutil.ToFloat64(b.skipped), testutil.ToFloat64(b.cpuUsed))
	}
	if r := testutil.ToFloat64(b.ratio); r <= 0 || r >= 0.5 {
		t.Errorf("traced ratio %v, want below the configured 0.5", r)
	}
	g := newCPUBudget(1, time.Second, prometheus.NewRegistry())
	g.windowStarts()
	burn()
	if cycle := g.next(500 * time.Millisecond); cycle != time.Second || testutil.ToFloat64(g.ratio) != 0.5 {
		t.Errorf("within budget: cycle %v ratio %v, want --every and 0.5", cycle, testutil.ToFloat64(g.ratio))
	}
}

// TestSampleWeight: a window that traced half its cycle makes the next
// window's counts count twice; in budget, windows every --every of length
// --every count once.
func TestSampleWeight(t *testing.T) {
	b := newCPUBudget(1, 2*time.Second, prometheus.NewRegistry())
	if w := b.sampleWeight(time.Second); w != 2 {
		t.Errorf("first window of 1s every 2s: weight %v, want 2", w)
	}
	b.windowStarts()
	b.next(time.Second)
	if w := b.sampleWeight(2 * time.Second); w != 1 {
		t.Errorf("window as long as its cycle: weight %v, want 1", w)
	}
}
