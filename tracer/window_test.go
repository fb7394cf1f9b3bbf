package tracer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// TestNamingWindowClosesEarly attaches to a process whose kernels were
// loaded before cudatap came, with a naming window of an hour: once its
// loop has run without naming anything new, the runtime's launch probes
// go (one trap per launch again), every kernel is named from its stub and
// every launch is counted exactly once.
func TestNamingWindowClosesEarly(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	w := startWaiter(t, b.Flood, "2", "0") // two threads, until stdin closes
	defer w.cmd.Process.Kill()
	pid := w.pid()
	sessions := make(chan *Session, 1)
	attached := make(chan struct{})
	col := model.NewCollector()
	type result struct {
		out *Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := run(context.Background(), Config{PIDs: []int{pid}, Stacks: probe.StacksNone, NVMLInterval: -1,
			NameWindow: time.Hour, Sink: col, Duration: 10 * time.Minute, OnAttached: func(int) { close(attached) }},
			func(s *Session) { sessions <- s })
		done <- result{out, err}
	}()
	s := <-sessions
	<-attached
	if !windowOpen(s, pid) {
		t.Fatal("no naming window after attaching to a process with libcuda loaded")
	}
	w.start()
	for deadline := time.Now().Add(2 * time.Minute); windowOpen(s, pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the naming window is still open after 2 minutes of the same kernels")
		}
	}
	out := w.result(t)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	made, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("flood output %q", out)
	}
	p := r.out.Result.Processes[0]
	// Counted in the driver, or by the runtime probe for the first
	// launches before the driver probe took over (never both). The flood
	// runs as fast as it can: on a loaded machine the reader may fall
	// behind and the ring buffer overflow, which is counted.
	got := p.CallCounts()["cuLaunchKernel"] + p.CallCounts()["cudaLaunchKernel"]
	if lost := int64(r.out.Result.Drops.RingbufFull); got+lost != int64(made) {
		t.Errorf("%d launches traced and %d lost to a full ring buffer, the workload made %d", got, lost, made)
	}
	tr := col.Traces[p.PID]
	named := map[string]int{}
	for _, op := range tr.GPUOps {
		name, addr := p.KernelSymbol(op.Func)
		if name == "" {
			name = r.out.Result.Names.Kernel(p.PID, addr)
		}
		named[name]++
	}
	// Launches made before the first stub hand-over reached the driver
	// probe cannot be named; every later one is.
	if named["flood_kernel"] == 0 || named["flood_kernel"] < len(tr.GPUOps)-named[""] || named[""] > 2 {
		t.Errorf("kernels named %v", named)
	}
}

// windowOpen reports whether pid's runtime launch probes are attached.
func windowOpen(s *Session, pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[pid]
	return t != nil && t.rtLaunch != nil
}
