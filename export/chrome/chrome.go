// Package chrome writes a recording as a Chrome trace (JSON Trace Event
// Format) in the shape PyTorch's Kineto profiler writes, so Perfetto UI,
// chrome://tracing and Holistic Trace Analysis read it: host API calls on
// the OS pid/tid, inferred GPU activity on a track per stream, ac2g flows
// from launches to their GPU slices, and cudatap's loss counters alongside.
//
// All timestamps are absolute CLOCK_MONOTONIC µs with three decimals, as
// Kineto writes them; the "cudatap" block carries the offset to Unix time.
package chrome

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Options tune the trace.
type Options struct {
	Version  string    // cudatap version, recorded in the "cudatap" block
	Counters []Counter // extra counter tracks, e.g. NVML samples
}

// Counter is one sample of a counter track (ph "C"). Values are drawn as
// stacked series named by their keys.
type Counter struct {
	Name   string
	PID    int    // trace pid: an OS pid or GPUPID(pid)
	TS     uint64 // ns, CLOCK_MONOTONIC like every other timestamp
	Values map[string]float64
}

// gpuPIDBase puts device tracks above every OS pid (Linux caps pids at 2^22)
// and below 2^31, which some viewers take pids to fit in.
const gpuPIDBase = 1_000_000_000

// devicePIDBase holds the NVML counter tracks, one trace process per GPU.
const devicePIDBase = 2_000_000_000

// DevicePID is the trace pid of GPU index's counter tracks (NVML samples).
func DevicePID(index int) int { return devicePIDBase + index }

// GPUPID is the trace pid of the device track of process pid: its inferred
// GPU activity is drawn there, one thread track per stream.
func GPUPID(pid uint32) int { return gpuPIDBase + int(pid) }

// Flow ids: ac2g flows use the correlation id itself, as Kineto does (the
// model numbers correlations across the whole recording); event
// dependencies get a range of their own above any correlation.
const depFlowBase = 1 << 40

// minDur is the duration of GPU ops whose inferred end is not after their
// start: a zero-length slice would be invisible and could not anchor flows.
const minDur = 1 // ns

// Write streams r to out as a Chrome trace.
func Write(out io.Writer, r *model.Result, opts Options) error {
	bw := bufio.NewWriterSize(out, 256<<10)
	w := &writer{out: bw, b: make([]byte, 0, 1024)}
	bw.WriteString(`{"schemaVersion":1,"deviceProperties":[],"displayTimeUnit":"ns","traceEvents":[` + "\n")
	for i, p := range r.Processes {
		w.process(i, p)
	}
	named := map[int]bool{}
	for i := range opts.Counters {
		c := &opts.Counters[i]
		if c.PID >= devicePIDBase && !named[c.PID] {
			// Name the device's counter track once: "GPU 0 NVIDIA H200 (NVML)".
			named[c.PID] = true
			w.meta("process_name", c.PID, 0, c.Name+" (NVML)")
		}
		w.counter(c)
	}
	bw.WriteString("\n],")
	w.footer(r, opts)
	bw.WriteString("}\n")
	return bw.Flush() // bufio errors are sticky: the first failed write surfaces here
}

// WriteFile writes the trace to path, gzip-compressed when path ends in
// ".gz" (Perfetto and chrome://tracing open .json.gz directly).
func WriteFile(path string, r *model.Result, opts Options) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chrome trace: %w", err)
	}
	var out io.Writer = f
	var zw *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		zw = gzip.NewWriter(f)
		out = zw
	}
	err = Write(out, r, opts)
	if zw != nil {
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write chrome trace %s: %w", path, err)
	}
	return nil
}

// writer builds one event at a time in b and hands it to out.
type writer struct {
	out    *bufio.Writer
	b      []byte
	sep    bool // a field precedes: the next key needs a comma
	events int
	deps   uint64 // dependency flows written so far, for unique ids

	// Per process: kernel names, demangled once per stub rather than per launch.
	kernels map[uint64]describe.Kernel
}

// begin starts an event with the fields every event carries.
func (w *writer) begin(ph string, pid, tid int, ts uint64) {
	w.b = w.b[:0]
	if w.events > 0 {
		w.b = append(w.b, ",\n"...)
	}
	w.events++
	w.b = append(w.b, '{')
	w.sep = false
	w.str("ph", ph)
	w.int("pid", int64(pid))
	w.int("tid", int64(tid))
	w.micros("ts", ts)
}

func (w *writer) end() {
	w.b = append(w.b, '}')
	w.out.Write(w.b)
}

// meta writes a metadata event (process_name, thread_sort_index, ...).
func (w *writer) meta(name string, pid, tid int, value string) {
	w.begin("M", pid, tid, 0)
	w.str("name", name)
	w.open("args")
	w.str("name", value)
	w.close()
	w.end()
}

func (w *writer) metaSort(name string, pid, tid, index int) {
	w.begin("M", pid, tid, 0)
	w.str("name", name)
	w.open("args")
	w.int("sort_index", int64(index))
	w.close()
	w.end()
}

func (w *writer) kernel(p *model.Process, addr uint64) describe.Kernel {
	k, ok := w.kernels[addr]
	if !ok {
		k = describe.KernelAt(p, addr)
		w.kernels[addr] = k
	}
	return k
}

func (w *writer) process(idx int, p *model.Process) {
	w.kernels = make(map[uint64]describe.Kernel)
	pid, gpid := int(p.PID), GPUPID(p.PID)

	// Each process's device track sorts right after the process itself.
	w.meta("process_name", pid, 0, p.Label())
	w.metaSort("process_sort_index", pid, 0, 2*idx)
	tids := make([]uint32, 0, len(p.Threads))
	for tid := range p.Threads {
		tids = append(tids, tid)
	}
	slices.Sort(tids)
	for _, tid := range tids {
		name := p.Threads[tid]
		if name == "" {
			name = fmt.Sprintf("thread %d", tid)
		}
		w.meta("thread_name", pid, int(tid), name)
	}
	if len(p.Streams) > 0 || len(p.GPUOps) > 0 {
		w.meta("process_name", gpid, 0, "GPU 0 — "+p.Label()+" (inferred)")
		w.metaSort("process_sort_index", gpid, 0, 2*idx+1)
		for _, s := range p.Streams {
			if s == nil {
				continue
			}
			w.meta("thread_name", gpid, s.ID, s.Label())
			w.metaSort("thread_sort_index", gpid, s.ID, s.ID)
		}
	}

	for i := range p.Calls {
		w.call(p, &p.Calls[i])
	}
	for i := range p.Syncs {
		w.sync(p, &p.Syncs[i])
	}
	for i := range p.GPUOps {
		w.gpuOp(p, &p.GPUOps[i])
	}
	if len(p.Deps) > 0 {
		w.dependencies(p)
	}
}

func (w *writer) call(p *model.Process, c *model.Call) {
	cat, name, class := "cuda_runtime", c.API.String(), event.ClassOther
	if s := c.Spec(); s != nil {
		cat, name, class = s.Layer.Category(), s.Name, s.Class
	}
	w.begin("X", int(p.PID), int(c.TID), c.Start)
	w.str("cat", cat)
	w.str("name", name)
	w.micros("dur", c.Duration())
	w.open("args")
	w.str("symbol", c.SymbolName())
	if c.Stream >= 0 {
		w.int("stream", int64(c.Stream))
	}
	if c.Correlation != 0 {
		w.uint("correlation", c.Correlation)
	}
	a := &c.Args
	switch class {
	case event.ClassMemcpy:
		w.uint("bytes", a.Bytes)
		w.str("kind", a.Kind.String())
		// Whether the host buffer was pinned is known from the pinned
		// ranges the model tracked, which it put on the copy's GPU op.
		if c.GPUOp >= 0 && int(c.GPUOp) < len(p.GPUOps) {
			w.bool("pageable", p.GPUOps[c.GPUOp].Pageable)
		}
	case event.ClassMemset:
		w.uint("bytes", a.Bytes)
	case event.ClassLaunch:
		w.dim3("grid", a.Grid.X, a.Grid.Y, a.Grid.Z)
		w.dim3("block", a.Block.X, a.Block.Y, a.Block.Z)
		w.uint("shared_mem", a.SharedMem)
		w.str("kernel", w.kernel(p, a.Func).Display)
	case event.ClassCollective:
		w.uint("bytes", a.Bytes)
		w.uint("count", a.Size) // elements
		w.str("datatype", ncclType(a.DataType))
		w.uint("comm", a.Comm)
		if a.Peer >= 0 {
			w.int("peer", int64(a.Peer))
		}
	}
	if c.Captured {
		w.bool("captured", true) // recorded into a CUDA graph, not executed here
	}
	if c.HasRet {
		w.int("ret", c.Ret)
	} else if c.End <= c.Start {
		w.bool("dur_measured", false)
	}
	w.close()
	w.end()
}

func (w *writer) sync(p *model.Process, s *model.Sync) {
	kind := s.Kind.String()
	w.begin("X", int(p.PID), int(s.TID), s.Start)
	w.str("cat", "cuda_sync")
	w.key("name")
	w.b = append(w.b, `"sync: `...)
	w.b = append(w.b, kind...) // identifier-like, needs no escaping
	w.b = append(w.b, '"')
	w.micros("dur", s.BlockedNs)
	w.open("args")
	w.str("kind", kind)
	w.bool("explicit", s.Kind.Explicit())
	w.uint("blocked_ns", s.BlockedNs)
	if s.Stream >= 0 {
		w.int("stream", int64(s.Stream))
	}
	w.int("queued_ops", int64(s.QueuedOps))
	if s.Kind == model.SyncQueryPoll {
		w.int("polls", int64(s.Polls))
	}
	w.str("hint", s.Kind.Hint())
	if s.Call >= 0 && s.Call < len(p.Calls) {
		if st := p.Calls[s.Call].Stack; st >= 0 && int(st) < len(p.Stacks) {
			w.key("stack")
			w.b = append(w.b, '[')
			for i, addr := range p.Stacks[st] {
				if i > 0 {
					w.b = append(w.b, ',')
				}
				w.b = appendString(w.b, describe.Frame(p, addr))
			}
			w.b = append(w.b, ']')
		}
		if py := describe.PyStack(p, &p.Calls[s.Call]); len(py) > 0 {
			// The Python line that led here, innermost first.
			w.key("python_stack")
			w.b = append(w.b, '[')
			for i, f := range py {
				if i > 0 {
					w.b = append(w.b, ',')
				}
				w.b = appendString(w.b, f)
			}
			w.b = append(w.b, ']')
		}
	}
	w.close()
	w.end()
}

func (w *writer) gpuOp(p *model.Process, op *model.GPUOp) {
	gpid := GPUPID(p.PID)
	dur := uint64(minDur)
	if op.End > op.Start {
		dur = op.End - op.Start
	}
	var call *model.Call
	if op.Call >= 0 && op.Call < len(p.Calls) {
		call = &p.Calls[op.Call]
	}
	var k describe.Kernel
	if op.Kind == model.OpKernel {
		k = w.kernel(p, op.Func)
	}

	w.begin("X", gpid, op.Stream, op.Start)
	w.str("cat", op.Kind.Category())
	switch op.Kind {
	case model.OpKernel:
		w.str("name", k.Display)
	case model.OpMemcpy:
		w.key("name")
		w.b = append(w.b, `"Memcpy `...)
		w.b = append(w.b, op.CopyKind.String()...)
		if op.CopyKind != event.DeviceToDevice { // host memory is involved
			if op.Pageable {
				w.b = append(w.b, " (Pageable)"...)
			} else {
				w.b = append(w.b, " (Pinned)"...)
			}
		}
		w.b = append(w.b, '"')
	case model.OpMemset:
		w.str("name", "Memset")
	case model.OpGraph:
		if op.GraphOps > 0 {
			w.str("name", "Graph launch ("+strconv.Itoa(int(op.GraphOps))+" ops)")
		} else {
			w.str("name", "Graph launch")
		}
	case model.OpCollective:
		name := "nccl"
		if call != nil {
			name = call.API.String()
		}
		w.str("name", name)
	default:
		w.str("name", "Host function")
	}
	w.micros("dur", dur)
	w.open("args")
	w.bool("inferred", true)
	w.bool("bounded", op.Bounded)
	w.int("stream", int64(op.Stream))
	if op.Correlation != 0 {
		w.uint("correlation", op.Correlation)
	}
	w.int("device", 0)
	switch op.Kind {
	case model.OpKernel:
		w.str("kernel_full", k.Full)
		w.str("kernel_mangled", k.Mangled)
		if call != nil && call.Spec() != nil && call.Spec().Class == event.ClassLaunch {
			a := &call.Args
			w.dim3("grid", a.Grid.X, a.Grid.Y, a.Grid.Z)
			w.dim3("block", a.Block.X, a.Block.Y, a.Block.Z)
		}
	case model.OpMemcpy:
		w.uint("bytes", op.Bytes)
		w.str("kind", op.CopyKind.String())
		w.bool("pageable", op.Pageable)
	case model.OpMemset, model.OpCollective:
		w.uint("bytes", op.Bytes)
	}
	w.close()
	w.end()

	if op.Correlation == 0 || call == nil {
		return
	}
	w.flow("s", "ac2g", op.Correlation, int(p.PID), int(call.TID), call.Start)
	w.flow("f", "ac2g", op.Correlation, gpid, op.Stream, op.Start)
}

func ncclType(t uint8) string {
	if int(t) < len(event.NCCLTypeName) {
		return event.NCCLTypeName[t]
	}
	return "type " + strconv.Itoa(int(t))
}

// flow writes one end of a flow arrow. Both ends bind to the slice that
// encloses ts on their track ("bp":"e" on the finish).
func (w *writer) flow(ph, cat string, id uint64, pid, tid int, ts uint64) {
	w.begin(ph, pid, tid, ts)
	w.str("cat", cat)
	w.str("name", cat)
	w.uint("id", id)
	if ph == "f" {
		w.str("bp", "e")
	}
	w.end()
}

// dependencies draws cudaEventRecord → cudaStreamWaitEvent as arrows from
// the last GPU op the record followed on its stream to the first op
// enqueued after the wait on the waiting stream: that op is the one held
// back. Without such an op an end falls back to the host call itself.
func (w *writer) dependencies(p *model.Process) {
	// GPU op indices per stream, in enqueue order.
	byStream := make(map[int][]int)
	for i := range p.GPUOps {
		byStream[p.GPUOps[i].Stream] = append(byStream[p.GPUOps[i].Stream], i)
	}
	for _, ops := range byStream {
		slices.SortStableFunc(ops, func(a, b int) int { return p.GPUOps[a].Call - p.GPUOps[b].Call })
	}
	pid, gpid := int(p.PID), GPUPID(p.PID)
	for _, d := range p.Deps {
		if d.ToStream < 0 || d.RecordCall < 0 || d.RecordCall >= len(p.Calls) || d.WaitCall < 0 || d.WaitCall >= len(p.Calls) {
			continue
		}
		id := depFlowBase + w.deps
		w.deps++

		from := byStream[d.FromStream]
		if i := sort.Search(len(from), func(i int) bool { return p.GPUOps[from[i]].Call >= d.RecordCall }); i > 0 {
			w.flow("s", "cuda_event", id, gpid, d.FromStream, p.GPUOps[from[i-1]].Start)
		} else {
			rec := &p.Calls[d.RecordCall]
			w.flow("s", "cuda_event", id, pid, int(rec.TID), rec.Start)
		}
		to := byStream[d.ToStream]
		if i := sort.Search(len(to), func(i int) bool { return p.GPUOps[to[i]].Call > d.WaitCall }); i < len(to) {
			w.flow("f", "cuda_event", id, gpid, d.ToStream, p.GPUOps[to[i]].Start)
		} else {
			wait := &p.Calls[d.WaitCall]
			w.flow("f", "cuda_event", id, pid, int(wait.TID), wait.Start)
		}
	}
}

func (w *writer) counter(c *Counter) {
	names := make([]string, 0, len(c.Values))
	for k := range c.Values {
		names = append(names, k)
	}
	slices.Sort(names) // deterministic output
	w.begin("C", c.PID, 0, c.TS)
	w.str("name", c.Name)
	w.open("args")
	for _, k := range names {
		w.float(k, c.Values[k])
	}
	w.close()
	w.end()
}

// footer writes the "cudatap" block: which clock the timestamps use and
// what was lost, so a reader can tell a quiet GPU from a lossy recording.
func (w *writer) footer(r *model.Result, opts Options) {
	d := r.Drops
	w.b = w.b[:0]
	w.sep = false
	w.open("cudatap")
	w.str("version", opts.Version)
	w.str("clock", "CLOCK_MONOTONIC")
	w.int("wall_offset_ns", r.WallOffsetNs)
	w.open("drops")
	w.uint("submitted", d.Submitted)
	w.uint("received", d.Received)
	w.uint("ringbuf_full", d.RingbufFull)
	w.uint("inflight_full", d.InflightFull)
	w.uint("orphan_returns", d.OrphanReturns)
	w.uint("read_faults", d.ReadFaults)
	w.uint("decode_errors", d.DecodeErrors)
	w.uint("unknown_api", d.UnknownAPI)
	w.uint("attach_failures", d.AttachFailures)
	w.uint("nested", d.Nested)
	w.uint("program_skips", d.ProgramSkips)
	w.close()
	w.uint("lost_events", d.Lost())
	w.close()
	w.out.Write(w.b)
}
