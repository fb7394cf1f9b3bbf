package agent

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/testutil"
)

// BenchmarkAgentLoad runs the agent (--continuous, in this process) while a
// simulated job makes CUDATAP_AGENT_RATE launches per second (default
// 10,000; one thread per 50,000/s) for CUDATAP_AGENT_SOAK (default 10s), and
// reports the agent's CPU as a share of one core, its peak RSS, and how its
// descriptors and goroutines moved from the first second to the end (a
// soak: CUDATAP_AGENT_SOAK=10m). The job runs in a child: its CPU is not
// counted.
//
//	go test -run '^$' -bench AgentLoad -benchtime 1x ./internal/agent/
func BenchmarkAgentLoad(b *testing.B) {
	testutil.RequireRoot(b)
	bin := testutil.Sim(b).Flood
	rate := 10_000
	if v, err := strconv.Atoi(os.Getenv("CUDATAP_AGENT_RATE")); err == nil && v > 0 {
		rate = v
	}
	soak := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("CUDATAP_AGENT_SOAK")); err == nil && d > 0 {
		soak = d
	}
	threads := (rate + 49_999) / 50_000
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		done := runBench(b, ctx, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Minute, RingBufferBytes: 16 << 20})
		cmd := exec.Command(bin, strconv.Itoa(threads), "0", strconv.Itoa(rate/threads))
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		if l, _ := r.ReadString('\n'); !strings.HasPrefix(l, "ready") {
			b.Fatalf("flood: %q", l)
		}
		io.WriteString(stdin, "go\n")
		time.Sleep(time.Second) // settle: the agent attaches; the baseline is taken after
		fds0, gor0 := fdCount(), runtime.NumGoroutine()
		cpu0, t0 := cpuTime(), time.Now()
		var peak int64
		for end := t0.Add(soak); time.Now().Before(end); time.Sleep(time.Second) {
			peak = max(peak, procfs.RSS(os.Getpid()))
		}
		cpu, wall := cpuTime()-cpu0, time.Since(t0)
		fds1, gor1 := fdCount(), runtime.NumGoroutine()
		stdin.Close()
		made, _ := io.ReadAll(r)
		cmd.Wait()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu%_of_core")
		b.ReportMetric(float64(peak)/(1<<20), "peak_rss_MB")
		b.ReportMetric(float64(fds1-fds0), "fds_delta")
		b.ReportMetric(float64(gor1-gor0), "goroutines_delta")
		b.Logf("rate %d/s (%d threads) for %v; the job made %s launches", rate, threads, soak, strings.TrimSpace(string(made)))
	}
}

// runBench runs an agent in this process until ctx ends; its error comes
// on the channel.
func runBench(b *testing.B, ctx context.Context, o *Options) <-chan error {
	o.Logger = slog.New(slog.DiscardHandler)
	a, err := New(*withDefaults(o))
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return done
}

func fdCount() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// BenchmarkAgentChurn runs the agent (--continuous, in this process) while
// short CUDA processes come and go, CUDATAP_CHURN_BATCH (default 300) per
// batch for CUDATAP_CHURN_BATCHES batches (default 4), and reports the Go
// heap in use (after a collection) after the first batch and after the
// last: what the agent keeps per exited process (CUDATAP_CHURN_HEAP=FILE
// writes a heap profile at the end).
//
//	go test -run '^$' -bench AgentChurn -benchtime 1x ./internal/agent/
func BenchmarkAgentChurn(b *testing.B) {
	testutil.RequireRoot(b)
	sim := testutil.Sim(b)
	batch, batches := envInt("CUDATAP_CHURN_BATCH", 300), envInt("CUDATAP_CHURN_BATCHES", 4)
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		done := runBench(b, ctx, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Second, RingBufferBytes: 16 << 20})
		time.Sleep(time.Second) // attached (no target yet: the host scan)
		heap := func() float64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return float64(m.HeapInuse) / (1 << 20)
		}
		var first float64
		for i := range batches {
			for range batch {
				if out, err := exec.Command(sim.Workload, "--scenario", "basic", "--iters", "20").CombinedOutput(); err != nil {
					b.Fatalf("workload: %v\n%s", err, out)
				}
			}
			time.Sleep(2 * time.Second) // the agent reads and prunes
			h := heap()
			b.Logf("after %d processes: heap %.1f MB, RSS %.1f MB", (i+1)*batch, h, float64(procfs.RSS(os.Getpid()))/(1<<20))
			if i == 0 {
				first = h
			}
			if i == batches-1 {
				b.ReportMetric(first, "heap_MB_after_first_batch")
				b.ReportMetric(h, "heap_MB_after_last_batch")
				b.ReportMetric((h-first)*(1<<20)/float64((batches-1)*batch), "heap_bytes_per_process")
			}
		}
		if path := os.Getenv("CUDATAP_CHURN_HEAP"); path != "" {
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			pprof.WriteHeapProfile(f)
			f.Close()
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
