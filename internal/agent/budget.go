package agent

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// cpuBudget keeps the agent's own CPU time under a share of one core
// (--max-cpu): after each window it measures what the window cost (its
// CPU time since the window began, all threads), and when the average over
// window and pause would exceed the budget, it lengthens the pause before
// the next window, never the window itself. What is traced is then a
// smaller share of the time, which it reports (traced_ratio) so that
// rates can be scaled back; it never drops events inside a window.
type cpuBudget struct {
	share   float64 // of one core
	every   time.Duration
	start   time.Duration // CPU time when the window began
	cycle   time.Duration // the last cycle's length (window and pause)
	weight  prometheus.Gauge
	ratio   prometheus.Gauge
	cpuUsed prometheus.Gauge
	skipped prometheus.Counter
}

func newCPUBudget(share float64, every time.Duration, reg prometheus.Registerer) *cpuBudget {
	b := &cpuBudget{share: share, every: every, cycle: every,
		weight:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "cudatap_agent_sample_weight", Help: "What each count of the current window counts for in the *_total series: the last cycle's length over the window's (1 in --continuous)."}),
		ratio:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "cudatap_agent_traced_ratio", Help: "Share of wall time the last cycle traced (window / (window + pause)): divide window-mode rates by it."}),
		cpuUsed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cudatap_agent_cycle_cpu_ratio", Help: "The agent's CPU time over the last cycle, as a share of one core (held under --max-cpu)."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "cudatap_agent_budget_delays_total", Help: "Windows started later than --every to stay within --max-cpu."}),
	}
	reg.MustRegister(b.ratio, b.cpuUsed, b.skipped, b.weight)
	b.weight.Set(1)
	return b
}

// cpuTime is the process's CPU time, user and system, all threads.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (b *cpuBudget) windowStarts() { b.start = cpuTime() }

// intervalEnded reports the CPU share of an interval of --continuous that
// lasted d (there is no pause to lengthen).
func (b *cpuBudget) intervalEnded(d time.Duration) {
	if d > 0 {
		b.cpuUsed.Set(b.spent().Seconds() / d.Seconds())
	}
}

// spent is the agent's CPU time since the window began.
func (b *cpuBudget) spent() time.Duration { return cpuTime() - b.start }

// perCycle is the CPU time the budget allows a window: its share of
// --every (0: no budget).
func (b *cpuBudget) perCycle() time.Duration { return time.Duration(b.share * float64(b.every)) }

// next is how long after the window's start the next one may begin:
// --every, or longer when the window cost more than the budget allows.
func (b *cpuBudget) next(window time.Duration) time.Duration {
	cost := cpuTime() - b.start
	cycle := b.every
	if b.share > 0 {
		if need := time.Duration(float64(cost) / b.share); need > cycle {
			cycle = need
			b.skipped.Inc()
		}
	}
	b.cpuUsed.Set(cost.Seconds() / cycle.Seconds())
	b.ratio.Set(min(1, window.Seconds()/cycle.Seconds()))
	b.cycle = cycle
	return cycle
}

// sampleWeight is what a count of the next window stands for: the
// windows trace a share window/cycle of the time, so each count is worth
// cycle/window of them (the last cycle's, as the next one's is known only
// after it). Totals so weighted estimate the counts over all the time.
func (b *cpuBudget) sampleWeight(window time.Duration) float64 {
	w := 1.0
	if window > 0 && b.cycle > window {
		w = b.cycle.Seconds() / window.Seconds()
	}
	b.weight.Set(w)
	return w
}
