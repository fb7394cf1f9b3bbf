package main

import (
	"io"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/oom"
	"github.com/cudatap/cudatap/export/report"
	"github.com/cudatap/cudatap/export/steps"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
)

// summarySchema is the version of the JSON summary (`record --json`,
// `export --json`, `report --json`; docs/formats.md "JSON output", the lints in
// docs/lints.md): fields are only ever added; a removed or retyped field
// bumps it.
const summarySchema = 1

// summaryJSON is the summary as JSON. Times are ns of CLOCK_MONOTONIC
// (unix ns = monotonic + wall_offset_ns); sizes in bytes.
type summaryJSON struct {
	Schema       int           `json:"schema"`
	Cudatap      string        `json:"cudatap"` // the version that wrote it
	StartNs      uint64        `json:"start_ns"`
	EndNs        uint64        `json:"end_ns"`
	DurationNs   uint64        `json:"duration_ns"`
	WallOffsetNs int64         `json:"wall_offset_ns"`
	Truncated    string        `json:"truncated,omitempty"` // why the recording ends early; drop counters are then unknown
	Processes    []processJSON `json:"processes"`
	// Device allocations that failed for want of memory (the first 64 of
	// each process; processes[].ooms counts them all): the size asked, the
	// line, who held the memory, NVML's view of the device, the outcome.
	OOMs  []oom.Record `json:"ooms"`
	Sites []syncs.Site `json:"sites"` // as `cudatap syncs --json`, by blocked time
	// The summary's judgements of each process's host side (launch bound,
	// input stall), with the numbers behind them and the fix.
	HostVerdicts []report.HostVerdict `json:"host_verdicts"`
	Lints        []lint.Finding       `json:"lints"`       // as `cudatap lint --json`'s findings: priced, ranked by level then cost
	LintLimits   lint.Limits          `json:"lint_limits"` // what the lints' bounds left out (counted, not shown)
	Stragglers   []straggler.Comm     `json:"stragglers"`  // per NCCL communicator: meetings, arrival spread, per-rank waits
	GPU          model.GPUReport      `json:"gpu"`         // NVML: per-device statistics and verdicts
	Drops        model.Drops          `json:"drops"`       // as `cudatap syncs --json`
	Lost         uint64               `json:"lost_events"`
	Outputs      []outputJSON         `json:"outputs"`
	Command      *commandJSON         `json:"command,omitempty"` // record with a command after --
	// Per process: its training steps (ProfilerStep#N in the traces), what
	// marked them and their times, or why none were found (docs/steps.md).
	Steps []steps.Found `json:"steps"`
}

type processJSON struct {
	PID                uint32       `json:"pid"`
	Comm               string       `json:"comm"`
	Cmdline            string       `json:"cmdline,omitempty"`
	Parent             uint32       `json:"parent,omitempty"` // the process of the followed tree that started it
	Container          string       `json:"container,omitempty"`
	Rank               int32        `json:"rank"`       // NCCL rank; -1 when not in a job
	WorldSize          int32        `json:"world_size"` // 0 when not in a job
	Calls              int64        `json:"calls"`
	GPUOps             int64        `json:"gpu_ops"`
	DeviceMemPeakBytes uint64       `json:"device_mem_peak_bytes"`
	OOMs               int64        `json:"ooms"`          // device allocations that failed for want of memory
	AttachedLate       bool         `json:"attached_late"` // traced from after its start: earlier allocations unknown
	GPUTimesMeasured   bool         `json:"gpu_times_measured"`
	HeldNs             uint64       `json:"held_ns"` // held by cudatap while it hooked libraries
	FirstNs            uint64       `json:"first_ns"`
	LastNs             uint64       `json:"last_ns"`
	Streams            []streamJSON `json:"streams"`
}

type streamJSON struct {
	ID                int    `json:"id"` // 0: the legacy default stream
	Label             string `json:"label"`
	Launches          int64  `json:"launches"`
	GraphLaunches     int64  `json:"graph_launches"`
	GraphOps          int64  `json:"graph_ops"` // GPU ops graph launches ran (each launch's nodes), among gpu_ops
	Memcpys           int64  `json:"memcpys"`
	Memsets           int64  `json:"memsets"`
	BytesHtoD         uint64 `json:"bytes_htod"`
	BytesDtoH         uint64 `json:"bytes_dtoh"`
	BytesDtoD         uint64 `json:"bytes_dtod"`
	BytesOther        uint64 `json:"bytes_other"`
	BytesPageable     uint64 `json:"bytes_pageable"`
	BytesPinned       uint64 `json:"bytes_pinned"`
	ExplicitSyncs     int    `json:"explicit_syncs"`
	ImplicitSyncs     int    `json:"implicit_syncs"`
	ExplicitSyncNs    uint64 `json:"explicit_sync_blocked_ns"`
	ImplicitSyncNs    uint64 `json:"implicit_sync_blocked_ns"`
	Collectives       int64  `json:"collectives"`
	CommBytes         uint64 `json:"comm_bytes"`
	GPUOps            int64  `json:"gpu_ops"`
	GPUBusyMaxNs      uint64 `json:"gpu_busy_max_ns"`      // upper bound of GPU busy time
	GPUBusyMeasuredNs uint64 `json:"gpu_busy_measured_ns"` // what CUPTI measured (--gpu-times), else 0
}

// outputJSON is an output asked for; whether each was written, the exit
// status says (6: not all of them) and stderr which.
type outputJSON struct {
	Path   string `json:"path"` // "-": the standard output
	Format string `json:"format"`
}

// commandJSON is how the command record launched ended.
type commandJSON struct {
	ExitCode int    `json:"exit_code"`        // as a shell reports it: 128+N when signal N killed it
	Signal   string `json:"signal,omitempty"` // the signal that killed it
	Stopped  bool   `json:"stopped"`          // cudatap stopped it (-d, Ctrl-C): exit_code is not its own
}

func newCommandJSON(e tracer.Exit) *commandJSON {
	c := &commandJSON{ExitCode: e.Code, Stopped: e.Stopped}
	if e.Signal != 0 {
		c.Signal = signalName(e.Signal)
	}
	return c
}

// writeSummaryJSON writes the summary of r as one JSON document.
func writeSummaryJSON(w io.Writer, r *model.Result, agg *export.Aggregates, outs []export.Output, command *commandJSON) error {
	col := agg.Syncs
	s := summaryJSON{Lints: lint.Findings(r, agg.Lints), Stragglers: agg.Stragglers.Comms(), Schema: summarySchema, Cudatap: readBuildInfo().Version, StartNs: r.Start, EndNs: r.End,
		WallOffsetNs: r.WallOffsetNs, Truncated: r.Truncated, Processes: []processJSON{}, OOMs: oom.Records(r), Sites: syncs.Sites(r, col),
		HostVerdicts: report.AllHostVerdicts(r, col), GPU: r.GPU, Drops: r.Drops, Lost: r.Drops.Lost(), Outputs: []outputJSON{}, Command: command}
	if r.End > r.Start {
		s.DurationNs = r.End - r.Start
	}
	if s.Sites == nil {
		s.Sites = []syncs.Site{}
	}
	if s.OOMs == nil {
		s.OOMs = []oom.Record{}
	}
	if s.HostVerdicts == nil {
		s.HostVerdicts = []report.HostVerdict{}
	}
	if agg.Lints != nil {
		s.LintLimits = agg.Lints.Limits()
	}
	if s.Lints == nil {
		s.Lints = []lint.Finding{}
	}
	if s.Stragglers == nil {
		s.Stragglers = []straggler.Comm{}
	}
	if s.Steps = agg.Steps.Find(r); s.Steps == nil {
		s.Steps = []steps.Found{}
	}
	for _, p := range r.Processes {
		pj := processJSON{PID: p.PID, Comm: p.Info.Comm, Cmdline: p.Info.Cmdline, Parent: p.Info.Parent, Container: p.Info.Container, Rank: -1, WorldSize: p.WorldSize,
			Calls: p.NCalls, GPUOps: p.NGPUOps, DeviceMemPeakBytes: p.DeviceMemPeak, OOMs: p.OOMCount, AttachedLate: p.AttachedLate, GPUTimesMeasured: p.Measured,
			HeldNs: p.HeldNs, FirstNs: p.FirstSeen, LastNs: p.LastSeen, Streams: []streamJSON{}}
		if p.WorldSize > 0 {
			pj.Rank = p.Rank
		}
		totals := col.StreamTotals(p.PID)
		for _, st := range p.Streams {
			if st == nil {
				continue
			}
			t := totals[st.ID]
			x := st.Stats
			pj.Streams = append(pj.Streams, streamJSON{ID: st.ID, Label: st.Label(), Launches: x.Launches, GraphLaunches: x.GraphLaunches, GraphOps: x.GraphOps,
				Memcpys: x.Memcpys, Memsets: x.Memsets, BytesHtoD: x.BytesHtoD, BytesDtoH: x.BytesDtoH, BytesDtoD: x.BytesDtoD,
				BytesOther: x.BytesOther, BytesPageable: x.BytesPageable, BytesPinned: x.BytesPinned,
				ExplicitSyncs: t.Explicit, ImplicitSyncs: t.Implicit, ExplicitSyncNs: t.ExplicitNs, ImplicitSyncNs: t.ImplicitNs,
				Collectives: x.Collectives, CommBytes: x.CommBytes, GPUOps: x.GPUOps, GPUBusyMaxNs: x.BusyMaxNs, GPUBusyMeasuredNs: x.BusyNs})
		}
		s.Processes = append(s.Processes, pj)
	}
	for _, o := range outs {
		s.Outputs = append(s.Outputs, outputJSON{Path: o.Path, Format: string(o.Format)})
	}
	return writeJSON(w, s)
}
