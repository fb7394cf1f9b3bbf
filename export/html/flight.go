package html

import (
	"fmt"
	"strings"

	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/recording"
)

// flightLead puts what made a flight recorder's dump first: the first
// finding, and the summary's first line.
func (rep *Report) flightLead(f *recording.Flight) {
	sev := SevHigh
	if f.Trigger == "on_demand" {
		sev = SevInfo
	}
	who := fmt.Sprintf("%d processes", len(f.PIDs))
	if len(f.PIDs) == 1 {
		who = fmt.Sprintf("process %d", f.PIDs[0])
	}
	detail := fmt.Sprintf("the flight recorder's dump of %s at %s: the last %s of each, %d events, and %d calls from before that window whose state it still used (allocations, streams, pending GPU work, communicators), restated with their own times",
		who, rep.at(f.At), units.Duration(f.WindowNs), f.Events, f.Restated)
	var lost []string
	if f.Dropped > 0 {
		lost = append(lost, fmt.Sprintf("%d events of the window did not fit its per-process budget (the oldest went first; raise --flight-max-bytes)", f.Dropped))
	}
	if f.StateDropped > 0 {
		lost = append(lost, fmt.Sprintf("%d calls of lasting state or names did not fit it", f.StateDropped))
	}
	if len(lost) > 0 {
		detail += "; " + strings.Join(lost, "; ")
	}
	title := fmt.Sprintf("flight recorder, trigger %s: %s", f.Trigger, f.Detail)
	rep.Findings = append([]Finding{{Severity: sev, Title: title, Detail: detail}}, rep.Findings...)
	rep.Summary = title + "\n  " + detail + "\n" + rep.Summary
}
