package agent

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
)

// stats are the agent's own series. Events and losses are live (the
// session's once-a-second status, added to the windows before); the rest
// are known when a window ends.
type stats struct {
	windows, orphans, attachFailures prometheus.Counter
	// Of the windows that ended, and of the current one.
	eventsDone, eventsNow, lostDone, lostNow atomic.Uint64
}

func newStats(reg prometheus.Registerer) *stats {
	s := &stats{}
	c := func(name, help string) prometheus.Counter {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(m)
		return m
	}
	live := func(name, help string, done, now *atomic.Uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(done.Load() + now.Load()) }))
	}
	s.windows = c("cudatap_agent_windows_total", "Tracing windows completed.")
	s.orphans = c("cudatap_agent_orphan_returns_total", "Returns seen without their entry (windows that ended).")
	s.attachFailures = c("cudatap_agent_attach_failures_total", "Probe sets that could not be attached (windows that ended).")
	live("cudatap_agent_events_total", "Records received from the probes.", &s.eventsDone, &s.eventsNow)
	live("cudatap_agent_dropped_events_total", "Calls traced but lost (ring buffer full, entry table full, decode errors, skipped programs).", &s.lostDone, &s.lostNow)
	return s
}

// status follows the current window's counts.
func (s *stats) status(st tracer.Status) {
	s.eventsNow.Store(st.Events)
	s.lostNow.Store(st.Lost)
}

// windowEnded folds a window's final counts into the totals.
func (s *stats) windowEnded(d model.Drops) {
	s.eventsNow.Store(0)
	s.lostNow.Store(0)
	s.eventsDone.Add(d.Received)
	s.lostDone.Add(d.Lost())
	s.windows.Inc()
	s.orphans.Add(float64(d.OrphanReturns))
	s.attachFailures.Add(float64(d.AttachFailures))
}
