package tracer

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// TestAggregateLaunches: under shared probes with AggregateLaunches, a
// workload's launches are counted in BPF, exactly, and none reaches the
// model as a call; its other calls still do.
func TestAggregateLaunches(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	const iters = 20
	var mu sync.Mutex
	var last map[uint32]map[event.LaunchKey]uint64
	ctx, cancel := context.WithCancel(context.Background())
	attached := make(chan struct{})
	done := make(chan *Outcome, 1)
	col := &pidSink{Collector: model.NewCollector(), seen: map[uint32]bool{}, first: make(chan uint32, 64)}
	go func() {
		out, err := Run(ctx, Config{All: true, Stacks: probe.StacksNone, NVMLInterval: -1, NameWindow: -1, Sink: col,
			AggregateLaunches: true, OnAttached: func(int) { close(attached) },
			OnLaunchCounts: func(c map[uint32]map[event.LaunchKey]uint64) { mu.Lock(); last = c; mu.Unlock() }})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	<-attached
	run := func() *sim.Report {
		t.Helper()
		out, err := exec.Command(b.Workload, "--scenario", "basic", "--iters", strconv.Itoa(iters)).Output()
		if err != nil {
			t.Fatal(err)
		}
		rep, err := sim.ParseReport(out)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	// The first process to map the simulated runtime may run before its
	// file is hooked: run until one is traced, then count the next.
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatal("50 workloads ran and none was traced")
		}
		warm := run()
		if col.waitFor(uint32(warm.PID)) {
			break
		}
	}
	rep := run()
	cancel()
	out := <-done
	if out == nil {
		t.FailNow()
	}
	launches := uint64(0)
	for sym, n := range rep.Calls {
		if strings.HasPrefix(sym, "cudaLaunchKernel") {
			launches += uint64(n)
		}
	}
	mu.Lock()
	var counted uint64
	byStream := map[uint64]uint64{}
	for k, n := range last[uint32(rep.PID)] {
		if k.API == event.CuLaunchKernel {
			counted += n
			byStream[k.Stream] += n
		}
	}
	mu.Unlock()
	if counted != launches {
		t.Errorf("launches counted in BPF: %d, the workload made %d", counted, launches)
	}
	var calls, launchCalls int
	created := map[uint64]bool{}
	for _, c := range col.Traces[uint32(rep.PID)].Calls {
		calls++
		s := c.Spec()
		if s != nil && s.Class == event.ClassLaunch {
			launchCalls++
		}
		if s != nil && s.Class == event.ClassStreamCreate {
			created[c.Args.Stream] = true
		}
	}
	// Per stream: the basic scenario launches a gemm on each of its two
	// streams and a relu on the legacy default stream (NULL) each
	// iteration.
	for stream, n := range byStream {
		if stream != 0 && !created[stream] {
			t.Errorf("%d launches counted on stream %#x, not one of the workload's %v", n, stream, created)
		}
	}
	if len(created) != 2 || byStream[0] != iters {
		t.Errorf("launches by stream %v (created %v), want %d on each of the 2 created and on the legacy stream", byStream, created, iters)
	}
	for stream := range created {
		if byStream[stream] != iters {
			t.Errorf("launches by stream %v (created %v), want %d on each of the 2 created and on the legacy stream", byStream, created, iters)
		}
	}
	if launchCalls != 0 || calls == 0 {
		t.Errorf("%d launch calls reached the model (want 0), %d calls in all (want the others)", launchCalls, calls)
	}
}

// pidSink is a collector that says when it first sees a process's call.
type pidSink struct {
	*model.Collector
	mu    sync.Mutex
	seen  map[uint32]bool
	first chan uint32
}

func (s *pidSink) Call(p *model.Process, c *model.Call) {
	s.mu.Lock()
	s.Collector.Call(p, c)
	if !s.seen[p.PID] {
		s.seen[p.PID] = true
		s.first <- p.PID
	}
	s.mu.Unlock()
}

// waitFor says whether pid's calls reach the model: true once one does;
// false when none did within 2 s of its exit (its calls were not traced:
// the caller runs another, so a slow machine only costs a retry).
func (s *pidSink) waitFor(pid uint32) bool {
	deadline := time.After(2 * time.Second)
	for {
		select {
		case p := <-s.first:
			if p == pid {
				return true
			}
		case <-deadline:
			return false
		}
	}
}
