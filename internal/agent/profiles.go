package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cudatap/cudatap/export/pprofout"
	"github.com/cudatap/cudatap/export/profilestore"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/model"
)

// pushFlushTimeout is how long the agent, once told to stop, gives the
// pushes of its last window (and one still running from the window
// before) to finish: well within Kubernetes' 30 s between SIGTERM and
// SIGKILL, with the probes to detach too.
const pushFlushTimeout = 10 * time.Second

// profileStores hand each window's per-process profiles to the directory
// and the push endpoint the agent was given. Pushing runs beside the next
// window; a window whose push finds the previous one still running is not
// pushed, and counted, but the last window's waits for it. Pushes run
// under a context of their own, not the agent's: a SIGTERM ends the
// tracing, and the last pushes still go (close).
type profileStores struct {
	dir    *profilestore.Dir
	pusher *profilestore.Pusher
	// name labels a process's profile (Run sets it: the pods' names).
	name    func(*model.Process) profilestore.Labels
	log     *slog.Logger
	ctx     context.Context // of the pushes: close cancels it
	cancel  context.CancelFunc
	busy    sync.Mutex
	pushing sync.WaitGroup
	written prometheus.Counter
	skipped prometheus.Counter
}

func newProfileStores(dir string, maxBytes int64, push string, pidLabel bool, reg prometheus.Registerer, log *slog.Logger) (*profileStores, error) {
	s := &profileStores{log: log, name: profilestore.LabelsOf,
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "cudatap_agent_profiles_written_total", Help: "Process profiles written to --profiles-dir."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "cudatap_agent_profiles_push_skipped_total", Help: "Process profiles not pushed (or, under --continuous, not stored): the previous window's were still being pushed (stored)."}),
	}
	reg.MustRegister(s.written, s.skipped)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	var err error
	if dir != "" {
		if s.dir, err = profilestore.OpenDir(dir, maxBytes); err != nil {
			return nil, err
		}
	}
	if push != "" {
		if s.pusher, err = profilestore.NewPusher(push); err != nil {
			return nil, err
		}
		s.pusher.PIDLabel = pidLabel
		p := s.pusher
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cudatap_agent_profiles_pushed_total", Help: "Process profiles delivered to --push."},
				func() float64 { return float64(p.Pushed.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cudatap_agent_profiles_push_dropped_total", Help: "Process profiles --push could not deliver after its retries."},
				func() float64 { return float64(p.Dropped.Load()) }))
	}
	return s, nil
}

// store stores one window's profiles, of the processes procs, which cover
// from to until; the last window's waits for a push still running.
func (s *profileStores) store(p *profile.Profile, procs []*model.Process, from, until time.Time, last bool) {
	if s.dir == nil && s.pusher == nil {
		return
	}
	per := profilestore.PerProcess(p, procs, s.name)
	if s.dir != nil {
		for l, prof := range per {
			if _, err := s.dir.Write(l, from, prof); err != nil {
				s.log.Warn("writing a profile failed", "pid", l.PID, "err", err)
				continue
			}
			s.written.Inc()
		}
	}
	if s.pusher == nil {
		return
	}
	if last {
		s.lockLast()
	} else if !s.busy.TryLock() {
		s.skipped.Add(float64(len(per)))
		return
	}
	s.pushing.Add(1)
	go func() {
		defer s.pushing.Done()
		defer s.busy.Unlock()
		for l, prof := range per {
			if err := s.pusher.Push(s.ctx, l, from, until, prof); err != nil {
				s.log.Warn("pushing a profile failed", "pid", l.PID, "err", err)
			}
		}
	}()
}

// lockLast takes the push lock for the last window, waiting for the
// window being pushed pushFlushTimeout at most: then its pushes are
// cancelled (counted as dropped), so that the agent's shutdown is bounded
// however many processes a window held and however the store answers
// (a store gone: each profile retried for 1.25 s, a window of hundreds of
// processes held a make test's agent for 8 minutes).
func (s *profileStores) lockLast() {
	got := make(chan struct{})
	go func() {
		s.busy.Lock()
		close(got)
	}()
	select {
	case <-got:
	case <-time.After(pushFlushTimeout):
		s.log.Warn("a window's profiles were still being pushed at shutdown: cancelled, counted in cudatap_agent_profiles_push_dropped_total; check that the store given to --push answers", "after", pushFlushTimeout)
		s.cancel()
		<-got
	}
}

// skip counts the process profiles of p not stored (the last window's
// were still being stored).
func (s *profileStores) skip(p *profile.Profile) {
	if s.dir == nil && s.pusher == nil {
		return
	}
	pids := map[string]bool{}
	for _, smp := range p.Sample {
		if v := smp.Label["pid"]; len(v) > 0 {
			pids[v[0]] = true
		}
	}
	s.skipped.Add(float64(len(pids)))
}

// close lets the pushes in flight finish, for pushFlushTimeout at most
// (a push retries twice, with backoff); then it cancels them.
func (s *profileStores) close() {
	done := make(chan struct{})
	go func() {
		s.pushing.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(pushFlushTimeout):
		s.log.Warn("the last profiles were not all pushed in time: cancelled", "after", pushFlushTimeout)
		s.cancel()
		<-done
	}
	s.cancel()
}

// profileCutter cuts --continuous's one session into intervals of --every.
// At each cut, on the reader goroutine with the model locked, it builds
// the interval's profile and serves it; labels, files, pushes and
// forgetting the processes that exited go to a goroutine, one at a time: a
// cut that finds the last one still storing serves its profile but does
// not store it (counted).
type profileCutter struct {
	a       *Agent
	prof    *pprofout.Collector
	from    time.Time // what the next profile covers
	storing sync.Mutex
	stored  sync.WaitGroup
}

func (c *profileCutter) cut(r *model.Result) {
	p, err := pprofout.Build(r, c.prof, pprofout.Options{})
	c.prof.Reset()
	until := time.Now()
	c.a.coll.CutAggregates() // the interval's launches, with its weights
	if err == nil {
		c.a.profiles.set(p)
		procs := make([]*model.Process, len(r.Processes))
		for i, mp := range r.Processes {
			procs[i] = &model.Process{PID: mp.PID, Info: mp.Info} // what labels need
		}
		if c.storing.TryLock() {
			c.stored.Add(1)
			go func(from time.Time) {
				defer c.stored.Done()
				defer c.storing.Unlock()
				c.a.stores.store(p, procs, from, until, false)
				c.a.coll.ForgetExited(procfs.Alive, until)
			}(c.from)
		} else {
			c.a.stores.skip(p)
		}
	}
	c.from = until
}

// wait lets the last cut's storing finish.
func (c *profileCutter) wait() { c.stored.Wait() }
