package tracer

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"runtime"

	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/resolve"
	"github.com/cudatap/cudatap/tracer/targets"
)

// realRecords traces the simulated workload for real (uprobes, ring
// buffer) and returns its raw event records exactly as the BPF side wrote
// them, read back from the recording.
func realRecords(tb testing.TB) [][]byte {
	testutil.RequireRoot(tb)
	b := testutil.Sim(tb)
	var rec bytes.Buffer
	_, err := Run(context.Background(), Config{Command: []string{b.Workload, "--scenario", "basic", "--iters", "300", "--streams", "4"},
		Stacks: probe.StacksNone, Recording: &rec, Stdout: io.Discard, NVMLInterval: -1, Duration: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	raws := eventRecords(tb, rec.Bytes())
	if len(raws) < 1000 {
		tb.Fatalf("only %d records", len(raws))
	}
	return raws
}

// eventRecords walks a recording and returns its event records.
func eventRecords(tb testing.TB, file []byte) [][]byte {
	off := 16 + int(binary.LittleEndian.Uint32(file[12:]))
	var out [][]byte
	for off < len(file) {
		typ := file[off]
		n, k := binary.Uvarint(file[off+1:])
		if k <= 0 {
			tb.Fatalf("bad record at %d", off)
		}
		body := file[off+1+k : off+1+k+int(n)]
		off += 1 + k + int(n)
		if typ == 1 {
			var ev event.Event
			if event.Decode(body, &ev) == nil && ev.API() != event.LibraryLoad {
				out = append(out, body)
			}
		}
	}
	return out
}

// readerOnly is a session with its reader stage and nothing else: no BPF,
// no targets. Records are fed to handleRecord as the ring buffer would.
func readerOnly(tb testing.TB, rec io.Writer, sink model.Sink) *Session {
	cache := objfile.NewCache(64)
	s := &Session{cfg: Config{}, log: slog.New(slog.DiscardHandler), cache: cache,
		targets: targets.New(targets.Config{}, nil, nil, cache, nil)}
	var names resolve.NameWriter
	if rec != nil {
		w, err := recording.NewWriter(rec, recording.NewHeader("bench", 0))
		if err != nil {
			tb.Fatal(err)
		}
		s.rec, names = w, w
	}
	s.model = model.New(sink)
	s.resolver = resolve.New(s.targets, names, nil, s.log)
	return s
}

// shift returns copies of raws whose timestamps move forward by the
// recording's span per round, so that a replayed loop looks like time
// going on. Stream and event creations and destructions are left out: a
// real program makes them once, not every round.
func shift(raws [][]byte, round uint64) [][]byte {
	var first, last uint64
	var ev event.Event
	for _, r := range raws {
		event.Decode(r, &ev)
		if first == 0 || ev.Start < first {
			first = ev.Start
		}
		last = max(last, ev.Start, ev.End)
	}
	span := last - first + 1
	var out [][]byte
	for _, r := range raws {
		event.Decode(r, &ev)
		switch ev.Spec().Class {
		case event.ClassStreamCreate, event.ClassStreamDestroy, event.ClassEventCreate, event.ClassEventDestroy:
			continue
		}
		ev.Start += round * span
		if ev.End != 0 {
			ev.End += round * span
		}
		out = append(out, event.Encode(nil, &ev))
	}
	return out
}

// BenchmarkConsumer is the reader stage on its own core: real ring-buffer
// records (from the simulated workload, traced for real) through decode →
// model → names → recording write to a file, without the producer
// competing for the CPU. DecodeOnly, in the same run, is the baseline.
// Reports events/s.
func BenchmarkConsumer(b *testing.B) {
	raws := realRecords(b)
	b.Run("DecodeOnly", func(b *testing.B) {
		var ev event.Event
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			event.Decode(raws[i%len(raws)], &ev)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("Pipeline", func(b *testing.B) {
		f, err := os.CreateTemp(b.TempDir(), "bench-*.cudatap")
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		s := readerOnly(b, f, nil)
		for _, r := range raws { // names resolved once, as in a long run
			s.handleRecord(r)
		}
		loop := shift(raws, 1)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			s.handleRecord(loop[i%len(loop)])
		}
		b.StopTimer()
		if err := s.rec.Close(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

// heapAfterGC is the live heap in bytes.
func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestReaderMemoryBounded feeds 2.4 M real records through the reader
// stage, with a recording written to a file and the export aggregates as
// sink, and checks that the live heap after 0.4 M events and after 2.4 M
// is the same within a fixed bound: memory does not grow with events.
func TestReaderMemoryBounded(t *testing.T) {
	raws := realRecords(t)
	f, err := os.CreateTemp(t.TempDir(), "mem-*.cudatap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	col := &countingSink{}
	s := readerOnly(t, f, col)
	const total, warm = 2_400_000, 400_000
	var at int64
	round := uint64(0)
	batch := raws
	for n := 0; n < total; {
		for _, r := range batch {
			s.handleRecord(r)
		}
		n += len(batch)
		round++
		batch = shift(raws, round)
		if at == 0 && n >= warm {
			at = int64(heapAfterGC())
		}
	}
	end := int64(heapAfterGC())
	r := s.model.Finish()
	if col.calls < total {
		t.Fatalf("%d calls reached the sink, want at least %d", col.calls, total)
	}
	if r.Drops.WindowFull != 0 {
		t.Logf("%d ops laid out early (window full)", r.Drops.WindowFull)
	}
	// The recording's 1 MiB buffer, the model's per-stream state and name
	// tables: a few MiB whatever the length. 760 bytes per event (the old
	// design) would be 1.5 GB here.
	const bound = 8 << 20
	if grew := end - at; grew > bound {
		t.Errorf("heap grew %d bytes from %d to %d events (%.1f bytes/event), want under %d", grew, warm, total,
			float64(grew)/float64(total-warm), bound)
	}
	if end > 64<<20 {
		t.Errorf("heap %d bytes after %d events, want under 64 MiB", end, total)
	}
}

// countingSink counts what the model concludes and keeps nothing.
type countingSink struct{ calls, syncs, ops int }

func (c *countingSink) Call(*model.Process, *model.Call)             { c.calls++ }
func (c *countingSink) Sync(*model.Process, *model.Sync)             { c.syncs++ }
func (c *countingSink) GPUOp(*model.Process, *model.GPUOp)           { c.ops++ }
func (c *countingSink) Dependency(*model.Process, *model.Dependency) {}
func (c *countingSink) Hold(*model.Process, *model.Hold)             {}
