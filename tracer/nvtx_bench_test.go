package tracer

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/probe"
)

// nvtxLoop times N nvtxRangePushA + nvtxRangePop pairs through the
// simulated libnvToolsExt.so.1 (no NVTX tool loaded: each call is NVTX's
// own no-op, as in a process nobody profiles) and prints ns per pair. It
// initializes CUDA first (cudatap traces CUDA processes) and waits for a
// line on stdin, so probes can be attached to the running process.
const nvtxLoop = `
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "cuda_sim.h"
#include "nvtx_sim.h"
int main(int argc, char **argv) {
	long n = atol(argv[1]);
	char line[16];
	void *p;
	cudaMalloc(&p, 1 << 20);
	printf("ready\n"); fflush(stdout);
	if (!fgets(line, sizeof line, stdin)) return 1;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		nvtxRangePushA("train step");
		nvtxRangePop();
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
`

// BenchmarkNVTXOverhead measures, interleaved in one run, what hooking a
// running process's NVTX library costs per range (a push and its pop):
// the loop untraced, with do-nothing uprobes on nvtxRangePushA and
// nvtxRangePop, and recorded by cudatap (-p PID: the message copied at
// the push, a record each). Reports the medians and cudatap's added cost
// as a ratio to the empty uprobes'.
//
//	go test -run '^$' -bench NVTXOverhead -benchtime 1x ./tracer/
func BenchmarkNVTXOverhead(b *testing.B) {
	testutil.RequireRoot(b)
	s := testutil.Sim(b)
	src, bin := filepath.Join(s.Dir, "nvtxloop.c"), filepath.Join(s.Dir, "nvtxloop")
	if err := os.WriteFile(src, []byte(nvtxLoop), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("cc", "-O2", "-I", filepath.Join(s.Dir, "csrc"), "-I", s.Dir, "-o", bin, src, "-L"+s.Dir,
		"-l:libcudart.so.13", "-l:"+sim.NVTXSoname, "-Wl,-rpath,"+s.Dir).CombinedOutput(); err != nil {
		b.Fatalf("compile: %v\n%s", err, out)
	}
	const n = 20000
	rounds := envInt("CUDATAP_BENCH_ROUNDS", 5)
	record := func(tb testing.TB, pid int) func() {
		return attachSession(tb, pid, Config{NameWindow: -1, Stacks: probe.StacksSync})
	}
	var base, empty, traced []float64
	for range rounds {
		base = append(base, runLoop(b, bin, n, nil))
		empty = append(empty, runLoop(b, bin, n, attachEmptyNVTX))
		traced = append(traced, runLoop(b, bin, n, record))
	}
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	mb, me, mt := med(base), med(empty), med(traced)
	b.ReportMetric(mb, "ns/range-untraced")
	b.ReportMetric(me, "ns/range-empty-uprobes")
	b.ReportMetric(mt, "ns/range-cudatap")
	if me > mb {
		b.ReportMetric((mt-mb)/(me-mb), "cost-ratio-vs-empty-uprobes")
	}
}

// attachEmptyNVTX puts a do-nothing uprobe_multi program on
// nvtxRangePushA and nvtxRangePop in pid's NVTX library.
func attachEmptyNVTX(tb testing.TB, pid int) func() {
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
	i := slices.IndexFunc(d.Libraries, func(l probe.Library) bool { return l.Layer == event.NVTX })
	if i < 0 {
		tb.Fatalf("no NVTX library in process %d", pid)
	}
	f, err := objfile.Open(d.Libraries[i].OpenPath)
	if err != nil {
		tb.Fatal(err)
	}
	var offs []uint64
	for _, sym := range []string{"nvtxRangePushA", "nvtxRangePop"} {
		off, err := f.SymbolFileOffset(sym)
		if err != nil {
			tb.Fatal(err)
		}
		offs = append(offs, off)
	}
	ex, err := link.OpenExecutable(d.Libraries[i].OpenPath)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := ex.UprobeMulti(nil, prog, &link.UprobeMultiOptions{Addresses: offs, PID: uint32(pid)})
	if err != nil {
		tb.Fatal(err)
	}
	return func() { l.Close(); prog.Close() }
}
