package report

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/tracer/model"
)

const (
	GiB       = 1 << 30
	h200Total = 143771 << 20
)

var nan = model.Reading(math.NaN())

// device is an H200 polled n times with every reading supported and no
// throttling; f edits it.
func device(index, n int, f func(d *model.GPUStats)) model.GPUStats {
	d := model.GPUStats{Index: index, UUID: "GPU-x", Name: "NVIDIA H200", Samples: n, StartNs: 1e9, EndNs: uint64(1e9 + (n-1)*1e8),
		UtilMean: 50, UtilPeak: 60, MemUtilMean: 5, MemTotal: h200Total,
		PowerMeanW: 300, PowerPeakW: 320, PowerLimitW: 700, TempPeakC: 40,
		SMClockMeanMHz: 1980, SMClockMinMHz: 1980, SMClockMaxMHz: 1980}
	f(&d)
	return d
}

// host is a traced process whose CPU time was not read.
func host(pid uint32, calls int64) model.TracedHost {
	return model.TracedHost{PID: pid, CUDACalls: calls, HostBusy: nan}
}

func busy(pid uint32, calls int64, share float64) model.TracedHost {
	return model.TracedHost{PID: pid, CUDACalls: calls, HostBusy: model.Reading(share)}
}

func TestVerdictHostBound(t *testing.T) {
	g := &model.GPUReport{GPUs: []model.GPUStats{
		device(0, 20, func(d *model.GPUStats) {
			d.UtilMean, d.UtilPeak, d.MemPeak = 13.4, 40, 20*GiB
			d.Processes = []model.GPUProcess{{PID: 4123, MemPeak: 19 * GiB, Polls: 20, SMUtilMean: 12}}
		}),
		device(1, 20, func(d *model.GPUStats) {
			d.UtilMean, d.UtilPeak = 95, 95
			d.Processes = []model.GPUProcess{{PID: 5000, MemPeak: GiB, Polls: 20, SMUtilMean: 95}}
		}),
	}}
	g.Traced = []model.TracedHost{busy(4123, 5000, 0.87), busy(5000, 9000, 0.9), busy(6000, 10, 0.2)}
	v := Verdicts(g)
	if len(v) != 1 {
		t.Fatalf("verdicts %v", v)
	}
	if v[0].Kind != "input/host bound" || v[0].Device != 0 || v[0].PID != 4123 {
		t.Errorf("%+v", v[0])
	}
	for _, want := range []string{"GPU 0 busy 13.4% on average", "peak 40%", "20 samples", "busy 87% of wall time outside CUDA calls"} {
		if !strings.Contains(v[0].Detail, want) {
			t.Errorf("detail %q lacks %q", v[0].Detail, want)
		}
	}

	// Without host CPU times there is nothing to judge.
	g.Traced = []model.TracedHost{host(4123, 5000), host(5000, 9000)}
	if v := Verdicts(g); v != nil {
		t.Errorf("verdict without host data: %v", v)
	}
	// A traced process NVML never listed (another PID namespace): judged
	// against every GPU.
	g.Traced = []model.TracedHost{busy(777, 10, 0.6)}
	if v := Verdicts(g); len(v) != 1 || v[0].Device != 0 || v[0].PID != 777 {
		t.Errorf("unlisted pid: %v", v)
	}
	// A GPU that never reported utilization is not judged.
	g.GPUs[0].UtilMean, g.GPUs[0].UtilPeak = nan, nan
	if v := Verdicts(g); len(v) != 0 {
		t.Errorf("GPU without utilization: %v", v)
	}
}

func TestVerdictOOMRisk(t *testing.T) {
	g := &model.GPUReport{GPUs: []model.GPUStats{device(2, 10, func(d *model.GPUStats) {
		d.MemPeak = 136 * GiB // of 140.4 GiB
		d.MemPeakPID, d.MemPeakPIDBytes = 4123, 136*GiB-GiB/2
		d.Processes = []model.GPUProcess{{PID: 99, MemPeak: GiB / 4, Polls: 10}, {PID: 4123, MemPeak: 136*GiB - GiB/2, Polls: 10}}
	})}, Traced: []model.TracedHost{host(4123, 10)}}
	v := Verdicts(g)
	if len(v) != 1 || v[0].Kind != "out-of-memory risk" || v[0].Device != 2 || v[0].PID != 4123 {
		t.Fatalf("verdicts %v", v)
	}
	want := "peak 136.0 GiB used of 140.4 GiB (96.9%, threshold 95%), 4.4 GiB free; pid 4123 held 135.5 GiB of it"
	if v[0].Detail != want {
		t.Errorf("detail\n %q\nwant\n %q", v[0].Detail, want)
	}
	// No process listed at the peak: the device alone.
	g.GPUs[0].MemPeakPID, g.GPUs[0].MemPeakPIDBytes = 0, 0
	if v := Verdicts(g); len(v) != 1 || v[0].PID != 0 || strings.Contains(v[0].Detail, "pid") {
		t.Errorf("without a holder: %v", v)
	}
	// 94% is not a risk
	safe := &model.GPUReport{GPUs: []model.GPUStats{device(0, 3, func(d *model.GPUStats) { d.MemPeak = h200Total * 94 / 100 })}}
	if v := Verdicts(safe); len(v) != 0 {
		t.Errorf("94%%: %v", v)
	}
}

func TestVerdictThrottled(t *testing.T) {
	g := &model.GPUReport{GPUs: []model.GPUStats{device(1, 20, func(d *model.GPUStats) {
		d.UtilMean, d.UtilPeak = 99, 99
		d.PowerMeanW, d.PowerPeakW, d.TempPeakC = 669.6, 699, 88
		d.SMClockMeanMHz, d.SMClockMinMHz = 1861.5, 1410
		d.ThrottlePolls = map[string]int{"sw_power_cap": 9, "hw_thermal_slowdown": 1, "applications_clocks": 11}
	})}}
	v := Verdicts(g)
	if len(v) != 1 || v[0].Kind != "throttled" || v[0].Device != 1 || v[0].PID != 0 {
		t.Fatalf("verdicts %v", v)
	}
	want := "sw_power_cap in 45% of samples (9/20), hw_thermal_slowdown in 5% of samples (1/20); power mean 670 W, peak 699 W of 700 W limit; SM clock mean 1862 MHz, min 1410 MHz (max 1980 MHz); temperature peak 88 °C"
	if v[0].Detail != want {
		t.Errorf("detail\n %q\nwant\n %q", v[0].Detail, want)
	}
	if !strings.Contains(v[0].String(), "GPU 1: throttled: sw_power_cap") {
		t.Errorf("string %q", v[0])
	}
	// Unsupported readings are left out of the numbers behind it.
	d := &g.GPUs[0]
	d.PowerMeanW, d.PowerPeakW, d.PowerLimitW, d.TempPeakC, d.SMClockMeanMHz, d.SMClockMinMHz, d.SMClockMaxMHz = nan, nan, nan, nan, nan, 0, 0
	if v := Verdicts(g); len(v) != 1 || v[0].Detail != "sw_power_cap in 45% of samples (9/20), hw_thermal_slowdown in 5% of samples (1/20)" {
		t.Errorf("without power, clocks, temperature: %v", v)
	}
	// Idle clocks and a single blip are not throttling.
	calm := &model.GPUReport{GPUs: []model.GPUStats{device(0, 40, func(d *model.GPUStats) {
		d.ThrottlePolls = map[string]int{"gpu_idle": 39, "hw_slowdown": 1}
	})}}
	if v := Verdicts(calm); len(v) != 0 {
		t.Errorf("calm GPU: %v", v)
	}
}

func TestVerdictIdleHolder(t *testing.T) {
	g := &model.GPUReport{GPUs: []model.GPUStats{device(3, 10, func(d *model.GPUStats) {
		d.UtilMean = 60
		d.Processes = []model.GPUProcess{
			{PID: 4123, MemPeak: 70 * GiB, Polls: 10, SMUtilMean: 60},
			{PID: 777, MemPeak: 12 * GiB, Polls: 6, SMUtilMean: 0}, // traced, no CUDA calls
			{PID: 888, MemPeak: 3 * GiB, Polls: 6, SMUtilMean: 0},  // not traced: not judged
		}
	})}, Traced: []model.TracedHost{host(777, 0), host(4123, 120000)}}
	v := Verdicts(g)
	if len(v) != 1 || v[0].Kind != "idle holder" || v[0].Device != 3 || v[0].PID != 777 {
		t.Fatalf("verdicts %v", v)
	}
	want := "pid 777 held 12.0 GiB of GPU 3 (peak, listed in 6 of 10 samples) and made 0 CUDA calls while traced; SM utilization 0.0%: its memory is unavailable to the jobs that are working"
	if v[0].Detail != want {
		t.Errorf("detail\n %q\nwant\n %q", v[0].Detail, want)
	}
	// Without per-process SM utilization the clause is left out.
	g.GPUs[0].Processes[1].SMUtilMean = nan
	if v := Verdicts(g); len(v) != 1 || strings.Contains(v[0].Detail, "SM utilization") {
		t.Errorf("without SM utilization: %v", v)
	}
}

func TestVerdictOrder(t *testing.T) {
	d := func(index int) model.GPUStats {
		return device(index, 10, func(d *model.GPUStats) {
			d.UtilMean, d.UtilPeak, d.MemPeak = 5, 5, h200Total-GiB
			d.MemPeakPID, d.MemPeakPIDBytes = 1, h200Total-2*GiB
			d.ThrottlePolls = map[string]int{"hw_power_brake_slowdown": 10}
			d.Processes = []model.GPUProcess{{PID: 2, MemPeak: GiB / 2, Polls: 10}, {PID: 1, MemPeak: h200Total - 2*GiB, Polls: 10}}
		})
	}
	// Devices and processes out of order on purpose.
	g := &model.GPUReport{GPUs: []model.GPUStats{d(1), d(0)}, Traced: []model.TracedHost{host(2, 0), busy(1, 10, 0.95)}}
	var got []string
	for _, x := range Verdicts(g) {
		got = append(got, x.String()[:strings.Index(x.String(), ": ")+2]+x.Kind)
	}
	want := []string{
		"GPU 0, pid 1: input/host bound", "GPU 1, pid 1: input/host bound",
		"GPU 0, pid 1: out-of-memory risk", "GPU 1, pid 1: out-of-memory risk",
		"GPU 0: throttled", "GPU 1: throttled",
		"GPU 0, pid 2: idle holder", "GPU 1, pid 2: idle holder",
	}
	if !slices.Equal(got, want) {
		t.Errorf("verdicts\n %q\nwant\n %q", got, want)
	}
}

// gpuSection is the summary's GPU section for g.
func gpuSection(t *testing.T, g model.GPUReport) string {
	t.Helper()
	f := fixture.New()
	f.Result.GPU = g
	out := summary(t, f, Options{})
	i, j := strings.Index(out, "\nGPUs (NVML)\n"), strings.Index(out, "\ndropped events")
	if i < 0 || j < i {
		t.Fatalf("no GPU section in\n%s", out)
	}
	return out[i+1 : j]
}

func TestGPUSection(t *testing.T) {
	g := model.GPUReport{ClockErrorNs: 1500,
		GPUs: []model.GPUStats{
			device(0, 20, func(d *model.GPUStats) {
				d.MemPeak = 137 * GiB
				d.ThrottlePolls = map[string]int{"gpu_idle": 3, "applications_clocks": 1}
			}),
			device(1, 4, func(d *model.GPUStats) {
				d.UtilMean, d.UtilPeak, d.PowerMeanW, d.PowerPeakW = nan, nan, nan, nan
			}),
		},
		Events: []model.GPUEvent{{TS: fixture.Base + 2e9, Device: 1, Kind: "xid", Data: 79}, {TS: fixture.Base + 3e6, Device: 0, Kind: "ecc_double_bit"}},
	}
	want := `GPUs (NVML)
  GPU 0 NVIDIA H200: 20 samples, utilization mean 50% peak 60%, memory peak 137.0 GiB of 140.4 GiB, power mean 300 W peak 320 W, throttle reasons seen: applications_clocks
  GPU 1 NVIDIA H200: 4 samples, utilization mean n/a peak n/a, memory peak 0 B of 140.4 GiB, power mean n/a peak n/a
  verdict: GPU 0: out-of-memory risk: peak 137.0 GiB used of 140.4 GiB (97.6%, threshold 95%), 3.4 GiB free
  event: GPU 1: Xid 79 at +2.00 s
  event: GPU 0: ecc_double_bit at +3.0 ms
  clock: NVML samples placed on the trace clock within ±1.5 µs
`
	if got := gpuSection(t, g); got != want {
		t.Errorf("GPU section\n%s\nwant\n%s", got, want)
	}

	g = model.GPUReport{GPUs: []model.GPUStats{device(0, 1, func(*model.GPUStats) {})}}
	if got := gpuSection(t, g); !strings.Contains(got, "\n  verdicts: none (not host bound, no input-pipeline stall, no out-of-memory risk, no throttling, no idle holder)\n") {
		t.Errorf("no verdicts:\n%s", got)
	}
	g = model.GPUReport{Status: "disabled (--nvml-interval < 0)"}
	if got := gpuSection(t, g); got != "GPUs (NVML)\n  not sampled: disabled (--nvml-interval < 0)\n" {
		t.Errorf("not sampled:\n%s", got)
	}
}

// A recording made before the report held numbers has worded lines only:
// they are printed as they are.
func TestGPUSectionLegacy(t *testing.T) {
	g := model.GPUReport{ClockErrorNs: 1500,
		Devices:  []string{"GPU 0 NVIDIA H200: 2 samples, utilization mean 12% peak 40%"},
		Verdicts: []string{"GPU 0, pid 4123: input/host bound: GPU 0 busy 12.0% on average", "GPU 0: xid event (data 79)"},
	}
	want := `GPUs (NVML)
  GPU 0 NVIDIA H200: 2 samples, utilization mean 12% peak 40%
  verdict: GPU 0, pid 4123: input/host bound: GPU 0 busy 12.0% on average
  verdict: GPU 0: xid event (data 79)
  clock: NVML samples placed on the trace clock within ±1.5 µs
`
	if got := gpuSection(t, g); got != want {
		t.Errorf("legacy GPU section\n%s\nwant\n%s", got, want)
	}
	g.Verdicts = nil
	if got := gpuSection(t, g); !strings.Contains(got, "  verdicts: none") {
		t.Errorf("legacy, no verdicts:\n%s", got)
	}
}
