package lint

import (
	"fmt"
	"strings"

	"github.com/cudatap/cudatap/export/oom"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/model"
)

// oomFindings are the out-of-memory failures of r, a finding per process:
// always errors, each request an example (the first Examples of them),
// its failed call the evidence and its note what was held by whom.
func oomFindings(r *model.Result, opts Options) []Finding {
	recs := oom.Records(r)
	rule := Rules(opts)[0]
	var out []Finding
	for _, p := range r.Processes {
		if p.OOMCount == 0 {
			continue
		}
		f := Finding{ID: OutOfMemory, Level: LevelError, Cost: Cost{Kind: CostFailure}, Title: rule.Title, PID: p.PID, Process: p.Label(),
			Count: p.OOMCount, Unit: "failed allocations", Fix: rule.Fix, Scope: rule.Scope}
		sites := map[string]bool{}
		var first *oom.Record
		for i := range recs {
			rec := &recs[i]
			if rec.PID != p.PID {
				continue
			}
			if first == nil {
				first = rec
			}
			sites[rec.Call+"|"+rec.Site] = true
			if len(f.Examples) >= opts.Examples {
				continue
			}
			f.Examples = append(f.Examples, Example{Count: int64(rec.Attempts), Note: oomNote(rec), Calls: []Evidence{{
				Role: "alloc", Call: rec.Call, Seq: rec.Seq, AtNs: rec.AtNs, TID: rec.TID, Thread: rec.Thread, Stream: -1,
				Site: rec.Site, UserFrame: rec.UserFrame, Via: rec.Via, Bytes: rec.Bytes}}})
		}
		f.Sites = len(sites)
		f.Summary = fmt.Sprintf("%s for want of memory", plural(p.OOMCount, "device allocation failed", "device allocations failed"))
		if first != nil {
			f.Summary += fmt.Sprintf("; the first: %s of %s at +%s, holding %s through CUDA; %s", first.Call, units.Bytes(first.Bytes),
				units.Offset(first.AtNs), units.Bytes(first.Held), outcome(first))
		}
		out = append(out, f)
	}
	return out
}

// oomNote is what a request asked and who held the memory then.
func oomNote(rec *oom.Record) string {
	var parts []string
	for _, h := range rec.Holders[:min(3, len(rec.Holders))] {
		s := units.Bytes(h.Bytes) + " at " + h.Site
		if h.Site == "" {
			s = units.Bytes(h.Bytes) + " by " + h.API
		}
		if h.Kind != "" {
			s += " [" + h.Kind + "]"
		}
		parts = append(parts, s)
	}
	if len(rec.Holders) > 3 {
		parts = append(parts, fmt.Sprintf("%d more", len(rec.Holders)-3))
	}
	s := fmt.Sprintf("%s asked, %s held", units.Bytes(rec.Bytes), units.Bytes(rec.Held))
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	for _, d := range rec.GPUs {
		s += fmt.Sprintf("; GPU %d %s free of %s (NVML)", d.Device, units.Bytes(d.Free), units.Bytes(d.Total))
	}
	return s + "; " + outcome(rec)
}

func outcome(rec *oom.Record) string {
	switch {
	case rec.Recovered:
		return "recovered"
	case rec.CallsAfter == 0:
		return "did not recover"
	}
	return fmt.Sprintf("no allocation succeeded after it (%s)", plural(rec.CallsAfter, "more CUDA call", "more CUDA calls"))
}
