package tracer

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/probe"
)

// launchLoop times N cudaLaunchKernel calls of one-block kernels (the host
// never waits for the modeled GPU, so the loop measures the host path) and
// prints ns per launch. Each launch passes its kernel three device pointers
// and an int as nvcc's generated host stubs do (kernelParams pointing at the
// stub's own parameters), what --kernel-args copies. It waits for a line on
// stdin first, so probes can be attached to the running process.
const launchLoop = `
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "cuda_sim.h"
void bench_kernel(const float *a, const float *b, float *c, int n) { (void)a; (void)b; (void)c; (void)n; }
__attribute__((noinline)) static void launch(const float *a, const float *b, float *c, int n) {
	void *args[] = {&a, &b, &c, &n};
	dim3 one = {1, 1, 1}, block = {1, 1, 1};
	cudaLaunchKernel((const void *)bench_kernel, one, block, args, 0, NULL);
}
int main(int argc, char **argv) {
	long n = atol(argv[1]);
	char line[16];
	float *p;
	/* Initialize CUDA (loads libcuda) before the tracer attaches. */
	cudaMalloc((void **)&p, 3 << 20);
	printf("ready\n"); fflush(stdout);
	if (!fgets(line, sizeof line, stdin)) return 1;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		launch(p, p + (1 << 18), p + (2 << 18), 1 << 18);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
`

// BenchmarkLaunchOverhead measures, in the same run and interleaved, the
// simulated launch loop untraced, with an empty uprobe on cudaLaunchKernel,
// traced by cudatap in its steady state (launches probed in the driver
// only: one trap per launch), and traced while the runtime's launch probes
// are also attached (the naming window after attaching: two traps), and
// reports cudatap's added cost per call as a ratio to the empty uprobe's.
// It also traces with the kernels' parameter values copied (--kernel-args)
// and reports what that adds as a share of a traced launch's cost
// (traced − untraced), paired within each round.
func BenchmarkLaunchOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	bin := buildLaunchLoop(b)
	const n = 20000
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("CUDATAP_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	var base, empty, traced, both, stacks, followed, pairedFollow, kargs, pairedKargs []float64
	for r := 0; r < rounds; r++ {
		base = append(base, runLoop(b, bin, n, nil))
		empty = append(empty, runLoop(b, bin, n, attachEmpty))
		traced = append(traced, runLoop(b, bin, n, attachCudatap(-1, probe.StacksSync)))
		// Followed (-p --follow, record -- CMD): shared probes that count
		// the process tree's hits only. Its cost over tracing the one
		// process, in the same round.
		followed = append(followed, runLoop(b, bin, n, attachFollowing))
		if k := len(base) - 1; traced[k] > base[k] {
			pairedFollow = append(pairedFollow, (followed[k]-base[k])/(traced[k]-base[k]))
		}
		// --kernel-args: its cost over tracing without, in the same round.
		kargs = append(kargs, runLoop(b, bin, n, attachKernelArgs))
		if k := len(base) - 1; traced[k] > base[k] {
			pairedKargs = append(pairedKargs, (kargs[k]-traced[k])/(traced[k]-base[k]))
		}
		both = append(both, runLoop(b, bin, n, attachCudatap(time.Hour, probe.StacksSync)))
		stacks = append(stacks, runLoop(b, bin, n, attachCudatap(-1, probe.StacksAll)))
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	mb, me, mt, m2, ms := med(base), med(empty), med(traced), med(both), med(stacks)
	// --stacks=all captures a stack at every launch: registers, a
	// frame-pointer walk and 8 KiB of stack in BPF, .eh_frame unwinding and
	// symbolization in user space.
	b.ReportMetric(ms-mt, "ns/stack")
	b.ReportMetric(mb, "ns/launch-untraced")
	b.ReportMetric(me, "ns/launch-empty-uprobe")
	b.ReportMetric(mt, "ns/launch-cudatap")
	b.ReportMetric(m2, "ns/launch-cudatap-both-layers")
	b.ReportMetric(med(followed), "ns/launch-cudatap-followed")
	if len(pairedFollow) > 0 {
		b.ReportMetric(med(pairedFollow), "followed-ratio-vs-cudatap-paired-median")
	}
	b.ReportMetric(med(kargs), "ns/launch-cudatap-kernel-args")
	if len(pairedKargs) > 0 {
		b.ReportMetric(med(pairedKargs), "kernel-args-added-share-of-traced-paired-median")
	}
	if me > mb {
		b.ReportMetric((mt-mb)/(me-mb), "cost-ratio-vs-empty-uprobe")
		b.ReportMetric((m2-mb)/(me-mb), "both-layers-ratio-vs-empty-uprobe")
	}
}

// buildLaunchLoop compiles launchLoop against the simulated runtime.
func buildLaunchLoop(b *testing.B) string {
	s := testutil.Sim(b)
	src := filepath.Join(s.Dir, "launchloop.c")
	bin := filepath.Join(s.Dir, "launchloop")
	if err := os.WriteFile(src, []byte(launchLoop), 0o644); err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command("cc", "-O2", "-I", s.Dir, "-I", filepath.Join(s.Dir, "csrc"), "-o", bin, src,
		"-L"+s.Dir, "-l:libcudart.so.13", "-Wl,-rpath,"+s.Dir).CombinedOutput()
	if err != nil {
		b.Fatalf("compile: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkAggregateOverhead measures the agent's way of tracing a launch,
// interleaved in one run: shared probes (--all) counting launches in BPF
// maps (aggregate mode), and recording each launch, against an empty
// uprobe on the same driver symbol, cuLaunchKernel (where shared probes
// count the runtime's launches).
//
//	go test -run '^$' -bench AggregateOverhead -benchtime 1x ./tracer/
func BenchmarkAggregateOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	bin := buildLaunchLoop(b)
	const n = 20000
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("CUDATAP_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	var base, empty, emptyRet, recorded, aggregated, noStream, timed []float64
	var paired, pairedNoStream, pairedTimed, pairedTimedRet []float64
	for range rounds {
		base = append(base, runLoop(b, bin, n, nil))
		empty = append(empty, runLoop(b, bin, n, func(tb testing.TB, pid int) func() { return attachEmptyOn(tb, pid, "cuLaunchKernel", false) }))
		emptyRet = append(emptyRet, runLoop(b, bin, n, func(tb testing.TB, pid int) func() { return attachEmptyOn(tb, pid, "cuLaunchKernel", true) }))
		recorded = append(recorded, runLoop(b, bin, n, attachAll(false, false)))
		aggregated = append(aggregated, runLoop(b, bin, n, attachAll(true, false)))
		noStream = append(noStream, runLoop(b, bin, n, attachAllWithoutStream))
		timed = append(timed, runLoop(b, bin, n, attachAll(true, true)))
		// The same round's ratio: the machine's drift between rounds
		// (a VM's uprobe cost moves ±20%) cancels out.
		if k := len(base) - 1; empty[k] > base[k] && emptyRet[k] > base[k] {
			paired = append(paired, (aggregated[k]-base[k])/(empty[k]-base[k]))
			pairedNoStream = append(pairedNoStream, (noStream[k]-base[k])/(empty[k]-base[k]))
			pairedTimed = append(pairedTimed, (timed[k]-base[k])/(empty[k]-base[k]))
			pairedTimedRet = append(pairedTimedRet, (timed[k]-base[k])/(emptyRet[k]-base[k]))
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	if len(paired) > 0 {
		b.ReportMetric(med(paired), "aggregated-ratio-paired-median")
		b.ReportMetric(med(pairedNoStream), "aggregated-no-stream-ratio-paired-median")
		// --launch-times: against an empty uprobe, and against an empty
		// uprobe and uretprobe pair (what any return-timed probe costs).
		b.ReportMetric(med(pairedTimed), "timed-ratio-paired-median")
		b.ReportMetric(med(pairedTimedRet), "timed-ratio-vs-empty-pair-paired-median")
	}
	b.ReportMetric(med(emptyRet), "ns/launch-empty-uprobe-and-uretprobe")
	b.ReportMetric(med(timed), "ns/launch-aggregated-timed")
	mb, me, mr, ma := med(base), med(empty), med(recorded), med(aggregated)
	b.ReportMetric(mb, "ns/launch-untraced")
	b.ReportMetric(me, "ns/launch-empty-uprobe")
	b.ReportMetric(mr, "ns/launch-recorded")
	b.ReportMetric(ma, "ns/launch-aggregated")
	if me > mb {
		b.ReportMetric((ma-mb)/(me-mb), "aggregated-ratio-vs-empty-uprobe")
		b.ReportMetric((mr-mb)/(me-mb), "recorded-ratio-vs-empty-uprobe")
	}
}

// attachAll runs an --all session (shared probes), counting launches in
// BPF when aggregate (and timing them when times); detaching ends it.
func attachAll(aggregate, times bool) func(testing.TB, int) func() {
	return attachAllWith(Config{AggregateLaunches: aggregate, LaunchTimes: times})
}

// attachAllWithoutStream is attachAll(true, false) counting launches
// without their stream: what the stream read costs.
var attachAllWithoutStream = attachAllWith(Config{AggregateLaunches: true, aggregateWithoutStream: true})

// attachAllWith is attachAll with cfg's aggregation settings.
func attachAllWith(agg Config) func(testing.TB, int) func() {
	return func(tb testing.TB, pid int) func() {
		ctx, cancel := context.WithCancel(context.Background())
		attached := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := Run(ctx, Config{All: true, Stacks: probe.StacksNone, NVMLInterval: -1, NameWindow: -1, Recording: discard{},
				AggregateLaunches: agg.AggregateLaunches, LaunchTimes: agg.LaunchTimes, aggregateWithoutStream: agg.aggregateWithoutStream,
				Observer: Funcs{OnAttached: func(int) { close(attached) }}})
			done <- err
		}()
		select {
		case <-attached:
		case err := <-done:
			tb.Fatalf("record --all: %v", err)
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// runLoop runs the loop once; attach, if given, hooks the waiting process
// and returns a function that detaches and waits for the tracer to finish.
func runLoop(b *testing.B, bin string, n int, attach func(testing.TB, int) func()) float64 {
	w := startWaiter(b, bin, strconv.Itoa(n))
	var detach func()
	if attach != nil {
		detach = attach(b, w.pid())
	}
	w.start()
	out := w.result(b)
	if detach != nil {
		detach()
	}
	v, err := strconv.ParseFloat(out, 64)
	if err != nil {
		b.Fatalf("loop output %q: %v", out, err)
	}
	return v
}

// attachEmpty puts a do-nothing uprobe_multi program on cudaLaunchKernel.
func attachEmpty(tb testing.TB, pid int) func() {
	return attachEmptyOn(tb, pid, "cudaLaunchKernel", false)
}

// attachEmptyOn puts a do-nothing uprobe_multi program on symbol, in the
// runtime (cuda*) or the driver (cu*) of pid; with ret, a do-nothing
// uretprobe too.
func attachEmptyOn(tb testing.TB, pid int, symbol string, ret bool) func() {
	layer := event.Driver
	if strings.HasPrefix(symbol, "cuda") {
		layer = event.Runtime
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Kprobe, AttachType: ebpf.AttachTraceUprobeMulti, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		tb.Fatal(err)
	}
	d, err := probe.Discover(pid, objfile.NewCache(16), nil)
	if err != nil {
		tb.Fatalf("discover: %v", err)
	}
	i := slices.IndexFunc(d.Libraries, func(l probe.Library) bool { return l.Layer == layer })
	if i < 0 {
		tb.Fatalf("no %s library in process %d", layer, pid)
	}
	lib := d.Libraries[i]
	f, err := objfile.Open(lib.OpenPath)
	if err != nil {
		tb.Fatal(err)
	}
	off, err := f.SymbolFileOffset(symbol)
	if err != nil {
		tb.Fatal(err)
	}
	ex, err := link.OpenExecutable(lib.OpenPath)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: uint32(pid)})
	if err != nil {
		tb.Fatal(err)
	}
	if !ret {
		return func() { l.Close(); prog.Close() }
	}
	r, err := ex.UretprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: []uint64{off}, PID: uint32(pid)})
	if err != nil {
		tb.Fatal(err)
	}
	return func() { r.Close(); l.Close(); prog.Close() }
}

// attachCudatap runs a full recording session on the process, with the
// runtime's launch probes kept for window (negative: none).
func attachCudatap(window time.Duration, stacks probe.StackMode) func(testing.TB, int) func() {
	return func(tb testing.TB, pid int) func() {
		return attachSession(tb, pid, Config{NameWindow: window, Stacks: stacks})
	}
}

// attachKernelArgs is attachCudatap(-1, probe.StacksSync) copying each
// launch's kernel parameter values (--kernel-args).
func attachKernelArgs(tb testing.TB, pid int) func() {
	return attachSession(tb, pid, Config{NameWindow: -1, Stacks: probe.StacksSync, KernelArgs: true})
}

// attachSession records pid with what's NameWindow, Stacks and KernelArgs.
func attachSession(tb testing.TB, pid int, what Config) func() {
	attached := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), Config{PIDs: []int{pid}, Stacks: what.Stacks, Duration: time.Minute,
			NameWindow: what.NameWindow, KernelArgs: what.KernelArgs, NVMLInterval: -1, Recording: discard{},
			Observer: Funcs{OnAttached: func(int) { close(attached) }}})
		done <- err
	}()
	select {
	case <-attached:
	case err := <-done:
		tb.Fatalf("record: %v", err)
	}
	return func() {
		if err := <-done; err != nil {
			tb.Fatal(err)
		}
	}
}

// attachFollowing traces pid as -p PID --follow does.
func attachFollowing(tb testing.TB, pid int) func() {
	attached := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), Config{PIDs: []int{pid}, Follow: true, Stacks: probe.StacksSync, Duration: time.Minute,
			NameWindow: -1, NVMLInterval: -1, Recording: discard{}, Observer: Funcs{OnAttached: func(int) { close(attached) }}})
		done <- err
	}()
	select {
	case <-attached:
	case err := <-done:
		tb.Fatalf("record --follow: %v", err)
	}
	return func() {
		if err := <-done; err != nil {
			tb.Fatal(err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkAttachLatency measures the time from the start of a recording to
// live probes in an already running CUDA process (discovery, symbol lookup,
// uprobe_multi links, BPF already loaded excluded).
func BenchmarkAttachLatency(b *testing.B) {
	testutil.RequireRoot(b)
	s := testutil.Sim(b)
	cmd := exec.Command(s.Workload, "--wait-stdin")
	stdin, _ := cmd.StdinPipe()
	pr, pw, _ := os.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pw.Close()
	defer func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() }()
	buf := make([]byte, 32)
	pr.Read(buf)
	tr, err := probe.New(probe.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cache := objfile.NewCache(64) // cold: every library read again
		d, err := probe.Discover(cmd.Process.Pid, cache, nil)
		if err != nil || len(d.Libraries) == 0 {
			b.Fatalf("discover: %v", err)
		}
		a, err := tr.Attach(cmd.Process.Pid, &d.Libraries[0], nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		a.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/attach")
}
