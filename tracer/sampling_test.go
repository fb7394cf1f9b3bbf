package tracer

import (
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// TestSampledOut: under --all, a process the agent's sampling leaves out of
// the session has none of its calls counted, runtime or driver, though it
// maps the very files another traced process has hooked; the other's are
// all counted.
func TestSampledOut(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	out, in, outStart := startOutAndIn(t)
	stop := make(chan struct{})
	done, attached := watch(t, Config{All: true, SampledOut: map[int]uint64{out.pid(): outStart}}, stop)
	s := <-attached
	inRep, err := in.finish(s) // hooks the runtime's file for everyone
	if err != nil {
		t.Fatal(err)
	}
	out.stdin.Write([]byte("go\n"))
	out.stdin.Close()
	if err := out.cmd.Wait(); err != nil {
		t.Fatalf("sampled-out workload: %v\n%s", err, out.out.Bytes())
	}
	if hooked(s, out.pid()) {
		t.Error("the sampled-out process was adopted")
	}
	close(stop)
	res := <-done
	if res == nil {
		t.FailNow()
	}
	checkCounts(t, res, inRep)
	if n := len(countsBySymbol(res.Result, out.pid())); n != 0 {
		t.Errorf("the sampled-out process has calls of %d APIs traced: %v", n, countsBySymbol(res.Result, out.pid()))
	}
}

// TestResampleIn: with cuts, the sampling changes inside one session (the
// agent's --continuous): a process sampled out at the start and let back
// in by Observer.Resample at the first cut has every launch it makes from then on
// counted, through the same shared probes.
func TestResampleIn(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	out, in, outStart := startOutAndIn(t)
	cuts := make(chan struct{}, 16)
	stop := make(chan struct{})
	done, attached := watch(t, Config{All: true, Stacks: probe.StacksNone, SampledOut: map[int]uint64{out.pid(): outStart},
		Cut: time.Second, Observer: Funcs{OnCut: func(*model.Result) { cuts <- struct{}{} }, OnResample: func() map[int]uint64 { return map[int]uint64{} }}}, stop)
	s := <-attached
	if _, err := in.finish(s); err != nil { // hooks the runtime's file for everyone
		t.Fatal(err)
	}
	<-cuts // the first: everyone sampled in after it
	<-cuts // the next: that is in effect
	out.stdin.Write([]byte("go\n"))
	out.stdin.Close()
	if err := out.cmd.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, out.out.Bytes())
	}
	rep, err := sim.ParseReport(out.out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	res := <-done
	if res == nil {
		t.FailNow()
	}
	if got, want := launches(countsBySymbol(res.Result, out.pid())), launches(rep.Calls); got != want || want == 0 {
		t.Errorf("process sampled back in: %d launches traced, it made %d", got, want)
	}
}

// startOutAndIn starts two held workloads: one to sample out (with its
// start time) and one that hooks the files for both.
func startOutAndIn(t *testing.T) (out, in *heldWorkload, outStart uint64) {
	t.Helper()
	b := testutil.Sim(t)
	var err error
	if out, err = startHeld(b, "--scenario", "basic", "--iters", "10"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.cmd.Process.Kill() })
	if in, err = startHeld(b, "--scenario", "basic", "--iters", "10"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.cmd.Process.Kill() })
	st, err := procfs.Stat(out.pid())
	if err != nil {
		t.Fatal(err)
	}
	return out, in, st.StartTicks
}
