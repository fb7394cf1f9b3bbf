package main

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
//	go test -run '^$' -bench AgentLoad -benchtime 1x ./cmd/cudatap/
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
		done := make(chan error, 1)
		go func() {
			done <- runAgent(ctx, &globalOptions{}, &agentOptions{listen: "127.0.0.1:0", continuous: true, ringBuffer: 16 << 20}, io.Discard)
		}()
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

func fdCount() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}
