package flight

import (
	"github.com/prometheus/client_golang/prometheus"
)

// counters: what the recorder did, for its metrics and Stats (under r.mu).
type counters struct {
	dumps, suppressed map[string]uint64 // by trigger
	failures          uint64            // dumps not written
	removed           uint64            // dumps removed to keep Dir under its bound
	dropped           uint64            // events of a window that did not fit its budget
	stateDropped      uint64            // state records and names that did not fit
}

// Stats is a snapshot of the recorder's counters and holdings.
type Stats struct {
	Dumps, Suppressed map[string]uint64 // by trigger
	Failures, Removed uint64
	Dropped           uint64 // events of the windows that did not fit a budget
	StateDropped      uint64
	Processes         int
	Bytes             int64               // held, over all processes (and the chunks kept for reuse)
	PerProcess        map[uint32]ProcStat // by pid
}

// ProcStat is what the recorder holds of one process and where its events
// went: Read = Held + Dropped + Expired.
type ProcStat struct {
	Read, Held, Dropped, Expired, StateDropped uint64
	Restated                                   int   // state records kept from before the window
	WindowBytes, StateBytes, NameBytes         int64 // held
}

// Stats returns the recorder's counters and what it holds.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Dumps: map[string]uint64{}, Suppressed: map[string]uint64{}, Failures: r.stats.failures, Removed: r.stats.removed,
		Dropped: r.stats.dropped, StateDropped: r.stats.stateDropped, Processes: len(r.procs), PerProcess: map[uint32]ProcStat{}}
	for k, v := range r.stats.dumps {
		s.Dumps[k] = v
	}
	for k, v := range r.stats.suppressed {
		s.Suppressed[k] = v
	}
	for pid, p := range r.procs {
		ps := ProcStat{Read: p.counts.Read, Held: p.counts.Held, Dropped: p.counts.Dropped, Expired: p.counts.Expired,
			StateDropped: p.counts.StateDropped, Restated: len(p.state),
			WindowBytes: int64(p.window.bytes), StateBytes: int64(p.stBytes[0] + p.stBytes[1]), NameBytes: int64(p.names.bytes)}
		s.PerProcess[pid] = ps
		s.Bytes += ps.WindowBytes + ps.StateBytes + ps.NameBytes
	}
	s.Bytes += int64(r.chunks.spareBytes())
	return s
}

// Collector is the recorder's Prometheus series.
func (r *Recorder) Collector() prometheus.Collector { return (*collector)(r) }

type collector Recorder

var (
	descDumps      = prometheus.NewDesc("cudatap_flight_dumps_total", "Flight recorder dumps written, by trigger.", []string{"trigger"}, nil)
	descSuppressed = prometheus.NewDesc("cudatap_flight_suppressed_total", "Flight recorder triggers that wrote no dump: the same trigger had fired for the process within --flight-cooldown.", []string{"trigger"}, nil)
	descFailures   = prometheus.NewDesc("cudatap_flight_dump_failures_total", "Flight recorder dumps that could not be written (the agent's log says why).", nil, nil)
	descRemoved    = prometheus.NewDesc("cudatap_flight_dumps_removed_total", "Flight recorder dumps removed to keep --dumps-dir under --dumps-max-bytes (the oldest first).", nil, nil)
	descDropped    = prometheus.NewDesc("cudatap_flight_dropped_events_total", "Events that left a process's flight recorder window before their time: its --flight-max-bytes, or the windows' --flight-host-max-bytes, was full (the oldest go first).", nil, nil)
	descStateDrop  = prometheus.NewDesc("cudatap_flight_dropped_state_total", "Calls of lasting state (allocations, streams, pending GPU work) and names the flight recorder could not keep within a process's budget.", nil, nil)
	descBytes      = prometheus.NewDesc("cudatap_flight_bytes", "Bytes the flight recorder holds, over all processes.", nil, nil)
	descProcs      = prometheus.NewDesc("cudatap_flight_processes", "Processes the flight recorder holds a window of.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDumps, descSuppressed, descFailures, descRemoved, descDropped, descStateDrop, descBytes, descProcs} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := (*Recorder)(c).Stats()
	for _, k := range Kinds {
		ch <- prometheus.MustNewConstMetric(descDumps, prometheus.CounterValue, float64(s.Dumps[k]), k)
		ch <- prometheus.MustNewConstMetric(descSuppressed, prometheus.CounterValue, float64(s.Suppressed[k]), k)
	}
	ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(s.Failures))
	ch <- prometheus.MustNewConstMetric(descRemoved, prometheus.CounterValue, float64(s.Removed))
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(s.Dropped))
	ch <- prometheus.MustNewConstMetric(descStateDrop, prometheus.CounterValue, float64(s.StateDropped))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(descProcs, prometheus.GaugeValue, float64(s.Processes))
}
