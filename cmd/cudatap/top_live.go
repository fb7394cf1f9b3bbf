package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// traceForTop traces the selected processes (no stacks, no outputs) while
// top runs and renders per stream: launches/s, copy bandwidth, share of
// wall time the host was blocked in synchronizations, and queue depth.
func traceForTop(ctx context.Context, g *globalOptions, pids []int, all bool) (func() []string, error) {
	if len(pids) == 0 && !all {
		return nil, nil
	}
	live := make(chan func() []model.StreamSnap, 1)
	errc := make(chan error, 1)
	go func() {
		_, err := tracer.Run(ctx, tracer.Config{
			PIDs: pids, All: all, Stacks: probe.StacksNone, NVMLInterval: -1, WaitForCUDA: true,
			Stdout: io.Discard, Stderr: io.Discard, Logger: g.logger(),
			OnLive: func(snap func() []model.StreamSnap) { live <- snap },
		})
		errc <- err
	}()
	var snap func() []model.StreamSnap
	select {
	case snap = <-live:
	case err := <-errc:
		return nil, err
	}
	var (
		mu   sync.Mutex
		prev map[[2]uint64]model.StreamSnap
		at   time.Time
	)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		now, cur := time.Now(), snap()
		dt := now.Sub(at).Seconds()
		lines := []string{fmt.Sprintf("%-8s %-40s %12s %12s %8s %6s", "PID", "STREAM", "LAUNCHES/S", "COPY/S", "BLOCKED", "QUEUE")}
		sort.Slice(cur, func(i, j int) bool {
			if cur[i].PID != cur[j].PID {
				return cur[i].PID < cur[j].PID
			}
			return cur[i].Stream < cur[j].Stream
		})
		next := map[[2]uint64]model.StreamSnap{}
		for _, s := range cur {
			key := [2]uint64{uint64(s.PID), uint64(s.Stream)}
			next[key] = s
			p, seen := prev[key]
			if !seen || dt <= 0 || (s.Launches == p.Launches && s.CopyBytes == p.CopyBytes && s.Syncs == p.Syncs && s.Queued == 0) {
				continue // idle streams are not listed
			}
			lines = append(lines, fmt.Sprintf("%-8d %-40.40s %12.0f %10s/s %7.1f%% %6d", s.PID, s.Label,
				float64(s.Launches-p.Launches)/dt, units.Bytes(uint64(float64(s.CopyBytes-p.CopyBytes)/dt)),
				100*float64(s.SyncBlockedNs-p.SyncBlockedNs)/1e9/dt, s.Queued))
		}
		prev, at = next, now
		return lines
	}, nil
}
