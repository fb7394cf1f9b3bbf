package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/cudatap/cudatap/export/straggler"
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
	ranks := straggler.NewProgress()
	errc := make(chan error, 1)
	go func() {
		_, err := tracer.Run(ctx, tracer.Config{
			PIDs: pids, All: all, Stacks: probe.StacksNone, NVMLInterval: -1, WaitForCUDA: true,
			Stdout: io.Discard, Stderr: io.Discard, Logger: g.logger(),
			Observer: tracer.Funcs{OnLive: func(snap func() []model.StreamSnap) { live <- snap }}, Sink: ranks,
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
		return append(lines, ncclLines(ranks, monotonicNow())...)
	}, nil
}

// ncclLines show each NCCL rank traced: collectives arrived at and seen
// complete, how long since the last completed, what it waits in; then the
// ranks that stopped arriving while others wait (hangAfter).
func ncclLines(p *straggler.Progress, now uint64) []string {
	comms := p.Snapshot()
	if len(comms) == 0 {
		return nil
	}
	lines := []string{"", fmt.Sprintf("%-18s %-8s %-8s %10s %10s %14s  %s", "NCCL COMMUNICATOR", "RANK", "PID", "ARRIVED", "COMPLETE", "LAST COMPLETE", "STATE")}
	for _, c := range comms {
		for _, r := range c.Ranks {
			if r.PID == 0 {
				lines = append(lines, fmt.Sprintf("%016x   %-8d %-8s", c.Comm, r.Rank, "-"))
				continue
			}
			ago, state := "-", "running"
			if r.LastComplete > 0 && now > r.LastComplete {
				ago = units.Duration(now-r.LastComplete) + " ago"
			}
			if r.Waiting() && now > r.LastArrival {
				state = fmt.Sprintf("in collective #%d for %s", r.Arrived, units.Duration(now-r.LastArrival))
			}
			lines = append(lines, fmt.Sprintf("%016x   %-8d %-8d %10d %10d %14s  %s", c.Comm, r.Rank, r.PID, r.Arrived, r.Complete, ago, state))
		}
	}
	for _, s := range p.Stalls(now, hangAfter) {
		lines = append(lines, "NCCL hang? "+s.String(now))
	}
	return lines
}
