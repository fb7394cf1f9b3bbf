package tracer

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/report"
	"github.com/cudatap/cudatap/tracer/gpusample"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/nvml"
)

// The sampler's numbers reach the report's verdicts whole: samples →
// Summarize → the recording's GPU record (JSON, NaN included) → Verdicts.
func TestGPUReportVerdicts(t *testing.T) {
	const gib, total = 1 << 30, 143771 << 20
	var samples []nvml.Sample
	for i := range 10 {
		samples = append(samples, nvml.Sample{TS: uint64(1e9 + i*1e8), Device: 0, Name: "NVIDIA H200",
			GPUUtil: 5, MemUtil: math.NaN(), MemUsed: total - gib, MemTotal: total, TempC: math.NaN(),
			PowerW: math.NaN(), PowerLimitW: math.NaN(), SMClockMHz: 1410, SMClockMaxMHz: 1980,
			ThrottleReasons: []string{"hw_power_brake_slowdown"},
			Processes:       []nvml.ProcSample{{PID: 1, MemUsed: total - 2*gib, SMUtil: 3}, {PID: 2, MemUsed: gib / 2, SMUtil: math.NaN()}}})
	}
	g := model.GPUReport{GPUs: gpuStats(gpusample.Summarize(samples)),
		Traced: []model.TracedHost{{PID: 1, CUDACalls: 10, HostBusy: 0.95}, {PID: 2, HostBusy: model.Reading(math.NaN())}}}
	js, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back model.GPUReport
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range report.Verdicts(&back) {
		got = append(got, v.String())
	}
	want := []string{
		"GPU 0, pid 1: input/host bound: GPU 0 busy 5.0% on average (peak 5%, 10 samples, threshold 20%)",
		"GPU 0, pid 1: out-of-memory risk: peak 139.4 GiB used of 140.4 GiB (99.3%, threshold 95%), 1.0 GiB free; pid 1 held 138.4 GiB of it",
		"GPU 0: throttled: hw_power_brake_slowdown in 100% of samples (10/10); SM clock mean 1410 MHz, min 1410 MHz (max 1980 MHz)",
		"GPU 0, pid 2: idle holder: pid 2 held 0.5 GiB of GPU 0 (peak, listed in 10 of 10 samples) and made 0 CUDA calls while traced: its memory",
	}
	if len(got) != len(want) || !slices.EqualFunc(got, want, strings.HasPrefix) {
		t.Errorf("verdicts\n %q\nwant (prefixes)\n %q", got, want)
	}
}

func TestHostBusy(t *testing.T) {
	g := &gpuSampler{cpu0: map[uint32]cpuMark{}}
	self := uint32(os.Getpid())
	if b := g.hostBusy(&model.Process{PID: self}); !math.IsNaN(b) {
		t.Errorf("unmarked process: %v", b)
	}
	g.markCPU(self)
	if b := g.hostBusy(&model.Process{PID: self}); !(b >= 0 && b <= 1) {
		t.Errorf("host busy share %v", b)
	}
}
