package describe

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// The names of a trace's tracks and slices, shared by the trace formats
// (export/chrome, export/perfetto) so that one recording reads the same in
// both.

// Origin is where a process of a merged trace ran.
type Origin struct {
	Host string
	PID  uint32
}

// ByRank orders processes for a trace: the ranks of NCCL jobs first, by
// rank (a job's process groups in rank order), then the others by pid.
func ByRank(ps []*model.Process) []*model.Process {
	out := slices.Clone(ps)
	slices.SortStableFunc(out, func(a, b *model.Process) int {
		ra, rb := a.WorldSize > 0, b.WorldSize > 0
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		case ra:
			return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.PID, b.PID))
		}
		return cmp.Compare(a.PID, b.PID)
	})
	return out
}

// Label names p's process group: "rank 1 of 2 — python3 (pid 4124)" for a
// rank of an NCCL job; in a merged trace (where not nil) with the host and
// the pid there.
func Label(p *model.Process, where *Origin) string {
	l := p.Label()
	if where != nil {
		at := "(pid " + strconv.FormatUint(uint64(where.PID), 10)
		if where.Host != "" {
			at += " on " + where.Host
		}
		l = strings.Replace(l, "(pid "+strconv.FormatUint(uint64(p.PID), 10), at, 1)
	}
	if p.WorldSize > 0 {
		rank := fmt.Sprintf("rank %d of %d", p.Rank, p.WorldSize)
		l = rank + " — " + strings.Replace(l, ", "+rank, "", 1)
	}
	return l
}

// DeviceName names device d ("GPU ?" for work cudatap could not attribute).
func DeviceName(d int8) string {
	if d < 0 {
		return "GPU ?"
	}
	return "GPU " + strconv.Itoa(int(d))
}

// DeviceTrack names the track of p's work on device d, labelled by label
// (Label): "GPU 0 — python3 (pid 4123) (inferred)".
func DeviceTrack(d int8, label string, p *model.Process) string {
	timing := " (inferred)"
	if p.Measured {
		timing = " (CUPTI)"
	}
	return DeviceName(d) + " — " + label + timing
}

// NCCLType names an NCCL data type.
func NCCLType(t uint8) string {
	if int(t) < len(event.NCCLTypeName) {
		return event.NCCLTypeName[t]
	}
	return "type " + strconv.Itoa(int(t))
}

// CallName is the category and name of c's slice, and its API's spec (nil
// for an API cudatap does not know: then the category is cuda_runtime and
// the name the API's number). A driver launch the runtime made is named as
// the program called it, as the PyTorch profiler does.
func CallName(c *model.Call) (spec *event.Spec, cat, name string) {
	spec = c.Spec()
	if spec == nil {
		return nil, "cuda_runtime", c.API.String()
	}
	cat, name = spec.Layer.Category(), spec.Name
	if rt := event.Lookup(event.RuntimeLaunch(c.API)); c.ViaRuntime && rt != nil {
		cat, name = rt.Layer.Category(), rt.Name
	}
	return spec, cat, name
}

// AppendOpName appends the name of a GPU op's slice that is not a kernel
// (kernels are named by their full demangled name), as Kineto names it:
// "Memcpy HtoD (Pinned -> Device)", "Memset (Device)"; the collective; and
// "Graph launch" for the launch of a graph whose nodes cudatap did not see
// made (the ops of one it saw are named as their nodes). Only printable
// ASCII, which needs no escaping in JSON.
func AppendOpName(b []byte, op *model.GPUOp) []byte {
	switch op.Kind {
	case model.OpMemcpy:
		// Kineto: "Memcpy <kind> (<source memory> -> <destination memory>)".
		host := "Pinned"
		if op.Pageable {
			host = "Pageable"
		}
		kind, src, dst := op.CopyKind.String(), host, host
		switch op.CopyKind {
		case event.HostToDevice:
			dst = "Device"
		case event.DeviceToHost:
			src = "Device"
		case event.DeviceToDevice:
			src, dst = "Device", "Device"
		case event.DefaultKind: // direction left to the pointers: CUPTI's "Unknown"
			kind, src, dst = "Unknown", "Unknown", "Unknown"
		}
		b = append(b, "Memcpy "...)
		b = append(b, kind...)
		b = append(b, " ("...)
		b = append(b, src...)
		b = append(b, " -> "...)
		b = append(b, dst...)
		b = append(b, ')')
	case model.OpMemset:
		b = append(b, "Memset (Device)"...)
	case model.OpGraph:
		b = append(b, "Graph launch"...)
	case model.OpCollective:
		name := "nccl"
		if s := event.Lookup(op.API); s != nil {
			name = s.Name
		}
		b = append(b, name...)
	default:
		b = append(b, "Host function"...)
	}
	return b
}

// Timing says how a GPU op's times are known: measured by CUPTI; or only
// bounded (it ran within [earliest start, latest end], drawn as laid out
// there); or unbounded (no sync proved it done before the end).
func Timing(op *model.GPUOp) string {
	switch {
	case op.Measured:
		return "measured"
	case op.Bounded:
		return "bounded"
	}
	return "unbounded"
}

// AppendMeeting appends the name of an NCCL meeting's slice: "ncclAllReduce
// #3: rank 1 last".
func AppendMeeting(b []byte, api event.API, seq, lastRank int) []byte {
	b = append(b, api.String()...)
	b = append(b, " #"...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, ": rank "...)
	b = strconv.AppendInt(b, int64(lastRank), 10)
	return append(b, " last"...)
}

// CommTrack names an NCCL communicator's meetings track.
func CommTrack(id uint64, ranks int) string {
	return fmt.Sprintf("NCCL communicator %016x (%d ranks): meetings, first to last arrival", id, ranks)
}
