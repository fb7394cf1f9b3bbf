package tracer

import (
	"context"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/probe"
)

// BenchmarkAllBursts measures how many short-lived CUDA processes --all
// traces exactly: 200 processes (CUDATAP_BURST_N) that live 50–500 ms
// before their first call, started 4 at a time, as the reliability review
// did (it found 64 of 200). Reports the share traced with exact counts.
func BenchmarkAllBursts(b *testing.B) {
	testutil.RequireRoot(b)
	bld := testutil.Sim(b)
	n := envInt("CUDATAP_BURST_N", 200)
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		attached := make(chan struct{})
		done := make(chan *Outcome, 1)
		go func() {
			out, err := Run(ctx, Config{All: true, Stacks: probe.StacksNone, NVMLInterval: -1,
				Observer: Funcs{OnAttached: func(int) { close(attached) }}})
			if err != nil {
				b.Error(err)
			}
			done <- out
		}()
		<-attached
		rng := rand.New(rand.NewPCG(3, uint64(i)))
		var (
			mu   sync.Mutex
			reps []*sim.Report
			wg   sync.WaitGroup
			sem  = make(chan struct{}, 4)
		)
		for k := 0; k < n; k++ {
			sleep := 50 + rng.IntN(451)
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				out, err := exec.Command(bld.Workload, "--sleep-ms", strconv.Itoa(sleep), "--scenario", "launches", "--iters", "20").Output()
				if err != nil {
					b.Error(err)
					return
				}
				rep, err := sim.ParseReport(out)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				reps = append(reps, rep)
				mu.Unlock()
			}()
		}
		wg.Wait()
		cancel()
		out := <-done
		exact := 0
		for _, rep := range reps {
			got := countsBySymbol(out.Result, rep.PID)
			if launches(got) == launches(rep.Calls) && got["cudaDeviceSynchronize"] == rep.Calls["cudaDeviceSynchronize"] {
				exact++
			}
		}
		b.ReportMetric(float64(exact), "traced_exactly")
		b.ReportMetric(float64(len(reps)), "processes")
	}
}
