package tracer

import (
	"encoding/json"
	"fmt"
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
	t.Parallel()
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
	t.Parallel()
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

// TestOOMMoments: for each failed allocation, each device's sample that
// shows it (the latest before, else the first after) is kept whole, once,
// named; the report picks the device the process was on.
func TestOOMMoments(t *testing.T) {
	t.Parallel()
	const gib, total = 1 << 30, 140 * (1 << 30)
	var samples []nvml.Sample
	for i := range uint64(5) {
		for d := range 2 {
			smp := nvml.Sample{TS: (i + 1) * 100e6, Device: d, MemUsed: (10 + i) * gib, MemTotal: total}
			if d == 1 {
				smp.Processes = []nvml.ProcSample{{PID: 7, MemUsed: gib}, {PID: 42, MemUsed: (9 + i) * gib}}
			}
			samples = append(samples, smp)
		}
	}
	p := &model.Process{PID: 42, OOMs: []model.OOM{
		{At: 240e6, End: 250e6, Device: 0},
		{At: 245e6, End: 260e6, Device: 0}, // the same samples: kept once
		{At: 40e6, End: 50e6, Device: 0},   // before the first sample
	}}
	name := func(pid uint32) (string, string) {
		if pid == 7 {
			return "other", "c0ffee"
		}
		return "", "" // exited
	}
	g := model.GPUReport{Moments: oomMoments(samples, []*model.Process{p}, name)}
	var got []string
	for _, m := range g.Moments {
		got = append(got, fmt.Sprintf("%d@%d:%d", m.Device, m.TS/1e6, m.MemUsed/gib))
	}
	if want := "0@100:10 1@100:10 0@200:11 1@200:11"; strings.Join(got, " ") != want {
		t.Errorf("moments %s, want %s", strings.Join(got, " "), want)
	}
	if m := g.Moments[3]; len(m.Processes) != 2 || m.Processes[0] != (model.GPUHolder{PID: 42, MemUsed: 10 * gib}) ||
		m.Processes[1] != (model.GPUHolder{PID: 7, MemUsed: gib, Comm: "other", Container: "c0ffee"}) {
		t.Errorf("processes %+v", m.Processes)
	}
	// NVML listed pid 42 on device 1 only: that is its device, though its
	// thread's CUDA device was 0 (CUDA_VISIBLE_DEVICES renumbers them).
	for i, want := range []uint64{200e6, 100e6} {
		o := &p.OOMs[[]int{0, 2}[i]]
		ms := g.MomentsOf(p, o)
		if len(ms) != 1 || ms[0].Device != 1 || ms[0].TS != want {
			t.Errorf("OOM at %d: moments %+v, want device 1 at %d", o.End, ms, want)
		}
	}
}
