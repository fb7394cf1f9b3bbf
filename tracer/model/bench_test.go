package model

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// benchCycle is one period of a realistic training-loop mix, from one
// process and two threads: ~70% kernel launches, async copies (mostly
// pinned), event record/wait between a compute and a copy stream, and a
// stream synchronization closing every step. Every stream is drained at the
// end of a cycle, so cycles can be repeated with shifted timestamps.
func benchCycle() (evs []event.Event, span uint64) {
	const (
		compute = stream
		copyS   = nbStrm
		steps   = 64
	)
	now := uint64(1_000_000)
	add := func(e *ev) {
		evs = append(evs, e.Event)
		now = max(e.Start, e.End) + 2*us
	}
	kernels := []uint64{0x401000, 0x401100, 0x401200, 0x401300, 0x401400, 0x401500, 0x401600, 0x401700}
	for s := 0; s < steps; s++ {
		// Host-to-device input on the copy stream, then the compute stream waits for it.
		add(memcpyAsync(2, now, 5*us, devA, hostP, 1<<20, event.HostToDevice, copyS))
		add(eventRecord(2, now, 0xe1, copyS))
		add(streamWait(1, now, compute, 0xe1))
		for k := 0; k < 19; k++ {
			add(launch(1, now, compute, kernels[k%len(kernels)]))
		}
		add(memsetAsync(1, now, devB, 4096, compute))
		add(eventRecord(1, now, 0xe2, compute))
		add(streamWait(2, now, copyS, 0xe2))
		add(memcpyAsync(2, now, 5*us, hostP+4096, devB, 4096, event.DeviceToHost, copyS))
		add(streamSync(1, now, 300*us, compute))
		if s%8 == 7 {
			add(streamSync(2, now, 60*us, copyS))
		}
	}
	add(deviceSync(1, now, 100*us))
	return evs, now
}

// benchSetup is what a session has seen before the loop: streams, events,
// pinned and device memory.
func benchSetup(m *Model) {
	for _, e := range []*ev{
		streamCreate(1, 100, stream),
		streamCreateFlags(1, 200, nbStrm, 1),
		eventCreate(1, 300, 0xe1),
		eventCreate(1, 400, 0xe2),
		hostAlloc(1, 500, hostP, 1<<24),
		malloc(1, 600, us, devA, 1<<28),
		malloc(1, 700, us, devB, 1<<28),
	} {
		m.Handle(&e.Event)
	}
}

// warmup events run untimed first: the time to fault in the model's
// fresh pages (about 14 µs a page on the CI VMs, well under 1 µs on bare
// metal) is the machine's, not the model's. The model keeps no calls, so
// one model serves any b.N with flat memory.
const warmup = 1 << 16

// runBench times handle over b.N events.
func runBench(b *testing.B, handle func(m *Model, i int)) {
	m := New(nil)
	benchSetup(m)
	for i := 0; i < warmup; i++ {
		handle(m, i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		handle(m, warmup+i)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkModelHandle(b *testing.B) {
	cycle, span := benchCycle()
	var e event.Event
	runBench(b, func(m *Model, i int) {
		e = cycle[i%len(cycle)]
		off := uint64(i/len(cycle)) * span
		e.Start += off
		if e.End != 0 {
			e.End += off
		}
		m.Handle(&e)
	})
}

// BenchmarkDecodeAndModel is the tracer's per-record work: decode a raw
// ring-buffer record, then model it.
func BenchmarkDecodeAndModel(b *testing.B) {
	cycle, span := benchCycle()
	raw := make([][]byte, len(cycle))
	for i := range cycle {
		raw[i] = event.Encode(nil, &cycle[i])
	}
	var e event.Event
	runBench(b, func(m *Model, i int) {
		if err := event.Decode(raw[i%len(raw)], &e); err != nil {
			b.Fatal(err)
		}
		off := uint64(i/len(raw)) * span
		e.Start += off
		if e.End != 0 {
			e.End += off
		}
		m.Handle(&e)
	})
}

// TestBenchCycleIsRealistic keeps the benchmark honest: the mix is what the
// comment says and the model sees it as a training loop.
func TestBenchCycleIsRealistic(t *testing.T) {
	cycle, span := benchCycle()
	col := NewCollector()
	m := New(col)
	benchSetup(m)
	for c := uint64(0); c < 3; c++ {
		for _, e := range cycle {
			e.Start += c * span
			if e.End != 0 {
				e.End += c * span
			}
			m.Handle(&e)
		}
	}
	r := m.Finish()
	p := &traced{Process: r.Processes[0], Trace: *col.Traces[testPID]}
	launches := 0
	for _, c := range p.Calls {
		if c.API == event.CudaLaunchKernel {
			launches++
		}
	}
	if frac := float64(launches) / float64(len(p.Calls)); frac < 0.65 || frac > 0.75 {
		t.Errorf("%.2f of the calls are launches", frac)
	}
	for i, op := range p.GPUOps {
		if !op.Bounded {
			t.Fatalf("op %d not bounded: a cycle must drain every stream", i)
		}
	}
	// Only explicit syncs: pinned copies, blocking streams that never meet the legacy one.
	for _, s := range p.Syncs {
		if !s.Kind.Explicit() {
			t.Fatalf("implicit sync %v in the benchmark mix", s.Kind)
		}
	}
	if len(p.Deps) != 3*64*2 {
		t.Errorf("%d dependencies, want %d", len(p.Deps), 3*64*2)
	}
	checkLayout(t, 0, p)
}
