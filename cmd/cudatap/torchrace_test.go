package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/replay"
)

// TestTorchRace records testdata/gpu/race.py's four races as PyTorch 2.11
// on CUDA 13 makes them (the simulated driver workload's torch-race
// scenario) with record --kernel-args --stacks all, and checks that the
// race lint finds each, with what its calls prove: a kernel on the side
// stream whose parameters lie hundreds of bytes apart in its launcher's
// frame, as gcc leaves PyTorch's (y = x + 2 on a side stream, read back
// by q.cpu(); w = x * 2 read by w + 1), and cuBLASLt's gemm, launched
// with cuLaunchKernelEx, whose one parameter is a Params struct with the
// output pointer 600 bytes in. On the H200 the lint found only the copy
// (testdata/gpu/RESULTS-batch-h200.txt, section race): the launch record
// carried 512 bytes from the lowest parameter, and only the parameters
// within 256 bytes of the first.
func TestTorchRace(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	const n = 3
	rec, rep := recordScenario(t, b, "torch-race", n, 4*n+1, func(c *tracer.Config) {
		c.Command[0] = b.DriverWorkload
		c.KernelArgs, c.Stacks = true, probe.StacksAll
	})
	if doc := lintJSON(t, rec); !slices.Equal(lintIDs(doc.Findings), []lint.ID{lint.CrossStreamRace}) {
		t.Fatalf("findings %v", lintIDs(doc.Findings))
	}
	// Linted again with room for every example (the CLI keeps 3).
	fr, err := os.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	opts := lint.DefaultOptions()
	opts.Examples = 8
	col := lint.NewCollector(opts)
	res, _, err := replay.Load(fr, func(*replay.Replay) model.Sink { return col }, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := lint.Findings(res, col)[0]
	if rep.Calls["__cudaLaunchKernel"] != 5*n || rep.Calls["cuLaunchKernelEx"] != n || f.Count != 4*n || f.Sites != 4 || len(f.Examples) != 4 {
		text, _, _ := run(t, "lint", rec)
		t.Fatalf("%d races at %d pairs of sites (%d examples), want %d at 4 (calls %v):\n%s", f.Count, f.Sites, len(f.Examples), 4*n, rep.Calls, text)
	}
	const gemm, add, mul = "sm90_xmma_gemm_f32f32_tn_n_cublas", "torch_add_kernel", "torch_mul_kernel"
	type end struct{ role, call, kernel, site string }
	for i, want := range []struct {
		proof      string
		write, use end
	}{
		{"write then kernel", end{"write", "cudaMemcpyAsync", "", "torch_race_step"}, end{"use", "cuLaunchKernel", mul, "torch_mul_stub"}},
		{"kernel then use", end{"may write", "cuLaunchKernel", add, "torch_add_stub"}, end{"use", "cudaMemcpyAsync", "", "torch_race_step"}},
		{"kernels", end{"may write", "cuLaunchKernelEx", gemm, "torch_gemm"}, end{"use", "cuLaunchKernel", add, "torch_add_stub"}},
		{"kernels", end{"may write", "cuLaunchKernel", mul, "torch_mul_stub"}, end{"use", "cuLaunchKernel", add, "torch_add_stub"}},
	} {
		ex := f.Examples[i]
		if ex.Proof != want.proof || ex.Count != n || len(ex.Calls) != 2 {
			t.Errorf("example %d: %+v, want %q ×%d", i, ex, want.proof, n)
			continue
		}
		for j, w := range []end{want.write, want.use} {
			c := ex.Calls[j]
			if c.Role != w.role || c.Call != w.call || c.Kernel != w.kernel || !strings.HasPrefix(c.Site, w.site) || c.Stream != 1-j {
				t.Errorf("example %d (%s), call %d: %+v; want %s %s %s at %s on stream %d", i, want.proof, j, c, w.role, w.call, w.kernel, w.site, 1-j)
			}
		}
	}
}
