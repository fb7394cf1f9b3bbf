package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/nvml"
)

// procInfo names a process for the tables (gpuProcInfo reads it from /proc).
type procInfo struct {
	Comm      string
	Container string // short container id, with the container's hostname (pod name) when known
}

// renderGPUs writes the `cudatap gpus` view of one poll: a table of devices,
// then a table of the processes using them. proc may be nil.
func renderGPUs(w io.Writer, driver string, samples []nvml.Sample, proc func(pid uint32) procInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if driver != "" {
		fmt.Fprintf(tw, "NVIDIA driver %s, %d GPU(s)\n\n", driver, len(samples))
	}
	fmt.Fprintln(tw, "GPU\tNAME\tUUID\tUTIL\tMEM UTIL\tMEMORY\tTEMP\tPOWER\tSM CLOCK\tMEM CLOCK\tTHROTTLE")
	for _, s := range samples {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			s.Device, orNA(s.Name), orNA(s.UUID), fmtPct(s.GPUUtil), fmtPct(s.MemUtil), fmtMemory(s.MemUsed, s.MemTotal),
			fmtTemp(s.TempC), fmtPower(s.PowerW, s.PowerLimitW), fmtMHz(s.SMClockMHz), fmtMHz(s.MemClockMHz), fmtReasons(s.ThrottleReasons))
	}
	rows := procRows(samples, nil)
	fmt.Fprintln(tw)
	if len(rows) == 0 {
		fmt.Fprintln(tw, "No process is using the GPUs.")
		return tw.Flush()
	}
	fmt.Fprintln(tw, "GPU\tPID\tPROCESS\tCONTAINER\tMEMORY\tSM UTIL")
	for _, r := range rows {
		info := lookup(proc, r.pid)
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\n", r.dev, r.pid, orDash(info.Comm), orDash(info.Container), units.Bytes(r.p.MemUsed), fmtPct(r.p.SMUtil))
	}
	return tw.Flush()
}

type procRow struct {
	dev int
	pid uint32
	p   nvml.ProcSample
}

func procRows(samples []nvml.Sample, keep map[uint32]bool) []procRow {
	var rows []procRow
	for _, s := range samples {
		for _, p := range s.Processes {
			if keep != nil && !keep[p.PID] {
				continue
			}
			rows = append(rows, procRow{s.Device, p.PID, p})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].dev != rows[j].dev {
			return rows[i].dev < rows[j].dev
		}
		return rows[i].pid < rows[j].pid
	})
	return rows
}

func lookup(proc func(uint32) procInfo, pid uint32) procInfo {
	if proc == nil {
		return procInfo{}
	}
	return proc(pid)
}

// topRenderer makes the lines of `cudatap top`, the same for the
// full-screen view and the plain fallback.
type topRenderer struct {
	Driver string
	PIDs   []uint32                  // only these processes; empty = every process
	Proc   func(pid uint32) procInfo // names a process; nil = pid only
	// Extra returns lines shown under the GPU and process tables: per traced
	// process and stream launches/s, copy bandwidth, share of wall time
	// blocked in synchronization, queue depth (filled by the tracer); nil = none.
	Extra func() []string
	// Warning is shown on top when set (e.g. NVML missing).
	Warning string
}

// Lines renders one refresh.
func (r *topRenderer) Lines(now time.Time, samples []nvml.Sample) []string {
	head := fmt.Sprintf("cudatap top  %s  %d GPU(s)", now.Format("15:04:05"), len(samples))
	if r.Driver != "" {
		head += "  driver " + r.Driver
	}
	lines := []string{head}
	if r.Warning != "" {
		lines = append(lines, r.Warning)
	}
	if len(samples) > 0 {
		lines = append(lines, "")
		lines = append(lines, fmt.Sprintf("%-3s %-18s %-8s %-24s %-15s %-6s %-9s %-9s %-21s %s",
			"GPU", "UTIL", "MEM UTIL", "MEMORY", "POWER", "TEMP", "SM CLOCK", "MEM CLOCK", "PCIE RX / TX", "THROTTLE"))
		for _, s := range samples {
			lines = append(lines, fmt.Sprintf("%-3d %-18s %-8s %-24s %-15s %-6s %-9s %-9s %-21s %s",
				s.Device, fmtBar(s.GPUUtil), fmtPct(s.MemUtil), fmtMemory(s.MemUsed, s.MemTotal), fmtPower(s.PowerW, s.PowerLimitW),
				fmtTemp(s.TempC), fmtMHz(s.SMClockMHz), fmtMHz(s.MemClockMHz), fmtRate(s.PCIeRxBps)+" / "+fmtRate(s.PCIeTxBps), fmtReasons(s.ThrottleReasons)))
		}
		var keep map[uint32]bool
		if len(r.PIDs) > 0 {
			keep = map[uint32]bool{}
			for _, p := range r.PIDs {
				keep[p] = true
			}
		}
		rows := procRows(samples, keep)
		lines = append(lines, "")
		if len(rows) == 0 {
			if keep != nil {
				lines = append(lines, "The selected processes hold no GPU memory.")
			} else {
				lines = append(lines, "No process is using the GPUs.")
			}
		} else {
			lines = append(lines, fmt.Sprintf("%-3s %-8s %-16s %-32s %-10s %s", "GPU", "PID", "PROCESS", "CONTAINER", "MEMORY", "SM UTIL"))
			for _, row := range rows {
				info := lookup(r.Proc, row.pid)
				lines = append(lines, fmt.Sprintf("%-3d %-8d %-16s %-32s %-10s %s", row.dev, row.pid,
					orDash(info.Comm), orDash(info.Container), units.Bytes(row.p.MemUsed), fmtPct(row.p.SMUtil)))
			}
		}
	}
	if r.Extra != nil {
		if extra := r.Extra(); len(extra) > 0 {
			lines = append(lines, "")
			lines = append(lines, extra...)
		}
	}
	return lines
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtPct(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", v)
}

func fmtBar(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	n := int(math.Round(math.Max(0, math.Min(100, v)) / 10))
	return fmt.Sprintf("[%s%s] %3.0f%%", strings.Repeat("#", n), strings.Repeat(".", 10-n), v)
}

func fmtMemory(used, total uint64) string {
	if total == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f / %.1f GiB (%.0f%%)", float64(used)/(1<<30), float64(total)/(1<<30), 100*float64(used)/float64(total))
}

func fmtTemp(c float64) string {
	if math.IsNaN(c) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f°C", c)
}

func fmtPower(w, limit float64) string {
	switch {
	case math.IsNaN(w):
		return "n/a"
	case math.IsNaN(limit) || limit == 0:
		return fmt.Sprintf("%.0f W", w)
	}
	return fmt.Sprintf("%.0f / %.0f W", w, limit)
}

func fmtMHz(v uint32) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%d MHz", v)
}

func fmtReasons(r []string) string {
	var out []string
	for _, x := range r {
		if x != "gpu_idle" {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func fmtRate(bps float64) string {
	if math.IsNaN(bps) {
		return "n/a"
	}
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.1f GB/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.1f MB/s", bps/1e6)
	case bps >= 1e3:
		return fmt.Sprintf("%.1f kB/s", bps/1e3)
	}
	return fmt.Sprintf("%.0f B/s", bps)
}
