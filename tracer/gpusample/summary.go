package gpusample

import (
	"math"
	"sort"
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
	Throttled                []string       // reasons seen, except gpu_idle, sorted
	ThrottlePolls            map[string]int // reason -> polls it was active in
	// PeakHolder is the process holding the most memory at the first poll
	// that saw MemPeak (zero when none was listed there).
	PeakHolder ProcSample
	Processes  []ProcSummary // every process listed on the device, by pid
}

// ProcSummary is one process's use of one device over a recording.
type ProcSummary struct {
	PID        uint32
	MemPeak    uint64  // bytes
	Polls      int     // polls that listed it
	SMUtilMean float64 // %, NaN when unsupported
}

// Summarize groups samples by device (in device order) and computes each
// device's statistics. Fields a GPU never reported are NaN.
func Summarize(samples []Sample) []DeviceSummary {
	type acc struct {
		sum                DeviceSummary
		gpu, mem, pwr, clk mean
		reasons            map[string]int
		procs              map[uint32]*procAcc
	}
	by := map[int]*acc{}
	var order []int
	for i := range samples {
		s := &samples[i]
		a := by[s.Device]
		if a == nil {
			a = &acc{reasons: map[string]int{}, procs: map[uint32]*procAcc{}}
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
		if d.Samples == 1 || s.MemUsed > d.MemPeak {
			d.PeakHolder = biggest(s.Processes)
		}
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
		for _, p := range s.Processes {
			pa := a.procs[p.PID]
			if pa == nil {
				pa = &procAcc{}
				a.procs[p.PID] = pa
			}
			pa.peak = max(pa.peak, p.MemUsed)
			pa.polls++
			pa.sm.add(p.SMUtil)
		}
	}
	sort.Ints(order)
	out := make([]DeviceSummary, 0, len(order))
	for _, dev := range order {
		a := by[dev]
		d := a.sum
		d.GPUUtilMean, d.MemUtilMean, d.PowerMeanW, d.SMClockMeanMHz = a.gpu.value(), a.mem.value(), a.pwr.value(), a.clk.value()
		d.ThrottlePolls = a.reasons
		for r := range a.reasons {
			if r != "gpu_idle" {
				d.Throttled = append(d.Throttled, r)
			}
		}
		sort.Strings(d.Throttled)
		for pid, pa := range a.procs {
			d.Processes = append(d.Processes, ProcSummary{PID: pid, MemPeak: pa.peak, Polls: pa.polls, SMUtilMean: pa.sm.value()})
		}
		sort.Slice(d.Processes, func(i, j int) bool { return d.Processes[i].PID < d.Processes[j].PID })
		out = append(out, d)
	}
	return out
}

type procAcc struct {
	peak  uint64
	polls int
	sm    mean
}

// biggest is the process holding the most memory, zero when none holds any.
func biggest(procs []ProcSample) ProcSample {
	var top ProcSample
	for _, p := range procs {
		if p.MemUsed > top.MemUsed {
			top = p
		}
	}
	return top
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
