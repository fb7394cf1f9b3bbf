package html

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	base    = uint64(5_000_000_000)
	us      = uint64(1_000)
	mainTID = 700
	pid     = 700
	gemm    = 0x401000 // a kernel's host stub
)

// world is a hand-made process, fed to a collector the way the model
// feeds its sink: calls in time order, each with its syncs after it; GPU
// ops when final. It keeps the model's own bookkeeping the collector
// reads (device memory in use, first and last seen).
type world struct {
	c     *Collector
	sink  model.Sink // c, or c and a tape
	p     *model.Process
	names *model.Names
	seq   int
	ops   int
	inUse map[uint64]uint64
}

func newWorld(opts Options) *world {
	p := &model.Process{PID: pid, Info: model.ProcessInfo{Comm: "train"}, Threads: map[uint32]struct{}{mainTID: {}},
		KernelNames: map[uint64]string{gemm: "_Z4gemmPfS_i"}, Stubs: map[uint64]uint64{}, MeasuredNames: map[uint64]string{},
		Streams: []*model.Stream{
			{ID: 0, Kind: model.StreamLegacy},
			{ID: 1, Kind: model.StreamCreated, Handle: 0x51, Device: 0},
			{ID: 2, Kind: model.StreamCreated, Handle: 0x52, NonBlocking: true, Device: 0},
			{ID: 3, Kind: model.StreamCreated, Handle: 0x53, NonBlocking: true, Device: 0},
		},
		// Two allocation sites: a Python line (stack 0) and native code only (stack 1).
		Stacks:   [][]uint64{{0x7f0000001000, 0x555500002000}, {0x7f0000001000, 0x555500003000}},
		PyStacks: [][]model.PyKey{{{Code: 0xaa, Instr: 1}, {Code: 0xbb, Instr: 2}}},
	}
	n := model.NewNames()
	n.Threads[model.NameKey{PID: pid, Key: mainTID}] = "train"
	n.Frames[model.NameKey{PID: pid, Key: 0x7f0000001000}] = "cudaMalloc (libcudart.so.13)"
	n.Frames[model.NameKey{PID: pid, Key: 0x555500002000}] = "alloc_params (train)"
	n.Frames[model.NameKey{PID: pid, Key: 0x555500003000}] = "alloc_workspace (train)"
	n.Py[model.PyNameKey{PID: pid, PyKey: model.PyKey{Code: 0xaa, Instr: 1}}] = "model.py:42 build"
	n.Py[model.PyNameKey{PID: pid, PyKey: model.PyKey{Code: 0xbb, Instr: 2}}] = "train.py:7 <module>"
	c := NewCollector(opts)
	return &world{c: c, sink: c, p: p, names: n, inUse: map[uint64]uint64{}}
}

func (w *world) call(api event.API, start, end uint64, set func(*model.Call)) *model.Call {
	c := &model.Call{Start: base + start, End: base + end, TID: mainTID, API: api, Seq: w.seq, Stream: -1, GPUOp: -1, Stack: -1, PyStack: -1, HasRet: end > start}
	w.seq++
	if set != nil {
		set(c)
	}
	p := w.p
	if p.FirstSeen == 0 {
		p.FirstSeen = c.Start
	}
	p.LastSeen = max(p.LastSeen, c.End)
	p.NCalls++
	// The model's memory accounting, before the sink sees the call.
	switch c.Spec().Class {
	case event.ClassMalloc:
		if _, dup := w.inUse[c.Args.Ptr]; !dup {
			p.DeviceMemInUse += c.Args.Size
		}
		w.inUse[c.Args.Ptr] = c.Args.Size
		p.DeviceMemPeak = max(p.DeviceMemPeak, p.DeviceMemInUse)
	case event.ClassFree:
		p.DeviceMemInUse -= w.inUse[c.Args.Ptr]
		delete(w.inUse, c.Args.Ptr)
	}
	w.sink.Call(p, c)
	return c
}

// syncCall is a call that blocked the host on stream (-1: every stream)
// from start to end, with its sync.
func (w *world) syncCall(api event.API, start, end uint64, kind model.SyncKind, stream int) {
	c := w.call(api, start, end, func(c *model.Call) { c.Stream, c.Sync, c.BlockedNs = int32(max(stream, 0)), kind, end-start })
	w.sink.Sync(w.p, &model.Sync{Kind: kind, Call: c.Seq, TID: c.TID, Stream: stream, Start: c.Start, BlockedNs: c.End - c.Start, API: c.API, Stack: -1, PyStack: -1})
}

// op hands the collector a final GPU op; times in µs after base.
func (w *world) op(kind model.OpKind, stream int, enq, start, end uint64, measured bool) *model.GPUOp {
	op := &model.GPUOp{ID: w.ops, Stream: stream, Call: -1, Enqueued: base + enq*us, Start: base + start*us, End: base + end*us,
		After: -1, AfterStream: -1, TID: mainTID, Kind: kind, Device: 0, Measured: measured, Bounded: !measured}
	switch kind {
	case model.OpKernel:
		op.Func = gemm
	case model.OpMemcpy:
		op.CopyKind, op.Bytes = event.HostToDevice, 1<<20
	case model.OpCollective:
		op.API, op.Bytes = event.NcclAllReduce, 4<<20
	}
	w.ops++
	w.p.NGPUOps++
	w.sink.GPUOp(w.p, op)
	return op
}

func (w *world) result() *model.Result {
	r := &model.Result{Processes: []*model.Process{w.p}, Start: w.p.FirstSeen, End: w.p.LastSeen, WallOffsetNs: 1_764_000_000_000_000_000}
	r.GPU.Status = "not sampled: NVML not available (a test)"
	r.Name(w.names)
	return r
}

// measuredWorld: measured ops on three streams of GPU 0 (compute on 1,
// copies on 2, a collective on 3); the host blocks in a stream sync during
// stream 2's long gap; memory allocated at two sites, one freed.
func measuredWorld(t *testing.T, opts Options) (*world, *model.Result) {
	w := newWorld(opts)
	mib := uint64(1 << 20)
	w.call(event.CudaMalloc, 0, 5*us, func(c *model.Call) { c.Args.Ptr, c.Args.Size, c.Stack, c.PyStack = 0xd000, mib, 0, 0 })
	w.call(event.CudaMalloc, 6*us, 8*us, func(c *model.Call) { c.Args.Ptr, c.Args.Size, c.Stack = 0xe000, 2*mib, 1 })
	w.call(event.CudaMalloc, 9*us, 10*us, func(c *model.Call) { c.Args.Ptr, c.Args.Size, c.Stack, c.PyStack = 0xf000, 4*mib, 0, 0 })
	for i, at := range []uint64{0, 200} {
		w.call(event.CudaLaunchKernel, at*us, at*us, func(c *model.Call) { c.Stream, c.GPUOp, c.Args.Func = 1, i, gemm })
	}
	w.syncCall(event.CudaStreamSynchronize, 160*us, 360*us, model.SyncStream, 2)
	w.call(event.CudaFree, 370*us, 380*us, func(c *model.Call) { c.Args.Ptr = 0xe000 })
	w.syncCall(event.CudaDeviceSynchronize, 460*us, 470*us, model.SyncDevice, -1)
	w.op(model.OpKernel, 1, 0, 0, 100, true)
	w.op(model.OpMemcpy, 2, 40, 50, 150, true)
	w.op(model.OpKernel, 1, 200, 200, 300, true)
	w.op(model.OpCollective, 3, 240, 250, 350, true)
	w.op(model.OpMemcpy, 2, 390, 400, 450, true)
	return w, w.result()
}

func TestOverlapGapsMemoryMeasured(t *testing.T) {
	w, r := measuredWorld(t, Options{Version: "test"})
	rep := w.c.Build(r)

	if len(rep.Devices) != 1 {
		t.Fatalf("devices: %+v", rep.Devices)
	}
	d := rep.Devices[0]
	want := Overlap{Compute: 200 * us, Copy: 150 * us, Comm: 100 * us, Any: 350 * us, CopyCompute: 50 * us, CommCompute: 50 * us}
	if d.Drawn != want || d.AtMost != want {
		t.Errorf("measured overlap: drawn %+v, at most %+v; want both %+v", d.Drawn, d.AtMost, want)
	}
	if d.SpanNs != 450*us || d.Ops != 5 || d.Measured != 5 {
		t.Errorf("device: span %d ops %d measured %d", d.SpanNs, d.Ops, d.Measured)
	}

	pr := rep.Processes[0]
	gaps := map[int]StreamReport{}
	for _, s := range pr.Streams {
		gaps[s.ID] = s
	}
	if s := gaps[1]; s.Gaps != 1 || s.CertainIdleNs != 100*us || s.TopGaps[0].CertainStart != base+100*us {
		t.Errorf("stream 1 gaps: %+v", s)
	}
	s2 := gaps[2]
	if s2.Gaps != 1 || s2.CertainIdleNs != 250*us || !s2.TopGaps[0].Measured {
		t.Fatalf("stream 2 gaps: %+v", s2)
	}
	// During [150, 400] µs the host blocked in the stream sync for 200 µs
	// and freed memory for 10 µs.
	g := s2.TopGaps[0]
	if len(g.Host) != 1 || g.Host[0].BlockedNs != 200*us || g.Host[0].CallNs != 210*us || g.Host[0].TopAPI != "cudaStreamSynchronize" || g.Host[0].Sync != model.SyncStream || !g.HostComplete {
		t.Errorf("stream 2's gap, host: %+v", g.Host)
	}
	if got := g.HostSummary(); !strings.Contains(got, "84% in CUDA calls (mostly cudaStreamSynchronize, blocked 80%: stream_sync), 16% outside CUDA") {
		t.Errorf("host summary: %s", got)
	}
	if gaps[3].Gaps != 0 {
		t.Errorf("stream 3 has one op, no gap: %+v", gaps[3])
	}
	if q := gaps[1]; q.MaxQueue != 1 || q.QueueBound {
		t.Errorf("stream 1 queue: max %d bound %v", q.MaxQueue, q.QueueBound)
	}

	m := pr.Memory
	if m.Peak != 7<<20 || m.NeverFreedB != 5<<20 || m.NeverFreedN != 2 || m.Allocs != 3 || m.Frees != 1 {
		t.Errorf("memory: %+v", m)
	}
	if len(m.NeverFreed) != 1 || m.NeverFreed[0].Where != "model.py:42 build" || m.NeverFreed[0].Bytes != 5<<20 || m.NeverFreed[0].Count != 2 {
		t.Errorf("never freed: %+v", m.NeverFreed)
	}
	if len(m.AtPeak) != 2 || m.AtPeak[0].PeakBytes != 5<<20 || m.AtPeak[1].PeakBytes != 2<<20 || m.AtPeak[1].Where != "alloc_workspace (train)" {
		t.Errorf("at the peak: %+v", m.AtPeak)
	}
	if pr.BlockedTID != mainTID || pr.ThreadNs != 210*us {
		t.Errorf("blocked: tid %d %d ns", pr.BlockedTID, pr.ThreadNs)
	}
	if len(rep.TopByCount) == 0 || rep.TopByCount[0].Name != "gemm" || rep.TopByCount[0].Count != 2 || rep.TopByCount[0].MeasuredNs != 200*us {
		t.Errorf("top ops: %+v", rep.TopByCount)
	}
	golden(t, "measured.txt", text(t, rep))
}

// Bounded ops: each ran somewhere between its enqueue and the end the
// model proved; the page must not turn the layout into a measurement.
func TestOverlapBounded(t *testing.T) {
	w := newWorld(Options{})
	w.call(event.CudaLaunchKernel, 0, 0, func(c *model.Call) { c.Stream = 1 })
	w.call(event.CudaStreamSynchronize, 10*us, 100*us, func(c *model.Call) { c.Stream = 1 })
	// The model laid the kernel out over [50, 100] and the copy over
	// [0, 50]: apart as drawn, together as far as the bounds go.
	w.op(model.OpKernel, 1, 0, 50, 100, false)
	w.op(model.OpMemcpy, 2, 0, 0, 50, false)
	w.op(model.OpKernel, 1, 300, 300, 320, false)
	rep := w.c.Build(w.result())
	d := rep.Devices[0]
	if d.Drawn.CopyCompute != 0 || d.AtMost.CopyCompute != 50*us || d.Measured != 0 {
		t.Errorf("bounded overlap: drawn %+v, at most %+v", d.Drawn, d.AtMost)
	}
	var s1 StreamReport
	for _, s := range rep.Processes[0].Streams {
		if s.ID == 1 {
			s1 = s
		}
	}
	// Proven idle from the first kernel's proof (its end, for ops made by
	// hand) to the next enqueue.
	if s1.Gaps != 1 || s1.CertainIdleNs != 200*us || s1.TopGaps[0].Measured || !s1.QueueBound {
		t.Errorf("stream 1: %+v", s1)
	}
	txt := text(t, rep)
	for _, want := range []string{"70.0 µs (≤ 120.0 µs)", "0 ns (≤ 50.0 µs)", "not measured", "≤ 1"} {
		if !strings.Contains(txt, want) {
			t.Errorf("text lacks %q:\n%s", want, txt)
		}
	}
}

// The driver's allocation inside the runtime's is one allocation; frees
// likewise; past MaxLive allocations are counted, not attributed.
func TestMemoryNestedAndCapped(t *testing.T) {
	w := newWorld(Options{MaxLive: 2})
	mib := uint64(1 << 20)
	w.call(event.CuMemAlloc, 2*us, 3*us, func(c *model.Call) { c.Args.Ptr, c.Args.Size = 0xa000, mib })
	w.call(event.CudaMalloc, 1*us, 4*us, func(c *model.Call) { c.Args.Ptr, c.Args.Size, c.Stack = 0xa000, mib, 1 })
	w.call(event.CudaMalloc, 5*us, 6*us, func(c *model.Call) { c.Args.Ptr, c.Args.Size = 0xb000, mib })
	w.call(event.CudaMalloc, 7*us, 8*us, func(c *model.Call) { c.Args.Ptr, c.Args.Size = 0xc000, mib })
	w.call(event.CuMemFree, 11*us, 12*us, func(c *model.Call) { c.Args.Ptr = 0xb000 })
	w.call(event.CudaFree, 10*us, 13*us, func(c *model.Call) { c.Args.Ptr = 0xb000 })
	rep := w.c.Build(w.result())
	m := rep.Processes[0].Memory
	if m.Allocs != 3 || m.Frees != 1 || m.UnknownFrees != 0 || m.Untracked != 1 || m.UntrackedBytes != mib {
		t.Errorf("memory: %+v", m)
	}
	if len(m.NeverFreed) != 1 || m.NeverFreed[0].API != "cudaMalloc" || m.NeverFreed[0].Where != "alloc_workspace (train)" {
		t.Errorf("never freed: %+v", m.NeverFreed)
	}
	if !strings.Contains(strings.Join(rep.Bounds, "\n"), "1 allocations (1.0 MiB) past the limit of 2 live allocations") {
		t.Errorf("bounds do not say what was not attributed: %q", rep.Bounds)
	}
}

func TestMemoryProfile(t *testing.T) {
	w, r := measuredWorld(t, Options{})
	rep := w.c.Build(r)
	var buf bytes.Buffer
	if err := rep.WriteMemoryProfile(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if p.DefaultSampleType != "gpu_inuse" {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}
	idx := map[string]int{}
	for i, st := range p.SampleType {
		idx[st.Type+"/"+st.Unit] = i
	}
	var inuse, peak, alloc int64
	var sawPy bool
	for _, s := range p.Sample {
		inuse += s.Value[idx["gpu_inuse/bytes"]]
		peak += s.Value[idx["gpu_peak/bytes"]]
		alloc += s.Value[idx["gpu_alloc/bytes"]]
		if s.Location[0].Line[0].Function.Name != "cudaMalloc" {
			t.Errorf("leaf frame %q, want the API", s.Location[0].Line[0].Function.Name)
		}
		for _, l := range s.Location {
			if f := l.Line[0].Function; f.Name == "build" && f.Filename == "model.py" && l.Line[0].Line == 42 {
				sawPy = true
			}
		}
	}
	if inuse != 5<<20 || peak != 7<<20 || alloc != 7<<20 || !sawPy {
		t.Errorf("profile: in use %d, peak %d, allocated %d, Python frame %v", inuse, peak, alloc, sawPy)
	}
}

// More slices than the page keeps: a second pass keeps the busiest
// window; the rest is drawn as occupancy, and the page says so.
func TestDetailWindowBounded(t *testing.T) {
	feed := func(s model.Sink, w *world) {
		// 20 calls spread over 10 ms, then 50 packed in 100 µs.
		for i := range uint64(20) {
			c := &model.Call{Start: base + i*500*us, End: base + i*500*us + us, TID: mainTID, API: event.CudaLaunchKernel, Seq: int(i), Stream: 1, GPUOp: -1, Stack: -1, PyStack: -1}
			s.Call(w.p, c)
		}
		for i := range uint64(50) {
			at := base + 10_000*us + i*2*us
			c := &model.Call{Start: at, End: at + us, TID: mainTID, API: event.CudaLaunchKernel, Seq: int(20 + i), Stream: 1, GPUOp: -1, Stack: -1, PyStack: -1}
			s.Call(w.p, c)
		}
	}
	w := newWorld(Options{MaxSlices: 40, Buckets: 64})
	w.p.FirstSeen, w.p.LastSeen = base, base+10_100*us
	feed(w.c, w)
	from, to, need := w.c.DetailWindow()
	if !need {
		t.Fatal("70 slices, 40 kept: a detail pass is needed")
	}
	feed(w.c.DetailPass(from, to), w)
	rep := w.c.Build(w.result())
	win := rep.timeline.Window
	// The burst alone holds more than 40: its first 40 are shown.
	if win.Complete || win.Shown != 40 || win.Dropped != 10 || win.Total != 70 {
		t.Errorf("window: %+v", win)
	}
	if rep.timeline.Agg == nil || len(rep.timeline.Agg.Rows) == 0 {
		t.Error("no occupancy for the aggregated part")
	}
	// The busiest window is the packed burst.
	if to <= base+10_000*us {
		t.Errorf("window [%d, %d] misses the burst at %d", from-base, to-base, 10_000*us)
	}
	if b := strings.Join(rep.Bounds, "\n"); !strings.Contains(b, "40 of 70 slices in full detail, in the busiest window that holds at most 40") || !strings.Contains(b, "10 slices of that window past the limit") {
		t.Errorf("bounds: %s", b)
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "of 70 slices are drawn in full detail") {
		t.Error("the page does not say what was aggregated")
	}
}

// The page is one file: no request leaves it, its data parses, every
// section is there.
func TestPageSelfContained(t *testing.T) {
	w, r := measuredWorld(t, Options{Version: "test"})
	rep := w.c.Build(r)
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf, "run.gpu_inuse.pb.gz"); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)\b(src|href)\s*=\s*["']?(https?:|//)`),
		regexp.MustCompile(`(?i)<link\b`), regexp.MustCompile(`(?i)@import|url\(\s*["']?https?:`),
		regexp.MustCompile(`(?i)<script[^>]+src=`), regexp.MustCompile(`(?i)fetch\(|XMLHttpRequest|WebSocket`),
	} {
		if loc := bad.FindStringIndex(page); loc != nil {
			t.Errorf("the page may make a request: %q", page[max(0, loc[0]-40):min(len(page), loc[1]+40)])
		}
	}
	if !strings.Contains(page, `Content-Security-Policy" content="default-src 'none'`) {
		t.Error("no content security policy forbidding requests")
	}
	for _, id := range []string{"verdicts", "timeline", "syncs", "overlap", "gaps", "queues", "kernels", "memory", "nvml", "bounds", "summary", "console-errors", "cudatap-data"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("no #%s", id)
		}
	}
	m := regexp.MustCompile(`(?s)<script type="application/json" id="cudatap-data">(.*?)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no data")
	}
	var data struct {
		Rows []struct{ Label, Kind string }
		Ops  [][]int64
		Host [][]int64
	}
	if err := json.Unmarshal([]byte(m[1]), &data); err != nil {
		t.Fatalf("data: %v", err)
	}
	var labels []string
	for _, r := range data.Rows {
		labels = append(labels, r.Kind+": "+r.Label)
	}
	for _, want := range []string{"host: train (tid 700)", "gpu: stream 1 (blocking, prio 0)", "gpu: stream 2 (non-blocking, prio 0)", "counter: device memory in use (reserved through CUDA)"} {
		if !strings.Contains(strings.Join(labels, "\n"), want) {
			t.Errorf("rows %q lack %q", labels, want)
		}
	}
	if len(data.Ops) != 5 || len(data.Host) != 8 {
		t.Errorf("%d ops and %d calls in the data, want 5 and 8", len(data.Ops), len(data.Host))
	}
	for _, want := range []string{"run.gpu_inuse.pb.gz", "model.py:42 build", "memory_reserved", "stream_sync"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

func TestClockWidens(t *testing.T) {
	c := newClock(8)
	s, sp := c.newSum(), c.newSpan()
	s.add(c, 1000, 1)   // t0 = 1000, width 1000: bucket 0
	sp.add(1000, 3500)  // buckets 0..2
	s.add(c, 20_000, 1) // widens to 4000: bucket 4
	if c.width != 4000 {
		t.Fatalf("width %d", c.width)
	}
	if s.v[0] != 1 || s.v[4] != 1 {
		t.Errorf("counts %v", s.v)
	}
	if v := sp.values(); v[0] != 2500 || v[1] != 0 {
		t.Errorf("span %v", v)
	}
	sp.add(1000+4000*2+100, 1000+4000*5+100) // partial, full, full, partial
	v := sp.values()
	if v[2] != 3900 || v[3] != 4000 || v[4] != 4000 || v[5] != 100 {
		t.Errorf("span %v", v)
	}
}

func text(t *testing.T, rep *Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// The blocked share is over the thread's own time, less what cudatap held
// it: a hold that began before its first call counts only from there.
func TestBlockedShareLessHolds(t *testing.T) {
	w := newWorld(Options{})
	w.c.Hold(w.p, &model.Hold{TID: mainTID, Start: base - 50*us, End: base + 20*us})
	w.call(event.CudaStreamCreate, 0, 30*us, func(c *model.Call) { c.HoldNs = 20 * us })
	w.syncCall(event.CudaStreamSynchronize, 30*us, 90*us, model.SyncStream, 0)
	w.call(event.CudaLaunchKernel, 100*us, 100*us, nil)
	rep := w.c.Build(w.result())
	pr := rep.Processes[0]
	if pr.ThreadWallNs != 80*us || pr.ThreadNs != 60*us || pr.BlockedShare != 0.75 {
		t.Errorf("thread wall %d, blocked %d, share %v; want 80 µs, 60 µs, 0.75", pr.ThreadWallNs, pr.ThreadNs, pr.BlockedShare)
	}
	if f := rep.Findings[0]; f.Severity != SevHigh || !strings.Contains(f.Title, "waited for the GPU 75% of its wall time") {
		t.Errorf("finding: %+v", f)
	}
}

// Syncs that overlap on one thread (a sync inside another's time) count
// each nanosecond once: the thread is never blocked longer than it ran.
func TestBlockedOverlappingSyncs(t *testing.T) {
	w := newWorld(Options{})
	w.call(event.CudaLaunchKernel, 0, 10*us, func(c *model.Call) { c.GPUOp, c.Stream = 0, 0 })
	w.syncCall(event.CudaDeviceSynchronize, 10*us, 90*us, model.SyncDevice, -1)
	w.syncCall(event.CudaStreamSynchronize, 20*us, 80*us, model.SyncStream, 0)
	w.call(event.CudaLaunchKernel, 100*us, 100*us, func(c *model.Call) { c.GPUOp, c.Stream = 1, 0 })
	rep := w.c.Build(w.result())
	pr := rep.Processes[0]
	if pr.ThreadNs != 80*us || pr.ThreadWallNs != 100*us || pr.BlockedShare != 0.8 {
		t.Errorf("thread blocked %d of %d ns (share %v); want 80 µs of 100 µs, 0.8", pr.ThreadNs, pr.ThreadWallNs, pr.BlockedShare)
	}
	if f := rep.Findings[0]; !strings.Contains(f.Detail, "blocked 80.0 µs of its 100.0 µs") || !strings.Contains(f.Detail, "all threads: 80.0 µs in 2") {
		t.Errorf("finding: %+v", f)
	}
}

// The thread named in "waited for the GPU" is one that launches work: a
// background thread blocked longer (it enqueues nothing: NCCL's watchdog,
// a poller) does not hold up the work.
func TestBlockedThreadLaunchesWork(t *testing.T) {
	w := newWorld(Options{})
	w.call(event.CudaLaunchKernel, 0, 10*us, func(c *model.Call) { c.GPUOp, c.Stream = 0, 0 })
	w.syncCall(event.CudaStreamSynchronize, 10*us, 30*us, model.SyncStream, 0)
	// The background thread: one long sync, no work.
	c := w.call(event.CudaStreamSynchronize, 5*us, 95*us, func(c *model.Call) {
		c.TID, c.Stream, c.Sync, c.BlockedNs = mainTID+1, 0, model.SyncStream, 90*us
	})
	w.sink.Sync(w.p, &model.Sync{Kind: model.SyncStream, Call: c.Seq, TID: c.TID, Stream: 0, Start: c.Start, BlockedNs: 90 * us, API: c.API, Stack: -1, PyStack: -1})
	w.call(event.CudaLaunchKernel, 100*us, 100*us, func(c *model.Call) { c.GPUOp, c.Stream = 1, 0 })
	rep := w.c.Build(w.result())
	if pr := rep.Processes[0]; pr.BlockedTID != mainTID || pr.ThreadNs != 20*us {
		t.Errorf("blocked thread %d for %d ns; want the launching thread %d, 20 µs", pr.BlockedTID, pr.ThreadNs, mainTID)
	}
}

// NVML samples become a group of rows on the timeline's axis; a long
// series is reduced to a mean per stretch.
func TestNVMLSeries(t *testing.T) {
	w, r := measuredWorld(t, Options{Buckets: 8})
	for i := range uint64(100) {
		r.Counters = append(r.Counters, model.Counter{Device: 0, Name: "GPU 0 NVIDIA H200", TS: base - 100*us + i*10*us,
			Values: map[string]float64{"gpu_util_pct": float64(i % 2 * 100), "mem_used_bytes": float64(i << 20), "mem_total_bytes": 141 << 30, "power_w": 300}})
	}
	rep := w.c.Build(r)
	tl := rep.timeline
	if tl.T0 != base-100*us || tl.From != 0 {
		t.Errorf("the axis starts at %d, want the first sample %d", tl.T0, base-100*us)
	}
	var g *tlGroup
	for i := range tl.Groups {
		if tl.Groups[i].Label == "GPU 0 NVIDIA H200 (NVML)" {
			g = &tl.Groups[i]
		}
	}
	if g == nil {
		t.Fatalf("no NVML group in %+v", tl.Groups)
	}
	var labels []string
	for _, i := range g.Rows {
		labels = append(labels, tl.Rows[i].Label)
		for _, si := range tl.Rows[i].Series {
			if n := len(tl.Series[si].Points); n == 0 || n > 4*8 {
				t.Errorf("%s: %d points", tl.Series[si].Label, n)
			}
		}
	}
	if strings.Join(labels, "; ") != "utilization (%); memory used (141.0 GiB total); power (W)" {
		t.Errorf("NVML rows: %q", labels)
	}
	// Alternating 0 and 100: each stretch's mean is near 50 (12 or 13
	// samples), never a sample's 0 or 100.
	for _, s := range tl.Series {
		if s.Label == "gpu_util_pct" {
			for _, p := range s.Points {
				if p[1] < 40 || p[1] > 60 {
					t.Errorf("utilization point %v, want a mean near 50", p)
				}
			}
		}
	}
}

// tape keeps what a world fed, to feed it again (a detail pass).
type tape struct{ events []func(model.Sink) }

func (t *tape) Call(p *model.Process, c *model.Call) {
	x := *c
	t.events = append(t.events, func(s model.Sink) { s.Call(p, &x) })
}
func (t *tape) Sync(p *model.Process, y *model.Sync) {
	x := *y
	t.events = append(t.events, func(s model.Sink) { s.Sync(p, &x) })
}
func (t *tape) GPUOp(p *model.Process, op *model.GPUOp) {
	x := *op
	t.events = append(t.events, func(s model.Sink) { s.GPUOp(p, &x) })
}
func (t *tape) Dependency(p *model.Process, d *model.Dependency) {}
func (t *tape) Hold(p *model.Process, h *model.Hold) {
	x := *h
	t.events = append(t.events, func(s model.Sink) { s.Hold(p, &x) })
}
func (t *tape) play(s model.Sink) {
	for _, e := range t.events {
		e(s)
	}
}

// TestH200TrainingLoop: the report of a real PyTorch training loop on the
// H200 (testdata/gpu/report_train.py under record --gpu-times: an input
// stall of 30 ms a step on the main thread, and a pageable non_blocking
// copy of each batch) names both: the input-pipeline stall among its
// verdicts, the pageable copy at the script's line among its syncs.
func TestH200TrainingLoop(t *testing.T) {
	gz, err := os.Open("testdata/h200-report_train.cudatap.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Load(bytes.NewReader(raw), Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stall := false
	for _, f := range rep.Findings {
		if strings.Contains(f.Title, "input-pipeline stall") {
			stall = true
		}
	}
	if !stall {
		var titles []string
		for _, f := range rep.Findings {
			titles = append(titles, f.Title)
		}
		t.Errorf("no input-pipeline stall among the verdicts: %q", titles)
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page, ""); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"input-pipeline stall", "report_train.py:24", "pageable_memcpy"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the page does not name %q", want)
		}
	}
}
