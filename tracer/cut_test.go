package tracer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// TestCutRetiresExited: with Config.Cut, a session hands Observer.Cut the
// processes of each interval, named, and forgets the ones that exited:
// an exited workload is in the cuts until it is retired, named and with
// its calls to the last, and then in no later cut nor in the final result.
func TestCutRetiresExited(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	type seen struct {
		calls int64
		comm  string
	}
	var mu sync.Mutex
	var cuts []map[uint32]seen
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attached := make(chan struct{})
	done := make(chan *Outcome, 1)
	col := newPIDSink()
	go func() {
		out, err := Run(ctx, Config{All: true, Stacks: probe.StacksNone, NVMLInterval: -1, NameWindow: -1, Sink: col,
			Cut: time.Second,
			Observer: Funcs{OnAttached: func(int) { close(attached) }, OnCut: func(r *model.Result) {
				in := map[uint32]seen{}
				for _, p := range r.Processes {
					in[p.PID] = seen{p.NCalls, p.Info.Comm}
				}
				mu.Lock()
				cuts = append(cuts, in)
				mu.Unlock()
			}}})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	<-attached
	run := func() *sim.Report { return testutil.RunWorkload(t, b, nil, "--scenario", "basic", "--iters", "5") }
	col.untilTraced(t, run)
	pid := uint32(run().PID)
	// In a cut, then retired: in none after.
	var last seen
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		in := slices.IndexFunc(cuts, func(c map[uint32]seen) bool { _, ok := c[pid]; return ok })
		gone := -1
		if in >= 0 {
			for i := in; i < len(cuts); i++ {
				if s, ok := cuts[i][pid]; ok {
					last = s
				} else {
					gone = i
					break
				}
			}
		}
		mu.Unlock()
		if gone >= 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d: in cut %d, still not retired a minute later", pid, in)
		}
	}
	cancel()
	out := <-done
	if out == nil {
		t.FailNow()
	}
	if want := int64(len(col.Traces[pid].Calls)); last.comm != "workload" || last.calls != want || want == 0 {
		t.Errorf("process %d in its last cut: comm %q, %d calls; want \"workload\" and the %d calls the sink got", pid, last.comm, last.calls, want)
	}
	if slices.ContainsFunc(out.Result.Processes, func(p *model.Process) bool { return p.PID == pid }) {
		t.Errorf("retired process %d still in the final result", pid)
	}
	mu.Lock()
	defer mu.Unlock()
	first := slices.IndexFunc(cuts, func(c map[uint32]seen) bool { _, ok := c[pid]; return ok })
	for i := first; i < len(cuts); i++ {
		if _, ok := cuts[i][pid]; !ok {
			for j := i + 1; j < len(cuts); j++ {
				if _, back := cuts[j][pid]; back {
					t.Errorf("process %d retired at cut %d, back in cut %d", pid, i, j)
				}
			}
			break
		}
	}
}
