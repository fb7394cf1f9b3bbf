package tracer

import (
	"context"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/replay"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkFlood is the whole pipeline under a launch flood, for real: T
// threads (CUDATAP_FLOOD_THREADS, default 8) make CUDATAP_FLOOD_LAUNCHES
// launches each (default 250,000), as fast as they can or at
// CUDATAP_FLOOD_RATE launches/s per thread, while cudatap, attached, records them to
// a file with the default ring buffer. Reports events/s offered (made by
// the workload), recorded and dropped (ring buffer full), and cudatap's
// peak RSS. On a 2-core VM the producer and the consumer share the CPUs;
// the consumer alone is BenchmarkConsumer.
//
// With CUDATAP_SOAK=10m it floods for that long instead (endless launches)
// and reports the RSS at the start and the end of the soak.
func BenchmarkFlood(b *testing.B) {
	testutil.RequireRoot(b)
	bin := testutil.Sim(b).Flood
	threads := envInt("CUDATAP_FLOOD_THREADS", 8)
	launches := envInt("CUDATAP_FLOOD_LAUNCHES", 250_000)
	rate := envInt("CUDATAP_FLOOD_RATE", 0) // launches/s per thread, 0: as fast as possible
	soak, _ := time.ParseDuration(os.Getenv("CUDATAP_SOAK"))
	if soak > 0 {
		launches = 0
	}
	for i := 0; i < b.N; i++ {
		w := startWaiter(b, bin, strconv.Itoa(threads), strconv.Itoa(launches), strconv.Itoa(rate))
		rec, err := os.CreateTemp(b.TempDir(), "flood-*.cudatap")
		if err != nil {
			b.Fatal(err)
		}
		// A soak writes tens of GB: records go to the writer all the same,
		// but not to the disk.
		var sink io.Writer = rec
		if soak > 0 {
			sink = discard{}
		}
		attached := make(chan struct{})
		var peak, startRSS atomic.Int64
		done := make(chan struct{})
		go func() { // cudatap's RSS, once a second and at the end
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				rss := procfs.RSS(os.Getpid())
				if rss > peak.Load() {
					peak.Store(rss)
				}
				select {
				case <-done:
					return
				case <-t.C:
				}
			}
		}()
		type result struct {
			out *Outcome
			err error
		}
		res := make(chan result, 1)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			out, err := Run(ctx, Config{PIDs: []int{w.pid()}, Stacks: probe.StacksNone, NVMLInterval: -1,
				Recording: sink, NameWindow: -1, Observer: Funcs{OnAttached: func(int) { close(attached) }}})
			res <- result{out, err}
		}()
		<-attached
		start := time.Now()
		w.start()
		if soak > 0 {
			runtime.GC()
			startRSS.Store(procfs.RSS(os.Getpid()))
			time.Sleep(soak) // a benchmark's duration, not a synchronisation
		}
		out := w.result(b) // ends an endless flood
		elapsed := time.Since(start)
		cancel()
		r := <-res
		close(done)
		if r.err != nil {
			b.Fatal(r.err)
		}
		made, err := strconv.ParseFloat(out, 64)
		if err != nil {
			b.Fatalf("flood output %q", out)
		}
		d := r.out.Result.Drops
		calls := float64(r.out.Result.Processes[0].NCalls)
		sec := elapsed.Seconds()
		b.ReportMetric(made/sec, "offered/s")
		b.ReportMetric(calls/sec, "recorded/s")
		b.ReportMetric(float64(d.RingbufFull)/sec, "dropped/s")
		b.ReportMetric(float64(d.Lost()), "lost")
		b.ReportMetric(float64(peak.Load())/(1<<20), "peakRSS_MB")
		if soak > 0 {
			b.ReportMetric(float64(startRSS.Load())/(1<<20), "startRSS_MB")
		}
		// Baseline, same run: the recording read back through decode and
		// the model alone (no ring buffer, no names, no writing).
		if soak > 0 {
			rec.Close()
			continue
		}
		if _, err := rec.Seek(0, io.SeekStart); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		m := model.New(nil)
		if _, err := replay.ReadEvents(rec, m, nil); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(m.Calls())/time.Since(t0).Seconds(), "replay/s")
		rec.Close()
	}
}
