package html

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/cudatap/cudatap/internal/units"
)

// HostSummary says in words what the process's threads did during the
// gap.
func (g *Gap) HostSummary() string {
	span := g.Certain()
	partial := ""
	if !g.HostComplete {
		partial = " (calls before the last kept are unknown)"
	}
	if len(g.Host) == 0 {
		return "no CUDA call in progress: the host was busy elsewhere (or idle)" + partial
	}
	var parts []string
	for _, t := range g.Host {
		s := fmt.Sprintf("thread %d: %s in CUDA calls", t.TID, share(t.CallNs, span))
		if t.TopAPI != "" && t.TopNs > 0 {
			s += fmt.Sprintf(" (mostly %s", t.TopAPI)
			if t.BlockedNs > 0 {
				s += fmt.Sprintf(", blocked %s: %s", share(t.BlockedNs, span), t.Sync)
			}
			s += ")"
		} else if t.Calls > 0 {
			s += fmt.Sprintf(" (%d entry-only calls)", t.Calls)
		}
		if t.CallNs < span {
			s += fmt.Sprintf(", %s outside CUDA", share(span-t.CallNs, span))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ") + partial
}

// overlapCell is a time as drawn, with its bound when the ops were not all
// measured: "1.2 ms (≤ 3.0 ms)".
func overlapCell(drawn, atMost uint64, measured bool) string {
	if measured {
		return units.Duration(drawn)
	}
	return fmt.Sprintf("%s (≤ %s)", units.Duration(drawn), units.Duration(atMost))
}

// at is a time of the recording as an offset from the start of the
// timeline (the page's axis).
func (rep *Report) at(t uint64) string {
	t0 := rep.timeline.T0
	if t0 == 0 {
		t0 = rep.Start
	}
	return "+" + units.Duration(t-min(t, t0))
}

// WriteText writes the report's analyses for a terminal: the verdicts,
// the overlap per device, the idle gaps, queues and launch rates, the top
// GPU operations, device memory and what was aggregated. The summary
// (export/report) is in Summary.
func (rep *Report) WriteText(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "cudatap report: %s, %s recorded\n", rep.Title, units.Duration(rep.End-min(rep.End, rep.Start)))

	fmt.Fprintf(&b, "\nverdicts\n")
	for _, f := range rep.Findings {
		fmt.Fprintf(&b, "  [%s] %s\n", f.Severity, f.Title)
		if f.Detail != "" {
			fmt.Fprintf(&b, "      %s\n", f.Detail)
		}
		if f.Where != "" {
			fmt.Fprintf(&b, "      where: %s\n", f.Where)
		}
		for _, l := range f.Lines {
			fmt.Fprintf(&b, "      %s\n", l)
		}
		if f.Fix != "" {
			fmt.Fprintf(&b, "      fix: %s\n", f.Fix)
		}
	}

	if len(rep.Devices) > 0 {
		fmt.Fprintf(&b, "\noverlap of compute, copies and communication per device (≤: at most, from the ops' bounds)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  DEVICE\tOPS\tMEASURED\tIN USE\tCOMPUTE\tCOPY\tCOMM\tCOPY+COMPUTE\tCOMM+COMPUTE\tNOTHING QUEUED")
		for _, d := range rep.Devices {
			m := d.Measured == d.Ops
			idle := d.SpanNs - min(d.SpanNs, d.AtMost.Any)
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t≥ %s (%s)\n", d.Label, d.Ops, d.Measured, units.Duration(d.SpanNs),
				overlapCell(d.Drawn.Compute, d.AtMost.Compute, m), overlapCell(d.Drawn.Copy, d.AtMost.Copy, m),
				overlapCell(d.Drawn.Comm, d.AtMost.Comm, m), overlapCell(d.Drawn.CopyCompute, d.AtMost.CopyCompute, m),
				overlapCell(d.Drawn.CommCompute, d.AtMost.CommCompute, m), units.Duration(idle), share(idle, d.SpanNs))
		}
		tw.Flush()
	}

	for _, pr := range rep.Processes {
		if len(pr.Streams) == 0 && !pr.Memory.Seen {
			continue
		}
		fmt.Fprintf(&b, "\n%s\n", pr.Label)
		if len(pr.Streams) > 0 {
			fmt.Fprintf(&b, "  streams: proven idle gaps, queue depth and launch rates\n")
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  STREAM\tOPS\tIDLE GAPS\tPROVEN IDLE\tLONGEST\tMAX QUEUED\tMEAN QUEUED\tLAUNCHES\tPEAK LAUNCHES/S")
			for _, s := range pr.Streams {
				longest := "-"
				if len(s.TopGaps) > 0 {
					longest = fmt.Sprintf("%s at %s", units.Duration(s.TopGaps[0].Certain()), rep.at(s.TopGaps[0].CertainStart))
				}
				fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%s\t%s\t%.1f\t%d\t%.0f\n", s.Label, s.Ops, s.Gaps, units.Duration(s.CertainIdleNs), longest,
					queueCell(s), s.MeanQueue, s.Launches, s.LaunchPeakPerS)
			}
			tw.Flush()
			for _, s := range pr.Streams {
				if len(s.TopGaps) == 0 {
					continue
				}
				g := s.TopGaps[0]
				fmt.Fprintf(&b, "  %s, longest gap %s at %s: %s\n", s.Label, units.Duration(g.Certain()), rep.at(g.CertainStart), g.HostSummary())
			}
		}
		if m := pr.Memory; m.Seen {
			late := ""
			if m.AttachedLate {
				late = " (allocations before cudatap attached are unknown)"
			}
			fmt.Fprintf(&b, "  device memory reserved through CUDA: peak %s at %s; %d allocations (%s), %d frees; never freed: %s in %d%s\n",
				units.Bytes(m.Peak), rep.at(m.PeakAt), m.Allocs, units.Bytes(m.AllocBytes), m.Frees, units.Bytes(m.NeverFreedB), m.NeverFreedN, late)
			for _, h := range m.NeverFreed[:min(5, len(m.NeverFreed))] {
				fmt.Fprintf(&b, "    never freed: %s in %d × %s at %s\n", units.Bytes(h.Bytes), h.Count, h.API, orDash(h.Where))
			}
		}
	}

	if len(rep.TopByCount) > 0 {
		fmt.Fprintf(&b, "\ntop GPU operations by count\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  COUNT\tKIND\tMEASURED TIME\tBYTES\tPID\tNAME")
		for _, o := range rep.TopByCount[:min(10, len(rep.TopByCount))] {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%s\n", o.Count, o.Kind, measuredCell(o), bytesCell(o.Bytes), o.PID, o.Name)
		}
		tw.Flush()
	}
	if len(rep.TopByTime) > 0 {
		fmt.Fprintf(&b, "\ntop GPU operations by measured time\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TIME\tCOUNT\tMAX\tPID\tNAME")
		for _, o := range rep.TopByTime[:min(10, len(rep.TopByTime))] {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%d\t%s\n", units.Duration(o.MeasuredNs), o.Count, units.Duration(o.MaxNs), o.PID, o.Name)
		}
		tw.Flush()
	}

	fmt.Fprintf(&b, "\nbounds\n")
	for _, s := range rep.Bounds {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	_, err := w.Write(b.Bytes())
	return err
}

func queueCell(s StreamReport) string {
	switch {
	case s.QueueSaturated:
		return fmt.Sprintf("> %d", s.MaxQueue)
	case s.QueueBound:
		return fmt.Sprintf("≤ %d", s.MaxQueue)
	}
	return fmt.Sprint(s.MaxQueue)
}

func measuredCell(o OpRow) string {
	switch {
	case o.Measured == 0:
		return "not measured"
	case o.Measured < o.Count:
		return fmt.Sprintf("%s (%d of %d measured)", units.Duration(o.MeasuredNs), o.Measured, o.Count)
	}
	return units.Duration(o.MeasuredNs)
}

func bytesCell(n uint64) string {
	if n == 0 {
		return "-"
	}
	return units.Bytes(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
