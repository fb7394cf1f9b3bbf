package model

import (
	"maps"
	"slices"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// timedLaunch is a cudaLaunchKernel on handle h that returns after dur.
func timedLaunch(tid uint32, t, dur, h uint64) *ev {
	e := launch(tid, t, h, 0xf00)
	e.End = t + dur
	return e
}

func ops(c *Collector) int {
	n := 0
	if tr := c.Traces[testPID]; tr != nil {
		for _, op := range tr.GPUOps {
			if op.ID >= 0 {
				n++
			}
		}
	}
	return n
}

// TestMeasuredTimes: CUPTI's times replace the inferred ones; final ops
// wait for their measurement however late it comes (CUPTI keeps a record
// until its buffer fills): marks release none of them; unmatched ones are
// counted; busy time is exact where every op was measured.
func TestMeasuredTimes(t *testing.T) {
	const h = 0x5000
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{
		streamCreate(1, 500, h),
		timedLaunch(1, 1000, 500, h),
		timedLaunch(1, 2000, 500, h),
		timedLaunch(1, 3000, 500, h),
		streamSync(1, 4000, 10_000, h),
	} {
		m.Handle(&e.Event)
	}
	if n := ops(c); n != 0 {
		t.Fatalf("%d ops went to the sink before their measurement, want 0", n)
	}
	// Out of order, as CUPTI may deliver them across buffers.
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 2100, APIEnd: 2400, Start: 5000, End: 7000, Kind: OpKernel})
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 1100, APIEnd: 1400, Start: 4100, End: 5000, Kind: OpKernel, Name: "_Z4gemmv"})
	if n := ops(c); n != 2 {
		t.Fatalf("%d ops in the sink after two measurements, want 2", n)
	}
	m.Measure(testPID, &Measurement{TID: 9, APIStart: 2100, APIEnd: 2400, Start: 1, End: 2}) // no call on thread 9
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 3550, APIEnd: 3600, Start: 1, End: 2}) // after the call returned
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 100, APIEnd: 200, Start: 1, End: 2})   // before any launch
	for _, at := range []uint64{MeasureSlack + 14_001, 100 * MeasureSlack} {
		m.MeasuredUntil(testPID, at)
		if n := ops(c); n != 2 {
			t.Fatalf("a mark at %d released %d unmeasured ops, want none", at, n-2)
		}
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 3100, APIEnd: 3400, Start: 7000, End: 8000}) // late, still awaited
	if n := ops(c); n != 3 {
		t.Fatalf("%d ops in the sink after the last measurement, want 3", n)
	}
	p := finish(m, c)[0]

	want := [][2]uint64{{4100, 5000}, {5000, 7000}, {7000, 8000}}
	for i, w := range want {
		op := p.GPUOps[i]
		if !op.Measured || op.Start != w[0] || op.End != w[1] {
			t.Errorf("op %d: measured %v [%d, %d], want CUPTI's [%d, %d]", i, op.Measured, op.Start, op.End, w[0], w[1])
		}
	}
	got := m.Drops()
	if got.GPUTimesUnmatched != 3 || got.GPUTimesLate != 0 || got.GPUTimesUnmeasured != 0 {
		t.Errorf("unmatched %d late %d unmeasured %d, want 3 0 0", got.GPUTimesUnmatched, got.GPUTimesLate, got.GPUTimesUnmeasured)
	}
	st := p.Streams[1].Stats
	if st.Measured != 3 || st.BusyNs != 3900 || st.BusyMaxNs != st.BusyNs {
		t.Errorf("stream: measured %d busy [%d, %d], want 3 ops, exactly 3900", st.Measured, st.BusyNs, st.BusyMaxNs)
	}
	if !p.Measured {
		t.Error("process not marked measured")
	}
	if got := p.MeasuredNames[0xf00]; got != "_Z4gemmv" {
		t.Errorf("CUPTI's name for the kernel: %q", got)
	}
}

// TestMeasuredBeforeSync: an op measured before any sync bounds it keeps
// CUPTI's times when the sync comes; with every op measured the busy time
// is exact.
func TestMeasuredBeforeSync(t *testing.T) {
	const h = 0x5000
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{streamCreate(1, 500, h), timedLaunch(1, 1000, 500, h), timedLaunch(1, 2000, 500, h)} {
		m.Handle(&e.Event)
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 1100, APIEnd: 1400, Start: 1500, End: 2500})
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 2100, APIEnd: 2400, Start: 2600, End: 3000})
	e := streamSync(1, 3000, 10_000, h)
	m.Handle(&e.Event)
	p := finish(m, c)[0]
	if op := p.GPUOps[1]; op.Start != 2600 || op.End != 3000 {
		t.Errorf("op 1 [%d, %d], want [2600, 3000]", op.Start, op.End)
	}
	if st := p.Streams[1].Stats; st.BusyNs != 1400 || st.BusyMaxNs != 1400 {
		t.Errorf("busy [%d, %d], want exactly 1400", st.BusyNs, st.BusyMaxNs)
	}
	if d := m.Drops(); d.GPUTimesUnmeasured+d.GPUTimesLate+d.GPUTimesUnmatched != 0 {
		t.Errorf("drops %+v", d)
	}
}

// TestMeasuredStaticRuntime: launches are traced at their entry only; a
// launch cuBLASLt makes through its statically linked runtime is traced at
// the driver call inside the runtime call CUPTI reports. The collector's
// record spans CUPTI's call, entry to exit, so each measurement finds its
// own op: the entry alone (1900) would name the op before (A), as it did on
// the H200 (GPT-2's backward: measurements shifted onto their neighbours,
// the last of each run unmeasured).
func TestMeasuredStaticRuntime(t *testing.T) {
	const h = 0x5000
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{streamCreate(1, 500, h), launch(1, 1000, h, 0xa), launch(1, 2000, h, 0xb), launch(1, 3000, h, 0xc)} {
		m.Handle(&e.Event)
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 1050, APIEnd: 1300, Start: 5000, End: 6000, Kind: OpKernel}) // A: the traced call contains CUPTI's
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 1900, APIEnd: 2300, Start: 6000, End: 7000, Kind: OpKernel}) // B: CUPTI's contains the traced one
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 3050, APIEnd: 3300, Start: 7000, End: 8000, Kind: OpKernel}) // C
	e := streamSync(1, 4000, 10_000, h)
	m.Handle(&e.Event)
	p := finish(m, c)[0]
	for i, w := range [][2]uint64{{5000, 6000}, {6000, 7000}, {7000, 8000}} {
		if op := p.GPUOps[i]; !op.Measured || op.Start != w[0] || op.End != w[1] {
			t.Errorf("op %d: measured %v [%d, %d], want [%d, %d]", i, op.Measured, op.Start, op.End, w[0], w[1])
		}
	}
	if d := m.Drops(); d.GPUTimesUnmeasured+d.GPUTimesLate+d.GPUTimesUnmatched != 0 {
		t.Errorf("drops %+v", d)
	}
}

// TestMeasuredWindow: ops held for a measurement that never comes stay
// within the window; the oldest go out unmeasured, counted.
func TestMeasuredWindow(t *testing.T) {
	c := NewCollector()
	m := New(c)
	m.window = 64
	m.StartMeasuring(testPID)
	for i := range uint64(200) {
		e := timedLaunch(1, 1000+1000*i, 100, 0)
		m.Handle(&e.Event)
		s := call(event.CudaDeviceSynchronize, 1, 1500+1000*i, 200)
		m.Handle(&s.Event)
	}
	if n := len(m.procs[testPID].ops); n > 64 {
		t.Errorf("window grew to %d", n)
	}
	finish(m, c)
	if n := ops(c); n != 200 {
		t.Errorf("%d ops reached the sink, want 200", n)
	}
	if d := m.Drops(); d.GPUTimesUnmeasured != 200 || d.WindowFull != 200-64 {
		t.Errorf("unmeasured %d window full %d, want 200 and %d", d.GPUTimesUnmeasured, d.WindowFull, 200-64)
	}
}

// TestSpanUnion: the union of interleaved intervals (two threads sharing a
// stream, their measurements arriving thread by thread) is exact.
func TestSpanUnion(t *testing.T) {
	var u spanUnion
	var want uint64
	// 1000 ops of 10 ns every 15 ns; arrival order: even ones, then odd
	// ones, in chunks of 100 (two threads' flushes).
	for chunk := 0; chunk < 1000; chunk += 100 {
		for parity := 0; parity < 2; parity++ {
			for i := chunk + parity; i < chunk+100; i += 2 {
				u.add(uint64(i*15), uint64(i*15+10))
			}
		}
	}
	want = 1000 * 10
	if got := u.total(); got != want {
		t.Errorf("union %d, want %d", got, want)
	}
}

// TestMeasuredDevice: the device CUPTI reports is the op's, whatever the
// thread's current device suggested.
func TestMeasuredDevice(t *testing.T) {
	const h = 0x5000
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{streamCreate(1, 500, h), timedLaunch(1, 1000, 500, h)} {
		m.Handle(&e.Event)
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 1100, APIEnd: 1400, Start: 1500, End: 2500, Device: 1})
	p := finish(m, c)[0]
	if op := p.GPUOps[0]; op.Device != 1 || p.Devices&DeviceBitsOf(1) == 0 {
		t.Errorf("op on device %d, process devices %b: want device 1", op.Device, p.Devices)
	}
}

// TestMeasuredHandOver: while the collector has let CUPTI go to another
// client, ops are not held (they are laid out within their bounds); those
// held at the hand-over go out then (every record before it came); once
// it takes CUPTI back, ops enqueued since are measured again, and the time
// away is kept for the trace.
func TestMeasuredHandOver(t *testing.T) {
	const h = 0x5000
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{streamCreate(1, 500, h), timedLaunch(1, 1000, 500, h), timedLaunch(1, 2000, 500, h),
		streamSync(1, 3000, 1000, h)} {
		m.Handle(&e.Event)
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 1100, APIEnd: 1400, Start: 1500, End: 2500})
	m.HandedOver(testPID, 4500) // the second launch's record was lost (in flight at the hand-over)
	if n := ops(c); n != 2 {
		t.Fatalf("%d ops in the sink after the hand-over, want both", n)
	}
	for _, e := range []*ev{timedLaunch(1, 5000, 500, h), streamSync(1, 6000, 1000, h)} {
		m.Handle(&e.Event)
	}
	if n := ops(c); n != 3 {
		t.Fatalf("%d ops in the sink, want the one enqueued while CUPTI was away too", n)
	}
	// A launch made before the collector took CUPTI back, and one after.
	for _, e := range []*ev{timedLaunch(1, 8000, 500, h), timedLaunch(1, 9000, 500, h)} {
		m.Handle(&e.Event)
	}
	m.StartMeasuringSince(testPID, 8600)
	for _, e := range []*ev{streamSync(1, 10_000, 1000, h)} {
		m.Handle(&e.Event)
	}
	if n := ops(c); n != 4 {
		t.Fatalf("%d ops in the sink, want the one before the take-back released, the one after held", n)
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 9100, APIEnd: 9400, Start: 9500, End: 10_500})
	p := finish(m, c)[0]
	measured := []bool{true, false, false, false, true}
	for i, w := range measured {
		if p.GPUOps[i].Measured != w {
			t.Errorf("op %d measured %v, want %v", i, p.GPUOps[i].Measured, w)
		}
	}
	if want := []Interval{{4500, 8600}}; !slices.Equal(p.CUPTIAway, want) {
		t.Errorf("CUPTI away %v, want %v", p.CUPTIAway, want)
	}
	if d := m.Drops(); d.GPUTimesUnmatched+d.GPUTimesLate != 0 || d.GPUTimesUnmeasured != 3 {
		t.Errorf("drops %+v: want the ops drawn bounded counted unmeasured (3), nothing else", d)
	}
}

// TestNotMeasured: a process whose collector could not start is not marked
// measured, and the ops held for it go out uncounted.
func TestNotMeasured(t *testing.T) {
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{timedLaunch(1, 1000, 500, 0), call(event.CudaDeviceSynchronize, 1, 2000, 200)} {
		m.Handle(&e.Event)
	}
	if n := ops(c); n != 0 {
		t.Fatalf("%d ops in the sink before the collector's word, want 0", n)
	}
	m.NotMeasured(testPID)
	p := finish(m, c)[0]
	if n := ops(c); n != 1 || p.Measured || m.Drops().GPUTimesUnmeasured != 0 {
		t.Errorf("%d ops, measured %v, unmeasured %d: want 1 op out, not measured, none counted", n, p.Measured, m.Drops().GPUTimesUnmeasured)
	}
}

// TestMeasuredCUPTIOnly: the H200's autograd thread, where cuBLASLt's
// statically linked runtime memsets through a driver call cudatap does not
// hook (a runtime is present) before the kernels it launches. The memset's
// record, under a runtime call CUPTI reports, finds the thread's last traced
// op, a kernel: it never measures it (the old join counted 202 such records
// "late" and 236 "second measurements" on GPT-2-small b8). Each becomes an
// op of its own, measured, on the stream CUPTI ran it on (learnt from the
// kernels joined there; a record that comes before the model knows that
// stream waits), so the stream's ops and busy time are the profiler's.
func TestMeasuredCUPTIOnly(t *testing.T) {
	const h = 0x5000
	const cs = 8 // CUPTI's id of stream h, plus one
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	// Thread 2: kernel A, memset M1 (untraced), kernel B, memset M2
	// (untraced) then memset M3 (untraced: its record comes after M2's
	// measured nothing), kernel C.
	for _, e := range []*ev{streamCreate(2, 500, h), cuLaunch(2, 1000, h, 0xa), cuLaunch(2, 2000, h, 0xb), cuLaunch(2, 4000, h, 0xc)} {
		m.Handle(&e.Event)
	}
	kernel := func(at, start, end uint64) *Measurement {
		return &Measurement{TID: 2, APIStart: at - 50, APIEnd: at + 200, Start: start, End: end, Kind: OpKernel, CUPTIStream: cs}
	}
	memset := func(at, start, end uint64) *Measurement {
		return &Measurement{TID: 2, APIStart: at, APIEnd: at + 300, Start: start, End: end, Kind: OpMemset, Bytes: 4096, CUPTIStream: cs}
	}
	// M1's record comes first: the model does not know CUPTI's stream 7
	// yet, so it waits; A's teaches it.
	m.Measure(testPID, memset(1500, 10_500, 10_600))
	m.Measure(testPID, kernel(1000, 10_000, 10_500))
	m.Measure(testPID, kernel(2000, 10_600, 11_000))
	m.Measure(testPID, memset(3000, 11_000, 11_100))
	m.Measure(testPID, memset(3500, 11_100, 11_200))
	e := streamSync(2, 5000, 10_000, h)
	m.Handle(&e.Event)
	m.Measure(testPID, kernel(4000, 11_200, 12_000)) // C, after the sync: still awaited
	p := finish(m, c)[0]

	var kernels, memsets []GPUOp
	for _, op := range p.GPUOps {
		switch {
		case op.ID < 0:
		case op.Kind == OpKernel && !op.CUPTIOnly():
			kernels = append(kernels, op)
		case op.Kind == OpMemset && op.CUPTIOnly() && op.Stream == p.GPUOps[0].Stream:
			memsets = append(memsets, op)
		default:
			t.Errorf("op %d: %v on stream %d, CUPTI only %v", op.ID, op.Kind, op.Stream, op.CUPTIOnly())
		}
	}
	for i, w := range [][2]uint64{{10_000, 10_500}, {10_600, 11_000}, {11_200, 12_000}} {
		if i >= len(kernels) || !kernels[i].Measured || kernels[i].Start != w[0] || kernels[i].End != w[1] {
			t.Errorf("kernel %d: %+v, want measured [%d, %d]", i, kernels[min(i, len(kernels)-1)], w[0], w[1])
		}
	}
	slices.SortFunc(memsets, func(a, b GPUOp) int { return int(a.Start) - int(b.Start) })
	for i, w := range [][3]uint64{{1500, 10_500, 10_600}, {3000, 11_000, 11_100}, {3500, 11_100, 11_200}} {
		if i >= len(memsets) || memsets[i].Enqueued != w[0] || memsets[i].Start != w[1] || memsets[i].End != w[2] || memsets[i].Bytes != 4096 || memsets[i].TID != 2 {
			t.Errorf("memset %d: %+v, want enqueued %d, [%d, %d], 4096 bytes, thread 2", i, memsets[min(i, len(memsets)-1)], w[0], w[1], w[2])
		}
	}
	st := p.Streams[kernels[0].Stream].Stats
	if st.GPUOps != 6 || st.CUPTIOnly != 3 || st.Measured != 6 || st.BusyNs != 2000 || st.BusyMaxNs != st.BusyNs {
		t.Errorf("stream: %d ops (%d CUPTI only, %d measured), busy [%d, %d]: want 6 (3), 6, exactly 2000", st.GPUOps, st.CUPTIOnly, st.Measured, st.BusyNs, st.BusyMaxNs)
	}
	if d := m.Drops(); d.GPUTimesUnmatched+d.GPUTimesLate+d.GPUTimesUnmeasured != 0 || d.GPUOpsCUPTIOnly != 3 {
		t.Errorf("unmatched %d late %d unmeasured %d CUPTI only %d, want 0 0 0 3", d.GPUTimesUnmatched, d.GPUTimesLate, d.GPUTimesUnmeasured, d.GPUOpsCUPTIOnly)
	}
}

// TestMeasuredFit: a record measures only an op of its kind, size and
// stream that has no measurement yet; any other is another call's, shown
// on its own stream; one whose stream the model never learns is counted
// unmatched at the end, never guessed.
func TestMeasuredFit(t *testing.T) {
	const h1, h2 = 0x5000, 0x6000
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{streamCreate(1, 100, h1), streamCreate(1, 200, h2),
		memsetAsync(1, 1000, 0x10, 256, h1), // op 0 on h1
		memsetAsync(1, 2000, 0x10, 512, h2), // op 1 on h2
		launch(1, 3000, h1, 0xa),            // op 2 on h1
	} {
		m.Handle(&e.Event)
	}
	rec := func(kind OpKind, at, bytes uint64, cs uint32, start uint64) *Measurement {
		return &Measurement{TID: 1, APIStart: at + 10, APIEnd: at + 100, Start: start, End: start + 50, Kind: kind, Bytes: bytes, CUPTIStream: cs}
	}
	m.Measure(testPID, rec(OpMemset, 1000, 256, 1, 5000)) // op 0: h1 is CUPTI's 1
	m.Measure(testPID, rec(OpMemset, 2000, 512, 2, 5100)) // op 1: h2 is CUPTI's 2
	m.Measure(testPID, rec(OpMemset, 2000, 512, 2, 5200)) // op 1 again: a second memset, on h2
	m.Measure(testPID, rec(OpMemset, 2000, 128, 2, 5300)) // op 1's size differs: another memset, on h2
	m.Measure(testPID, rec(OpKernel, 3000, 0, 2, 5400))   // op 2 is on h1, CUPTI ran this on h2: another kernel, on h2
	m.Measure(testPID, rec(OpKernel, 3000, 0, 1, 5500))   // op 2's own
	m.Measure(testPID, rec(OpMemcpy, 3000, 64, 9, 5600))  // a copy on a stream the model never learns
	e := deviceSync(1, 4000, 10_000)
	m.Handle(&e.Event)
	p := finish(m, c)[0]
	want := map[[3]int]int{} // stream, kind, CUPTI only → ops
	got := map[[3]int]int{}
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	s1, s2 := p.GPUOps[0].Stream, p.GPUOps[1].Stream
	want[[3]int{s1, int(OpMemset), 0}] = 1
	want[[3]int{s2, int(OpMemset), 0}] = 1
	want[[3]int{s1, int(OpKernel), 0}] = 1
	want[[3]int{s2, int(OpMemset), 1}] = 2
	want[[3]int{s2, int(OpKernel), 1}] = 1
	for _, op := range p.GPUOps {
		if op.ID >= 0 {
			if !op.Measured {
				t.Errorf("op %d not measured", op.ID)
			}
			got[[3]int{op.Stream, int(op.Kind), b(op.CUPTIOnly())}]++
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("ops by stream, kind, CUPTI only: %v, want %v", got, want)
	}
	if op := p.GPUOps[2]; op.Start != 5500 {
		t.Errorf("the launch measured at %d, want its own record's 5500", op.Start)
	}
	if d := m.Drops(); d.GPUTimesUnmatched != 1 || d.GPUTimesLate+d.GPUTimesUnmeasured != 0 || d.GPUOpsCUPTIOnly != 3 {
		t.Errorf("unmatched %d late %d unmeasured %d CUPTI only %d, want 1 0 0 3", d.GPUTimesUnmatched, d.GPUTimesLate, d.GPUTimesUnmeasured, d.GPUOpsCUPTIOnly)
	}
}

// TestMeasuredAfterGone: a record that comes after its thread's last op by
// its call's end went to the sink measured is another call's (CUPTI alone
// saw its op), not a late one; one whose op went out unmeasured is late.
func TestMeasuredAfterGone(t *testing.T) {
	const h = 0x5000
	c := NewCollector()
	m := New(c)
	m.window = 64
	m.StartMeasuring(testPID)
	for _, e := range []*ev{streamCreate(1, 100, h), launch(1, 1000, h, 0xa)} {
		m.Handle(&e.Event)
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 990, APIEnd: 1100, Start: 2000, End: 2100, Kind: OpKernel, CUPTIStream: 3})
	for _, e := range []*ev{streamSync(1, 1200, 2000, h), launch(1, 4000, h, 0xb)} {
		m.Handle(&e.Event)
	}
	// A memset CUPTI saw under a call after the kernel A, which went out
	// measured: CUPTI only.
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 1500, APIEnd: 1600, Start: 2100, End: 2200, Kind: OpMemset, CUPTIStream: 3})
	// Push B out of the window unmeasured, then its record: late.
	for i := range uint64(70) {
		e := launch(1, 5000+100*i, h, 0xc)
		m.Handle(&e.Event)
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 3990, APIEnd: 4100, Start: 6000, End: 6100, Kind: OpKernel, CUPTIStream: 3})
	p := finish(m, c)[0]
	n := 0
	for _, op := range p.GPUOps {
		if op.ID >= 0 && op.CUPTIOnly() {
			n++
			if op.Kind != OpMemset || op.Start != 2100 {
				t.Errorf("CUPTI-only op %+v, want the memset at 2100", op)
			}
		}
	}
	if d := m.Drops(); n != 1 || d.GPUOpsCUPTIOnly != 1 || d.GPUTimesLate != 1 || d.GPUTimesUnmatched != 0 {
		t.Errorf("%d CUPTI-only ops; CUPTI only %d late %d unmatched %d, want 1, 1 1 0", n, d.GPUOpsCUPTIOnly, d.GPUTimesLate, d.GPUTimesUnmatched)
	}
}
