package model

import (
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
