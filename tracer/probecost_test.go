package tracer

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/cudatap/cudatap/tracer/probe"
)

// BenchmarkTorchProbeCost measures, on a GPU machine, what each way of
// probing adds per launch to a launch-bound PyTorch loop
// (testdata/gpu/probecost.py: x.add_(1) × 20,000), all in one process and
// interleaved over CUDATAP_PROBECOST_ROUNDS rounds (default 5): untraced,
// an empty uprobe on cuLaunchKernel (the symbol cudatap counts launches
// on), cudatap in its steady state (default stacks, and --stacks none),
// cudatap right after attaching (the naming window: runtime launches
// probed too), one second after attaching, and with each launch's kernel
// parameter values copied (--kernel-args). Reports the medians and
// cudatap's added cost as a ratio to the empty uprobe's.
// Set CUDATAP_PROBECOST_SCRIPT to the script's path; skipped otherwise.
func BenchmarkTorchProbeCost(b *testing.B) {
	script := os.Getenv("CUDATAP_PROBECOST_SCRIPT")
	if script == "" {
		b.Skip("set CUDATAP_PROBECOST_SCRIPT=testdata/gpu/probecost.py on a GPU machine")
	}
	rounds := envInt("CUDATAP_PROBECOST_ROUNDS", 5)
	// CUDATAP_PROBECOST_CPU pins the PyTorch process to one CPU (run the
	// benchmark itself pinned elsewhere, with taskset): less noise.
	args := []string{"python3", script}
	if cpu := os.Getenv("CUDATAP_PROBECOST_CPU"); cpu != "" {
		args = append([]string{"taskset", "-c", cpu}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "ready" {
		b.Fatalf("probecost.py: %q", lines.Text())
	}
	pid := cmd.Process.Pid
	measure := func() float64 {
		fmt.Fprintln(stdin, "go")
		if !lines.Scan() {
			b.Fatal("probecost.py stopped")
		}
		v, err := strconv.ParseFloat(lines.Text(), 64)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	with := func(attach func() func(), wait time.Duration) float64 {
		detach := attach()
		time.Sleep(wait) // a benchmark's phase, not a synchronisation
		v := measure()
		// Stop the session: the process lives on.
		detach()
		return v
	}
	configs := []struct {
		name   string
		attach func() func()
		wait   time.Duration
	}{
		{"untraced", func() func() { return func() {} }, 0},
		{"empty_uprobe", func() func() { return attachEmptyOn(b, pid, "cuLaunchKernel", false) }, 0},
		{"cudatap", func() func() { return attachUntil(b, pid, Config{NameWindow: -1, Stacks: probe.StacksSync}) }, 0},
		{"cudatap_stacks_none", func() func() { return attachUntil(b, pid, Config{NameWindow: -1, Stacks: probe.StacksNone}) }, 0},
		{"cudatap_window_0s", func() func() { return attachUntil(b, pid, Config{Stacks: probe.StacksSync}) }, 0},
		{"cudatap_window_1s", func() func() { return attachUntil(b, pid, Config{Stacks: probe.StacksSync}) }, time.Second},
		{"cudatap_kernel_args", func() func() {
			return attachUntil(b, pid, Config{NameWindow: -1, Stacks: probe.StacksSync, KernelArgs: true})
		}, 0},
	}
	got := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		for _, c := range configs {
			got[c.name] = append(got[c.name], with(c.attach, c.wait))
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); sort.Float64s(v); return v[len(v)/2] }
	base := med(got["untraced"])
	empty := med(got["empty_uprobe"]) - base
	for _, c := range configs {
		m := med(got[c.name])
		b.ReportMetric(m, c.name+"_ns")
		if c.name != "untraced" && c.name != "empty_uprobe" && empty > 0 {
			b.ReportMetric((m-base)/empty, c.name+"_x_empty")
		}
		b.Logf("%-22s median %7.1f ns/launch, added %6.1f ns  (runs %v)", c.name, m, m-base, got[c.name])
	}
}

// attachUntil runs a session on pid with what's Stacks, NameWindow
// (negative none, 0 the default) and KernelArgs, and returns what stops it.
func attachUntil(tb testing.TB, pid int, what Config) func() {
	stop := make(chan struct{})
	attached := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := contextUntil(stop)
		defer cancel()
		_, err := Run(ctx, Config{PIDs: []int{pid}, Stacks: what.Stacks, NameWindow: what.NameWindow, KernelArgs: what.KernelArgs,
			NVMLInterval: -1, Recording: discard{}, Observer: Funcs{OnAttached: func(int) { close(attached) }}})
		done <- err
	}()
	select {
	case <-attached:
	case err := <-done:
		tb.Fatalf("record: %v", err)
	}
	return func() {
		close(stop)
		if err := <-done; err != nil {
			tb.Fatal(err)
		}
	}
}

// contextUntil is a context cancelled when stop closes.
func contextUntil(stop <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
