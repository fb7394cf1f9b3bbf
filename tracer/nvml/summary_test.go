package nvml_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/tracer/nvml"
)

const h200Total = 143771 << 20

// series makes n polls 100 ms apart of one device; f edits poll i.
func series(dev, n int, f func(i int, s *nvml.Sample)) []nvml.Sample {
	out := make([]nvml.Sample, n)
	for i := range out {
		s := &out[i]
		*s = nvml.Sample{TS: uint64(1e9 + i*1e8), Device: dev, UUID: "GPU-x", Name: "NVIDIA H200",
			MemTotal: h200Total, PowerLimitW: 700, SMClockMHz: 1980, SMClockMaxMHz: 1980, MemClockMHz: 3201, TempC: 40,
			PCIeRxBps: math.NaN(), PCIeTxBps: math.NaN()}
		f(i, s)
	}
	return out
}

func TestSummarize(t *testing.T) {
	a := series(0, 10, func(i int, s *nvml.Sample) {
		s.GPUUtil, s.MemUtil = float64(10*i), 5
		s.PowerW = 100 + float64(i)
		s.MemUsed = uint64(i) * gib
		s.TempC = float64(50 + i)
		if i == 9 {
			s.SMClockMHz = 1500
		}
		if i < 3 {
			s.ThrottleReasons = []string{"gpu_idle"}
		} else if i < 5 {
			s.ThrottleReasons = []string{"sw_power_cap"}
		}
		s.Util = []nvml.UtilPoint{{GPUUtil: float64(10*i) + 5, MemUtil: 5}}
	})
	b := series(1, 4, func(i int, s *nvml.Sample) {
		s.GPUUtil, s.MemUtil, s.PowerW, s.TempC = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	})
	sums := nvml.Summarize(append(b, a...)) // out of order on purpose
	if len(sums) != 2 || sums[0].Device.Index != 0 || sums[1].Device.Index != 1 {
		t.Fatalf("%+v", sums)
	}
	d := sums[0]
	if d.Samples != 10 || d.GPUUtilMean != 45 || d.GPUUtilPeak != 95 || d.MemUtilMean != 5 || d.MemPeak != 9*gib ||
		d.PowerMeanW != 104.5 || d.PowerPeakW != 109 || d.TempPeakC != 59 || d.SMClockMinMHz != 1500 ||
		d.SMClockMeanMHz != (9*1980+1500)/10.0 || d.Start != 1e9 || d.End != 1e9+9e8 {
		t.Errorf("summary %+v", d)
	}
	if !slices.Equal(d.Throttled, []string{"sw_power_cap"}) || d.ThrottleShare["sw_power_cap"] != 0.2 || d.ThrottleShare["gpu_idle"] != 0.3 {
		t.Errorf("throttle %v %v", d.Throttled, d.ThrottleShare)
	}
	if d.Device.Name != "NVIDIA H200" || d.Device.MemTotal != h200Total || d.Device.PowerLimitW != 700 {
		t.Errorf("device %+v", d.Device)
	}
	u := sums[1]
	if !math.IsNaN(u.GPUUtilMean) || !math.IsNaN(u.GPUUtilPeak) || !math.IsNaN(u.PowerMeanW) || !math.IsNaN(u.TempPeakC) {
		t.Errorf("unsupported fields should summarize to NaN: %+v", u)
	}
}

func TestVerdictHostBound(t *testing.T) {
	starved := series(0, 20, func(i int, s *nvml.Sample) {
		s.GPUUtil = 12
		if i == 7 {
			s.GPUUtil = 40
		}
		s.MemUsed = 20 * gib
		s.Processes = []nvml.ProcSample{{PID: 4123, MemUsed: 19 * gib, SMUtil: 12}}
	})
	busy := series(1, 20, func(i int, s *nvml.Sample) {
		s.GPUUtil = 95
		s.Processes = []nvml.ProcSample{{PID: 5000, MemUsed: gib, SMUtil: 95}}
	})
	samples := append(starved, busy...)
	v := nvml.Verdicts(nvml.Summarize(samples), samples,
		map[uint32]float64{4123: 0.87, 5000: 0.9, 6000: 0.2}, map[uint32]int{4123: 5000, 5000: 9000, 6000: 10})
	if len(v) != 1 {
		t.Fatalf("verdicts %v", v)
	}
	g := v[0]
	if g.Kind != "input/host bound" || g.Device != 0 || g.PID != 4123 {
		t.Errorf("%+v", g)
	}
	for _, want := range []string{"GPU 0 busy 13.4% on average", "peak 40%", "20 samples", "busy 87% of wall time outside CUDA calls"} {
		if !strings.Contains(g.Detail, want) {
			t.Errorf("detail %q lacks %q", g.Detail, want)
		}
	}
	if nvml.Verdicts(nvml.Summarize(samples), samples, nil, nil) != nil {
		t.Error("verdict without host data")
	}
	// A traced process NVML never listed (another PID namespace): judged
	// against every GPU.
	v = nvml.Verdicts(nvml.Summarize(samples), samples, map[uint32]float64{777: 0.6}, nil)
	if len(v) != 1 || v[0].Device != 0 || v[0].PID != 777 {
		t.Errorf("unlisted pid: %v", v)
	}
}

func TestVerdictOOMRisk(t *testing.T) {
	samples := series(2, 10, func(i int, s *nvml.Sample) {
		s.GPUUtil = 90
		s.MemUsed = uint64(100+4*i) * gib // peak 136 GiB of 140.4 GiB
		s.Processes = []nvml.ProcSample{{PID: 4123, MemUsed: s.MemUsed - gib/2}, {PID: 99, MemUsed: gib / 4}}
	})
	v := nvml.Verdicts(nvml.Summarize(samples), samples, nil, nil)
	if len(v) != 1 || v[0].Kind != "out-of-memory risk" || v[0].Device != 2 || v[0].PID != 4123 {
		t.Fatalf("verdicts %v", v)
	}
	want := "peak 136.0 GiB used of 140.4 GiB (96.9%, threshold 95%), 4.4 GiB free; pid 4123 held 135.5 GiB of it"
	if v[0].Detail != want {
		t.Errorf("detail\n %q\nwant\n %q", v[0].Detail, want)
	}
	// 94% is not a risk
	safe := series(0, 3, func(i int, s *nvml.Sample) { s.MemUsed = h200Total * 94 / 100 })
	if v := nvml.Verdicts(nvml.Summarize(safe), safe, nil, nil); len(v) != 0 {
		t.Errorf("94%%: %v", v)
	}
}

func TestVerdictThrottled(t *testing.T) {
	samples := series(1, 20, func(i int, s *nvml.Sample) {
		s.GPUUtil, s.PowerW, s.TempC = 99, 650, 70
		switch {
		case i < 8:
			s.ThrottleReasons = []string{"sw_power_cap"}
			s.PowerW, s.SMClockMHz = 699, 1755
		case i == 8:
			s.ThrottleReasons = []string{"hw_thermal_slowdown", "sw_power_cap"}
			s.TempC, s.SMClockMHz = 88, 1410
		default:
			s.ThrottleReasons = []string{"applications_clocks"}
		}
	})
	v := nvml.Verdicts(nvml.Summarize(samples), samples, nil, nil)
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
	// idle clocks and a single blip are not throttling
	calm := series(0, 40, func(i int, s *nvml.Sample) {
		s.ThrottleReasons = []string{"gpu_idle"}
		if i == 3 {
			s.ThrottleReasons = []string{"hw_slowdown"}
		}
	})
	if v := nvml.Verdicts(nvml.Summarize(calm), calm, nil, nil); len(v) != 0 {
		t.Errorf("calm GPU: %v", v)
	}
}

func TestVerdictIdleHolder(t *testing.T) {
	samples := series(3, 10, func(i int, s *nvml.Sample) {
		s.GPUUtil = 60
		s.Processes = []nvml.ProcSample{
			{PID: 4123, MemUsed: 70 * gib, SMUtil: 60},
			{PID: 777, MemUsed: 12 * gib, SMUtil: 0}, // traced, no CUDA calls
			{PID: 888, MemUsed: 3 * gib, SMUtil: 0},  // not traced: not judged
		}
		if i >= 6 {
			s.Processes = s.Processes[:1] // 777 exits
		}
	})
	v := nvml.Verdicts(nvml.Summarize(samples), samples, nil, map[uint32]int{4123: 120000, 777: 0})
	if len(v) != 1 || v[0].Kind != "idle holder" || v[0].Device != 3 || v[0].PID != 777 {
		t.Fatalf("verdicts %v", v)
	}
	want := "pid 777 held 12.0 GiB of GPU 3 (peak, listed in 6 of 10 samples) and made 0 CUDA calls while traced; SM utilization 0.0%: its memory is unavailable to the jobs that are working"
	if v[0].Detail != want {
		t.Errorf("detail\n %q\nwant\n %q", v[0].Detail, want)
	}
}

func TestVerdictOrder(t *testing.T) {
	samples := series(0, 10, func(i int, s *nvml.Sample) {
		s.GPUUtil, s.MemUsed = 5, h200Total-gib
		s.ThrottleReasons = []string{"hw_power_brake_slowdown"}
		s.Processes = []nvml.ProcSample{{PID: 1, MemUsed: h200Total - 2*gib}, {PID: 2, MemUsed: gib / 2}}
	})
	v := nvml.Verdicts(nvml.Summarize(samples), samples, map[uint32]float64{1: 0.95}, map[uint32]int{1: 10, 2: 0})
	var kinds []string
	for _, x := range v {
		kinds = append(kinds, x.Kind)
	}
	if !slices.Equal(kinds, []string{"input/host bound", "out-of-memory risk", "throttled", "idle holder"}) {
		t.Errorf("kinds %v", kinds)
	}
}
