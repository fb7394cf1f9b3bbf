package model

import (
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
// wait for their measurement, or for a mark MeasureSlack after they were proven done; late,
// unmatched and unmeasured ones are counted; busy time is exact where
// every op was measured and bounded where not.
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
	m.MeasuredUntil(testPID, MeasureSlack+13_000)                                            // not a slack past the sync
	if n := ops(c); n != 2 {
		t.Fatalf("the first mark released %d ops, want none", n-2)
	}
	m.MeasuredUntil(testPID, MeasureSlack+14_000)
	if n := ops(c); n != 2 {
		t.Fatalf("the second mark released %d ops, want none", n-2)
	}
	m.MeasuredUntil(testPID, MeasureSlack+14_001)
	if n := ops(c); n != 3 {
		t.Fatalf("%d ops in the sink after the second mark, want 3", n)
	}
	m.Measure(testPID, &Measurement{TID: 1, APIStart: 3100, APIEnd: 3400, Start: 7000, End: 8000}) // too late
	p := finish(m, c)[0]

	want := [][2]uint64{{4100, 5000}, {5000, 7000}}
	for i, w := range want {
		op := p.GPUOps[i]
		if !op.Measured || op.Start != w[0] || op.End != w[1] {
			t.Errorf("op %d: measured %v [%d, %d], want CUPTI's [%d, %d]", i, op.Measured, op.Start, op.End, w[0], w[1])
		}
	}
	if op := p.GPUOps[2]; op.Measured || !op.Bounded || op.End > 14_000 {
		t.Errorf("unmeasured op: %+v, want bounded by the sync", op)
	}
	got := m.Drops()
	if got.GPUTimesUnmatched != 3 || got.GPUTimesLate != 1 || got.GPUTimesUnmeasured != 1 {
		t.Errorf("unmatched %d late %d unmeasured %d, want 3 1 1", got.GPUTimesUnmatched, got.GPUTimesLate, got.GPUTimesUnmeasured)
	}
	st := p.Streams[1].Stats
	if st.Measured != 2 || st.BusyNs != 2900 || st.BusyMaxNs < st.BusyNs {
		t.Errorf("stream: measured %d busy [%d, %d], want 2 ops, [2900, ≥2900]", st.Measured, st.BusyNs, st.BusyMaxNs)
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
