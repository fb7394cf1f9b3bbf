// Package report writes the text summary cudatap prints at the end of every
// record and export: per process and stream what was enqueued and copied,
// where the host waited for the GPU, what NVML measured on each GPU and the
// verdicts drawn from it (gpu.go), and what the recording lost.
package report

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/oom"
	"github.com/cudatap/cudatap/export/steps"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/model"
)

// Options tune the summary.
type Options struct {
	// TopSites is how many sync sites each process lists; 0 means 10.
	TopSites int
	// Steps: the training steps found (steps.Detector.Find), each process's
	// step times; nil: the summary has no steps section.
	Steps []steps.Found
}

// Summary writes the report on r to w, with the synchronization sites
// collected (nil: none). The order is deterministic: processes as the
// result lists them (by pid), streams by id, sync sites by blocked time.
func Summary(w io.Writer, r *model.Result, sites *syncs.Collector, opts Options) error {
	if sites == nil {
		sites = syncs.NewCollector()
	}
	top := opts.TopSites
	if top <= 0 {
		top = 10
	}
	// Built in memory (it is small), so a failing w is reported once.
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "cudatap summary: %s, %s recorded\n", plural(len(r.Processes), "process", "processes"), units.Duration(span(r.Start, r.End)))
	// A failed allocation is what the run came to: said first.
	ooms := oom.Records(r)
	for i := range ooms {
		fmt.Fprintf(&buf, "verdict: out of memory: %s\n", ooms[i].Verdict())
	}
	if n := oom.Count(r) - int64(len(ooms)); n > 0 {
		fmt.Fprintf(&buf, "verdict: out of memory: %d more failed allocations, past the %d kept per process\n", n, len(ooms))
	}
	judged := map[uint32]bool{} // processes with a host verdict
	var calls int64
	for _, p := range r.Processes {
		buf.WriteByte('\n')
		calls += p.NCalls
		if process(&buf, r, p, sites, top, ooms, opts.Steps) {
			judged[p.PID] = true
		}
	}
	if calls == 0 && r.Truncated == "" {
		// Said plainly: an all-zero summary reads like a broken tracer.
		who := "the traced process made no CUDA call"
		if len(r.Processes) != 1 {
			who = fmt.Sprintf("none of the %d traced processes made a CUDA call", len(r.Processes))
		}
		fmt.Fprintf(&buf, "\nno CUDA: %s. cudatap hooks the CUDA runtime (libcudart, found by its symbols in any file a process maps, static or vendored), the driver (libcuda.so.1) and NCCL; "+
			"a process that never loaded one of them does not use the GPU through CUDA (check that the job runs on the GPU: nvidia-smi, torch.cuda.is_available())\n", who)
	}
	gpus(&buf, &r.GPU, r.Start, judged, len(ooms) > 0)
	fmt.Fprintf(&buf, "\n%s\n", describe.Account(r))
	_, err := w.Write(buf.Bytes())
	return err
}

// clip shortens s to n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// deviceWide keys the syncs that wait on no single stream.
const deviceWide = -1

func merge(t *syncs.Totals, o syncs.Totals) {
	t.Explicit += o.Explicit
	t.Implicit += o.Implicit
	t.ExplicitNs += o.ExplicitNs
	t.ImplicitNs += o.ImplicitNs
}

// process writes the section of process p and reports whether a host
// verdict was given on it.
func process(buf *bytes.Buffer, r *model.Result, p *model.Process, collected *syncs.Collector, top int, ooms []oom.Record, found []steps.Found) bool {
	fmt.Fprintf(buf, "%s\n", p.Label())
	if p.Info.Cmdline != "" {
		fmt.Fprintf(buf, "  command: %s\n", clip(p.Info.Cmdline, 200))
	}
	if p.NCalls == 0 && p.NGPUOps == 0 {
		fmt.Fprintf(buf, "  no CUDA calls while traced\n")
		if p.HeldNs > 0 {
			fmt.Fprintf(buf, "  held by cudatap while it hooked libraries: %s\n", units.Duration(p.HeldNs))
		}
		return false
	}
	mem := "device memory peak " + units.Bytes(p.DeviceMemPeak)
	if p.AttachedLate {
		// Allocations made before the attach were not seen.
		mem = "device memory allocated since attaching: peak " + units.Bytes(p.DeviceMemPeak) + " (earlier allocations unknown)"
	}
	timing := "inferred"
	if p.Measured {
		timing = "timed by CUPTI"
	}
	fmt.Fprintf(buf, "  %s over %s, %s (%s), %s\n",
		plural(p.NCalls, "call", "calls"), units.Duration(span(p.FirstSeen, p.LastSeen)),
		plural(p.NGPUOps, "GPU op", "GPU ops"), timing, mem)
	if p.PinnedRecovered > 0 {
		fmt.Fprintf(buf, "  pinned host memory found at attach: %s (copies from it are not pageable)\n", units.Bytes(p.PinnedRecovered))
	}
	if p.HeldNs > 0 {
		fmt.Fprintf(buf, "  held by cudatap while it hooked libraries: %s (not counted as CUDA time)\n", units.Duration(p.HeldNs))
	}
	for i := range ooms {
		if ooms[i].PID != p.PID {
			continue
		}
		buf.WriteString("  out of memory:\n")
		for _, l := range ooms[i].Lines() {
			fmt.Fprintf(buf, "    %s\n", l)
		}
	}

	// The syncs of the threads that launch work: background threads'
	// waits held none of them up (hostLines names them).
	totals := collected.WorkStreamTotals(r, p.PID)

	tw := tabwriter.NewWriter(buf, 0, 0, 2, ' ', 0)
	// GPU BUSY is an upper bound (no kernel timings): "≤ 2.1ms (3%)" of the
	// process's traced span says the stream was idle at least 97% of it.
	fmt.Fprintln(tw, "  STREAM\tLAUNCHES\tCOPIES\tHtoD\tDtoH\tDtoD\tPAGEABLE\tPINNED\tMEMSETS\tEXPLICIT SYNCS\tIMPLICIT SYNCS\tGPU OPS\tGPU BUSY")
	traced := span(p.FirstSeen, p.LastSeen)
	var sum model.StreamStats
	var sumSyncs syncs.Totals
	idle := 0
	for _, s := range p.Streams {
		if s == nil {
			continue
		}
		st := &s.Stats
		sy := totals[s.ID]
		// PyTorch creates pools of streams it never uses: count them, do
		// not list them. The legacy default stream is always listed.
		if s.ID != 0 && st.GPUOps == 0 && sy.Explicit+sy.Implicit == 0 {
			idle++
			continue
		}
		streamRow(tw, s.Label(), st, sy, busyCell(st, traced))
		sum.Collectives += st.Collectives
		sum.CommBytes += st.CommBytes
		sum.Launches += st.Launches
		sum.Memcpys += st.Memcpys
		sum.Memsets += st.Memsets
		sum.BytesHtoD += st.BytesHtoD
		sum.BytesDtoH += st.BytesDtoH
		sum.BytesDtoD += st.BytesDtoD
		sum.BytesPageable += st.BytesPageable
		sum.BytesPinned += st.BytesPinned
		sum.GPUOps += st.GPUOps
		sum.GraphLaunches += st.GraphLaunches
		sum.GraphOps += st.GraphOps
		merge(&sumSyncs, sy)
	}
	if t, ok := totals[deviceWide]; ok {
		fmt.Fprintf(tw, "  device-wide\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t%s\t-\t-\n",
			syncCell(t.Explicit, t.ExplicitNs), syncCell(t.Implicit, t.ImplicitNs))
		merge(&sumSyncs, t)
	}
	streamRow(tw, "total", &sum, sumSyncs, "-")
	tw.Flush()
	if idle > 0 {
		fmt.Fprintf(buf, "  (%s with no work while traced not listed)\n", plural(idle, "stream", "streams"))
	}
	if sum.GraphLaunches > 0 {
		fmt.Fprintf(buf, "  CUDA graphs: %s ran %s (their nodes: in GPU OPS, not in LAUNCHES)\n",
			plural(sum.GraphLaunches, "launch", "launches"), plural(sum.GraphOps, "GPU op", "GPU ops"))
	}
	if sum.Collectives > 0 {
		comm, overlap := model.CommOverlap(p)
		share := 0.0
		if comm > 0 {
			share = 100 * float64(overlap) / float64(comm)
		}
		fmt.Fprintf(buf, "  NCCL: %d operations, %s; communication %s, %.0f%% of it overlapped compute on other streams (inferred)\n",
			sum.Collectives, units.Bytes(sum.CommBytes), units.Duration(comm), share)
	}

	if found != nil {
		stepLines(buf, steps.Of(found, p.PID))
	}
	host := syncs.HostOf(r, collected, p.PID)
	hostLines(buf, host)

	// The same sites as `cudatap syncs`: the user's line, else the
	// innermost frame; background threads' last.
	sites := syncs.ProcessSites(r, collected, p.PID)
	if len(sites) > 0 {
		fmt.Fprintf(buf, "\n  top sync sites by blocked time (cudatap syncs --full-stacks has their stacks)\n")
		tw = tabwriter.NewWriter(buf, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  KIND\tCOUNT\tBLOCKED\tAPI\tSITE\tHINT")
		for _, s := range sites[:min(top, len(sites))] {
			site := s.Where()
			switch {
			case site == "":
				site = "-"
			case !s.UserFrame:
				site += " [no user frame]"
			}
			blocked, hint := units.Duration(s.BlockedNs), s.Hint
			if s.Background != "" {
				blocked = "(" + blocked + ")"
				hint = fmt.Sprintf("%s on %s: did not hold up the threads that launch work", s.Background, strings.Join(s.Threads, ", "))
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\n", s.Kind, s.Count, blocked, s.API, site, hint)
		}
		tw.Flush()
	}
	verdicts := HostVerdicts(&r.GPU, host)
	if len(verdicts) > 0 {
		buf.WriteByte('\n')
	}
	for _, v := range verdicts {
		fmt.Fprintf(buf, "  verdict: %s: %s\n", v.Kind, v.Detail)
	}
	return len(verdicts) > 0
}

// stepLines writes the process's step times, or why none were found.
func stepLines(buf *bytes.Buffer, f *steps.Found) {
	switch {
	case f == nil:
		return
	case len(f.Steps) == 0:
		fmt.Fprintf(buf, "  steps: none found: %s\n", f.Why)
		return
	}
	by := "the NVTX range " + strconv.Quote(f.Marker)
	if f.By == steps.BySync {
		by = "the wait at " + f.Marker
	}
	fmt.Fprintf(buf, "  steps: %s, marked by %s on thread %d (ProfilerStep#N in the traces)\n", plural(len(f.Steps), "step", "steps"), by, f.TID)
	tw := tabwriter.NewWriter(buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    STEPS\tMEAN\tMEDIAN\tP90\tGPU TIME PER STEP (median)")
	gpu := "-"
	switch {
	case f.GPUMeasured:
		gpu = units.Duration(f.GPUMedianNs) + " (measured by CUPTI)"
	case f.GPUMedianNs > 0:
		gpu = "≥ " + units.Duration(f.GPUMedianNs) + " (some ops not measured)"
	}
	fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%s\n", len(f.Steps), units.Duration(f.MeanNs), units.Duration(f.MedianNs), units.Duration(f.P90Ns), gpu)
	tw.Flush()
	if f.NotSearched > 0 {
		fmt.Fprintf(buf, "    (%d synchronizations past the bound of the step search: later steps not found)\n", f.NotSearched)
	}
}

func streamRow(w io.Writer, label string, st *model.StreamStats, sy syncs.Totals, busy string) {
	fmt.Fprintf(w, "  %s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", label,
		st.Launches, st.Memcpys, units.Bytes(st.BytesHtoD), units.Bytes(st.BytesDtoH), units.Bytes(st.BytesDtoD),
		units.Bytes(st.BytesPageable), units.Bytes(st.BytesPinned), st.Memsets,
		syncCell(sy.Explicit, sy.ExplicitNs), syncCell(sy.Implicit, sy.ImplicitNs), st.GPUOps, busy)
}

// busyCell is the stream's GPU busy time with its share of the traced
// span: measured ("2.1ms (3%)" when CUPTI timed every op), bounded above
// ("≤ 2.1ms (3%)" without timings), or between what was measured and the
// bound ("1.9ms–2.1ms (3%)"); "-" for a stream without GPU work.
func busyCell(st *model.StreamStats, traced uint64) string {
	if st.GPUOps == 0 {
		return "-"
	}
	var s string
	switch {
	case st.BusyNs > 0 && st.BusyNs == st.BusyMaxNs:
		s = units.Duration(st.BusyNs)
	case st.BusyNs > 0:
		s = units.Duration(st.BusyNs) + "–" + units.Duration(st.BusyMaxNs)
	default:
		s = "≤ " + units.Duration(st.BusyMaxNs)
	}
	if traced > 0 {
		s += fmt.Sprintf(" (%.0f%%)", 100*float64(min(st.BusyMaxNs, traced))/float64(traced))
	}
	return s
}

// syncCell is "count / blocked time", or "-" for none.
func syncCell(n int, ns uint64) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n) + " / " + units.Duration(ns)
}

func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(int64(n), 10) + " " + many
}

func span(start, end uint64) uint64 {
	if end > start {
		return end - start
	}
	return 0
}
