// Package oom describes the device allocations that failed for want of
// memory (model.Process.OOMs) as every output shows them: the size asked,
// the user's line and stack, when; what the process held at that moment,
// by place and by API, each place said for what it is (PyTorch's caching
// allocator, NCCL, a cuBLAS workspace); the device as NVML saw it then
// and the other processes holding its memory; and whether the process
// got memory again. The summary, the report, the page, the lints and the
// JSON outputs all word them from Records.
package oom

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Record is one failed request, named. Times are ns: TimeNs on
// CLOCK_MONOTONIC, the others since the recording began or after the
// failure.
type Record struct {
	PID     uint32 `json:"pid"`
	Process string `json:"process"`
	// Call is the exact symbol that failed; Bytes what it asked for;
	// Attempts the failed calls of the request (a caching allocator frees
	// its cache and asks again).
	Call     string `json:"call"`
	Bytes    uint64 `json:"bytes"`
	Attempts int    `json:"attempts"`
	Seq      int    `json:"seq"` // the first failed call's position in its process
	AtNs     uint64 `json:"at_ns"`
	TimeNs   uint64 `json:"time_ns"`
	TID      uint32 `json:"tid"`
	Thread   string `json:"thread,omitempty"`
	// Device: the CUDA device the thread had chosen, -1 when unknown.
	Device int `json:"device"`
	// Site is the user's line (syncs.UserSite): the innermost user Python
	// frame, else native frame; "" without a stack.
	Site        string   `json:"site"`
	UserFrame   bool     `json:"user_frame"`
	Via         string   `json:"via,omitempty"`
	PythonStack []string `json:"python_stack,omitempty"`
	NativeStack []string `json:"native_stack,omitempty"`
	// Held is the device memory the process held through CUDA at the
	// (last) failure, in HeldAllocations allocations; with
	// HeldSinceAttach only what it allocated since cudatap attached
	// (earlier allocations are unknown). Released: freed between its first
	// and last attempt.
	Held            uint64 `json:"held_bytes"`
	HeldAllocations uint64 `json:"held_allocations"`
	HeldSinceAttach bool   `json:"held_since_attach"`
	Released        uint64 `json:"released_bytes"`
	// Holders: who held it, most first; the last, with Sites > 1 and no
	// API, adds up the places not shown. ByAPI: the same memory by API.
	Holders []Holder `json:"holders"`
	ByAPI   []Holder `json:"by_api"`
	// Recovered: a device allocation of the process succeeded after it,
	// RecoveredAfterNs after its last attempt. Without, CallsAfter says
	// whether the process went on (a caching allocator may serve it from
	// memory it kept, with no CUDA call) or died: the CUDA calls it made
	// after its last attempt, the last LastCallAfterNs after it.
	Recovered        bool   `json:"recovered"`
	RecoveredAfterNs uint64 `json:"recovered_after_ns,omitempty"`
	CallsAfter       int64  `json:"calls_after"`
	LastCallAfterNs  uint64 `json:"last_call_after_ns"`
	// GPUs: the device as NVML sampled it then; NVML says why not, when
	// it is empty.
	GPUs []GPU  `json:"gpus"`
	NVML string `json:"nvml,omitempty"`
}

// Holder is device memory held by one place (or, with Sites > 1, by
// several added up).
type Holder struct {
	Bytes uint64 `json:"bytes"`
	Count uint64 `json:"count"` // allocations
	API   string `json:"api,omitempty"`
	// Kind says what the memory is, from the allocating stack: a
	// reservation of PyTorch's caching allocator, NCCL's buffers, a cuBLAS
	// workspace; "" for an allocation the program (or a library not told
	// apart) made itself.
	Kind        string   `json:"kind,omitempty"`
	Site        string   `json:"site,omitempty"`
	UserFrame   bool     `json:"user_frame"`
	Sites       int      `json:"sites"`
	PythonStack []string `json:"python_stack,omitempty"`
	NativeStack []string `json:"native_stack,omitempty"`
}

// Kinds of held memory.
const (
	KindCachingAllocator = "PyTorch caching allocator"
	KindNCCL             = "NCCL"
	KindCUBLAS           = "cuBLAS workspace"
)

// GPU is one device as NVML sampled it near the failure.
type GPU struct {
	Device         int          `json:"device"`           // NVML index
	SampleOffsetNs int64        `json:"sample_offset_ns"` // the sample's time less the failure's: negative before
	Total          uint64       `json:"total_bytes"`
	Used           uint64       `json:"used_bytes"`
	Free           uint64       `json:"free_bytes"`
	Process        uint64       `json:"process_bytes"` // what NVML counted for the process (its context included); 0 when not listed
	Others         []GPUProcess `json:"others"`        // the other processes holding memory on it, most first
}

// GPUProcess is another process holding memory on the device.
type GPUProcess struct {
	PID       uint32 `json:"pid"`
	Comm      string `json:"comm,omitempty"`
	Container string `json:"container,omitempty"`
	Bytes     uint64 `json:"bytes"`
}

// Fix is what to do about an out-of-memory failure.
const Fix = "make room before this allocation: free or shrink what the places above hold (a smaller batch, activation checkpointing, lower precision; del the tensors no longer needed, then torch.cuda.empty_cache()), or ask for less; memory other processes hold on the device is not the process's to use"

// Scope says what the records see.
const Scope = "device allocations made through CUDA (cudaMalloc and its managed, pitched, async and pool forms, cuMemAlloc and its forms, cuMemCreate) while traced; what a caching allocator reserved, not the tensors it handed out; the device's memory as NVML sampled it, when it was"

// nativeFrames: native frames named per stack (to tell what allocated).
const nativeFrames = 64

// Records names the out-of-memory failures of r's processes, by process,
// then time.
func Records(r *model.Result) []Record {
	var out []Record
	for _, p := range r.Processes {
		for i := range p.OOMs {
			out = append(out, record(r, p, &p.OOMs[i]))
		}
	}
	return out
}

// Count is the number of failed requests of r, those past the model's
// bound included.
func Count(r *model.Result) int64 {
	var n int64
	for _, p := range r.Processes {
		n += p.OOMCount
	}
	return n
}

func record(r *model.Result, p *model.Process, o *model.OOM) Record {
	rec := Record{PID: p.PID, Process: p.Label(), Call: (&model.Call{API: o.API, Symbol: o.Symbol}).SymbolName(), Bytes: o.Size,
		Attempts: o.Attempts, Seq: o.Seq, TimeNs: o.At, TID: o.TID, Device: int(o.Device), Held: o.InUse, HeldAllocations: o.Allocations,
		HeldSinceAttach: p.AttachedLate, Released: o.Released, Recovered: o.Recovered, Holders: []Holder{}, ByAPI: []Holder{}, GPUs: []GPU{}}
	if o.At > r.Start {
		rec.AtNs = o.At - r.Start
	}
	if r.Names != nil {
		rec.Thread = r.Names.Thread(p.PID, o.TID)
	}
	rec.PythonStack = describe.PyStack(r.Names, p, o.PyStack)
	rec.NativeStack = describe.NativeStack(r.Names, p, o.Stack, o.API, o.Symbol, nativeFrames)
	rec.Site, rec.Via, rec.UserFrame = syncs.UserSite(rec.PythonStack, rec.NativeStack)
	if o.Recovered {
		rec.RecoveredAfterNs = o.RecoveredAt - min(o.RecoveredAt, o.End)
	}
	rec.CallsAfter = p.NCalls - min(p.NCalls, o.Calls)
	rec.LastCallAfterNs = p.LastSeen - min(p.LastSeen, o.End)
	rec.Holders = holders(r, p, o)
	for _, h := range o.ByAPI {
		rec.ByAPI = append(rec.ByAPI, Holder{Bytes: h.Bytes, Count: h.Count, API: h.API.String(), Sites: h.Sites})
	}
	rec.GPUs, rec.NVML = gpus(r, p, o)
	return rec
}

// holders names the places holding o's memory, merging those that name
// the same site with the same API and kind.
func holders(r *model.Result, p *model.Process, o *model.OOM) []Holder {
	out := []Holder{}
	index := map[[3]string]int{}
	for _, h := range o.Holders {
		api := h.API.String()
		if s := event.Lookup(h.API); s != nil {
			api = s.Symbol(int(h.Symbol))
		}
		x := Holder{Bytes: h.Bytes, Count: h.Count, API: api, Sites: 1}
		if h.Other {
			x.Site = "(allocation places past the limit, together)"
		} else {
			x.PythonStack = describe.PyStack(r.Names, p, h.PyStack)
			x.NativeStack = describe.NativeStack(r.Names, p, h.Stack, h.API, h.Symbol, nativeFrames)
			x.Site, _, x.UserFrame = syncs.UserSite(x.PythonStack, x.NativeStack)
			x.Kind = KindOf(x.NativeStack)
		}
		k := [3]string{api, x.Kind, x.Site}
		if i, ok := index[k]; ok && x.Site != "" {
			out[i].Bytes += x.Bytes
			out[i].Count += x.Count
			out[i].Sites++
			continue
		}
		index[k] = len(out)
		out = append(out, x)
	}
	slices.SortStableFunc(out, func(a, b Holder) int { return cmp.Compare(b.Bytes, a.Bytes) })
	if o.Rest.Sites > 0 {
		out = append(out, Holder{Bytes: o.Rest.Bytes, Count: o.Rest.Count, Sites: o.Rest.Sites})
	}
	return out
}

// KindOf says what an allocation is from its native stack (innermost
// first, "function (object)"): NCCL's own (a frame in libnccl, or of an
// nccl function), a cuBLAS workspace (cuBLAS's frames, or PyTorch's
// CUDABlas handle and workspace functions), a reservation of PyTorch's
// caching allocator (its frames in libc10_cuda), in that order: cuBLAS
// workspaces come from the caching allocator too. "" for none of them.
func KindOf(native []string) string {
	has := func(match func(fn, obj string) bool) bool {
		for _, f := range native {
			fn, obj := f, ""
			if i := strings.LastIndex(f, " ("); i >= 0 && strings.HasSuffix(f, ")") {
				fn, obj = f[:i], f[i+2:len(f)-1]
			}
			if match(fn, obj) {
				return true
			}
		}
		return false
	}
	switch {
	case has(func(fn, obj string) bool {
		return strings.HasPrefix(obj, "libnccl") || strings.HasPrefix(fn, "nccl") || strings.HasPrefix(fn, "pnccl")
	}):
		return KindNCCL
	case has(func(fn, obj string) bool {
		return strings.HasPrefix(obj, "libcublas") || strings.Contains(fn, "cublas") || strings.Contains(fn, "CUDABlas") || strings.Contains(fn, "BlasLt")
	}):
		return KindCUBLAS
	case has(func(fn, obj string) bool {
		return strings.HasPrefix(obj, "libc10_cuda") || strings.Contains(fn, "CUDACachingAllocator")
	}):
		return KindCachingAllocator
	}
	return ""
}

// gpus is the devices as NVML showed them when o failed, or why there is
// none.
func gpus(r *model.Result, p *model.Process, o *model.OOM) ([]GPU, string) {
	g := &r.GPU
	if g.Status != "" {
		return []GPU{}, "not sampled: " + g.Status
	}
	ms := g.MomentsOf(p, o)
	if len(ms) == 0 {
		return []GPU{}, "no NVML sample of the device was kept for it"
	}
	var out []GPU
	for _, m := range ms {
		d := GPU{Device: m.Device, SampleOffsetNs: int64(m.TS) - int64(o.End), Total: m.MemTotal, Used: m.MemUsed,
			Free: m.MemTotal - min(m.MemTotal, m.MemUsed), Others: []GPUProcess{}}
		for _, h := range m.Processes {
			if h.PID == p.PID {
				d.Process = h.MemUsed
				continue
			}
			d.Others = append(d.Others, GPUProcess{PID: h.PID, Comm: h.Comm, Container: h.Container, Bytes: h.MemUsed})
		}
		out = append(out, d)
	}
	return out, ""
}

// Verdict is the record in one line: what failed where, what the process
// held, the device, and whether it recovered.
func (rec *Record) Verdict() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s of %s failed (out of memory) at +%s", rec.Process, rec.Call, units.Bytes(rec.Bytes), units.Offset(rec.AtNs))
	if rec.Attempts > 1 {
		fmt.Fprintf(&b, ", %d attempts", rec.Attempts)
	}
	if rec.Site != "" {
		fmt.Fprintf(&b, ", at %s", rec.Site)
	}
	fmt.Fprintf(&b, "; it held %s through CUDA%s", units.Bytes(rec.Held), rec.since())
	if n := len(rec.Holders); n > 0 {
		fmt.Fprintf(&b, " (%s)", holderList(rec.Holders, 3))
	}
	for _, d := range rec.GPUs {
		fmt.Fprintf(&b, "; GPU %d: %s free of %s (NVML)", d.Device, units.Bytes(d.Free), units.Bytes(d.Total))
	}
	b.WriteString("; ")
	b.WriteString(rec.outcome())
	return b.String()
}

func (rec *Record) since() string {
	if rec.HeldSinceAttach {
		return " since cudatap attached"
	}
	return ""
}

// holderList names the first n holders: "40.0 GiB at a.py:3, 30.0 GiB at
// b.py:9 (30 allocations)".
func holderList(hs []Holder, n int) string {
	var parts []string
	for _, h := range hs[:min(n, len(hs))] {
		parts = append(parts, h.short())
	}
	if len(hs) > n {
		parts = append(parts, fmt.Sprintf("%d more", len(hs)-n))
	}
	return strings.Join(parts, ", ")
}

func (h *Holder) short() string {
	s := units.Bytes(h.Bytes)
	switch {
	case h.API == "":
		s += fmt.Sprintf(" at %d more places", h.Sites)
	case h.Site != "":
		s += " at " + h.Site
	default:
		s += " by " + h.API + " (no stack)"
	}
	if h.Kind != "" {
		s += " [" + h.Kind + "]"
	}
	return s
}

func (rec *Record) outcome() string {
	switch {
	case rec.Recovered:
		return fmt.Sprintf("recovered: an allocation succeeded %s later", units.Duration(rec.RecoveredAfterNs))
	case rec.CallsAfter == 0:
		return "did not recover: the failed allocation was its last CUDA call"
	}
	return fmt.Sprintf("no allocation succeeded after it; it made %s after it, the last %s later",
		plural(rec.CallsAfter, "more CUDA call", "more CUDA calls"), units.Duration(rec.LastCallAfterNs))
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Lines are the record's details, a line each: who held the memory, by
// API, the device as NVML saw it and the outcome.
func (rec *Record) Lines() []string {
	var out []string
	thread := fmt.Sprintf("tid %d", rec.TID)
	if rec.Thread != "" {
		thread = fmt.Sprintf("%s (tid %d)", rec.Thread, rec.TID)
	}
	dev := "an unknown device"
	if rec.Device >= 0 {
		dev = fmt.Sprintf("CUDA device %d", rec.Device)
	}
	out = append(out, fmt.Sprintf("%s asked %s of %s on %s at +%s", thread, rec.Call, units.Bytes(rec.Bytes), dev, units.Offset(rec.AtNs)))
	if rec.Site != "" {
		where := "at " + rec.Site
		if !rec.UserFrame {
			where += " [no user frame]"
		}
		if rec.Via != "" {
			where += " via " + rec.Via
		}
		out = append(out, where)
	}
	late := ""
	if rec.HeldSinceAttach {
		late = " (allocations before cudatap attached are unknown)"
	}
	out = append(out, fmt.Sprintf("held through CUDA: %s in %d allocations%s", units.Bytes(rec.Held), rec.HeldAllocations, late))
	for _, h := range rec.Holders {
		if h.API == "" {
			out = append(out, fmt.Sprintf("  %s in %d allocations at %d more places", units.Bytes(h.Bytes), h.Count, h.Sites))
			continue
		}
		s := fmt.Sprintf("  %s in %d × %s", units.Bytes(h.Bytes), h.Count, h.API)
		if h.Kind != "" {
			s += " [" + h.Kind + "]"
		}
		switch {
		case h.Site == "":
			s += " (no stack)"
		case h.UserFrame:
			s += " at " + h.Site
		default:
			s += " at " + h.Site + " [no user frame]"
		}
		out = append(out, s)
	}
	if len(rec.ByAPI) > 0 {
		var parts []string
		for _, h := range rec.ByAPI {
			parts = append(parts, fmt.Sprintf("%s %s in %d", h.API, units.Bytes(h.Bytes), h.Count))
		}
		out = append(out, "by API: "+strings.Join(parts, ", "))
	}
	if rec.Released > 0 {
		out = append(out, fmt.Sprintf("released %s between its first and last attempt", units.Bytes(rec.Released)))
	}
	if len(rec.GPUs) == 0 {
		out = append(out, "GPU (NVML): "+rec.NVML)
	}
	for _, d := range rec.GPUs {
		when := "at the failure"
		if d.SampleOffsetNs < 0 {
			when = units.Duration(uint64(-d.SampleOffsetNs)) + " before the failure"
		} else if d.SampleOffsetNs > 0 {
			when = units.Duration(uint64(d.SampleOffsetNs)) + " after the failure (none before)"
		}
		s := fmt.Sprintf("GPU %d (the NVML sample nearest, %s): %s total, %s used, %s free", d.Device, when,
			units.Bytes(d.Total), units.Bytes(d.Used), units.Bytes(d.Free))
		if d.Process > 0 {
			s += fmt.Sprintf("; this process %s", units.Bytes(d.Process))
		} else {
			s += "; this process not listed"
		}
		if len(d.Others) == 0 {
			s += "; no other process held memory on it"
		} else {
			var parts []string
			for _, o := range d.Others {
				parts = append(parts, o.label()+" "+units.Bytes(o.Bytes))
			}
			s += "; other processes: " + strings.Join(parts, ", ")
		}
		out = append(out, s)
	}
	return append(out, rec.outcome())
}

func (g *GPUProcess) label() string {
	name := g.Comm
	if name == "" {
		name = "exited"
	}
	if g.Container != "" {
		return fmt.Sprintf("%s (pid %d, container %s)", name, g.PID, g.Container[:min(12, len(g.Container))])
	}
	return fmt.Sprintf("%s (pid %d)", name, g.PID)
}
