package model

import (
	"encoding/json"
	"math"
	"slices"
)

// GPUReport is what the NVML sampler measured while a recording ran, the
// input of the summary's GPU section: each device's statistics with the
// processes that held its memory, the host side of each traced process, and
// the devices' Xid/ECC events. It holds numbers only; export/report judges
// them and words the verdicts.
//
// Recordings made before the report held numbers carry only the worded
// Devices and Verdicts lines; the summary prints those as they are when GPUs
// is empty.
type GPUReport struct {
	Status       string       `json:"status"`           // "" when sampled, else why not (no NVML, ...)
	ClockErrorNs int64        `json:"clock_error_ns"`   // bound of the NVML → tracer clock conversion
	GPUs         []GPUStats   `json:"gpus,omitempty"`   // by index
	Traced       []TracedHost `json:"traced,omitempty"` // every traced process, by pid
	Events       []GPUEvent   `json:"events,omitempty"` // in the order the sampler saw them
	// Moments are whole NVML samples kept for the failed allocations (out
	// of memory, Process.OOMs): per device, the sample nearest before
	// each (after, when none came before), by time.
	Moments []GPUMoment `json:"moments,omitempty"`

	// Legacy: one worded line per device and per verdict, as recordings
	// before the numbers were kept have them. Never written now.
	Devices  []string `json:"devices,omitempty"`
	Verdicts []string `json:"verdicts,omitempty"`
}

// GPUStats are one device's statistics over a recording. Means are over the
// sampler's polls, which are equally spaced.
type GPUStats struct {
	Index   int    `json:"index"` // NVML index
	UUID    string `json:"uuid,omitempty"`
	Name    string `json:"name"`
	Samples int    `json:"samples"`  // polls
	StartNs uint64 `json:"start_ns"` // first poll, CLOCK_MONOTONIC
	EndNs   uint64 `json:"end_ns"`   // last poll

	UtilMean    Reading `json:"util_mean_pct"`
	UtilPeak    Reading `json:"util_peak_pct"` // of the polls and the driver's samples between them
	MemUtilMean Reading `json:"mem_util_mean_pct"`

	MemPeak  uint64 `json:"mem_peak_bytes"`
	MemTotal uint64 `json:"mem_total_bytes"`
	// MemPeakPID held the most device memory, MemPeakPIDBytes, at the first
	// poll that saw MemPeak; 0 when no process was listed there.
	MemPeakPID      uint32 `json:"mem_peak_pid,omitempty"`
	MemPeakPIDBytes uint64 `json:"mem_peak_pid_bytes,omitempty"`

	PowerMeanW  Reading `json:"power_mean_w"`
	PowerPeakW  Reading `json:"power_peak_w"`
	PowerLimitW Reading `json:"power_limit_w"` // enforced limit at the start
	TempPeakC   Reading `json:"temp_peak_c"`

	SMClockMeanMHz Reading `json:"sm_clock_mean_mhz"`
	SMClockMinMHz  uint32  `json:"sm_clock_min_mhz,omitempty"` // 0 when never reported
	SMClockMaxMHz  uint32  `json:"sm_clock_max_mhz,omitempty"` // the clock's maximum; 0 when unknown

	// ThrottlePolls counts, per clock event reason in NVML's words
	// (gpu_idle, sw_power_cap, hw_thermal_slowdown, ...), the polls it was
	// active in.
	ThrottlePolls map[string]int `json:"throttle_polls,omitempty"`

	Processes []GPUProcess `json:"processes,omitempty"` // every process NVML listed on the device, by pid
}

// GPUProcess is one process's use of one device, from NVML's process lists.
type GPUProcess struct {
	PID        uint32  `json:"pid"` // as NVML sees it (the host's PID namespace)
	MemPeak    uint64  `json:"mem_peak_bytes"`
	Polls      int     `json:"polls"` // polls that listed it
	SMUtilMean Reading `json:"sm_util_mean_pct"`
}

// TracedHost is the host side of one traced process.
type TracedHost struct {
	PID       uint32 `json:"pid"`
	CUDACalls int64  `json:"cuda_calls"`
	// HostBusy is the share of wall time (0..1), from when tracing of it
	// began, that its threads spent on a CPU outside CUDA synchronizations;
	// NaN when its CPU time could not be read.
	HostBusy Reading `json:"host_busy"`
}

// GPUEvent is an asynchronous device event.
type GPUEvent struct {
	TS     uint64 `json:"ts"` // ns, CLOCK_MONOTONIC, when the sampler saw it
	Device int    `json:"device"`
	Kind   string `json:"kind"`           // "xid", "ecc_double_bit", "ecc_single_bit", "gpu_lost"
	Data   uint64 `json:"data,omitempty"` // the Xid number for "xid"
}

// Reading is a measurement a device or host may not give: NaN when it never
// did, null in JSON.
type Reading float64

// Known reports whether r holds a value.
func (r Reading) Known() bool { return !math.IsNaN(float64(r)) }

// MarshalJSON writes null for NaN (which JSON cannot hold) and infinities.
func (r Reading) MarshalJSON() ([]byte, error) {
	f := float64(r)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// UnmarshalJSON reads null as NaN.
func (r *Reading) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*r = Reading(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*r = Reading(f)
	return nil
}

// GPUMoment is one NVML sample of one device: its memory and every
// process NVML listed on it.
type GPUMoment struct {
	TS        uint64      `json:"ts"` // ns, CLOCK_MONOTONIC, when the poll ran
	Device    int         `json:"device"`
	MemUsed   uint64      `json:"mem_used_bytes"`
	MemTotal  uint64      `json:"mem_total_bytes"`
	Processes []GPUHolder `json:"processes,omitempty"` // most memory first
}

// GPUHolder is a process holding memory on a device at a moment, named
// as /proc showed it when the recording ended ("" when it had exited).
type GPUHolder struct {
	PID       uint32 `json:"pid"` // the host's PID namespace
	MemUsed   uint64 `json:"mem_used_bytes"`
	Comm      string `json:"comm,omitempty"`
	Container string `json:"container,omitempty"`
}

// Holds reports whether NVML listed pid at the moment.
func (m *GPUMoment) Holds(pid uint32) bool {
	for _, h := range m.Processes {
		if h.PID == pid {
			return true
		}
	}
	return false
}

// MomentsOf are the moments that show the devices when o failed in p:
// per device, the moment Nearer picks for o's last attempt; of those, the
// devices NVML listed p on when there are any, and among several the one
// o's thread had chosen, when it is there.
func (g *GPUReport) MomentsOf(p *Process, o *OOM) []*GPUMoment {
	var near []*GPUMoment
	for i := range g.Moments {
		m := &g.Moments[i]
		j := slices.IndexFunc(near, func(n *GPUMoment) bool { return n.Device == m.Device })
		switch {
		case j < 0:
			near = append(near, m)
		case Nearer(m.TS, near[j].TS, o.End):
			near[j] = m
		}
	}
	if held := slices.DeleteFunc(slices.Clone(near), func(m *GPUMoment) bool { return !m.Holds(p.PID) }); len(held) > 0 {
		near = held
	}
	if len(near) > 1 {
		if i := slices.IndexFunc(near, func(m *GPUMoment) bool { return m.Device == int(o.Device) }); i >= 0 {
			return near[i : i+1]
		}
	}
	return near
}

// Nearer reports whether a sample taken at a shows the device at t better
// than one taken at b: the latest at or before t (the state the failure
// met), else the earliest after.
func Nearer(a, b, t uint64) bool {
	switch {
	case a <= t && b <= t:
		return a > b
	case a <= t || b <= t:
		return a <= t
	}
	return a < b
}
