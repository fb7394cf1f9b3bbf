package steps

import (
	"strings"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

const (
	pid  = 100
	main = 100
	us   = uint64(1_000)
	ms   = uint64(1_000_000)
)

// prog plays a program's calls into a model whose sink is a Detector:
// one thread's calls, back to back from t.
type prog struct {
	t   *testing.T
	m   *model.Model
	d   *Detector
	now uint64
}

func newProg(t *testing.T) *prog {
	d := NewDetector(true)
	return &prog{t: t, m: model.New(d), d: d, now: 1_000 * ms}
}

// call makes api on thread tid for dur (a return-probed API's duration),
// its args placed as x86-64 passes them, with a stack of one frame at
// site when site is not 0; then the thread goes on after gap.
func (g *prog) call(tid uint32, api event.API, dur, gap, site uint64, args ...uint64) {
	s := event.Lookup(api)
	e := event.Event{Cookie: s.Cookie(0), PID: pid, TID: tid, Start: g.now}
	copy(e.Args[:], args)
	if s.Return {
		e.End, e.Flags = g.now+dur, event.FlagHasRet
	}
	if site != 0 {
		e.Cookie |= event.CookieStack
		e.HasStack, e.NStack, e.Stack[0] = true, 1, site
	}
	g.m.Handle(&e)
	g.now += dur + gap
}

// nvtx makes an NVTX call with message msg ("" none).
func (g *prog) nvtx(tid uint32, api event.API, msg string, args ...uint64) {
	s := event.Lookup(api)
	e := event.Event{Cookie: s.Cookie(0), PID: pid, TID: tid, Start: g.now, Flags: event.FlagInjected}
	copy(e.Args[:], args)
	if msg != "" {
		e.HasStack, e.Copy = true, []byte(msg+"\x00")
	}
	if api == event.NvtxRangeStartA {
		e.End, e.Ret, e.Flags = g.now, int64(args[0]), e.Flags|event.FlagHasRet
	}
	g.m.Handle(&e)
	g.now += us
}

func (g *prog) launch(tid uint32) {
	g.call(tid, event.CudaLaunchKernel, 0, 5*us, 0, 0x401000, 1|1<<32, 1, 128|1<<32, 1, 0, 0, 0)
}

// sync waits dur for stream 0, at site.
func (g *prog) sync(tid uint32, dur, site uint64) {
	g.call(tid, event.CudaStreamSynchronize, dur, 2*us, site, 0)
}

// memcpy is a synchronous 4 KiB copy (a sync of its own), at site.
func (g *prog) memcpy(tid uint32, site uint64) {
	g.call(tid, event.CudaMemcpy, 200*us, 2*us, site, 0x7f0000, 0x5000, 4096, 1)
}

func (g *prog) find() []Found {
	r := g.m.Finish()
	r.Name(nil)
	return g.d.Find(r)
}

// one is what Find found for the only process.
func one(t *testing.T, found []Found) Found {
	t.Helper()
	if len(found) != 1 {
		t.Fatalf("found %d processes, want 1: %+v", len(found), found)
	}
	return found[0]
}

// A training loop: a setup copy, then N iterations of launches ending in
// a read-back (.item(): a wait for the stream at one site); every third
// iteration also logs (a wait at another site); a final device sync.
func trainingLoop(g *prog, n int) (starts, ends []uint64) {
	g.call(main, event.CudaMalloc, 30*us, 500*us, 0x1100, 0x7ffd00, 1<<20)
	g.memcpy(main, 0x1000) // setup: the weights; the first step begins with the next call
	g.now += 2 * ms
	for i := 1; i <= n; i++ {
		starts = append(starts, g.now)
		for range 5 {
			g.launch(main)
		}
		g.sync(main, 3*ms, 0x2000) // loss.item()
		ends = append(ends, g.now-2*us)
		if i%3 == 0 {
			g.sync(main, 60*us, 0x3000) // logging
		}
		g.now += 700 * us // Python between iterations
	}
	g.call(main, event.CudaDeviceSynchronize, 100*us, 0, 0x4000)
	return starts, ends
}

func TestStepsFromSyncs(t *testing.T) {
	g := newProg(t)
	starts, ends := trainingLoop(g, 8)
	f := one(t, g.find())
	if f.By != BySync || f.TID != main || len(f.Steps) != 8 || f.Why != "" {
		t.Fatalf("found %+v, want 8 steps by the read-back", f)
	}
	for i, s := range f.Steps {
		start := starts[i]
		if i > 0 {
			start = ends[i-1] // each step begins where the one before ended
		}
		if s.N != i+1 || s.StartNs != start || s.EndNs != ends[i] {
			t.Errorf("step %d: #%d [%d, %d], want [%d, %d]", i, s.N, s.StartNs, s.EndNs, start, ends[i])
		}
		// 5 launches each, none measured (no CUPTI here).
		if s.GPUOps != 0 || s.Unmeasured != 5 || s.GPUNs != 0 {
			t.Errorf("step %d: %d GPU ops measured (%d ns), %d not, want 0, 5", i, s.GPUOps, s.GPUNs, s.Unmeasured)
		}
	}
	if !strings.Contains(f.Marker, "cudaStreamSynchronize (stream_sync)") || f.Sites != 4 {
		t.Errorf("marker %q, %d sites, want the stream sync among 4", f.Marker, f.Sites)
	}
	if f.MedianNs == 0 || f.P90Ns < f.MedianNs || f.GPUMeasured {
		t.Errorf("stats: median %d p90 %d measured %v", f.MedianNs, f.P90Ns, f.GPUMeasured)
	}
}

// The NVTX range named like a step wins over the site, and numbers in its
// name do not tell its ranges apart.
func TestStepsFromNVTX(t *testing.T) {
	g := newProg(t)
	g.memcpy(main, 0x1000)
	var want [][2]uint64
	for i := 1; i <= 4; i++ {
		start := g.now
		g.nvtx(main, event.NvtxRangePushA, "train step "+string(rune('0'+i)))
		g.nvtx(main, event.NvtxRangePushA, "forward")
		g.launch(main)
		g.nvtx(main, event.NvtxRangePop, "")
		g.sync(main, ms, 0x2000)
		want = append(want, [2]uint64{start, g.now})
		g.nvtx(main, event.NvtxRangePop, "")
		g.now += 100 * us
	}
	f := one(t, g.find())
	if f.By != ByNVTX || f.Marker != "train step #" || len(f.Steps) != 4 {
		t.Fatalf("found %+v, want 4 steps by the NVTX range", f)
	}
	for i, s := range f.Steps {
		if s.StartNs != want[i][0] || s.EndNs != want[i][1] || s.Unmeasured != 1 {
			t.Errorf("step %d: [%d, %d] %d ops, want [%d, %d] 1 op", i, s.StartNs, s.EndNs, s.Unmeasured, want[i][0], want[i][1])
		}
	}
}

// Without a regular site: irregular waits say so; none at all says so.
func TestNoSteps(t *testing.T) {
	g := newProg(t)
	g.memcpy(main, 0x1000)
	for _, n := range []uint64{1, 30, 2, 90, 1, 50} { // irregular in time and in work
		for range n {
			g.launch(main)
		}
		g.sync(main, 100*us, 0x2000)
		g.now += n * ms
	}
	f := one(t, g.find())
	if f.By != "" || len(f.Steps) != 0 || !strings.Contains(f.Why, "repeats regularly") {
		t.Errorf("irregular waits: %+v", f)
	}

	g = newProg(t)
	for range 10 {
		g.launch(main)
	}
	f = one(t, g.find())
	if f.By != "" || !strings.Contains(f.Why, "no thread that launches GPU work waited") {
		t.Errorf("no waits: %+v", f)
	}
}

// A loop on a busy host: every iteration enqueues the same work, but the
// program was descheduled for far longer than an iteration takes, at
// random: the waits are irregular in time, regular in work, and mark the
// steps.
func TestStepsOnBusyHost(t *testing.T) {
	g := newProg(t)
	g.memcpy(main, 0x1000)
	gaps := []uint64{0, 30, 0, 90, 0, 50, 40, 0, 70, 0}
	for _, gap := range gaps {
		g.launch(main)
		g.launch(main)
		g.sync(main, 100*us, 0x2000)
		g.now += gap * ms
	}
	f := one(t, g.find())
	if f.By != BySync || len(f.Steps) != len(gaps) {
		t.Errorf("steps on a busy host: %+v, want %d marked by the sync", f, len(gaps))
	}
}

// A thread that waits but launches nothing (NCCL's watchdog) marks no
// steps, however regular.
func TestBackgroundThreadIgnored(t *testing.T) {
	g := newProg(t)
	for range 10 {
		g.sync(main+1, 100*us, 0x5000)
		g.now += 10 * ms
	}
	g.launch(main)
	if f := one(t, g.find()); f.By != "" || f.Sites != 0 {
		t.Errorf("a background thread's waits: %+v", f)
	}
}

func TestRanges(t *testing.T) {
	p := &model.Process{PID: pid, Messages: map[uint64]string{7: "outer", 8: "inner", 9: "async"}}
	r := NewRanges()
	c := func(api event.API, tid uint32, at uint64, a event.Args) (Range, bool) {
		return r.Call(p, &model.Call{API: api, TID: tid, Start: at, Args: a})
	}
	c(event.NvtxRangePushA, 1, 10, event.Args{Ptr: 7})
	c(event.NvtxRangePushA, 1, 20, event.Args{Ptr: 8})
	c(event.NvtxRangeStartA, 1, 25, event.Args{Ptr: 9, Event: 42})
	c(event.NvtxRangePushA, 2, 26, event.Args{Ptr: 8, Comm: 5}) // another thread, another domain
	if rg, ok := c(event.NvtxRangePop, 1, 30, event.Args{}); !ok || rg.Name != "inner" || rg.Depth != 1 || rg.Start != 20 || rg.End != 30 {
		t.Errorf("inner: %+v %v", rg, ok)
	}
	if rg, ok := c(event.NvtxRangeEnd, 2, 35, event.Args{Event: 42}); !ok || rg.Name != "async" || rg.TID != 1 || rg.End != 35 {
		t.Errorf("async: %+v %v", rg, ok)
	}
	if rg, ok := c(event.NvtxRangePop, 1, 40, event.Args{}); !ok || rg.Name != "outer" || rg.Depth != 0 {
		t.Errorf("outer: %+v %v", rg, ok)
	}
	if _, ok := c(event.NvtxRangePop, 1, 41, event.Args{}); ok || r.Lost != 1 {
		t.Errorf("a pop without its push: %v, lost %d", ok, r.Lost)
	}
	if rg, ok := c(event.NvtxMarkA, 1, 50, event.Args{Ptr: 7}); !ok || !rg.Mark || rg.Start != 50 {
		t.Errorf("mark: %+v %v", rg, ok)
	}
	open := r.Open(func(uint32) *model.Process { return p }, 99)
	if len(open) != 1 || open[0].TID != 2 || open[0].Domain != 5 || open[0].End != 99 || open[0].EndSeq != -1 {
		t.Errorf("open: %+v", open)
	}
}

// TestRangesWithoutIDs: starts and ends NVTX gave no id (no NVTX tool
// loaded: every id is 0) pair by order per process and domain: an end
// closes the last range its thread started, else the first one open.
func TestRangesWithoutIDs(t *testing.T) {
	p := &model.Process{PID: pid, Messages: map[uint64]string{1: "epoch", 2: "io", 3: "opt", 4: "handoff"}}
	r := NewRanges()
	c := func(api event.API, tid uint32, at uint64, a event.Args) (Range, bool) {
		return r.Call(p, &model.Call{API: api, TID: tid, Start: at, Args: a})
	}
	c(event.NvtxRangeStartA, 1, 10, event.Args{Ptr: 1})
	c(event.NvtxRangeStartA, 1, 20, event.Args{Ptr: 2})
	c(event.NvtxRangeStartA, 1, 25, event.Args{Ptr: 3, Comm: 1}) // another domain
	c(event.NvtxRangeStartA, 2, 26, event.Args{Ptr: 4})          // another thread
	want := []struct {
		tid    uint32
		domain uint64
		name   string
	}{
		{1, 0, "io"},      // the last its thread started
		{1, 1, "opt"},     // its domain's
		{3, 0, "epoch"},   // a thread that started none: the first open
		{1, 0, "handoff"}, // ended on another thread than its start
	}
	for i, w := range want {
		rg, ok := c(event.NvtxRangeEnd, w.tid, uint64(30+i), event.Args{Comm: w.domain})
		if !ok || rg.Name != w.name || !rg.Started || rg.ID != 0 || rg.Domain != w.domain || rg.End != uint64(30+i) {
			t.Errorf("end %d: %+v %v, want %q", i, rg, ok, w.name)
		}
	}
	if _, ok := c(event.NvtxRangeEnd, 1, 40, event.Args{}); ok || r.Lost != 1 {
		t.Errorf("an end without a start: %v, lost %d", ok, r.Lost)
	}
	c(event.NvtxRangeStartA, 1, 50, event.Args{Ptr: 2})
	if open := r.Open(func(uint32) *model.Process { return p }, 99); len(open) != 1 || open[0].Name != "io" || open[0].End != 99 || !open[0].Started {
		t.Errorf("open: %+v", open)
	}
}

// An iteration that waits twice (an input copy, then the read-back): the
// longer wait ends the steps, and the first step begins after the setup,
// not after the first iteration's input copy; a first iteration three
// times as long (warm-up) does not hide the loop.
func TestStepsTwoWaitsPerIteration(t *testing.T) {
	g := newProg(t)
	g.memcpy(main, 0x1000) // setup
	g.now += 5 * ms
	first := g.now
	var ends []uint64
	for i := range 6 {
		g.memcpy(main, 0x1500) // the batch, from pageable memory
		g.launch(main)
		if i == 0 {
			g.now += 20 * ms
		}
		g.sync(main, 4*ms, 0x2000)
		ends = append(ends, g.now-2*us)
		g.now += ms
	}
	f := one(t, g.find())
	if f.By != BySync || len(f.Steps) != 6 || !strings.Contains(f.Marker, "stream_sync") {
		t.Fatalf("found %+v, want 6 steps by the read-back", f)
	}
	if f.Steps[0].StartNs != first || f.Steps[5].EndNs != ends[5] {
		t.Errorf("steps span [%d, %d], want [%d, %d]", f.Steps[0].StartNs, f.Steps[5].EndNs, first, ends[5])
	}
}

// A job whose imports and set-up take most of its time (a minute here)
// and whose set-up waits regularly too (weights loaded in ten chunks):
// the loop's read-back marks the steps, since the loop made most of the
// GPU work however short it was; the loading waits, more of them, made
// little of it.
func TestStepsAfterLongSetup(t *testing.T) {
	g := newProg(t)
	g.now += 60_000 * ms // import torch, build the model
	for range 10 {
		g.launch(main)
		g.sync(main, 1*ms, 0x5000) // a chunk of the weights
		g.now += 20 * ms
	}
	_, ends := trainingLoop(g, 8)
	f := one(t, g.find())
	if f.By != BySync || len(f.Steps) != 8 || !strings.Contains(f.Marker, "cudaStreamSynchronize") || f.Steps[7].EndNs != ends[7] {
		t.Fatalf("found %+v (%s), want the loop's 8 steps", f, f.Why)
	}
}
