package tracer

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// TestStragglerNamed: two processes play ranks 0 and 1 of one NCCL job
// (one communicator id) under --all; rank 1 sleeps 20 ms before every
// all-reduce. The meetings name rank 1 the straggler at every one.
func TestStragglerNamed(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := straggler.NewCollector()
	nccl := event.NCCL
	seen := newPIDSink()
	seen.layer = &nccl
	attached := make(chan struct{})
	done := make(chan *Outcome, 1)
	go func() {
		out, err := Run(ctx, Config{All: true, Stacks: probe.StacksNone, NVMLInterval: -1, NameWindow: -1, Sink: model.Sinks{st, seen},
			Observer: Funcs{OnAttached: func(int) { close(attached) }}})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	<-attached
	// The first process to map the simulated NCCL may run before its file
	// is hooked: run one (alone in its communicator) until one's NCCL calls
	// are traced (its runtime's may be, through a file an earlier process
	// had hooked).
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatal("50 workloads ran and none was traced")
		}
		warm := exec.Command(b.NCCLWorkload, "--scenario", "nccl", "--iters", "1")
		if err := warm.Run(); err != nil {
			t.Fatal(err)
		}
		if seen.waitFor(uint32(warm.Process.Pid)) {
			break
		}
	}
	run := "straggler-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() { os.Remove(sim.NCCLSegment(run, 0x5eed)) }) // left by ranks killed early
	var ranks [2]*waiter
	for r := range ranks {
		cmd := exec.Command(b.NCCLWorkload, "--wait-stdin", "--scenario", "nccl", "--iters", "10")
		// The job's file in /dev/shm is this test process's (SIM_NCCL_RUN),
		// not another test run's with the same id.
		cmd.Env = append(os.Environ(), "SIM_NCCL_RUN="+run, "SIM_NCCL_ID=0x5eed", "SIM_NCCL_NRANKS=2",
			"SIM_NCCL_RANK="+string(rune('0'+r)))
		if r == 1 {
			cmd.Env = append(cmd.Env, "SIM_NCCL_DELAY_US=20000")
		}
		ranks[r] = startWaiterCmd(t, "ready", cmd)
		defer cmd.Process.Kill()
	}
	for _, w := range ranks { // both go at once: their start skew is far below 20 ms
		w.start()
	}
	collectives := 0
	for _, w := range ranks {
		rep, err := sim.ParseReport([]byte(w.result(t)))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range event.Specs(event.NCCL) {
			if straggler.Meeting(s.API) { // collectives; sends and receives meet no one
				n += rep.Calls[s.Name]
			}
		}
		if collectives != 0 && n != collectives {
			t.Fatalf("the ranks made %d and %d collectives", collectives, n)
		}
		collectives = n
	}
	cancel()
	if out := <-done; out == nil {
		t.FailNow()
	}
	// Ours, by its id: --all also sees the jobs of tests running at once.
	var c *straggler.Comm
	comms := st.Comms()
	for i := range comms {
		if comms[i].ID == 0x5eed {
			c = &comms[i]
		}
	}
	if c == nil || c.Meetings != collectives {
		t.Fatalf("communicators %+v, want 0x5eed with %d meetings (each rank's collectives but sends and receives)", comms, collectives)
	}
	if s := c.Straggler(); s != 1 || c.Stats[1].Last != collectives || c.Stats[1].PID != uint32(ranks[1].pid()) {
		t.Errorf("straggler rank %d, stats %+v: want rank 1 (pid %d) last at all %d", s, c.Stats, ranks[1].pid(), collectives)
	}
}
