package gpusample_test

import (
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/cudatap/cudatap/tracer/gpusample"
)

const h200Total = 143771 << 20

// series makes n polls 100 ms apart of one device; f edits poll i.
const gib = 1 << 30

func series(dev, n int, f func(i int, s *gpusample.Sample)) []gpusample.Sample {
	out := make([]gpusample.Sample, n)
	for i := range out {
		s := &out[i]
		*s = gpusample.Sample{TS: uint64(1e9 + i*1e8), Device: dev, UUID: "GPU-x", Name: "NVIDIA H200",
			MemTotal: h200Total, PowerLimitW: 700, SMClockMHz: 1980, SMClockMaxMHz: 1980, MemClockMHz: 3201, TempC: 40,
			PCIeRxBps: math.NaN(), PCIeTxBps: math.NaN()}
		f(i, s)
	}
	return out
}

func TestSummarize(t *testing.T) {
	a := series(0, 10, func(i int, s *gpusample.Sample) {
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
		s.Util = []gpusample.UtilPoint{{GPUUtil: float64(10*i) + 5, MemUtil: 5}}
	})
	b := series(1, 4, func(i int, s *gpusample.Sample) {
		s.GPUUtil, s.MemUtil, s.PowerW, s.TempC = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	})
	sums := gpusample.Summarize(append(b, a...)) // out of order on purpose
	if len(sums) != 2 || sums[0].Device.Index != 0 || sums[1].Device.Index != 1 {
		t.Fatalf("%+v", sums)
	}
	d := sums[0]
	if d.Samples != 10 || d.GPUUtilMean != 45 || d.GPUUtilPeak != 95 || d.MemUtilMean != 5 || d.MemPeak != 9*gib ||
		d.PowerMeanW != 104.5 || d.PowerPeakW != 109 || d.TempPeakC != 59 || d.SMClockMinMHz != 1500 ||
		d.SMClockMeanMHz != (9*1980+1500)/10.0 || d.Start != 1e9 || d.End != 1e9+9e8 {
		t.Errorf("summary %+v", d)
	}
	if !slices.Equal(d.Throttled, []string{"sw_power_cap"}) || !maps.Equal(d.ThrottlePolls, map[string]int{"sw_power_cap": 2, "gpu_idle": 3}) {
		t.Errorf("throttle %v %v", d.Throttled, d.ThrottlePolls)
	}
	if d.Device.Name != "NVIDIA H200" || d.Device.MemTotal != h200Total || d.Device.PowerLimitW != 700 {
		t.Errorf("device %+v", d.Device)
	}
	u := sums[1]
	if !math.IsNaN(u.GPUUtilMean) || !math.IsNaN(u.GPUUtilPeak) || !math.IsNaN(u.PowerMeanW) || !math.IsNaN(u.TempPeakC) {
		t.Errorf("unsupported fields should summarize to NaN: %+v", u)
	}
}

// Per process: peak memory, polls listed, mean SM utilization; the biggest
// holder at the first poll that saw the device's memory peak.
func TestSummarizeProcesses(t *testing.T) {
	samples := series(3, 10, func(i int, s *gpusample.Sample) {
		s.MemUsed = uint64(80+min(i, 5)) * gib // peak from poll 5 on
		s.Processes = []gpusample.ProcSample{
			{PID: 4123, MemUsed: uint64(60+i) * gib, SMUtil: 60},
			{PID: 777, MemUsed: 12 * gib, SMUtil: float64(i)},
			{PID: 888, MemUsed: 3 * gib, SMUtil: math.NaN()},
		}
		if i >= 6 {
			s.Processes = s.Processes[:1] // 777 and 888 exit
		}
	})
	d := gpusample.Summarize(samples)[0]
	want := []gpusample.ProcSummary{
		{PID: 777, MemPeak: 12 * gib, Polls: 6, SMUtilMean: 2.5},
		{PID: 888, MemPeak: 3 * gib, Polls: 6, SMUtilMean: math.NaN()},
		{PID: 4123, MemPeak: 69 * gib, Polls: 10, SMUtilMean: 60},
	}
	same := func(a, b gpusample.ProcSummary) bool {
		return a.PID == b.PID && a.MemPeak == b.MemPeak && a.Polls == b.Polls &&
			(a.SMUtilMean == b.SMUtilMean || math.IsNaN(a.SMUtilMean) && math.IsNaN(b.SMUtilMean))
	}
	if !slices.EqualFunc(d.Processes, want, same) {
		t.Errorf("processes %+v\nwant %+v", d.Processes, want)
	}
	if d.MemPeak != 85*gib || d.PeakHolder != (gpusample.ProcSample{PID: 4123, MemUsed: 65 * gib, SMUtil: 60}) {
		t.Errorf("peak %d, holder %+v", d.MemPeak, d.PeakHolder)
	}
	// No process listed at the peak: no holder.
	bare := series(0, 3, func(i int, s *gpusample.Sample) { s.MemUsed = gib })
	if d := gpusample.Summarize(bare)[0]; d.PeakHolder != (gpusample.ProcSample{}) || d.Processes != nil {
		t.Errorf("no processes: holder %+v, processes %+v", d.PeakHolder, d.Processes)
	}
}
