package lint

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/syncs/synctest"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

const (
	pid = 4123
	tid = 4123
	us  = synctest.US
	ms  = synctest.MS

	sA, sB  = 0x55aa00, 0x55bb00 // non-blocking streams
	sBlk    = 0x55cc00           // a blocking stream
	dev     = 0x7f5500000000     // a 16 MiB device allocation
	pinned  = 0x7f4400000000     // 1 MiB of pinned host memory
	hostBuf = 0x5555000000       // pageable host memory
	kernel  = 0x401000

	frameCopy  = 0x7f0000001000 // inside cudaMemcpyAsync
	frameSync  = 0x7f0000001100 // inside cudaStreamSynchronize
	frameLoad  = 0x555500002000
	frameStep  = 0x555500003000
	frameOther = 0x555500004000
)

// rec is a recording being built, its clock moving forward call by call.
type rec struct {
	*synctest.Recording
	t uint64
}

func newRec() *rec {
	r := &rec{Recording: synctest.New(pid, "train"), t: synctest.Base}
	r.Thread(tid, "train")
	r.Frame(frameCopy, "cudaMemcpyAsync (libcudart.so.13)")
	r.Frame(frameSync, "cudaStreamSynchronize (libcudart.so.13)")
	r.Frame(frameLoad, "load_batch (train)")
	r.Frame(frameStep, "train_step (train)")
	r.Frame(frameOther, "evaluate (train)")
	r.Call(event.CudaMalloc, tid, r.tick(), 10*us, 0x7ffd1000, 16<<20).Out = dev
	r.Call(event.CudaHostAlloc, tid, r.tick(), 10*us, 0x7ffd1000, 1<<20, 0).Out = pinned
	return r
}

// tick advances the clock by 10 µs and returns it.
func (r *rec) tick() uint64 { r.t += 10 * us; return r.t }

func (r *rec) stream(h uint64, nonBlocking bool) {
	flags := uint64(0)
	if nonBlocking {
		flags = 1
	}
	r.Call(event.CudaStreamCreateWithFlags, tid, r.tick(), 5*us, 0x7ffd0000, flags).Out = h
}

func (r *rec) copy(dst, src, n uint64, kind event.MemcpyKind, h uint64, frames ...uint64) *event.Event {
	e := r.Call(event.CudaMemcpyAsync, tid, r.tick(), 5*us, dst, src, n, uint64(kind), h)
	if len(frames) > 0 {
		synctest.Stack(e, append([]uint64{frameCopy}, frames...)...)
	}
	return e
}

func (r *rec) memset(dst, n, h uint64) { r.Call(event.CudaMemsetAsync, tid, r.tick(), 0, dst, 0, n, h) }
func (r *rec) launch(h uint64)         { r.Launch(tid, r.tick(), h, kernel) }
func (r *rec) record(ev, h uint64)     { r.EventRecord(tid, r.tick(), ev, h) }
func (r *rec) wait(h, ev uint64)       { r.Call(event.CudaStreamWaitEvent, tid, r.tick(), 0, h, ev, 0) }
func (r *rec) sync(h uint64, frames ...uint64) {
	e := r.StreamSync(tid, r.tick(), 100*us, h)
	if len(frames) > 0 {
		synctest.Stack(e, append([]uint64{frameSync}, frames...)...)
	}
}

func run(t *testing.T, r *rec, opts Options) (*model.Result, *Collector, []Finding) {
	t.Helper()
	c := NewCollector(opts)
	res := r.Run(c)
	return res, c, Findings(res, c)
}

// measuredRun is run with GPU times for the calls in times, as
// --gpu-times gives them: the op each enqueued ran [start, end].
func measuredRun(t *testing.T, r *rec, times map[*event.Event][2]uint64, opts Options) (*model.Result, *Collector, []Finding) {
	t.Helper()
	evs := slices.Clone(r.Events)
	slices.SortStableFunc(evs, func(a, b *event.Event) int { return cmp.Compare(a.Start, b.Start) })
	c := NewCollector(opts)
	m := model.New(c)
	m.StartMeasuring(pid)
	for _, e := range evs {
		m.Handle(e)
		if tm, ok := times[e]; ok {
			m.Measure(pid, &model.Measurement{TID: e.TID, APIStart: e.Start, APIEnd: max(e.End, e.Start), Start: tm[0], End: tm[1]})
		}
	}
	m.StopMeasuring(pid)
	res := m.Finish()
	res.Name(r.Names)
	return res, c, Findings(res, c)
}

// only returns the findings of lint id, failing on any other.
func only(t *testing.T, fs []Finding, id ID) []Finding {
	t.Helper()
	var out []Finding
	for _, f := range fs {
		if f.ID != id {
			t.Errorf("unexpected finding %s: %s", f.ID, f.Summary)
			continue
		}
		out = append(out, f)
	}
	return out
}

func TestLegacyNonBlockingCopy(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	// x.to("cuda", non_blocking=True) from pinned memory: a copy on the
	// legacy stream, then a launch.
	r.copy(dev, pinned, 4096, event.HostToDevice, 0, frameLoad)
	r.launch(0)
	// .item(): a copy on the legacy stream then a sync of it: blocking, not
	// a non_blocking copy.
	r.copy(pinned, dev, 4, event.DeviceToHost, 0, frameStep)
	r.sync(0, frameStep)
	// The same with a device switch between: it decides nothing.
	r.copy(pinned, dev, 4, event.DeviceToHost, 0, frameStep)
	r.Call(event.CudaSetDevice, tid, r.tick(), 2*us, 0)
	r.sync(0, frameStep)
	// A non_blocking copy on a created stream, and a device-to-device copy
	// on the legacy stream: neither fires.
	r.copy(dev+(1<<20), pinned, 4096, event.HostToDevice, sA, frameLoad)
	r.Call(event.CudaMemcpyAsync, tid, r.tick(), 5*us, dev+8192, dev, 4096, uint64(event.DeviceToDevice), 0)
	r.launch(0)
	// The thread's last call: nothing synchronized it.
	r.copy(dev, hostBuf, 1024, event.HostToDevice, 0x1, frameOther) // cudaStreamLegacy, pageable
	_, _, fs := run(t, r, Options{})
	got := only(t, fs, LegacyNonBlocking)
	if len(got) != 1 {
		t.Fatalf("findings %+v", fs)
	}
	f := got[0]
	if f.Count != 2 || f.Sites != 2 || f.Unit != "copies" || len(f.Examples) != 2 || !strings.Contains(f.Summary, "1 from pageable memory") {
		t.Errorf("finding %+v", f)
	}
	first := f.Examples[0].Calls[0]
	if first.Site != "load_batch (train)" || !first.UserFrame || first.Call != "cudaMemcpyAsync" || first.Stream != 0 ||
		first.StreamLabel != "stream 0 (legacy default)" || first.Thread != "train" || first.Bytes != 4096 || first.Seq != 3 {
		t.Errorf("evidence %+v", first)
	}
	if e := f.Examples[1].Calls[0]; e.Site != "evaluate (train)" || e.Bytes != 1024 {
		t.Errorf("second example %+v", e)
	}
}

func TestCrossStreamRace(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	r.stream(sB, true)
	// Written on A, read on B: a possible race, ten times.
	for range 10 {
		r.copy(dev, pinned, 1<<20, event.HostToDevice, sA, frameLoad)
		r.Call(event.CudaMemcpyAsync, tid, r.tick(), 5*us, dev+(4<<20), dev+4096, 8192, uint64(event.DeviceToDevice), sB)
		r.launch(sB)
	}
	r.DeviceSync(tid, r.tick(), 200*us)
	// Each of these is ordered: an event wait; a stream sync; memory of
	// another range of the allocation; the same stream.
	r.copy(dev, pinned, 1<<20, event.HostToDevice, sA, frameLoad)
	r.record(0xe1, sA)
	r.wait(sB, 0xe1)
	r.Call(event.CudaMemcpyAsync, tid, r.tick(), 5*us, dev+(4<<20), dev, 8192, uint64(event.DeviceToDevice), sB)
	r.copy(dev+(8<<20), pinned, 1<<20, event.HostToDevice, sA, frameLoad)
	r.sync(sA)
	r.memset(dev+(8<<20), 1<<20, sB)
	r.copy(dev+(12<<20), pinned, 1<<20, event.HostToDevice, sA, frameLoad)
	r.memset(dev+(13<<20), 4096, sB)
	r.memset(dev+(12<<20), 4096, sA)
	_, _, fs := run(t, r, Options{})
	got := only(t, fs, CrossStreamRace)
	if len(got) != 1 {
		t.Fatalf("findings %+v", fs)
	}
	f := got[0]
	if f.Count != 10 || f.Sites != 1 || len(f.Examples) != 1 || f.Examples[0].Count != 10 {
		t.Fatalf("finding %+v", f)
	}
	w, u := f.Examples[0].Calls[0], f.Examples[0].Calls[1]
	if w.Role != "write" || w.Site != "load_batch (train)" || w.Stream != 1 || u.Role != "use" || u.Stream != 2 || u.Site != "" || u.Seq != w.Seq+1 {
		t.Errorf("evidence %+v / %+v", w, u)
	}
	if !strings.Contains(f.Examples[0].Note, "offset 4.0 KiB into a 16.0 MiB allocation") || !strings.Contains(f.Scope, "kernel arguments were not recorded (record --kernel-args)") ||
		f.Examples[0].Proof != "copies" {
		t.Errorf("note %q, scope %q", f.Examples[0].Note, f.Scope)
	}
}

// kernelLaunch launches kernel fn on stream h with its parameter values
// recorded (--kernel-args): an int, then each of ptrs, each value where
// its kernelParams entry points, as a generated host stub passes them;
// the entry past them points at nothing readable.
func (r *rec) kernelLaunch(h, fn uint64, ptrs ...uint64) *event.Event {
	e := r.Launch(tid, r.tick(), h, fn)
	e.Cookie |= event.Lookup(event.CudaLaunchKernel).KernelArgsCookie()
	k := &e.KernelArgs
	k.Params = 0x7ffe_0000_0f00
	b := binary.LittleEndian.AppendUint64(nil, 1<<20) // int n, padded
	k.Entries[0], k.Lens[0] = 0x7ffe_0000_2000, 8
	for i, p := range ptrs {
		k.Entries[1+i], k.Offsets[1+i], k.Lens[1+i] = 0x7ffe_0000_2400-0x100*uint64(i), uint16(len(b)), 8
		b = binary.LittleEndian.AppendUint64(b, p)
	}
	k.Entries[1+len(ptrs)] = 0x10 // past the parameters: what the stack held
	k.Bytes = b
	return e
}

// Kernels given device memory (their parameter values, --kernel-args) use
// it and may write it: races of kernels with copies and with each other,
// ranked by what the calls prove; waits order them as they order copies.
func TestKernelRaces(t *testing.T) {
	const gemm, relu, reduce = 0x401000, 0x402000, 0x403000
	r := newRec()
	r.Names.Kernels[model.NameKey{PID: pid, Key: gemm}] = "_Z11gemm_kernelPKfS0_Pfi"
	r.stream(sA, true)
	r.stream(sB, true)
	x, y, z := uint64(dev), uint64(dev+(1<<20)), uint64(dev+(2<<20))
	// kernels: y = x @ x on A (a side stream), then a kernel on B reads y:
	// three times, each followed by a device sync (else the next gemm
	// would race with the kernel on B too).
	for range 3 {
		r.kernelLaunch(sA, gemm, x, x, y)
		r.kernelLaunch(sB, relu, y, z)
		r.DeviceSync(tid, r.tick(), 200*us)
	}
	// write then kernel: a copy writes x on A, a kernel on A is given it
	// (ordered), then a kernel on B: the race is with the copy, the better
	// evidence, not with the kernel on A.
	r.copy(x, pinned, 4096, event.HostToDevice, sA, frameLoad)
	r.kernelLaunch(sA, gemm, x, x, y)
	r.kernelLaunch(sB, reduce, x+64, z)
	r.DeviceSync(tid, r.tick(), 200*us)
	// kernel then use: a kernel on A is given z, a copy on B reads it back.
	r.kernelLaunch(sA, relu, z, z)
	r.copy(pinned, z, 4, event.DeviceToHost, sB, frameStep)
	r.DeviceSync(tid, r.tick(), 200*us)
	// Ordered by an event wait: no race.
	r.kernelLaunch(sA, gemm, x, x, y)
	r.record(0xe1, sA)
	r.wait(sB, 0xe1)
	r.kernelLaunch(sB, relu, y, z)
	// Not device memory: the pointers lie in no allocation.
	r.kernelLaunch(sA, gemm, 0x7f00_0000_0000, 0x7f00_0000_1000)
	r.kernelLaunch(sB, relu, 0x7f00_0000_0000)
	_, _, fs := run(t, r, Options{})
	got := only(t, fs, CrossStreamRace)
	if len(got) != 1 {
		t.Fatalf("findings %+v", fs)
	}
	f := got[0]
	// 3 + 1 + 1 uses: the kernel on B uses y (the gemm on A was given it)
	// but not z, which nothing on A was given.
	if f.Count != 5 || f.Sites != 3 || len(f.Examples) != 3 || f.Level != LevelError ||
		!strings.Contains(f.Summary, "copies, memsets and kernels used") || !strings.Contains(f.Scope, "a kernel is taken to use each device pointer among its first 16 parameters' values") {
		t.Fatalf("finding %+v", f)
	}
	want := []struct {
		proof      string
		count      int64
		roles      [2]string
		kernels    [2]string
		calls      [2]string
		wantStream [2]int
	}{
		{"write then kernel", 1, [2]string{"write", "use"}, [2]string{"", "kernel@0x403000"}, [2]string{"cudaMemcpyAsync", "cudaLaunchKernel"}, [2]int{1, 2}},
		{"kernel then use", 1, [2]string{"may write", "use"}, [2]string{"kernel@0x402000", ""}, [2]string{"cudaLaunchKernel", "cudaMemcpyAsync"}, [2]int{1, 2}},
		{"kernels", 3, [2]string{"may write", "use"}, [2]string{"gemm_kernel", "kernel@0x402000"}, [2]string{"cudaLaunchKernel", "cudaLaunchKernel"}, [2]int{1, 2}},
	}
	for i, w := range want {
		ex := f.Examples[i]
		if ex.Proof != w.proof || ex.Count != w.count || !strings.Contains(ex.Note, "a pointer a kernel was given") {
			t.Errorf("example %d: %+v, want proof %q ×%d", i, ex, w.proof, w.count)
			continue
		}
		for k, c := range ex.Calls {
			if c.Role != w.roles[k] || c.Kernel != w.kernels[k] || c.Call != w.calls[k] || c.Stream != w.wantStream[k] {
				t.Errorf("example %d call %d: %+v, want %s %s %q on stream %d", i, k, c, w.roles[k], w.calls[k], w.kernels[k], w.wantStream[k])
			}
		}
	}
	if n := f.Examples[2].Calls; !strings.Contains(f.Examples[2].Note, "first at 0x7f5500100000, offset 1.0 MiB") || n[1].Seq != n[0].Seq+1 {
		t.Errorf("the first kernel race: %+v", f.Examples[2])
	}
	var b bytes.Buffer
	if err := WriteText(&b, &model.Result{}, nil, fs, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"may write  cudaLaunchKernel kernel@0x402000", "[a kernel given memory a copy or memset wrote]", "use    cudaLaunchKernel kernel@0x403000"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, b.String())
		}
	}
}

// The legacy default stream orders itself after blocking streams and
// them after it; a non-blocking stream is not ordered; a wait makes the
// order transitive.
func TestRaceOrderRules(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	r.stream(sBlk, false)
	r.copy(dev, pinned, 4096, event.HostToDevice, sBlk, frameLoad)
	r.memset(dev, 4096, 0) // legacy after blocking: ordered
	r.memset(dev, 4096, sBlk)
	r.record(0xe1, 0) // legacy after blocking again, then A waits for legacy
	r.wait(sA, 0xe1)
	r.memset(dev, 4096, sA) // ordered through the legacy stream
	r.memset(dev+4096, 4096, sA)
	r.memset(dev+4096, 4096, 0) // A is non-blocking: a race
	_, _, fs := run(t, r, Options{})
	got := only(t, fs, CrossStreamRace)
	if len(got) != 1 || got[0].Count != 1 {
		t.Fatalf("findings %+v", fs)
	}
	if c := got[0].Examples[0].Calls; c[0].Stream != 1 || c[1].Stream != 0 || c[1].Seq != c[0].Seq+1 {
		t.Errorf("evidence %+v", c)
	}
}

func TestManyBusyStreams(t *testing.T) {
	for _, n := range []int{8, 10} {
		r := newRec()
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = 0x60000 + uint64(i)*0x100
			r.stream(hs[i], true)
		}
		for _, h := range hs {
			r.launch(h)
		}
		r.DeviceSync(tid, r.tick(), 5*ms)
		// Then the same streams one after the other: never two at once.
		for _, h := range hs {
			r.launch(h)
			r.launch(h)
			r.sync(h)
		}
		_, _, fs := run(t, r, Options{})
		got := only(t, fs, ManyBusyStreams)
		if n <= 8 {
			if len(got) != 0 {
				t.Errorf("%d streams: %+v", n, got)
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("%d streams: findings %+v", n, fs)
		}
		f := got[0]
		if f.Count != 10 || f.Unit != "streams" || *f.Device != 0 || len(f.Examples) != 10 {
			t.Fatalf("finding %+v", f)
		}
		for i, e := range f.Examples {
			if c := e.Calls[0]; c.Stream != i+1 || c.Role != "op" || c.Call != "cudaLaunchKernel" {
				t.Errorf("example %d: %+v", i, c)
			}
		}
	}
}

func TestPageableLoop(t *testing.T) {
	for _, n := range []int{9, 10} {
		r := newRec()
		r.stream(sA, true)
		for range n {
			r.copy(dev, hostBuf, 1<<20, event.HostToDevice, sA, frameLoad) // pageable, one site
			r.copy(dev, pinned, 1<<20, event.HostToDevice, sA, frameStep)
			r.launch(sA)
		}
		// As many pageable copies from as many sites: no loop.
		for i := range 12 {
			r.Frame(frameOther+uint64(i)*16, "site_"+string(rune('a'+i))+" (train)")
			r.copy(dev, hostBuf, 4096, event.HostToDevice, sA, frameOther+uint64(i)*16)
		}
		_, _, fs := run(t, r, Options{})
		got := only(t, fs, PageableLoop)
		if n < 10 {
			if len(got) != 0 {
				t.Errorf("%d copies: %+v", n, got)
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("findings %+v", fs)
		}
		f := got[0]
		if f.Count != 10 || f.Sites != 1 || f.Examples[0].Calls[0].Site != "load_batch (train)" || !strings.Contains(f.Summary, "10.0 MiB") {
			t.Errorf("finding %+v", f)
		}
	}
}

func TestSyncEveryLaunch(t *testing.T) {
	for _, n := range []int{8, 12} {
		r := newRec()
		r.stream(sA, true)
		r.launch(sA)
		r.launch(sA) // two launches, one sync: not part of a run
		r.sync(sA, frameStep)
		for range n {
			r.launch(sA)
			r.sync(sA, frameStep)
		}
		r.launch(sA)
		r.launch(sA) // the run ends
		r.sync(sA, frameOther)
		_, _, fs := run(t, r, Options{})
		got := only(t, fs, SyncEveryLaunch)
		if n+1 < 10 {
			if len(got) != 0 {
				t.Errorf("%d: %+v", n, got)
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("findings %+v", fs)
		}
		f := got[0]
		l, s := f.Examples[0].Calls[0], f.Examples[0].Calls[1]
		// The run starts with the launch that the first sync at the site
		// followed alone: the second launch of the pair.
		if f.Count != int64(n)+1 || l.Role != "launch" || s.Role != "sync" || s.Site != "train_step (train)" || s.Call != "cudaStreamSynchronize" ||
			l.Seq+1 != s.Seq || f.Examples[0].Note != "1 run, the longest 13 launches" {
			t.Errorf("finding %+v", f)
		}
	}
}

// A clean pipeline: pinned buffers, a copy stream and a compute stream
// ordered by events both ways, a sync per step: nothing fires.
func TestCleanPipeline(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	r.stream(sB, true)
	for i := range 50 {
		buf := dev + uint64(i%2)<<20
		r.wait(sA, 0xe2) // the copy waits until compute is done with the buffer
		r.copy(buf, pinned, 1<<20, event.HostToDevice, sA, frameLoad)
		r.record(0xe1, sA)
		r.wait(sB, 0xe1)
		for range 4 {
			r.launch(sB)
		}
		r.Call(event.CudaMemcpyAsync, tid, r.tick(), 5*us, dev+(8<<20), buf, 4096, uint64(event.DeviceToDevice), sB)
		r.record(0xe2, sB)
		r.copy(pinned+(512<<10), dev+(8<<20), 4096, event.DeviceToHost, sB, frameStep)
		r.sync(sB, frameStep)
	}
	_, c, fs := run(t, r, Options{})
	if len(fs) != 0 || c.Limits().any() {
		t.Errorf("findings %+v, limits %+v", fs, c.Limits())
	}
}

func TestTextAndJSON(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	r.stream(sB, true)
	for range 10 {
		r.copy(dev, hostBuf, 4096, event.HostToDevice, 0, frameLoad)
		r.memset(dev, 4096, sA)
		r.launch(sB)
		r.sync(sB, frameStep)
	}
	res, c, fs := run(t, r, Options{})
	want := []ID{CrossStreamRace, SyncEveryLaunch, PageableLoop, LegacyNonBlocking} // ranked (TestFindingsRanked)
	if len(fs) != len(want) {
		t.Fatalf("findings %+v", fs)
	}
	for i, f := range fs {
		if f.ID != want[i] {
			t.Errorf("finding %d is %s, want %s", i, f.ID, want[i])
		}
	}
	var txt bytes.Buffer
	if err := WriteText(&txt, res, c, fs, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"cudatap lint: 4 findings: 1 error, 2 warnings, 1 note", "error: [cross-stream-race] possible race", "write  cudaMemsetAsync", "at load_batch (train)",
		"(no stack: record with --stacks all)", "fix: order the use after the write", "sees: copies and memsets only", "dropped events: 0",
		"cost: not priced in time", "cost: 1.0 ms blocked on the host", "notes: each cost less than 1%", "note: [legacy-nonblocking-copy]"} {
		if !strings.Contains(txt.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, txt.String())
		}
	}
	if d := regexp.MustCompile(`\d(ns|µs|ms|s)\b`).FindString(txt.String()); d != "" {
		t.Errorf("text has a time in Go's format (%q), not in every output's (units.Duration, units.Offset: \"+1.5 ms\"):\n%s", d, txt.String())
	}
	var sec bytes.Buffer
	WriteText(&sec, res, c, fs, TextOptions{Section: true, Examples: 1, Input: "run.cudatap"})
	if s := sec.String(); !strings.HasPrefix(s, "\nlints: 4 findings fired: 1 error, 2 warnings, 1 note (cudatap lint run.cudatap") || strings.Contains(s, "dropped events") ||
		strings.Contains(s, "sees:") || strings.Count(s, "fix:") != 3 {
		t.Errorf("section:\n%s", s)
	}
	var none bytes.Buffer
	WriteText(&none, res, c, nil, TextOptions{Section: true})
	if none.Len() != 0 {
		t.Errorf("empty section wrote %q", none.String())
	}
	// No lint fired, but a bound left something out: that still shows.
	c.limits.Writes = 3
	var limited bytes.Buffer
	WriteText(&limited, res, c, nil, TextOptions{Section: true})
	if s := limited.String(); !strings.Contains(s, "lints: none fired") || !strings.Contains(s, "lint limits (counted, not shown)") {
		t.Errorf("section with limits and no finding:\n%s", s)
	}
	c.limits.Writes = 0

	var js bytes.Buffer
	if err := WriteJSON(&js, res, c, fs); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Schema    int       `json:"schema"`
		Findings  []Finding `json:"findings"`
		Rules     []Rule    `json:"rules"`
		NoteBelow float64   `json:"note_below"`
		Lost      *uint64   `json:"lost_events"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Schema != Schema || len(doc.Findings) != 4 || len(doc.Rules) != 6 || doc.Lost == nil || doc.Findings[0].Examples[0].Calls[1].Role != "use" ||
		doc.NoteBelow != 0.01 || doc.Findings[0].Level != LevelError || doc.Findings[1].Cost != fs[1].Cost || doc.Rules[0].Cost == "" {
		t.Errorf("JSON %s", js.String())
	}
	// Findings are final: asking again gives the same.
	if again := Findings(res, c); len(again) != len(fs) || again[0].Count != fs[0].Count || again[3].Count != fs[3].Count {
		t.Errorf("second Findings %+v", again)
	}
}

func TestClockAndWrites(t *testing.T) {
	var c clock
	c.raise(3, 5)
	c.raise(1, 2)
	c.raise(3, 4)
	c.join(clock{{0, 1}, {3, 7}})
	if len(c) != 3 || c.get(0) != 1 || c.get(1) != 2 || c.get(3) != 7 || c.get(2) != 0 {
		t.Errorf("clock %v", c)
	}
	var w writes
	w.put(write{start: 0, end: 100, stream: 1})
	w.put(write{start: 40, end: 60, stream: 2})
	w.put(write{start: 90, end: 120, stream: 3})
	want := []write{{start: 0, end: 40, stream: 1}, {start: 40, end: 60, stream: 2}, {start: 60, end: 90, stream: 1}, {start: 90, end: 120, stream: 3}}
	if len(w.w) != len(want) {
		t.Fatalf("writes %+v", w.w)
	}
	for i := range want {
		if w.w[i].start != want[i].start || w.w[i].end != want[i].end || w.w[i].stream != want[i].stream {
			t.Errorf("write %d: %+v, want %+v", i, w.w[i], want[i])
		}
	}
	if i, j := w.overlapping(50, 95); i != 1 || j != 4 {
		t.Errorf("overlapping(50, 95) = %d, %d", i, j)
	}
}

// The race lint's memory stays bounded: writes never known complete are
// forgotten past maxWrites, and counted.
func TestWritesBounded(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	for i := range maxWrites + 10 {
		r.memset(dev+uint64(i)*512, 256, sA)
	}
	_, c, fs := run(t, r, Options{})
	if len(fs) != 0 {
		t.Errorf("findings %+v", fs)
	}
	ps := c.procs[pid]
	if n := len(ps.mem.writes.w); n > maxWrites || c.Limits().Writes == 0 {
		t.Errorf("%d writes kept, %d forgotten", n, c.Limits().Writes)
	}
}

// benchEvents is a training loop's mix: per step an upload on a copy
// stream, an event edge to the compute stream, 19 launches and a memset
// there, an edge back, a read-back, and a sync of the compute stream.
func benchEvents() []*event.Event {
	r := newRec()
	r.stream(sA, true)
	r.stream(sB, true)
	for range 256 {
		r.copy(dev, pinned, 1<<20, event.HostToDevice, sA, frameLoad)
		r.record(0xe1, sA)
		r.wait(sB, 0xe1)
		for range 19 {
			r.launch(sB)
		}
		r.memset(dev+(8<<20), 4096, sB)
		r.record(0xe2, sB)
		r.wait(sA, 0xe2)
		r.copy(pinned+4096, dev+(8<<20), 4096, event.DeviceToHost, sA, frameStep)
		r.sync(sB, frameStep)
	}
	r.DeviceSync(tid, r.tick(), 100*us)
	return r.Events
}

// BenchmarkCollector: the model alone, then with the lints' collector as
// its sink; compare the two ns/event of the same run.
func BenchmarkCollector(b *testing.B) {
	evs := benchEvents()
	for _, withLints := range []bool{false, true} {
		name := "model"
		if withLints {
			name = "model+lints"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				var sink model.Sink = model.Discard{}
				var c *Collector
				if withLints {
					c = NewCollector(Options{})
					sink = c
				}
				m := model.New(sink)
				for _, e := range evs {
					m.Handle(e)
				}
				res := m.Finish()
				if c != nil && len(Findings(res, c)) != 0 {
					b.Fatal("the benchmark's loop fires a lint")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
		})
	}
}

// A copy on the legacy stream enqueued while a kernel of a blocking
// stream runs waits for it: measured, its cost is that wait. A copy a
// kernel of a blocking stream is enqueued behind holds the kernel up
// while it runs: its cost is that time. Priced against the process's
// traced time, the same copy is a warning in a short run and a note in
// a long one.
func TestLegacyCopyCostMeasured(t *testing.T) {
	for _, tc := range []struct {
		name      string
		waits     bool   // the copy waits for the kernel (else the kernel for the copy)
		tail      uint64 // the run goes on this long after the copy
		cost      uint64
		level     Level
		serialize bool
	}{
		{"copy waits for a kernel", true, 0, 495 * us, LevelWarning, true},
		{"kernel waits for the copy", false, 0, 192 * us, LevelWarning, false},
		{"kernel waits for the copy, long run", false, 1000 * ms, 192 * us, LevelNote, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRec()
			r.stream(sA, true)
			r.stream(sBlk, false)
			times := map[*event.Event][2]uint64{}
			var cp *event.Event
			if tc.waits {
				k := r.Launch(tid, r.tick(), sBlk, kernel)
				times[k] = [2]uint64{k.Start + 5*us, k.Start + 505*us} // 500 µs, enqueued 10 µs before the copy
				cp = r.copy(dev, pinned, 4096, event.HostToDevice, 0, frameLoad)
				times[cp] = [2]uint64{k.Start + 505*us, k.Start + 525*us} // after the kernel: waited 495 µs
				o := r.Launch(tid, r.tick(), sA, kernel)                  // a non-blocking stream: not held up
				times[o] = [2]uint64{o.Start + 1*us, o.Start + 2*us}
			} else {
				cp = r.copy(dev, pinned, 4096, event.HostToDevice, 0, frameLoad)
				times[cp] = [2]uint64{cp.Start + 2*us, cp.Start + 202*us}
				k := r.Launch(tid, r.tick(), sBlk, kernel) // 10 µs after the copy: waits until it ends
				times[k] = [2]uint64{cp.Start + 202*us, cp.Start + 702*us}
			}
			r.DeviceSync(tid, r.tick(), ms)
			if tc.tail > 0 {
				r.DeviceSync(tid, r.t+tc.tail, 10*us)
			}
			_, _, fs := measuredRun(t, r, times, Options{})
			got := only(t, fs, LegacyNonBlocking)
			if len(got) != 1 {
				t.Fatalf("findings %+v", fs)
			}
			f := got[0]
			if f.Cost.Kind != CostSerialized || f.Cost.AtMost || f.Cost.Ns != tc.cost || f.Level != tc.level || f.Examples[0].CostNs != tc.cost {
				t.Errorf("cost %+v, level %s, example cost %d; want %d, %s", f.Cost, f.Level, f.Examples[0].CostNs, tc.cost, tc.level)
			}
			if want := float64(tc.cost) / float64(f.Cost.RunNs); f.Cost.Share != want || f.Cost.RunNs < tc.tail {
				t.Errorf("share %v of %d, want %v", f.Cost.Share, f.Cost.RunNs, want)
			}
			if s := f.Summary; strings.Contains(s, "1 waited for work queued on blocking streams") != tc.serialize {
				t.Errorf("summary %q", s)
			}
		})
	}
}

// Without GPU times the same copy is priced by its bounds: from the
// enqueue of the kernel held up behind it to the synchronize that proved
// the copy complete, at most.
func TestLegacyCopyCostBounded(t *testing.T) {
	r := newRec()
	r.stream(sBlk, false)
	r.copy(dev, pinned, 4096, event.HostToDevice, 0, frameLoad)
	k := r.Launch(tid, r.tick(), sBlk, kernel)
	sync := r.StreamSync(tid, r.tick(), 100*us, 0)
	res, c, fs := run(t, r, Options{})
	got := only(t, fs, LegacyNonBlocking)
	if len(got) != 1 {
		t.Fatalf("findings %+v", fs)
	}
	f := got[0]
	if want := sync.End - k.Start; f.Cost.Ns != want || !f.Cost.AtMost || !f.Examples[0].CostAtMost || f.Level != LevelWarning {
		t.Errorf("cost %+v, level %s; want at most %d", f.Cost, f.Level, want)
	}
	var txt bytes.Buffer
	WriteText(&txt, res, c, fs, TextOptions{})
	if s := txt.String(); !strings.Contains(s, "warning: [legacy-nonblocking-copy]") || !strings.Contains(s, "cost: at most 110.0 µs of GPU work serialized") ||
		!strings.Contains(s, "GPU times not measured (CUPTI not found, or --gpu-times=off") {
		t.Errorf("text:\n%s", s)
	}
}

// A copy nothing waited behind, that waited for nothing, cost nothing:
// a note, measured or not.
func TestLegacyCopyFree(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	for range 3 {
		r.copy(dev, pinned, 4096, event.HostToDevice, 0, frameLoad)
		r.launch(sA)
		r.sync(sA)
	}
	res, c, fs := run(t, r, Options{})
	got := only(t, fs, LegacyNonBlocking)
	if len(got) != 1 || got[0].Cost.Ns != 0 || got[0].Cost.AtMost || got[0].Level != LevelNote || got[0].Count != 3 {
		t.Fatalf("findings %+v", fs)
	}
	var sec bytes.Buffer
	WriteText(&sec, res, c, fs, TextOptions{Section: true})
	if s := sec.String(); !strings.Contains(s, "lints: 1 finding fired: 1 note") || !strings.Contains(s, "notes: each cost less than 1% of its process's traced time") ||
		!strings.Contains(s, "  [legacy-nonblocking-copy] train (pid 4123): 3 asynchronous") || !strings.Contains(s, "cost: none (of ") || strings.Contains(s, "fix:") {
		t.Errorf("section:\n%s", s)
	}
}

// many-busy-streams costs the time more streams than the limit were busy:
// measured, exactly; not measured, at most the time more may have been
// (each op anywhere between its enqueue and its proof of completion).
func TestManyBusyStreamsCost(t *testing.T) {
	for _, measured := range []bool{false, true} {
		r := newRec()
		hs := make([]uint64, 10)
		var launches []*event.Event
		for i := range hs {
			hs[i] = 0x60000 + uint64(i)*0x100
			r.stream(hs[i], true)
		}
		for _, h := range hs {
			launches = append(launches, r.Launch(tid, r.tick(), h, kernel))
		}
		sync := r.DeviceSync(tid, r.tick(), 5*ms)
		times := map[*event.Event][2]uint64{}
		for i, l := range launches {
			// Each runs 1 ms, 10 µs after the one before: 9 or 10 at once
			// from the ninth's start to the second's end.
			times[l] = [2]uint64{sync.Start + uint64(i)*10*us, sync.Start + ms + uint64(i)*10*us}
		}
		for _, h := range hs { // then one stream after the other
			for range 2 {
				l := r.Launch(tid, r.tick(), h, kernel)
				times[l] = [2]uint64{l.Start + us, l.Start + 2*us}
			}
			r.sync(h)
		}
		var fs []Finding
		want := sync.End - launches[8].Start // the ninth enqueued to the sync's return
		if measured {
			_, _, fs = measuredRun(t, r, times, Options{})
			want = ms + 10*us - 80*us
		} else {
			_, _, fs = run(t, r, Options{})
		}
		got := only(t, fs, ManyBusyStreams)
		if len(got) != 1 {
			t.Fatalf("measured %v: findings %+v", measured, fs)
		}
		if c := got[0].Cost; c.Kind != CostOversubscribed || c.Ns != want || c.AtMost == measured || got[0].Level != LevelWarning || got[0].Count != 10 {
			t.Errorf("measured %v: cost %+v, level %s; want %d", measured, c, got[0].Level, want)
		}
	}
}

// Findings are ranked: errors, then warnings and notes, each costliest
// first.
func TestFindingsRanked(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	r.stream(sB, true)
	for range 10 {
		r.copy(dev, hostBuf, 4096, event.HostToDevice, 0, frameLoad)
		r.memset(dev, 4096, sA)
		r.launch(sB)
		r.sync(sB, frameStep)
	}
	_, _, fs := run(t, r, Options{})
	var got []string
	for _, f := range fs {
		got = append(got, string(f.Level)+" "+string(f.ID))
	}
	want := []string{"error cross-stream-race", "warning sync-every-launch", "warning pageable-copy-loop", "note legacy-nonblocking-copy"}
	if !slices.Equal(got, want) {
		t.Errorf("ranked %v, want %v", got, want)
	}
	if fs[1].Cost.Ns != 10*100*us || fs[2].Cost.Ns != 10*5*us || fs[1].Cost.Kind != CostBlocked || fs[2].Cost.AtMost {
		t.Errorf("blocked costs %+v, %+v", fs[1].Cost, fs[2].Cost)
	}
	for _, l := range Levels {
		if !LevelError.AtLeast(l) || l != LevelNote && LevelNote.AtLeast(l) {
			t.Errorf("AtLeast %s", l)
		}
	}
	if l, err := ParseLevel("warning"); l != LevelWarning || err != nil {
		t.Errorf("ParseLevel: %s, %v", l, err)
	}
	if _, err := ParseLevel("fatal"); err == nil || !strings.Contains(err.Error(), "give error, warning or note") {
		t.Errorf("ParseLevel(fatal): %v", err)
	}
}

// A finding is priced against its process's traced time less the time
// cudatap held its threads within it; holds outside it (a library hooked
// before the first call) take nothing off.
func TestRunLessHolds(t *testing.T) {
	r := newRec()
	r.stream(sA, true)
	for range 12 {
		r.launch(sA)
		r.sync(sA, frameStep)
	}
	res, c, fs := run(t, r, Options{})
	p := res.Processes[0]
	span := p.LastSeen - p.FirstSeen
	if len(fs) != 1 || fs[0].Cost.RunNs != span {
		t.Fatalf("findings %+v, traced %d", fs, span)
	}
	c.Hold(p, &model.Hold{TID: tid, Start: p.FirstSeen - 50*us, End: p.FirstSeen + 10*us}) // 10 µs within
	c.Hold(p, &model.Hold{TID: tid + 1, Start: p.FirstSeen + 5*us, End: p.FirstSeen + 30*us})
	c.Hold(p, &model.Hold{TID: tid, Start: p.LastSeen + us, End: p.LastSeen + ms})
	if fs := Findings(res, c); fs[0].Cost.RunNs != span-30*us || fs[0].Cost.Share != float64(fs[0].Cost.Ns)/float64(span-30*us) {
		t.Errorf("priced against %d, want %d", fs[0].Cost.RunNs, span-30*us)
	}
}

// The bounds' sweep starts when a ninth stream gets work: ops handed over
// before then still count from that instant to the end of their bounds.
// Here eight streams' ops are proven complete by a device-wide sync of
// another thread that returns after the ninth and tenth streams' launches.
func TestManyBusyStreamsBoundsBeforeTheNinth(t *testing.T) {
	r := newRec()
	hs := make([]uint64, 10)
	for i := range hs {
		hs[i] = 0x60000 + uint64(i)*0x100
		r.stream(hs[i], true)
	}
	t0 := r.tick()
	for i, h := range hs[:8] {
		r.Launch(tid, t0+uint64(i)*10*us, h, kernel)
	}
	sync := r.DeviceSync(tid+1, t0+80*us, ms)
	ninth := r.Launch(tid, t0+90*us, hs[8], kernel)
	r.Launch(tid, t0+100*us, hs[9], kernel)
	r.DeviceSync(tid, t0+2*ms, 10*us)
	_, _, fs := run(t, r, Options{})
	got := only(t, fs, ManyBusyStreams)
	if len(got) != 1 {
		t.Fatalf("findings %+v", fs)
	}
	if c := got[0].Cost; !c.AtMost || c.Ns != sync.End-ninth.Start {
		t.Errorf("cost %+v, want at most %d", c, sync.End-ninth.Start)
	}
}
