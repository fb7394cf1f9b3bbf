package tracer

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/probe"
)

// BenchmarkGPUTimesJoin measures what GPU times add to a launch-bound
// program on top of tracing it, for each way of joining CUPTI's GPU
// records to the calls (CUDATAP_GPU_JOIN): the simulated launch loop
// untraced, traced with --gpu-times=off, and traced with GPU times joined
// by none (GPU records only, joined to nothing: what the records alone
// cost, the floor of any join), callbacks (the default) and api; rounds
// interleaved, medians reported as ns per launch and as what each adds over
// cudatap alone in the same rounds.
//
// What it measures: cudatap's and the collector's own work (uprobes, the
// callback path, the socket, the Go side's join and model) for real, and
// CUPTI's as modeled by the simulated CUPTI, which spins on the calling
// thread per GPU record, per API record and per callback
// (SIM_CUPTI_*_NS), with each launch a runtime call around a driver call
// (SIM_CUPTI_RUNTIME_CALLS) after three calls that enqueue nothing
// (SIM_CUPTI_OTHER_CALLS: PyTorch's cudaGetDevice), as PyTorch's launches
// are. The modeled costs come from what the H200 measured
// (docs/gpu-times.md): a kernel record 1.3 µs (x.add_(1): 9.96 → 11.21 µs
// with kernel activity on), an API record 0.4 µs (API records of every
// call, about five per launch, added 1.8–2.7 µs), a callback 0.15 µs (not
// measured apart on the H200, where a launch's four callbacks added 0.3 to
// 3 µs, within its noise); BENCH_CUPTI_RECORD_NS, _API_NS, _CALLBACK_NS
// replace them. So its ranking of the joins is as good as those figures;
// what the collector and cudatap add on top of them is measured. With
// BENCH_LOOP_CPU=0 the loop runs on CPU 0 (run the benchmark under
// taskset -c 1): cudatap's side then takes none of the program's CPU, as
// on a machine of many cores.
//
//	BENCH_LOOP_CPU=0 CUDATAP_BENCH_ROUNDS=5 taskset -c 1 go test -run '^$' -bench GPUTimesJoin -benchtime 1x ./tracer/
func BenchmarkGPUTimesJoin(b *testing.B) {
	testutil.RequireRoot(b)
	bin := buildLaunchLoop(b)
	for k, v := range map[string]string{"RECORD_NS": "1300", "API_NS": "400", "CALLBACK_NS": "150"} {
		if e := os.Getenv("BENCH_CUPTI_" + k); e != "" {
			v = e
		}
		b.Setenv("SIM_CUPTI_"+k, v)
	}
	b.Setenv("SIM_CUPTI_RUNTIME_CALLS", "1")
	b.Setenv("SIM_CUPTI_OTHER_CALLS", "3")
	const n = 20000
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("CUDATAP_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	joins := []string{"none", "callbacks", "api"}
	ns := map[string][]float64{}
	for range b.N {
		for range rounds {
			ns["plain"] = append(ns["plain"], runPinned(b, bin, n, nil))
			ns["cudatap"] = append(ns["cudatap"], runPinned(b, bin, n, attachCudatap(-1, probe.StacksNone)))
			for _, j := range joins {
				ns[j] = append(ns[j], runPinned(b, bin, n, attachGPUTimes(j)))
			}
		}
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	base := med(ns["cudatap"])
	b.ReportMetric(med(ns["plain"]), "ns/launch-untraced")
	b.ReportMetric(base, "ns/launch-cudatap")
	for _, j := range joins {
		b.ReportMetric(med(ns[j]), "ns/launch-"+j)
		b.ReportMetric(med(ns[j])-base, "ns-added-"+j)
		b.ReportMetric(med(ns[j])/base, j+"/cudatap")
	}
}

// attachGPUTimes records pid with GPU times joined by join, and returns
// once the collector measures (the loop's launches are all measured).
func attachGPUTimes(join string) func(testing.TB, int) func() {
	return func(tb testing.TB, pid int) func() {
		os.Setenv("CUDATAP_GPU_JOIN", join)
		defer os.Unsetenv("CUDATAP_GPU_JOIN")
		measured := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			_, err := Run(context.Background(), Config{PIDs: []int{pid}, Stacks: probe.StacksNone, Duration: time.Minute,
				NameWindow: -1, NVMLInterval: -1, GPUTimes: true, Recording: discard{},
				Observer: Funcs{OnGPUTimes: func(_ uint32, st string) {
					select {
					case measured <- st:
					default:
					}
				}}})
			done <- err
		}()
		select {
		case st := <-measured:
			if !strings.HasPrefix(st, "measured") || !strings.Contains(st, "join="+join) {
				tb.Fatalf("GPU times: %s, want measured with join=%s", st, join)
			}
		case err := <-done:
			tb.Fatalf("record: %v", err)
		}
		return func() {
			if err := <-done; err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// runPinned is runLoop with the loop on CPU 0 when BENCH_LOOP_CPU=0 (run
// the benchmark itself under taskset -c 1-N): cudatap's side then takes no
// time from the program's CPU, as on a machine of many cores.
func runPinned(b *testing.B, bin string, n int, attach func(testing.TB, int) func()) float64 {
	cpu := os.Getenv("BENCH_LOOP_CPU")
	if cpu == "" {
		return runLoop(b, bin, n, attach)
	}
	w := startWaiterCmd(b, "ready", exec.Command("taskset", "-c", cpu, bin, strconv.Itoa(n)))
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
