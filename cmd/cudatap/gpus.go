package main

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/nvml"
)

// newGPUsCmd: lib is the NVML library (nil: the driver's, libnvidia-ml.so.1).
func newGPUsCmd(g *globalOptions, lib gonvml.Interface) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "gpus",
		Short: "List the GPUs and the processes using them (PID, container, memory, utilization)",
		Long: `gpus shows every visible NVIDIA GPU (utilization over the last second, memory,
temperature, power, clocks, throttle reasons) and the processes using each one,
with their container, like nvidia-smi with container names. It needs NVML
(libnvidia-ml.so.1, installed with the NVIDIA driver).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := nvml.New(nvml.Options{Interval: time.Second, Lib: lib, Logger: g.logger()})
			if err != nil {
				return err // one line: what is missing, and that the rest of cudatap works
			}
			defer s.Close()
			samples, _, err := s.Poll()
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), gpusReport(s.Driver(), samples, gpuProcInfo))
			}
			return renderGPUs(cmd.OutOrStdout(), s.Driver(), samples, gpuProcInfo)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON: driver, gpus (one poll's readings), processes (gpu, pid, comm, container, memory, SM utilization); null where a GPU does not tell")
	return cmd
}

// gpusJSON is `cudatap gpus --json`. Percentages are 0-100; a reading the
// GPU does not report is null.
type gpusJSON struct {
	Driver    string        `json:"driver"`
	GPUs      []gpuJSON     `json:"gpus"`
	Processes []gpuProcJSON `json:"processes"`
}

type gpuJSON struct {
	Index           int      `json:"index"`
	Name            string   `json:"name"`
	UUID            string   `json:"uuid"`
	UtilPct         *float64 `json:"util_pct"`     // over the last second
	MemUtilPct      *float64 `json:"mem_util_pct"` // memory controller busy
	MemUsedBytes    uint64   `json:"memory_used_bytes"`
	MemTotalBytes   uint64   `json:"memory_total_bytes"`
	TempC           *float64 `json:"temperature_c"`
	PowerW          *float64 `json:"power_w"`
	PowerLimitW     *float64 `json:"power_limit_w"`
	SMClockMHz      uint32   `json:"sm_clock_mhz"`  // 0: unknown
	MemClockMHz     uint32   `json:"mem_clock_mhz"` // 0: unknown
	PCIeRxBps       *float64 `json:"pcie_rx_bytes_per_second"`
	PCIeTxBps       *float64 `json:"pcie_tx_bytes_per_second"`
	ThrottleReasons []string `json:"throttle_reasons"`
}

type gpuProcJSON struct {
	GPU          int      `json:"gpu"`
	PID          uint32   `json:"pid"`
	Comm         string   `json:"comm"`
	Container    string   `json:"container"`
	MemUsedBytes uint64   `json:"memory_used_bytes"`
	SMUtilPct    *float64 `json:"sm_util_pct"`
}

func gpusReport(driver string, samples []nvml.Sample, proc func(pid uint32) procInfo) gpusJSON {
	r := gpusJSON{Driver: driver, GPUs: []gpuJSON{}, Processes: []gpuProcJSON{}}
	for _, s := range samples {
		r.GPUs = append(r.GPUs, gpuJSON{Index: s.Device, Name: s.Name, UUID: s.UUID, UtilPct: reading(s.GPUUtil), MemUtilPct: reading(s.MemUtil),
			MemUsedBytes: s.MemUsed, MemTotalBytes: s.MemTotal, TempC: reading(s.TempC), PowerW: reading(s.PowerW), PowerLimitW: reading(s.PowerLimitW),
			SMClockMHz: s.SMClockMHz, MemClockMHz: s.MemClockMHz, PCIeRxBps: reading(s.PCIeRxBps), PCIeTxBps: reading(s.PCIeTxBps),
			ThrottleReasons: append([]string{}, s.ThrottleReasons...)})
	}
	for _, row := range procRows(samples, nil) {
		info := lookup(proc, row.pid)
		r.Processes = append(r.Processes, gpuProcJSON{GPU: row.dev, PID: row.pid, Comm: info.Comm, Container: info.Container,
			MemUsedBytes: row.p.MemUsed, SMUtilPct: reading(row.p.SMUtil)})
	}
	return r
}

// reading is v for JSON: null when NaN (not reported).
func reading(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// gpuProcInfo names a process using a GPU from /proc: its command name and
// its container (short id, with the container's hostname, which is the pod
// name under Kubernetes, when it says more than the id).
func gpuProcInfo(pid uint32) procInfo {
	var info procInfo
	info.Comm, _ = procfs.Comm(int(pid))
	cgroup, err := procfs.Cgroup(int(pid))
	if err != nil {
		return info
	}
	id, _ := procfs.ContainerFromCgroup(cgroup)
	if id == "" {
		return info
	}
	short := id[:min(12, len(id))]
	info.Container = short
	if name, err := procfs.RootHostname(int(pid)); err == nil {
		host, _ := os.Hostname()
		if name != "" && name != host && !strings.HasPrefix(id, name) {
			info.Container = fmt.Sprintf("%s (%s)", short, name)
		}
	}
	return info
}
