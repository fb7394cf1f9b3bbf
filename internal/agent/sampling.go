package agent

import (
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cudatap/cudatap/export/metrics"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/model"
)

// processSampler keeps the agent within --max-cpu when the node's processes
// call CUDA more than it can afford to trace: before each window it draws
// which processes sit the window out, each traced with a probability p of
// its own. The quiet ones keep p = 1; the busiest get the smallest p
// (water-filling: every process is traced for up to τ calls a window, τ
// chosen so the expected calls fit the budget). The windows a process is
// traced in count 1/p for it (metrics weights), so its totals stay
// unbiased; nothing is dropped inside a window. A process first seen is
// traced (p = 1) until its rate is known.
//
// It is also a model sink: it counts each process's calls in the window,
// the agent's cost driver (launches counted in BPF cost the agent nothing).
type processSampler struct {
	rng      *rand.Rand
	procs    map[int]*sampledProc // by PID
	sampling bool                 // some process has p < 1 (logged when it changes)

	mu     sync.Mutex
	events map[uint32]uint64 // calls per process in the current window
}

type sampledProc struct {
	start uint64  // procfs StartTicks: the process, not just its PID
	rate  float64 // calls in its last traced window
	p     float64 // probability of being traced in the current window
	out   bool    // sits the current window out
}

// minProbability bounds how rarely a process is traced: at least one
// window in 16 on average, whatever the budget (what is beyond is the
// pause lengthening's: cpuBudget).
const minProbability = 1.0 / 16

// maxSampled bounds the processes the sampler remembers.
const maxSampled = 4096

func newProcessSampler(seed uint64) *processSampler {
	return &processSampler{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), procs: map[int]*sampledProc{}, events: map[uint32]uint64{}}
}

func (s *processSampler) Call(p *model.Process, _ *model.Call) {
	s.mu.Lock()
	s.events[p.PID]++
	s.mu.Unlock()
}
func (s *processSampler) Sync(*model.Process, *model.Sync)             {}
func (s *processSampler) GPUOp(*model.Process, *model.GPUOp)           {}
func (s *processSampler) Dependency(*model.Process, *model.Dependency) {}
func (s *processSampler) Hold(*model.Process, *model.Hold)             {}

// windowEnded learns from the window that ended (its calls per process and
// what it cost the agent) and sets each process's probability for the
// next: the expected calls of the next window fit budget, at the window's
// cost per call. alive tells whether a process still runs (and its start).
// It returns the processes first seen in the window (traced in it, as
// every process is until its rate is known).
func (s *processSampler) windowEnded(cost, budget time.Duration, alive func(pid int) (start uint64, ok bool)) (first []uint32) {
	s.mu.Lock()
	events := s.events
	s.events = map[uint32]uint64{}
	s.mu.Unlock()

	var total uint64
	for pid, n := range events {
		total += n
		p := s.procs[int(pid)]
		if p == nil {
			start, ok := alive(int(pid))
			if !ok || len(s.procs) >= maxSampled {
				continue
			}
			p = &sampledProc{start: start, p: 1}
			s.procs[int(pid)] = p
			first = append(first, pid)
		}
		p.rate = float64(n)
	}
	for pid, p := range s.procs {
		if _, traced := events[uint32(pid)]; !traced && !p.out {
			p.rate = 0 // traced and silent
		}
		if start, ok := alive(pid); !ok || start != p.start {
			delete(s.procs, pid)
		}
	}
	// Calls the budget affords in a window, at this window's cost per call
	// but at most maxCallCost: the rest is the agent's fixed cost (the
	// host scan, a new process's symbols), which sampling calls cannot
	// lower, and which would make a window of few calls look dear per call
	// and sample its processes for nothing.
	afford := -1.0 // no limit
	if budget > 0 && total > 0 {
		perCall := min(float64(cost)/float64(total), float64(maxCallCost))
		afford = float64(budget) / perCall
	}
	tau := waterLevel(s.rates(), afford)
	for _, p := range s.procs {
		p.p = 1
		if tau >= 0 && p.rate > tau {
			p.p = max(minProbability, tau/p.rate)
		}
	}
	return first
}

// maxCallCost bounds what one traced call is taken to cost the agent
// (reading, decoding, modelling its record): about 1.3 µs on the 2-core CI
// VM (1.3% of a core at 10,000 recorded calls/s, BenchmarkAgentLoad before
// aggregate mode), so 20 µs leaves a wide margin.
const maxCallCost = 20 * time.Microsecond

func (s *processSampler) rates() []float64 {
	r := make([]float64, 0, len(s.procs))
	for _, p := range s.procs {
		r = append(r, p.rate)
	}
	return r
}

// waterLevel is the τ at which Σ min(rate, τ) = afford: each process traced
// for up to τ calls a window. -1 when everything fits (or no limit).
func waterLevel(rates []float64, afford float64) float64 {
	if afford < 0 {
		return -1
	}
	var sum float64
	for _, r := range rates {
		sum += r
	}
	if sum <= afford {
		return -1
	}
	slices.Sort(rates)
	left := afford
	for i, r := range rates {
		share := left / float64(len(rates)-i) // what each remaining process may have
		if r > share {
			return share
		}
		left -= r
	}
	return -1 // unreachable: sum > afford
}

// draw decides who sits the next window out: PID → start time for
// tracer.Config.SampledOut, and each known process's probability.
func (s *processSampler) draw() (out map[int]uint64, probability map[int]float64) {
	out, probability = map[int]uint64{}, make(map[int]float64, len(s.procs))
	for pid, p := range s.procs {
		p.out = p.p < 1 && s.rng.Float64() >= p.p
		if p.out {
			out[pid] = p.start
		}
		probability[pid] = p.p
	}
	return out, probability
}

// processStart is alive for the sampler: a running process's start time.
func processStart(pid int) (uint64, bool) {
	st, err := procfs.Stat(pid)
	if err != nil || st.State == 'Z' {
		return 0, false
	}
	return st.StartTicks, true
}

// drawWindow draws who sits the next window out and tells the metrics
// (each process's probability, and whether it is traced).
func drawWindow(s *processSampler, coll *metrics.Collector, log *slog.Logger) map[int]uint64 {
	out, probability := s.draw()
	sampled := 0
	for pid, p := range probability {
		_, skip := out[pid]
		coll.SetSampling(uint32(pid), p, !skip)
		if p < 1 {
			sampled++
		}
	}
	switch {
	case sampled > 0 && !s.sampling:
		log.Info("over --max-cpu: the busiest processes are traced in fewer windows, their counts weighted 1/p (cudatap_process_sample_probability)", "processes sampled", sampled)
	case sampled == 0 && s.sampling:
		log.Info("within --max-cpu again: every process traced in every window")
	}
	s.sampling = sampled > 0
	return out
}
