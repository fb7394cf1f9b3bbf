package agent

import (
	"context"
	"time"

	"github.com/cudatap/cudatap/export/pprofout"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// pollInterval: the agent reads the ring buffer every 100 ms, not every
// 20 ms (nothing it serves is fresher than a second; a filling ring still
// wakes it at once): a fifth of the idle wakeups.
const pollInterval = 100 * time.Millisecond

// runWindows traces in windows of --window, one every --every (later when
// the last cost more than --max-cpu allows), each a session of its own:
// before each, the sampler draws who sits it out; after each, its profile
// is served and stored.
func (a *Agent) runWindows(ctx context.Context) error {
	for {
		start := time.Now()
		a.budget.windowStarts()
		a.coll.SetWeight(a.budget.sampleWeight(a.o.Window))
		prof := pprofout.NewCollector()
		out, err := a.trace(ctx, tracer.Config{Duration: a.o.Window, Sink: model.Sinks{a.coll, prof, a.sampler},
			SampledOut: drawWindow(a.sampler, a.coll, a.log)}, tracer.Funcs{})
		if err != nil {
			return err
		}
		a.samplingEnded()
		a.sessionEnded(out.Result, prof, start, ctx.Err() != nil)
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(start.Add(a.budget.next(time.Since(start))))):
		}
	}
}

// runContinuous traces without gaps, in one session until ctx ends: every
// --every a profile is cut (profileCutter), the exited processes are
// forgotten (memory follows the live ones) and, under --max-cpu, the
// sampler draws who sits the next interval out.
func (a *Agent) runContinuous(ctx context.Context) error {
	start := time.Now()
	a.budget.windowStarts()
	prof := pprofout.NewCollector()
	cutter := &profileCutter{a: a, prof: prof, from: start}
	sinks := model.Sinks{a.coll, prof}
	cfg := tracer.Config{Cut: a.o.Every}
	if a.flight != nil {
		sinks = append(sinks, a.flight)
		cfg.Recording = a.flight // a recording.Tap: the records, not a file
	}
	obs := tracer.Funcs{OnCut: cutter.cut}
	if a.o.MaxCPU > 0 {
		sinks = append(sinks, a.sampler) // it learns each interval's calls
		began := start
		obs.OnResample = func() map[int]uint64 {
			a.samplingEnded()
			a.budget.intervalEnded(time.Since(began))
			began = time.Now()
			a.budget.windowStarts()
			if out := drawWindow(a.sampler, a.coll, a.log); out != nil {
				return out
			}
			return map[int]uint64{} // nobody sits out (nil would keep the last set)
		}
	}
	cfg.Sink = sinks
	out, err := a.trace(ctx, cfg, obs)
	if err != nil {
		return err
	}
	cutter.wait()
	a.sessionEnded(out.Result, prof, cutter.from, true)
	return nil
}

// trace runs one of the agent's sessions, c completed: host-wide (or one
// container's), no stacks, no NVML of its own, launches counted in BPF
// unless --record-launches. When it ends, the launches it counted are
// folded into the metrics' totals.
func (a *Agent) trace(ctx context.Context, c tracer.Config, obs tracer.Funcs) (*tracer.Outcome, error) {
	c.All, c.Container = a.o.Container == "", a.o.Container
	c.Stacks, c.RingBufferBytes, c.NVMLInterval, c.NameWindow = probe.StacksNone, a.o.RingBufferBytes, -1, -1
	c.AggregateLaunches, c.LaunchTimes = !a.o.RecordLaunches, a.o.LaunchTimes
	if a.flight != nil {
		// Every call recorded, with stacks where they may block, as record
		// does: the cost of a recording.
		c.AggregateLaunches, c.Stacks = false, probe.StacksSync
	}
	c.Logger, c.PollInterval = a.log, pollInterval
	c.SkipNVTX = true // ranges are drawn in no metric or profile
	obs.OnAggregates = a.coll.SetAggregates
	obs.OnAttached = func(int) { a.ready.Store(true) }
	obs.OnStatus = a.stats.status
	c.Observer = obs
	out, err := tracer.Run(ctx, c)
	a.coll.FoldAggregates()
	return out, err
}

// samplingEnded lets the sampler learn from the window (interval) that
// ended; the processes it saw first were traced in it.
func (a *Agent) samplingEnded() {
	for _, pid := range a.sampler.windowEnded(a.budget.spent(), a.budget.perCycle(), processStart) {
		a.coll.SetSampling(pid, 1, true)
	}
}

// sessionEnded serves and stores the profile of a session's last window
// (interval), which began at from, and counts what the session saw; last:
// the agent stops (its profiles are pushed whatever is still pushing).
func (a *Agent) sessionEnded(r *model.Result, prof *pprofout.Collector, from time.Time, last bool) {
	if p, err := pprofout.Build(r, prof, pprofout.Options{}); err == nil {
		a.profiles.set(p)
		a.stores.store(p, r.Processes, from, time.Now(), last)
	}
	a.stats.windowEnded(r.Drops)
	a.coll.ForgetExited(procfs.Alive, time.Now())
}
