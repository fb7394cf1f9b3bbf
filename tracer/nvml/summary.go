package nvml

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// DeviceSummary are one GPU's statistics over a recording. Means are over
// polls (equally spaced), skipping polls where the field was unsupported.
type DeviceSummary struct {
	Device                   Device
	Samples                  int
	Start, End               uint64 // ns, CLOCK_MONOTONIC, first and last poll
	GPUUtilMean, GPUUtilPeak float64
	MemUtilMean              float64
	MemPeak                  uint64
	PowerMeanW, PowerPeakW   float64
	TempPeakC                float64
	SMClockMeanMHz           float64
	SMClockMinMHz            uint32
	Throttled                []string           // reasons seen, except gpu_idle, sorted
	ThrottleShare            map[string]float64 // reason -> share of polls it was active in
}

// Summarize groups samples by device (in device order) and computes each
// device's statistics. Fields a GPU never reported are NaN.
func Summarize(samples []Sample) []DeviceSummary {
	type acc struct {
		sum                DeviceSummary
		gpu, mem, pwr, clk mean
		reasons            map[string]int
	}
	by := map[int]*acc{}
	var order []int
	for i := range samples {
		s := &samples[i]
		a := by[s.Device]
		if a == nil {
			a = &acc{reasons: map[string]int{}}
			a.sum.Device = Device{Index: s.Device, UUID: s.UUID, Name: s.Name, MemTotal: s.MemTotal, PowerLimitW: s.PowerLimitW, MaxSMClock: s.SMClockMaxMHz}
			a.sum.Start = s.TS
			a.sum.GPUUtilPeak, a.sum.PowerPeakW, a.sum.TempPeakC = math.NaN(), math.NaN(), math.NaN()
			by[s.Device] = a
			order = append(order, s.Device)
		}
		d := &a.sum
		d.Samples++
		d.Start, d.End = min(d.Start, s.TS), max(d.End, s.TS)
		if d.Device.MemTotal == 0 {
			d.Device.MemTotal = s.MemTotal
		}
		if math.IsNaN(d.Device.PowerLimitW) || d.Device.PowerLimitW == 0 {
			d.Device.PowerLimitW = s.PowerLimitW
		}
		a.gpu.add(s.GPUUtil)
		a.mem.add(s.MemUtil)
		a.pwr.add(s.PowerW)
		d.GPUUtilPeak = nanMax(d.GPUUtilPeak, s.GPUUtil)
		for _, p := range s.Util {
			d.GPUUtilPeak = nanMax(d.GPUUtilPeak, p.GPUUtil)
		}
		d.PowerPeakW = nanMax(d.PowerPeakW, s.PowerW)
		d.TempPeakC = nanMax(d.TempPeakC, s.TempC)
		d.MemPeak = max(d.MemPeak, s.MemUsed)
		if s.SMClockMHz > 0 {
			a.clk.add(float64(s.SMClockMHz))
			if d.SMClockMinMHz == 0 || s.SMClockMHz < d.SMClockMinMHz {
				d.SMClockMinMHz = s.SMClockMHz
			}
		}
		for _, r := range s.ThrottleReasons {
			a.reasons[r]++
		}
	}
	sort.Ints(order)
	out := make([]DeviceSummary, 0, len(order))
	for _, dev := range order {
		a := by[dev]
		d := a.sum
		d.GPUUtilMean, d.MemUtilMean, d.PowerMeanW, d.SMClockMeanMHz = a.gpu.value(), a.mem.value(), a.pwr.value(), a.clk.value()
		d.ThrottleShare = map[string]float64{}
		for r, n := range a.reasons {
			d.ThrottleShare[r] = float64(n) / float64(d.Samples)
			if r != "gpu_idle" {
				d.Throttled = append(d.Throttled, r)
			}
		}
		sort.Strings(d.Throttled)
		out = append(out, d)
	}
	return out
}

type mean struct {
	sum float64
	n   int
}

func (m *mean) add(v float64) {
	if !math.IsNaN(v) {
		m.sum += v
		m.n++
	}
}

func (m mean) value() float64 {
	if m.n == 0 {
		return math.NaN()
	}
	return m.sum / float64(m.n)
}

func nanMax(a, b float64) float64 {
	switch {
	case math.IsNaN(b):
		return a
	case math.IsNaN(a):
		return b
	}
	return math.Max(a, b)
}

// Verdict is one finding of the summary, with the numbers behind it.
type Verdict struct {
	Kind   string // VerdictHostBound, VerdictOOMRisk, VerdictThrottled, VerdictIdleHolder
	Device int
	PID    uint32 // 0 when the verdict is about the device alone
	Detail string
}

func (v Verdict) String() string {
	if v.PID != 0 {
		return fmt.Sprintf("GPU %d, pid %d: %s: %s", v.Device, v.PID, v.Kind, v.Detail)
	}
	return fmt.Sprintf("GPU %d: %s: %s", v.Device, v.Kind, v.Detail)
}

// Verdict kinds.
const (
	VerdictHostBound  = "input/host bound"
	VerdictOOMRisk    = "out-of-memory risk"
	VerdictThrottled  = "throttled"
	VerdictIdleHolder = "idle holder"
)

// Verdict thresholds.
const (
	// HostBoundGPUUtil: a GPU busier than this (mean %) is not starved.
	HostBoundGPUUtil = 20.0
	// HostBusyMin: the traced host threads count as busy when they spent at
	// least this share of wall time outside CUDA calls.
	HostBusyMin = 0.5
	// OOMRiskShare: device memory used at its peak, as a share of the total,
	// from which a device is at risk of running out.
	OOMRiskShare = 0.95
	// ThrottleMinShare: a thermal or power reason must be active in at least
	// this share of polls to count (one blip is not throttling).
	ThrottleMinShare = 0.05
)

// throttleKinds are the clock event reasons that are thermal or power
// throttling (gpu_idle, applications_clocks, sync_boost and display_clocks
// are not).
var throttleKinds = map[string]bool{
	"sw_power_cap":            true,
	"hw_slowdown":             true,
	"sw_thermal_slowdown":     true,
	"hw_thermal_slowdown":     true,
	"hw_power_brake_slowdown": true,
}

// Verdicts judges a recording:
//   - input/host bound: a GPU busy < 20% on average while a traced process
//     using it (or, when NVML never listed it, any process) kept its host
//     threads busy outside CUDA calls at least half of wall time. hostBusy
//     maps pid to that share (0..1); nil skips this verdict.
//   - out-of-memory risk: device memory used at its peak within 5% of the total.
//   - throttled: a thermal or power clock event reason active in ≥ 5% of polls.
//   - idle holder: a process holding device memory that made no CUDA calls.
//     cudaCalls must hold every traced pid (0 when it made none); pids
//     missing from it are not judged, so untraced processes never are.
//
// Verdicts come by kind (in the order above), then device, then pid.
func Verdicts(sum []DeviceSummary, samples []Sample, hostBusy map[uint32]float64, cudaCalls map[uint32]int) []Verdict {
	var out []Verdict
	byDev := map[int]*DeviceSummary{}
	for i := range sum {
		byDev[sum[i].Device.Index] = &sum[i]
	}

	// Which processes held memory where: peak bytes, polls present, SM use.
	type use struct {
		peak  uint64
		polls int
		sm    mean
	}
	uses := map[[2]int]*use{} // {device, pid}
	pidDevs := map[uint32][]int{}
	for _, s := range samples {
		for _, p := range s.Processes {
			k := [2]int{s.Device, int(p.PID)}
			u := uses[k]
			if u == nil {
				u = &use{}
				uses[k] = u
				pidDevs[p.PID] = append(pidDevs[p.PID], s.Device)
			}
			u.peak = max(u.peak, p.MemUsed)
			u.polls++
			u.sm.add(p.SMUtil)
		}
	}

	// input/host bound
	pids := sortedPIDs(hostBusy)
	for _, pid := range pids {
		busy := hostBusy[pid]
		if busy < HostBusyMin {
			continue
		}
		devs := pidDevs[pid]
		if len(devs) == 0 {
			for _, d := range sum {
				devs = append(devs, d.Device.Index)
			}
		}
		sort.Ints(devs)
		for _, dev := range devs {
			d := byDev[dev]
			if d == nil || math.IsNaN(d.GPUUtilMean) || d.GPUUtilMean >= HostBoundGPUUtil {
				continue
			}
			out = append(out, Verdict{Kind: VerdictHostBound, Device: dev, PID: pid, Detail: fmt.Sprintf(
				"GPU %d busy %.1f%% on average (peak %.0f%%, %d samples, threshold %.0f%%) while pid %d's host threads were busy %.0f%% of wall time outside CUDA calls: feed the GPU faster (more DataLoader workers, pinned memory, prefetching) or move host work off the critical path",
				dev, d.GPUUtilMean, d.GPUUtilPeak, d.Samples, HostBoundGPUUtil, pid, busy*100)})
		}
	}

	// out-of-memory risk
	for _, d := range sum {
		if d.Device.MemTotal == 0 || float64(d.MemPeak) < OOMRiskShare*float64(d.Device.MemTotal) {
			continue
		}
		v := Verdict{Kind: VerdictOOMRisk, Device: d.Device.Index}
		detail := fmt.Sprintf("peak %s used of %s (%.1f%%, threshold %.0f%%), %s free",
			gib(d.MemPeak), gib(d.Device.MemTotal), 100*float64(d.MemPeak)/float64(d.Device.MemTotal), OOMRiskShare*100, gib(d.Device.MemTotal-d.MemPeak))
		// the biggest holder at the peak poll
		for _, s := range samples {
			if s.Device != d.Device.Index || s.MemUsed != d.MemPeak {
				continue
			}
			var top ProcSample
			for _, p := range s.Processes {
				if p.MemUsed > top.MemUsed {
					top = p
				}
			}
			if top.MemUsed > 0 {
				v.PID = top.PID
				detail += fmt.Sprintf("; pid %d held %s of it", top.PID, gib(top.MemUsed))
			}
			break
		}
		v.Detail = detail
		out = append(out, v)
	}

	// throttled
	for _, d := range sum {
		var reasons []string
		for _, r := range d.Throttled {
			if throttleKinds[r] && d.ThrottleShare[r] >= ThrottleMinShare {
				reasons = append(reasons, r)
			}
		}
		sort.SliceStable(reasons, func(i, j int) bool { return d.ThrottleShare[reasons[i]] > d.ThrottleShare[reasons[j]] })
		var parts []string
		for _, r := range reasons {
			share := d.ThrottleShare[r]
			parts = append(parts, fmt.Sprintf("%s in %.0f%% of samples (%d/%d)", r, share*100, int(math.Round(share*float64(d.Samples))), d.Samples))
		}
		if len(parts) == 0 {
			continue
		}
		detail := strings.Join(parts, ", ")
		if !math.IsNaN(d.PowerMeanW) {
			detail += fmt.Sprintf("; power mean %.0f W, peak %.0f W", d.PowerMeanW, d.PowerPeakW)
			if !math.IsNaN(d.Device.PowerLimitW) && d.Device.PowerLimitW > 0 {
				detail += fmt.Sprintf(" of %.0f W limit", d.Device.PowerLimitW)
			}
		}
		if d.SMClockMinMHz > 0 {
			detail += fmt.Sprintf("; SM clock mean %.0f MHz, min %d MHz", d.SMClockMeanMHz, d.SMClockMinMHz)
			if d.Device.MaxSMClock > 0 {
				detail += fmt.Sprintf(" (max %d MHz)", d.Device.MaxSMClock)
			}
		}
		if !math.IsNaN(d.TempPeakC) {
			detail += fmt.Sprintf("; temperature peak %.0f °C", d.TempPeakC)
		}
		out = append(out, Verdict{Kind: VerdictThrottled, Device: d.Device.Index, Detail: detail})
	}

	// idle holder
	var keys [][2]int
	for k := range uses {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		pid := uint32(k[1])
		calls, traced := cudaCalls[pid]
		u := uses[k]
		if !traced || calls != 0 || u.peak == 0 {
			continue
		}
		n := 0
		if d := byDev[k[0]]; d != nil {
			n = d.Samples
		}
		detail := fmt.Sprintf("pid %d held %s of GPU %d (peak, listed in %d of %d samples) and made 0 CUDA calls while traced",
			pid, gib(u.peak), k[0], u.polls, n)
		if sm := u.sm.value(); !math.IsNaN(sm) {
			detail += fmt.Sprintf("; SM utilization %.1f%%", sm)
		}
		detail += ": its memory is unavailable to the jobs that are working"
		out = append(out, Verdict{Kind: VerdictIdleHolder, Device: k[0], PID: pid, Detail: detail})
	}
	return out
}

func sortedPIDs(m map[uint32]float64) []uint32 {
	out := make([]uint32, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func gib(b uint64) string {
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}
