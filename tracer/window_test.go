package tracer

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/sim"
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
	t.Parallel()
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
			NameWindow: time.Hour, Sink: col, Duration: 10 * time.Minute, Observer: Funcs{OnAttached: func(int) { close(attached) }}},
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
	named := kernelNames(r.out, col)
	// Launches made before the first stub hand-over reached the driver
	// probe cannot be named; every later one is.
	if named["flood_kernel"] == 0 || named["flood_kernel"] < len(tr.GPUOps)-named[""] || named[""] > 2 {
		t.Errorf("kernels named %v", named)
	}
}

// windowOpen reports whether pid's runtime launch probes are attached.
func windowOpen(s *Session, pid int) bool { return s.targets.NamingWindowOpen(pid) }

// TestAttachNamesStrippedKernels attaches to a stripped program (as some
// pip wheels are) whose kernels were registered and launched before cudatap
// came: no symbol names their host stubs, and neither the registrations nor
// the kernel loads were seen; each kernel is named from the code that
// registered it.
func TestAttachNamesStrippedKernels(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	stripped := filepath.Join(t.TempDir(), "workload")
	if out, err := exec.Command("strip", "--strip-all", "-o", stripped, b.Workload).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, out)
	}
	if out, _ := exec.Command("nm", stripped).CombinedOutput(); !strings.Contains(string(out), "no symbols") {
		t.Fatalf("the stripped copy still has symbols:\n%s", out)
	}
	cmd := exec.Command(stripped, "--warm-up", "--wait-after-setup", "--wait-before-exit", "--scenario", "basic", "--iters", "5")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Dir(b.Runtime))
	// basic with 2 streams: 2 gemm launches and 1 relu per iteration.
	if named, want := kernelNames(attachAfterSetup(t, cmd)), map[string]int{"sim_gemm_kernel": 10, "sim_relu_kernel": 5}; !maps.Equal(named, want) {
		t.Errorf("kernels named %v, want %v", named, want)
	}
}

// TestAttachNamesCUDA13Kernels attaches to a program that launches the way
// CUDA 13's generated stubs do (__cudaGetKernel once per stub into a static
// handle, then __cudaLaunchKernel with the handle), after its first
// launches: the runtime hands the driver launch a handle, not a stub, and
// every kernel is named by reading the stubs' handle variables.
func TestAttachNamesCUDA13Kernels(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	cmd := exec.Command(b.Workload, "--wait-after-setup", "--wait-before-exit", "--scenario", "handles", "--iters", "6")
	// Iterations 2–6, one gemm and one relu each.
	if named, want := kernelNames(attachAfterSetup(t, cmd)), map[string]int{"sim_gemm_kernel": 5, "sim_relu_kernel": 5}; !maps.Equal(named, want) {
		t.Errorf("kernels named %v, want %v", named, want)
	}
}

// attachAfterSetup starts cmd, a workload run with --wait-after-setup and
// --wait-before-exit; attaches once it has set up and lets it run; stops
// the session while it still lives (what is read from its memory can be),
// then lets it exit. It returns the outcome and the session's calls.
func attachAfterSetup(t *testing.T, cmd *exec.Cmd) (*Outcome, *model.Collector) {
	t.Helper()
	out, col, _ := attachAfterSetupWith(t, cmd, Config{Stacks: probe.StacksNone, NVMLInterval: -1}, nil)
	return out, col
}

// attachAfterSetupWith is attachAfterSetup with cfg (its PIDs, Sink,
// Duration and the Observer set here), inspect given the session; it also
// returns the workload's report.
func attachAfterSetupWith(t *testing.T, cmd *exec.Cmd, cfg Config, inspect func(*Session)) (*Outcome, *model.Collector, *sim.Report) {
	t.Helper()
	w := startWaiterCmd(t, "setup ", cmd)
	defer cmd.Process.Kill()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	col := model.NewCollector()
	done := make(chan *Outcome, 1)
	cfg.PIDs, cfg.Sink, cfg.Duration, cfg.Observer = []int{w.pid()}, col, time.Minute, Funcs{OnAttached: func(int) { w.start() }}
	go func() {
		out, err := run(ctx, cfg, inspect)
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	if line := w.line(t); !strings.HasPrefix(line, "done ") {
		t.Fatalf("workload did not finish: %q", line)
	}
	cancel()
	out := <-done
	w.start()                                        // the line it waits for before exiting
	rep, err := sim.ParseReport([]byte(w.result(t))) // its report, and its exit
	if err != nil {
		t.Fatal(err)
	}
	if out == nil {
		t.FailNow()
	}
	return out, col, rep
}

// kernelNames counts the kernel ops of the outcome's first process by the
// name the session gave them ("" for none).
func kernelNames(out *Outcome, col *model.Collector) map[string]int {
	p := out.Result.Processes[0]
	named := map[string]int{}
	for _, op := range col.Traces[p.PID].GPUOps {
		if op.Kind != model.OpKernel {
			continue
		}
		name, addr := p.KernelSymbol(op.Func)
		if name == "" {
			name = out.Result.Names.Kernel(p.PID, addr)
		}
		named[name]++
	}
	return named
}
