package tracer

import (
	"context"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// TestHookUpIsNotCUDATime: in launch mode the program is held at each
// library load while cudatap hooks it; the first CUDA call (which loads
// libcuda) contains such a hold. The hold is its own slice and is taken
// out of that call's duration.
func TestHookUpIsNotCUDATime(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	out, rep := launch(t, probe.StacksNone, b.Workload, "--scenario", "basic", "--iters", "3")
	p := tracedOf(t, out, rep.PID)
	if len(p.Holds) == 0 || p.HeldNs == 0 {
		t.Fatal("no hold recorded in launch mode")
	}
	var held int
	for _, c := range p.Calls {
		if c.HoldNs == 0 {
			continue
		}
		held++
		if c.Duration() != c.End-c.Start-c.HoldNs {
			t.Errorf("%s: duration %d, wall %d, held %d", c.API, c.Duration(), c.End-c.Start, c.HoldNs)
		}
	}
	if held == 0 {
		t.Errorf("no call contains a hold (holds %+v)", p.Holds)
	}
}

// TestPinnedBeforeAttach attaches to a program that pinned host memory and
// allocated device memory before cudatap came: its copies are classified
// as in launch mode (the pinned H2D copies are not pageable syncs).
func TestPinnedBeforeAttach(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	args := []string{"--scenario", "basic", "--iters", "20"}
	live, rep := launch(t, probe.StacksNone, append([]string{b.Workload}, args...)...)
	want := syncCounts(tracedOf(t, live, rep.PID))

	w := startWaiterLine(t, "setup", b.Workload, append(args, "--wait-after-setup")...)
	attached := make(chan struct{})
	var out *Outcome
	var err error
	done := make(chan struct{})
	go func() {
		out, err = runTraced(context.Background(), Config{PIDs: []int{w.pid()}, Stacks: probe.StacksNone, NVMLInterval: -1,
			Duration: time.Minute, Observer: Funcs{OnAttached: func(int) { close(attached) }}})
		close(done)
	}()
	<-attached
	w.start()
	w.cmd.Wait()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	p := tracedOf(t, out, w.pid())
	if got := syncCounts(p); got[model.SyncPageableMemcpy] != want[model.SyncPageableMemcpy] || got[model.SyncPageableMemcpy] != 20 {
		t.Errorf("pageable copies: attached %d, launched %d, want 20 (the pinned ones found at attach)",
			got[model.SyncPageableMemcpy], want[model.SyncPageableMemcpy])
	}
	if !p.AttachedLate || p.PinnedRecovered < 1<<20 {
		t.Errorf("attached late %v, pinned recovered %d", p.AttachedLate, p.PinnedRecovered)
	}
}

func syncCounts(p *traced) map[model.SyncKind]int {
	n := map[model.SyncKind]int{}
	for _, s := range p.Syncs {
		n[s.Kind]++
	}
	return n
}
