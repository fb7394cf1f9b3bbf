// Package gpusample holds what NVML reports of the GPUs, as plain values:
// the samples and events the NVML sampler (tracer/nvml, cgo) produces and
// the statistics over them (Summarize). Readers of those values (exports,
// metrics, reports) import this package, not the sampler, and build
// without cgo.
package gpusample

import "math"

// Sample is one poll of one GPU.
//
// GPUUtil and MemUtil are the mean of every entry the driver appended to its
// utilization sample buffer since the previous poll (nvmlDeviceGetSamples
// with lastSeenTimestamp), so nothing between polls is lost; Util holds those
// entries one by one with their own timestamps, for counter tracks. When the
// driver appended nothing since the previous poll, GPUUtil/MemUtil carry the
// last value (utilization is a step function between driver samples) and
// Util is empty.
//
// A float field the GPU does not support is NaN; an unsupported integer
// field is 0. Counters() lists only the fields that have values.
type Sample struct {
	TS                   uint64 // ns, CLOCK_MONOTONIC, when the poll ran
	Device               int    // NVML index
	UUID, Name           string
	GPUUtil, MemUtil     float64 // %, mean over the driver samples since the last poll
	Util                 []UtilPoint
	MemUsed, MemTotal    uint64 // bytes
	TempC                float64
	PowerW, PowerLimitW  float64
	SMClockMHz           uint32
	SMClockMaxMHz        uint32 // the SM clock's maximum, to judge SMClockMHz (0 when unknown)
	MemClockMHz          uint32
	PCIeRxBps, PCIeTxBps float64 // bytes/s
	ThrottleReasons      []string
	Processes            []ProcSample
}

// UtilPoint is one entry of the driver's utilization sample buffers.
type UtilPoint struct {
	TS      uint64  // ns, CLOCK_MONOTONIC (converted from NVML's µs wall clock)
	GPUUtil float64 // %; NaN when only the memory buffer had an entry at TS
	MemUtil float64 // %; NaN when only the GPU buffer had an entry at TS
}

// ProcSample is one process's use of one GPU at a poll.
type ProcSample struct {
	PID     uint32
	MemUsed uint64  // bytes of device memory (0 when NVML cannot tell)
	SMUtil  float64 // %, mean over the driver's process samples since the last poll; NaN when unsupported
}

// Event is an asynchronous device event.
type Event struct {
	TS     uint64 // ns, CLOCK_MONOTONIC, when the poll saw it
	Device int
	Kind   string // "xid", "ecc_double_bit", "ecc_single_bit", "gpu_lost"
	Data   uint64 // the Xid number for "xid"
}

// Device identifies one GPU.
type Device struct {
	Index       int
	UUID, Name  string
	MemTotal    uint64  // bytes
	PowerLimitW float64 // enforced limit at start; NaN when unsupported
	MaxSMClock  uint32  // MHz, the SM clock's maximum (0 when unsupported)
}

// Counters are a sample's values by counter name, leaving out the fields the
// GPU does not support (ready for Chrome "C" events or recording counters,
// which cannot hold NaN).
func (smp Sample) Counters() map[string]float64 {
	m := make(map[string]float64, 10)
	put := func(k string, v float64) {
		if !math.IsNaN(v) {
			m[k] = v
		}
	}
	put("gpu_util_pct", smp.GPUUtil)
	put("mem_util_pct", smp.MemUtil)
	if smp.MemTotal > 0 {
		m["mem_used_bytes"] = float64(smp.MemUsed)
		m["mem_total_bytes"] = float64(smp.MemTotal)
	}
	put("temp_c", smp.TempC)
	put("power_w", smp.PowerW)
	put("power_limit_w", smp.PowerLimitW)
	if smp.SMClockMHz > 0 {
		m["sm_clock_mhz"] = float64(smp.SMClockMHz)
	}
	if smp.MemClockMHz > 0 {
		m["mem_clock_mhz"] = float64(smp.MemClockMHz)
	}
	put("pcie_rx_bytes_per_s", smp.PCIeRxBps)
	put("pcie_tx_bytes_per_s", smp.PCIeTxBps)
	return m
}
