package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cudatap/cudatap/export/profilestore"
	"github.com/cudatap/cudatap/tracer/model"
)

// profileStores hand each window's per-process profiles to the directory
// and the push endpoint the agent was given. Pushing runs beside the next
// window; a window whose push finds the previous one still running is not
// pushed, and counted.
type profileStores struct {
	dir     *profilestore.Dir
	pusher  *profilestore.Pusher
	busy    sync.Mutex
	pushing sync.WaitGroup
	written prometheus.Counter
	skipped prometheus.Counter
}

func newProfileStores(o *agentOptions, reg prometheus.Registerer) (*profileStores, error) {
	s := &profileStores{
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "cudatap_agent_profiles_written_total", Help: "Process profiles written to --profiles-dir."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "cudatap_agent_profiles_push_skipped_total", Help: "Process profiles not pushed (or, under --continuous, not stored): the previous window's were still being pushed (stored)."}),
	}
	reg.MustRegister(s.written, s.skipped)
	var err error
	if o.profilesDir != "" {
		if s.dir, err = profilestore.OpenDir(o.profilesDir, o.profilesMax); err != nil {
			return nil, err
		}
	}
	if o.push != "" {
		if s.pusher, err = profilestore.NewPusher(o.push); err != nil {
			return nil, err
		}
		p := s.pusher
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cudatap_agent_profiles_pushed_total", Help: "Process profiles delivered to --push."},
				func() float64 { return float64(p.Pushed.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cudatap_agent_profiles_push_dropped_total", Help: "Process profiles --push could not deliver after its retries."},
				func() float64 { return float64(p.Dropped.Load()) }))
	}
	return s, nil
}

// window stores one window's profiles.
func (s *profileStores) window(ctx context.Context, p *profile.Profile, procs []*model.Process, name func(*model.Process) profilestore.Labels,
	from, until time.Time, log *slog.Logger) {
	if s.dir == nil && s.pusher == nil {
		return
	}
	per := profilestore.PerProcess(p, procs, name)
	if s.dir != nil {
		for l, prof := range per {
			if _, err := s.dir.Write(l, from, prof); err != nil {
				log.Warn("writing a profile failed", "pid", l.PID, "err", err)
				continue
			}
			s.written.Inc()
		}
	}
	if s.pusher == nil {
		return
	}
	if !s.busy.TryLock() {
		s.skipped.Add(float64(len(per)))
		return
	}
	s.pushing.Add(1)
	go func() {
		defer s.pushing.Done()
		defer s.busy.Unlock()
		for l, prof := range per {
			if err := s.pusher.Push(ctx, l, from, until, prof); err != nil {
				log.Warn("pushing a profile failed", "pid", l.PID, "err", err)
			}
		}
	}()
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

// wait lets a push in flight finish (its retries are bounded).
func (s *profileStores) wait() { s.pushing.Wait() }
