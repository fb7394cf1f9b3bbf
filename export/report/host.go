package report

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer/model"

	"github.com/cudatap/cudatap/internal/units"
)

// Host verdicts: judged from the trace (how the threads that launch work
// spent their time, how much GPU work they kept queued), with NVML's
// utilization when it was sampled.
const (
	VerdictLaunchBound = "host bound"
	VerdictInputStall  = "input-pipeline stall"
)

// Host verdict thresholds.
const (
	// LaunchBoundGPUBusy: a GPU busy less than this share of the wall time
	// is mostly idle.
	LaunchBoundGPUBusy = 0.5
	// LaunchBoundMinLaunches: fewer launches are not a launch loop.
	LaunchBoundMinLaunches = 1000
	// LaunchBoundMaxBlocked: the threads that launch work were blocked in
	// syncs less than this share of their wall time.
	LaunchBoundMaxBlocked = 0.2
	// LaunchBoundMaxAway: and away from CUDA (gaps of syncs.LongGap or
	// more between calls) less than this share.
	LaunchBoundMaxAway = 0.3
	// InputStallMinShare: the GPU idle while the host was away from CUDA
	// at least this share of the wall time...
	InputStallMinShare = 0.2
	// InputStallMinGaps: ...in at least this many gaps (one long pause,
	// such as loading a model, is not a stalling input pipeline).
	InputStallMinGaps = 3
)

// HostVerdict is a finding on the host side of one process.
type HostVerdict struct {
	Kind   string `json:"kind"` // VerdictLaunchBound, VerdictInputStall
	PID    uint32 `json:"pid"`
	Detail string `json:"detail"` // the numbers behind it, then the fix
}

// AllHostVerdicts judges the host side of every process of r, by pid, as
// the summary does: for the JSON outputs.
func AllHostVerdicts(r *model.Result, c *syncs.Collector) []HostVerdict {
	var out []HostVerdict
	for _, p := range r.Processes {
		out = append(out, HostVerdicts(&r.GPU, syncs.HostOf(r, c, p.PID))...)
	}
	return out
}

func (v HostVerdict) String() string { return fmt.Sprintf("pid %d: %s: %s", v.PID, v.Kind, v.Detail) }

// gpuBusy is the best bound known of the share of wall time the GPU was
// busy with the process's work, and where it comes from: the least of
// NVML's mean utilization (of the devices NVML listed the process on, else
// of the busiest device), the time CUPTI measured when it timed every op,
// and the time some op was queued or running (an upper bound the syncs
// prove). ok is false with no GPU work seen and no NVML.
func gpuBusy(g *model.GPUReport, h *syncs.Host) (share float64, source string, ok bool) {
	share = 2
	if h.GPUOps > 0 && h.WallNs > 0 {
		share, source, ok = float64(min(h.QueuedNs, h.WallNs))/float64(h.WallNs), "GPU work queued or running at most that share of the time, as the syncs prove", true
		if h.AllMeasured {
			if s := float64(min(h.MeasuredNs, h.WallNs)) / float64(h.WallNs); s < share {
				share, source = s, "measured by CUPTI"
			}
		}
	}
	if g != nil && g.Status == "" {
		var on []*model.GPUStats
		for _, d := range byIndex(g.GPUs) {
			if listed(d, h.PID) {
				on = append(on, d)
			}
		}
		if len(on) == 0 {
			on = byIndex(g.GPUs)
		}
		util, n := -1.0, 0
		var names []string
		for _, d := range on {
			if d.UtilMean.Known() {
				util = max(util, float64(d.UtilMean)/100)
				n += d.Samples
				names = append(names, fmt.Sprintf("GPU %d", d.Index))
			}
		}
		if util >= 0 && util < share {
			share, source, ok = util, fmt.Sprintf("NVML utilization mean of %s, %d samples", strings.Join(names, ", "), n), true
		}
	}
	return share, source, ok
}

// HostVerdicts judges the host side of process h:
//   - host bound: at least 1000 launches, the GPU busy less than 50% of the
//     wall time (gpuBusy), and the threads that launch work blocked in syncs
//     less than 20% of their wall time and away from CUDA (gaps ≥ 1 ms
//     between calls) less than 30% of it: the rest they spent issuing work,
//     and the GPU waited for them to launch.
//   - input-pipeline stall: in at least 3 gaps ≥ 1 ms, the threads that
//     launch work all away from CUDA while the GPU was idle, at least 20%
//     of the wall time. The GPU is idle where no work was queued or running
//     (as the syncs prove it); without that proof, at least the time away
//     less the time the GPU was busy (gpuBusy).
func HostVerdicts(g *model.GPUReport, h *syncs.Host) []HostVerdict {
	if h == nil || h.WorkThreads == 0 || h.WallNs == 0 {
		return nil
	}
	var out []HostVerdict
	busy, source, known := gpuBusy(g, h)
	away := float64(h.IdleNs) / float64(h.WallNs)
	blocked := h.Blocked()
	if known && busy < LaunchBoundGPUBusy && h.Launches >= LaunchBoundMinLaunches && blocked < LaunchBoundMaxBlocked && away < LaunchBoundMaxAway {
		every := float64(h.WallNs) / float64(h.Launches) / 1e3
		out = append(out, HostVerdict{Kind: VerdictLaunchBound, PID: h.PID, Detail: fmt.Sprintf(
			"%d launches in %s (one every %.1f µs) while the GPU was busy %.0f%% of the time (%s, threshold %.0f%%); "+
				"%s blocked in syncs %.0f%% of %s wall time (threshold %.0f%%) and away from CUDA in gaps ≥ %s %.0f%% (threshold %.0f%%): "+
				"the rest, %.0f%%, went to issuing work (the calls and the host code between them), and the GPU waited for it. "+
				"Fix: launch less often: capture the step in a CUDA graph (torch.compile(mode=\"reduce-overhead\"), torch.cuda.CUDAGraph), "+
				"fuse small kernels (torch.compile), or use larger batches so that each launch does more work",
			h.Launches, units.Duration(h.WallNs), every, 100*busy, source, 100*LaunchBoundGPUBusy,
			workers(h.WorkThreads, "was", "were"), 100*blocked, workers(h.WorkThreads, "its", "their"), 100*LaunchBoundMaxBlocked, units.Duration(syncs.LongGap), 100*away, 100*LaunchBoundMaxAway,
			100*max(0, 1-blocked-away))})
	}

	stall, gaps, how := h.StallNs, h.StallGaps, "with no GPU work queued or running"
	if known && source != "" && h.IdleNs > uint64(busy*float64(h.WallNs)) {
		// The GPU busy share bounds how much of the time away it could
		// have worked.
		if est := h.IdleNs - uint64(busy*float64(h.WallNs)); est > stall {
			stall, gaps, how = est, h.IdleGaps, fmt.Sprintf("with the GPU idle, at least (busy at most %.0f%% of the time: %s)", 100*busy, source)
		}
	}
	if s := float64(stall) / float64(h.WallNs); s >= InputStallMinShare && gaps >= InputStallMinGaps {
		longest := ""
		if h.LongestStallNs > 0 {
			longest = ", the longest " + units.Duration(h.LongestStallNs)
		}
		out = append(out, HostVerdict{Kind: VerdictInputStall, PID: h.PID, Detail: fmt.Sprintf(
			"%s away from CUDA %s of %s (%.0f%%) in %d gaps ≥ %s, %s of it (%.0f%% of the time, threshold %.0f%%) %s in %d gaps%s: "+
				"the GPU waited while the host did something else, typically waiting for the next batch. "+
				"Fix: feed the GPU ahead of time: more DataLoader workers (num_workers), pin_memory=True with .to(device, non_blocking=True), "+
				"prefetching (prefetch_factor, or copying the next batch on a side stream), or preprocessing on the GPU",
			workers(h.WorkThreads, "was", "were"), units.Duration(h.IdleNs), units.Duration(h.WallNs), 100*away, h.IdleGaps, units.Duration(syncs.LongGap),
			units.Duration(stall), 100*s, 100*InputStallMinShare, how, gaps, longest)})
	}
	return out
}

// workers is "the thread that launches work" followed by one, or "the N
// threads that launch work" followed by many; a bare possessive when one
// is "its".
func workers(n int, one, many string) string {
	switch {
	case one == "its":
		if n == 1 {
			return one
		}
		return many
	case n == 1:
		return strings.TrimSpace("the thread that launches work " + one)
	}
	return strings.TrimSpace(fmt.Sprintf("the %d threads that launch work %s", n, many))
}

// hostLines writes how the threads of a process spent their time: those
// that launch work, and the background ones.
func hostLines(buf *bytes.Buffer, h *syncs.Host) {
	if h == nil {
		return
	}
	if h.WorkThreads > 0 {
		var names []string
		for _, t := range h.Threads {
			if t.Role == syncs.RoleWork {
				names = append(names, t.Label())
			}
		}
		fmt.Fprintf(buf, "  host: %s, %s: %s; blocked in syncs %s of %s %s wall time (%.0f%%), away from CUDA in gaps ≥ %s %s (%.0f%%)\n",
			workers(h.WorkThreads, "", ""), strings.Join(names, ", "), plural(h.Launches, "launch", "launches"),
			units.Duration(h.BlockedNs), workers(h.WorkThreads, "its", "their"), units.Duration(h.ThreadWallNs), 100*h.Blocked(), units.Duration(syncs.LongGap), units.Duration(h.IdleNs), 100*share(h.IdleNs, h.WallNs))
		if h.GapsNotKept > 0 {
			fmt.Fprintf(buf, "  host: %d shorter gaps (%s) past the bound of gaps kept per thread are left out of the time away: it is understated\n",
				h.GapsNotKept, units.Duration(h.GapsNotKeptNs))
		}
	}
	for _, t := range h.Background() {
		what := fmt.Sprintf("%s in %d sync(s)", units.Duration(t.BlockedNs), t.Syncs)
		if t.Role == syncs.RolePoller {
			what = fmt.Sprintf("%s polling in %d poll loop(s)", units.Duration(t.BlockedNs), t.Polls)
		}
		fmt.Fprintf(buf, "  host: %s: %s, did not hold up the threads that launch work (%s; %s of its %s)\n",
			t.Label(), t.Role, t.Why, what, units.Duration(t.WallNs))
	}
}

func share(part, whole uint64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}
