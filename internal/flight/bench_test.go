package flight

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/probe"
)

// flood is the simulated load generator (sim's flood: THREADS threads
// launching as fast as they can, or at RATE each, until stdin closes),
// started and held until go.
type flood struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startFlood(tb testing.TB, bin string, threads, n, rate int) *flood {
	tb.Helper()
	cmd := exec.Command(bin, strconv.Itoa(threads), strconv.Itoa(n), strconv.Itoa(rate))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	f := &flood{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	if l, _ := f.out.ReadString('\n'); !strings.HasPrefix(l, "ready") {
		tb.Fatalf("flood: %q", l)
	}
	return f
}

// made is what the flood says it made, once it ended (stdin closed).
func (f *flood) made(tb testing.TB) int {
	tb.Helper()
	out, _ := io.ReadAll(f.out)
	f.cmd.Wait()
	n := 0
	for _, w := range strings.Fields(string(out)) {
		if k, err := strconv.Atoi(w); err == nil {
			n += k
		}
	}
	return n
}

// traceFlood attaches a session to the flood whose records go to rec (a
// file, or the recorder) and calls to sink, lets it run for d (0: until it
// made its launches), and returns when the session ended.
func traceFlood(tb testing.TB, f *flood, rec io.Writer, r *Recorder, d time.Duration, during func()) *tracer.Outcome {
	tb.Helper()
	attached := make(chan struct{})
	done := make(chan struct{})
	var out *tracer.Outcome
	var err error
	cfg := tracer.Config{PIDs: []int{f.cmd.Process.Pid}, Stacks: probe.StacksSync, NVMLInterval: -1, NameWindow: -1, Recording: rec,
		Observer: tracer.Funcs{OnAttached: func(int) { close(attached) }}}
	if r != nil {
		cfg.Sink = r
	}
	go func() {
		defer close(done)
		out, err = tracer.Run(context.Background(), cfg)
	}()
	<-attached
	io.WriteString(f.stdin, "go\n")
	if d > 0 {
		if during != nil {
			during()
		} else {
			time.Sleep(d)
		}
		f.stdin.Close() // it stops; the session ends once it exited
	}
	<-done
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestFloodBound: a process that launches 100,000 kernels as fast as it
// can into a 256 KiB budget. Every launch read is held, dropped for want
// of room (the oldest first) or expired; what the recorder holds stays
// within the budget throughout (checked at every record by the recorder's
// own accounting, read here at the end and in the dump); the dump says how
// many of the window's launches it lost.
func TestFloodBound(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	const budget = 256 << 10
	r := newRecorder(t, Options{MaxBytes: budget, NoReport: true, NoExitWatch: true})
	f := startFlood(t, b.Flood, 1, 100_000, 0)
	var peak int64
	r.onRecord = func(s *proc) { // the bound at every record
		peak = max(peak, int64(s.window.bytes+s.stBytes[0]+s.stBytes[1]+s.names.bytes))
	}
	traceFlood(t, f, r, r, 0, nil)
	made := f.made(t)
	st := r.Stats()
	var ps ProcStat
	for _, p := range st.PerProcess {
		ps = p
	}
	// The stream it made, its launches; the runtime's driver calls
	// underneath are not hooked (the runtime covers them).
	if ps.Read < uint64(made) || ps.Held+ps.Dropped+ps.Expired != ps.Read {
		t.Errorf("the flood made %d launches; read %d = held %d + dropped %d + expired %d", made, ps.Read, ps.Held, ps.Dropped, ps.Expired)
	}
	if ps.Dropped < uint64(made)/2 || st.Dropped != ps.Dropped {
		t.Errorf("dropped %d (all processes %d) of %d", ps.Dropped, st.Dropped, made)
	}
	if limit := int64(budget + r.chunkSize); peak > limit || peak == 0 {
		t.Errorf("held up to %d bytes, budget %d (+ the chunk being filled: %d)", peak, budget, limit)
	}
	res, err := r.Dump(context.Background(), nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	if res.Dropped != ps.Dropped || res.Events != ps.Held {
		t.Errorf("dump %+v, recorder %+v", res, ps)
	}
	t.Logf("%d launches made, %d read: %d held (%d bytes), %d dropped; peak %d bytes held of %d", made, ps.Read, ps.Held, ps.WindowBytes, ps.Dropped, peak, budget)
}

// BenchmarkFlightCost: the flight recorder's cost against record's, in
// the same run: a process launching CUDATAP_FLIGHT_RATE kernels a second
// (default 20,000; one thread) is traced CUDATAP_FLIGHT_ROUNDS times
// (default 2) each way for CUDATAP_FLIGHT_SECONDS (default 10), the ways
// interleaved: a session recording to a file (record -o x.cudatap), and
// one feeding the flight recorder (30 s window, the default 32 MiB
// budget). It reports cudatap's CPU as a share of one core each way, their
// ratio, and the peak RSS (the recorder's runs last: theirs includes
// record's).
//
// With CUDATAP_FLIGHT_SOAK=2m it runs the recorder alone that long and
// reports the bytes it holds and the process's RSS at 10 s and at the end
// (the bound: flat).
//
//	go test -run '^$' -bench FlightCost -benchtime 1x ./internal/flight/
func BenchmarkFlightCost(b *testing.B) {
	testutil.RequireRoot(b)
	bin := testutil.Sim(b).Flood
	rate := envInt("CUDATAP_FLIGHT_RATE", 20_000)
	secs := envInt("CUDATAP_FLIGHT_SECONDS", 10)
	rounds := envInt("CUDATAP_FLIGHT_ROUNDS", 2)
	if soak, _ := time.ParseDuration(os.Getenv("CUDATAP_FLIGHT_SOAK")); soak > 0 {
		flightSoak(b, bin, rate, soak)
		return
	}
	for range b.N {
		var cpu [2]time.Duration
		var wall [2]time.Duration
		var made [2]int
		for round := range rounds {
			for way := range 2 {
				f := startFlood(b, bin, 1, 0, rate)
				var rec io.Writer
				var r *Recorder
				if way == 0 {
					file, err := os.CreateTemp(b.TempDir(), "record-*.cudatap")
					if err != nil {
						b.Fatal(err)
					}
					defer file.Close()
					rec = file
				} else {
					r = newRecorder(b, Options{Window: 30 * time.Second, Dir: b.TempDir(), NoReport: true})
					rec = r
				}
				c0, t0 := cpuTime(), time.Now()
				traceFlood(b, f, rec, r, time.Duration(secs)*time.Second, nil)
				cpu[way] += cpuTime() - c0
				wall[way] += time.Since(t0)
				made[way] += f.made(b)
				if r != nil {
					r.Close()
				}
				b.Logf("round %d, %s: %d launches", round, [2]string{"record", "flight"}[way], made[way])
			}
		}
		share := func(i int) float64 { return 100 * cpu[i].Seconds() / wall[i].Seconds() }
		b.ReportMetric(share(0), "record_cpu%_of_core")
		b.ReportMetric(share(1), "flight_cpu%_of_core")
		b.ReportMetric(share(1)/share(0), "flight/record")
		b.ReportMetric(float64(procfs.RSS(os.Getpid()))/(1<<20), "rss_MB")
		b.Logf("record: %d launches, %v CPU in %v; flight: %d launches, %v CPU in %v", made[0], cpu[0], wall[0], made[1], cpu[1], wall[1])
	}
}

// flightSoak floods the recorder alone for d and reports what it holds.
func flightSoak(b *testing.B, bin string, rate int, d time.Duration) {
	r := newRecorder(b, Options{Window: 30 * time.Second, Dir: b.TempDir(), NoReport: true})
	defer r.Close()
	f := startFlood(b, bin, 1, 0, rate)
	var at10 [2]int64
	var peak [2]int64
	sample := func() (int64, int64) {
		runtime.GC()
		return r.Stats().Bytes, procfs.RSS(os.Getpid())
	}
	traceFlood(b, f, r, r, d, func() {
		start := time.Now()
		for time.Since(start) < d {
			time.Sleep(time.Second)
			held, rss := sample()
			peak[0], peak[1] = max(peak[0], held), max(peak[1], rss)
			if at10[0] == 0 && time.Since(start) >= 10*time.Second {
				at10 = [2]int64{held, rss}
			}
		}
	})
	held, rss := sample()
	made := f.made(b)
	st := r.Stats()
	mb := func(n int64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(mb(at10[0]), "held_MB_at_10s")
	b.ReportMetric(mb(held), "held_MB_at_end")
	b.ReportMetric(mb(peak[0]), "held_MB_peak")
	b.ReportMetric(mb(at10[1]), "rss_MB_at_10s")
	b.ReportMetric(mb(rss), "rss_MB_at_end")
	b.ReportMetric(mb(peak[1]), "rss_MB_peak")
	b.Logf("%v at %d launches/s: %d launches made, %d events dropped (the budget), held %.1f MiB at the end (budget %d MiB)", d, rate, made, st.Dropped, mb(held), DefaultMaxBytes>>20)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
