package oom

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/tracer/model"
)

// TestRecords: the failure of the fixture, named: the size, the line, the
// attempts, who held what (each said for what it is), by API, NVML's view
// of the device with the other process and its container, and the outcome.
func TestRecords(t *testing.T) {
	r := fixture.OOM(nil, true)
	recs := Records(r)
	if len(recs) != 1 || Count(r) != 1 {
		t.Fatalf("%d records, count %d; want 1", len(recs), Count(r))
	}
	rec := recs[0]
	const gib = fixture.GiB
	if rec.PID != fixture.OOMPID || rec.Call != "cudaMalloc" || rec.Bytes != fixture.OOMAsked || rec.Attempts != 2 ||
		rec.TimeNs != fixture.OOMAt || rec.AtNs != fixture.OOMAt-r.Start || rec.Site != fixture.OOMLine || !rec.UserFrame ||
		rec.Thread != "python3" || rec.Device != 0 || rec.Held != 102*gib+32<<20 || rec.HeldAllocations != 34 ||
		rec.Released != 4*gib || rec.HeldSinceAttach {
		t.Errorf("record: %+v", rec)
	}
	if !rec.Recovered || rec.RecoveredAfterNs != 2_000_000 {
		t.Errorf("recovered %v after %d, want 2 ms", rec.Recovered, rec.RecoveredAfterNs)
	}
	type h struct {
		bytes, count uint64
		kind, site   string
	}
	want := []h{
		{40 * gib, 1, KindCachingAllocator, fixture.OOMLineA},
		{30 * gib, 1, KindCachingAllocator, fixture.OOMLineB},
		{30 * gib, 30, KindCachingAllocator, fixture.OOMLineC},
		{2 * gib, 1, KindNCCL, fixture.OOMLineNCCL},
		{32 << 20, 1, KindCUBLAS, fixture.OOMLineBlas},
	}
	if len(rec.Holders) != len(want) {
		t.Fatalf("holders %+v", rec.Holders)
	}
	for i, w := range want {
		g := rec.Holders[i]
		if (h{g.Bytes, g.Count, g.Kind, g.Site}) != w || g.API != "cudaMalloc" || !g.UserFrame || g.Sites != 1 {
			t.Errorf("holder %d: %+v, want %+v", i, g, w)
		}
	}
	if len(rec.ByAPI) != 1 || rec.ByAPI[0].API != "cudaMalloc" || rec.ByAPI[0].Bytes != rec.Held || rec.ByAPI[0].Count != 34 {
		t.Errorf("by API: %+v", rec.ByAPI)
	}
	if len(rec.GPUs) != 1 {
		t.Fatalf("GPUs %+v (%s)", rec.GPUs, rec.NVML)
	}
	g := rec.GPUs[0]
	if g.Device != 0 || g.SampleOffsetNs != -40_000_000 || g.Total != 143*gib || g.Free != 9*gib || g.Process != 104*gib ||
		len(g.Others) != 1 || g.Others[0] != (GPUProcess{PID: fixture.OOMOtherPID, Comm: "serve", Container: fixture.OOMContainer, Bytes: 30 * gib}) {
		t.Errorf("GPU: %+v", g)
	}

	v := rec.Verdict()
	for _, s := range []string{"python3 (pid 4200): cudaMalloc of 200.0 GiB failed (out of memory) at +1.999 s, 2 attempts, at train.py:60 <module>",
		"it held 102.0 GiB through CUDA (40.0 GiB at train.py:30 hold_a [PyTorch caching allocator], 30.0 GiB at train.py:36 hold_b [PyTorch caching allocator], 30.0 GiB at train.py:42 hold_c [PyTorch caching allocator], 2 more)",
		"GPU 0: 9.0 GiB free of 143.0 GiB (NVML)", "recovered: an allocation succeeded 2.0 ms later"} {
		if !strings.Contains(v, s) {
			t.Errorf("verdict lacks %q:\n%s", s, v)
		}
	}
	lines := strings.Join(rec.Lines(), "\n")
	for _, s := range []string{
		"python3 (tid 4200) asked cudaMalloc of 200.0 GiB on CUDA device 0 at +1.999 s",
		"at train.py:60 <module>",
		"held through CUDA: 102.0 GiB in 34 allocations\n",
		"  30.0 GiB in 30 × cudaMalloc [PyTorch caching allocator] at train.py:42 hold_c",
		"  2.0 GiB in 1 × cudaMalloc [NCCL] at train.py:20 <module>",
		"  32.0 MiB in 1 × cudaMalloc [cuBLAS workspace] at train.py:50 forward",
		"by API: cudaMalloc 102.0 GiB in 34",
		"released 4.0 GiB between its first and last attempt",
		"GPU 0 (the NVML sample nearest, 40.0 ms before the failure): 143.0 GiB total, 134.0 GiB used, 9.0 GiB free; this process 104.0 GiB; other processes: serve (pid 999, container c0ffee00c0ff) 30.0 GiB",
	} {
		if !strings.Contains(lines, s) {
			t.Errorf("lines lack %q:\n%s", s, lines)
		}
	}

	// Died: no allocation after it.
	rec = Records(fixture.OOM(nil, false))[0]
	if rec.Recovered || rec.CallsAfter != 1 || rec.LastCallAfterNs != 960_000 || !strings.HasSuffix(rec.Verdict(), "; no allocation succeeded after it; it made 1 more CUDA call after it, the last 960.0 µs later") {
		t.Errorf("not recovered: %+v\n%s", rec, rec.Verdict())
	}

	// The record as JSON: every list present, also when empty.
	r = fixture.OOM(nil, true)
	r.GPU = model.GPUReport{Status: "disabled (--nvml-interval < 0)"}
	rec = Records(r)[0]
	js, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"gpus":[]`, `"nvml":"not sampled: disabled (--nvml-interval \u003c 0)"`, `"bytes":214748364800`, `"kind":"NCCL"`} {
		if !strings.Contains(string(js), s) {
			t.Errorf("JSON lacks %s:\n%s", s, js)
		}
	}
}

// TestKindOf: what an allocation is, from its native frames.
func TestKindOf(t *testing.T) {
	for want, frames := range map[string][]string{
		KindNCCL:             {"cudaMalloc (libcudart.so.13)", "ncclCudaCalloc (libnccl.so.2)", "c10::cuda::CUDACachingAllocator::x (libc10_cuda.so)"},
		KindCUBLAS:           {"c10::cuda::CUDACachingAllocator::x (libc10_cuda.so)", "at::cuda::getCUDABlasLtWorkspace() (libtorch_cuda.so)"},
		KindCachingAllocator: {"c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc (libc10_cuda.so)", "main (python3.12)"},
		"":                   {"main (train)", "0x7f00"},
	} {
		if got := KindOf(frames); got != want {
			t.Errorf("KindOf(%q) = %q, want %q", frames, got, want)
		}
	}
	if KindOf([]string{"cublasLtMatmul (libcublasLt.so.13)"}) != KindCUBLAS || KindOf(nil) != "" {
		t.Error("cuBLAS's own frames, or no frames")
	}
}
