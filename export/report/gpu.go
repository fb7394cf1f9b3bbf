package report

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/model"
)

// Verdict is one finding on the GPUs of a recording, with the numbers
// behind it.
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

// Verdicts judges the GPUs of a recording:
//   - input/host bound: a GPU busy < 20% on average while a traced process
//     using it (or, when NVML never listed it, any process) kept its host
//     threads busy outside CUDA calls at least half of wall time.
//   - out-of-memory risk: device memory used at its peak within 5% of the total.
//   - throttled: a thermal or power clock event reason active in ≥ 5% of polls.
//   - idle holder: a traced process holding device memory that made no CUDA
//     calls (untraced processes are never judged).
//
// Verdicts come by kind (in the order above), then device, then pid. A
// legacy report (worded lines only) has none.
func Verdicts(g *model.GPUReport) []Verdict {
	var out []Verdict
	out = append(out, hostBound(g)...)
	out = append(out, oomRisk(g)...)
	out = append(out, throttled(g)...)
	return append(out, idleHolders(g)...)
}

func hostBound(g *model.GPUReport) []Verdict {
	var out []Verdict
	traced := slices.Clone(g.Traced)
	slices.SortFunc(traced, func(a, b model.TracedHost) int { return cmp.Compare(a.PID, b.PID) })
	devs := byIndex(g.GPUs)
	for _, t := range traced {
		if !t.HostBusy.Known() || float64(t.HostBusy) < HostBusyMin {
			continue
		}
		// The devices NVML saw it on, else (another PID namespace) all.
		var on []*model.GPUStats
		for _, d := range devs {
			if listed(d, t.PID) {
				on = append(on, d)
			}
		}
		if len(on) == 0 {
			on = devs
		}
		for _, d := range on {
			if !d.UtilMean.Known() || float64(d.UtilMean) >= HostBoundGPUUtil {
				continue
			}
			out = append(out, Verdict{Kind: VerdictHostBound, Device: d.Index, PID: t.PID, Detail: fmt.Sprintf(
				"GPU %d busy %.1f%% on average (peak %.0f%%, %d samples, threshold %.0f%%) while pid %d's host threads were busy %.0f%% of wall time outside CUDA calls: feed the GPU faster (more DataLoader workers, pinned memory, prefetching) or move host work off the critical path",
				d.Index, float64(d.UtilMean), float64(d.UtilPeak), d.Samples, HostBoundGPUUtil, t.PID, float64(t.HostBusy)*100)})
		}
	}
	return out
}

func oomRisk(g *model.GPUReport) []Verdict {
	var out []Verdict
	for _, d := range byIndex(g.GPUs) {
		if d.MemTotal == 0 || float64(d.MemPeak) < OOMRiskShare*float64(d.MemTotal) {
			continue
		}
		v := Verdict{Kind: VerdictOOMRisk, Device: d.Index, PID: d.MemPeakPID}
		v.Detail = fmt.Sprintf("peak %s used of %s (%.1f%%, threshold %.0f%%), %s free",
			gib(d.MemPeak), gib(d.MemTotal), 100*float64(d.MemPeak)/float64(d.MemTotal), OOMRiskShare*100, gib(d.MemTotal-min(d.MemPeak, d.MemTotal)))
		if d.MemPeakPID != 0 {
			v.Detail += fmt.Sprintf("; pid %d held %s of it", d.MemPeakPID, gib(d.MemPeakPIDBytes))
		}
		out = append(out, v)
	}
	return out
}

func throttled(g *model.GPUReport) []Verdict {
	var out []Verdict
	for _, d := range byIndex(g.GPUs) {
		if d.Samples == 0 {
			continue
		}
		var reasons []string
		for r, n := range d.ThrottlePolls {
			if throttleKinds[r] && float64(n)/float64(d.Samples) >= ThrottleMinShare {
				reasons = append(reasons, r)
			}
		}
		if len(reasons) == 0 {
			continue
		}
		// Most often first, ties by name.
		sort.Slice(reasons, func(i, j int) bool {
			a, b := d.ThrottlePolls[reasons[i]], d.ThrottlePolls[reasons[j]]
			if a != b {
				return a > b
			}
			return reasons[i] < reasons[j]
		})
		var parts []string
		for _, r := range reasons {
			n := d.ThrottlePolls[r]
			parts = append(parts, fmt.Sprintf("%s in %.0f%% of samples (%d/%d)", r, 100*float64(n)/float64(d.Samples), n, d.Samples))
		}
		detail := strings.Join(parts, ", ")
		if d.PowerMeanW.Known() {
			detail += fmt.Sprintf("; power mean %.0f W, peak %.0f W", float64(d.PowerMeanW), float64(d.PowerPeakW))
			if d.PowerLimitW.Known() && d.PowerLimitW > 0 {
				detail += fmt.Sprintf(" of %.0f W limit", float64(d.PowerLimitW))
			}
		}
		if d.SMClockMinMHz > 0 {
			detail += fmt.Sprintf("; SM clock mean %.0f MHz, min %d MHz", float64(d.SMClockMeanMHz), d.SMClockMinMHz)
			if d.SMClockMaxMHz > 0 {
				detail += fmt.Sprintf(" (max %d MHz)", d.SMClockMaxMHz)
			}
		}
		if d.TempPeakC.Known() {
			detail += fmt.Sprintf("; temperature peak %.0f °C", float64(d.TempPeakC))
		}
		out = append(out, Verdict{Kind: VerdictThrottled, Device: d.Index, Detail: detail})
	}
	return out
}

func idleHolders(g *model.GPUReport) []Verdict {
	calls := map[uint32]int64{}
	for _, t := range g.Traced {
		calls[t.PID] = t.CUDACalls
	}
	var out []Verdict
	for _, d := range byIndex(g.GPUs) {
		procs := slices.Clone(d.Processes)
		slices.SortFunc(procs, func(a, b model.GPUProcess) int { return cmp.Compare(a.PID, b.PID) })
		for _, p := range procs {
			n, traced := calls[p.PID]
			if !traced || n != 0 || p.MemPeak == 0 {
				continue
			}
			detail := fmt.Sprintf("pid %d held %s of GPU %d (peak, listed in %d of %d samples) and made 0 CUDA calls while traced",
				p.PID, gib(p.MemPeak), d.Index, p.Polls, d.Samples)
			if p.SMUtilMean.Known() {
				detail += fmt.Sprintf("; SM utilization %.1f%%", float64(p.SMUtilMean))
			}
			detail += ": its memory is unavailable to the jobs that are working"
			out = append(out, Verdict{Kind: VerdictIdleHolder, Device: d.Index, PID: p.PID, Detail: detail})
		}
	}
	return out
}

// gpus writes what NVML saw: each device, the verdicts and the device
// events, or why there were no samples. start is the recording's first
// event, to place the events. The processes judged had a host verdict
// from the trace (HostVerdicts): NVML's coarser input/host bound verdict is
// left out for them. failed says an allocation failed for want of memory
// (said at the top): NVML's verdicts are then not all there is.
func gpus(buf *bytes.Buffer, g *model.GPUReport, start uint64, judged map[uint32]bool, failed bool) {
	buf.WriteString("\nGPUs (NVML)\n")
	if g.Status != "" {
		fmt.Fprintf(buf, "  not sampled: %s\n", g.Status)
		return
	}
	if len(g.GPUs) == 0 && len(g.Devices)+len(g.Verdicts) > 0 {
		legacyGPUs(buf, g)
	} else {
		for _, d := range byIndex(g.GPUs) {
			fmt.Fprintf(buf, "  %s\n", deviceLine(d))
		}
		vs := UnjudgedVerdicts(g, judged)
		switch {
		case len(vs) == 0 && failed:
			buf.WriteString("  verdicts: none from NVML (no out-of-memory risk seen in its samples, no throttling, no idle holder); an allocation failed for want of memory: see the out-of-memory verdicts at the top\n")
		case len(vs) == 0 && len(judged) > 0:
			buf.WriteString("  verdicts: none from NVML (no out-of-memory risk, no throttling, no idle holder); the host verdicts are in the process sections above\n")
		case len(vs) == 0:
			buf.WriteString("  verdicts: none (not host bound, no input-pipeline stall, no out-of-memory risk, no throttling, no idle holder)\n")
		}
		for _, v := range vs {
			fmt.Fprintf(buf, "  verdict: %s\n", v)
		}
		for _, e := range g.Events {
			fmt.Fprintf(buf, "  event: %s\n", eventLine(e, start))
		}
	}
	fmt.Fprintf(buf, "  clock: NVML samples placed on the trace clock within ±%s\n", units.Duration(uint64(g.ClockErrorNs)))
}

// legacyGPUs prints a recording's worded lines as they were recorded.
func legacyGPUs(buf *bytes.Buffer, g *model.GPUReport) {
	for _, d := range g.Devices {
		fmt.Fprintf(buf, "  %s\n", d)
	}
	if len(g.Verdicts) == 0 {
		buf.WriteString("  verdicts: none (not host bound, no out-of-memory risk, no throttling, no idle holder)\n")
	}
	for _, v := range g.Verdicts {
		fmt.Fprintf(buf, "  verdict: %s\n", v)
	}
}

// deviceLine is one device's statistics in a line.
func deviceLine(d *model.GPUStats) string {
	line := fmt.Sprintf("GPU %d %s: %d samples, utilization mean %s peak %s, memory peak %s of %s, power mean %s peak %s",
		d.Index, d.Name, d.Samples, pct(d.UtilMean), pct(d.UtilPeak), units.Bytes(d.MemPeak), units.Bytes(d.MemTotal), watts(d.PowerMeanW), watts(d.PowerPeakW))
	var seen []string
	for r := range d.ThrottlePolls {
		if r != "gpu_idle" {
			seen = append(seen, r)
		}
	}
	if len(seen) > 0 {
		sort.Strings(seen)
		line += ", throttle reasons seen: " + strings.Join(seen, ", ")
	}
	return line
}

// eventLine is a device event and when it came, from the recording's start.
func eventLine(e model.GPUEvent, start uint64) string {
	what := e.Kind
	if e.Kind == "xid" {
		what = fmt.Sprintf("Xid %d", e.Data)
	} else if e.Data != 0 {
		what += fmt.Sprintf(" (data %d)", e.Data)
	}
	line := fmt.Sprintf("GPU %d: %s", e.Device, what)
	if e.TS >= start && start > 0 {
		line += " at +" + units.Duration(e.TS-start)
	}
	return line
}

func pct(r model.Reading) string {
	if !r.Known() {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", float64(r))
}

func watts(r model.Reading) string {
	if !r.Known() {
		return "n/a"
	}
	return fmt.Sprintf("%.0f W", float64(r))
}

func gib(b uint64) string {
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

// listed reports whether NVML listed pid on d.
func listed(d *model.GPUStats, pid uint32) bool {
	return slices.ContainsFunc(d.Processes, func(p model.GPUProcess) bool { return p.PID == pid })
}

// byIndex is the devices by NVML index (as the sampler writes them; a
// hand-made report may not be).
func byIndex(ds []model.GPUStats) []*model.GPUStats {
	out := make([]*model.GPUStats, len(ds))
	for i := range ds {
		out[i] = &ds[i]
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// UnjudgedVerdicts are NVML's verdicts less its host-bound ones for the
// processes judged from the trace (those with a host verdict): the trace's
// judgement is the finer one, and the same thing said twice is noise.
func UnjudgedVerdicts(g *model.GPUReport, judged map[uint32]bool) []Verdict {
	return slices.DeleteFunc(Verdicts(g), func(v Verdict) bool { return v.Kind == VerdictHostBound && judged[v.PID] })
}
