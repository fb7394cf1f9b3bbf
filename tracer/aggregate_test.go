package tracer

import (
	"context"
	"math/bits"
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
// model as a call; its other calls still do. With LaunchTimes, each
// counted launch is also timed: as many times as launches, none shorter
// than the host time the simulated driver spends in it.
func TestAggregateLaunches(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	t.Run("counts", func(t *testing.T) { testAggregateLaunches(t, false) })
	t.Run("times", func(t *testing.T) { testAggregateLaunches(t, true) })
}

// launchHostUs is what each simulated launch spends on the host (busy) in
// the times test.
const launchHostUs = 300

func testAggregateLaunches(t *testing.T, times bool) {
	b := testutil.Sim(t)
	const iters = 20
	var mu sync.Mutex
	var last event.Aggregates                           // the latest report
	reported := map[uint32]map[event.LaunchKey]uint64{} // each process's last counts reported
	ctx, cancel := context.WithCancel(context.Background())
	attached := make(chan struct{})
	done := make(chan *Outcome, 1)
	col := newPIDSink()
	go func() {
		out, err := Run(ctx, Config{All: true, Stacks: probe.StacksNone, NVMLInterval: -1, NameWindow: -1, Sink: col,
			AggregateLaunches: true, LaunchTimes: times, pruneEvery: time.Nanosecond,
			Observer: Funcs{OnAttached: func(int) { close(attached) }, OnAggregates: func(a event.Aggregates) {
				mu.Lock()
				defer mu.Unlock()
				last = a
				for pid, c := range a.Launches {
					reported[pid] = c
				}
			}}})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	<-attached
	var env []string
	if times {
		env = []string{"SIM_LAUNCH_HOST_US=" + strconv.Itoa(launchHostUs)}
	}
	run := func() *sim.Report {
		return testutil.RunWorkload(t, b, env, "--scenario", "basic", "--iters", strconv.Itoa(iters))
	}
	col.untilTraced(t, run)
	rep := run()
	if !times {
		// An exited process's counters are reported one last time, then
		// deleted from the BPF maps (continuous tracing would fill them).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			_, was := reported[uint32(rep.PID)]
			_, in := last.Launches[uint32(rep.PID)]
			mu.Unlock()
			if was && !in {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the exited workload's (%d) launch counters still in the BPF maps after 30 s", rep.PID)
			}
		}
	}
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
	for k, n := range reported[uint32(rep.PID)] {
		if k.API == event.CuLaunchKernel {
			counted += n
			byStream[k.Stream] += n
		}
	}
	timed := last.Times[uint32(rep.PID)][event.CuLaunchKernel]
	lost := last.TimesLost
	mu.Unlock()
	if counted != launches {
		t.Errorf("launches counted in BPF: %d, the workload made %d", counted, launches)
	}
	switch {
	case !times && timed != nil:
		t.Errorf("launch times kept without LaunchTimes: %v", timed.Count)
	case times && timed == nil:
		t.Errorf("no launch times for process %d (%d lost)", rep.PID, lost)
	case times:
		var n, ns uint64
		floor := bits.Len64(launchHostUs*1000) - 1 // the bucket of the shortest possible launch
		for b := range timed.Count {
			n += timed.Count[b]
			ns += timed.Ns[b]
			if timed.Count[b] == 0 {
				continue
			}
			if b < floor {
				t.Errorf("%d launches timed in bucket %d ([%d, %d) ns): each spent at least %d µs", timed.Count[b], b, uint64(1)<<b, uint64(2)<<b, launchHostUs)
			}
			// A bucket's nanoseconds are its calls' times, each in its range.
			if lo, hi := timed.Count[b]<<b, timed.Count[b]<<(b+1); timed.Ns[b] < lo || timed.Ns[b] >= hi {
				t.Errorf("bucket %d: %d calls summing %d ns, outside [%d, %d)", b, timed.Count[b], timed.Ns[b], lo, hi)
			}
		}
		// Exact for this workload; lost is the session's, host-wide under
		// --all (another test run's processes may fill the tables).
		if n != launches {
			t.Errorf("%d launches timed (%d lost in the session), the workload made %d", n, lost, launches)
		}
		if ns < launches*launchHostUs*1000 {
			t.Errorf("launch time %d ns in all, below the %d µs × %d launches spent", ns, launchHostUs, launches)
		}
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

// untilTraced runs workloads until one is traced: under shared probes,
// the first process to map the simulated runtime may run before its file
// is hooked. The next one is traced from its first call.
func (s *pidSink) untilTraced(t *testing.T, run func() *sim.Report) {
	t.Helper()
	for range 50 {
		if s.waitFor(uint32(run().PID)) {
			return
		}
	}
	t.Fatal("50 workloads ran and none was traced")
}

// pidSink is a collector that says when it first sees a process's call.
// Under --all it sees every CUDA process on the host, other test runs'
// among them: it never blocks on them.
type pidSink struct {
	*model.Collector
	mu   sync.Mutex
	seen map[uint32]bool
	news chan struct{} // a process was first seen (one pending wake-up)
	// layer, when set, makes only calls of that layer count as seen
	// (traced NCCL calls need libnccl's file hooked, not just libcudart's).
	layer *event.Layer
}

func newPIDSink() *pidSink {
	return &pidSink{Collector: model.NewCollector(), seen: map[uint32]bool{}, news: make(chan struct{}, 1)}
}

func (s *pidSink) Call(p *model.Process, c *model.Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Collector.Call(p, c)
	if sp := c.Spec(); s.layer != nil && (sp == nil || sp.Layer != *s.layer) {
		return
	}
	if !s.seen[p.PID] {
		s.seen[p.PID] = true
		select {
		case s.news <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// waitFor says whether pid's calls reach the model: true once one does;
// false when none did within 2 s of its exit (its calls were not traced:
// the caller runs another, so a slow machine only costs a retry).
func (s *pidSink) waitFor(pid uint32) bool {
	deadline := time.After(2 * time.Second)
	for {
		s.mu.Lock()
		seen := s.seen[pid]
		s.mu.Unlock()
		if seen {
			return true
		}
		select {
		case <-s.news:
		case <-deadline:
			return false
		}
	}
}
