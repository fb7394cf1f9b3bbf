package tracer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/nvml"
)

// gpuSampler runs the NVML sampler beside a recording and turns its samples
// into model counters, device summaries and verdicts.
type gpuSampler struct {
	s       *nvml.Sampler
	status  string // why there is no sampler
	mu      sync.Mutex
	samples []nvml.Sample
	events  []nvml.Event
	cancel  context.CancelFunc
	done    chan struct{}
	cpu0    map[uint32]cpuMark
}

type cpuMark struct {
	ticks uint64
	at    time.Time
}

// startGPU starts sampling every visible GPU; without NVML it records why
// and everything else works.
func startGPU(ctx context.Context, interval time.Duration) *gpuSampler {
	g := &gpuSampler{cpu0: map[uint32]cpuMark{}}
	if interval < 0 {
		g.status = "disabled (--nvml-interval < 0)"
		return g
	}
	s, err := nvml.New(nvml.Options{Interval: interval, OnEvent: func(e nvml.Event) {
		g.mu.Lock()
		g.events = append(g.events, e)
		g.mu.Unlock()
	}})
	if err != nil {
		g.status = err.Error()
		return g
	}
	g.s = s
	ctx, g.cancel = context.WithCancel(ctx)
	g.done = make(chan struct{})
	go func() {
		defer close(g.done)
		s.Run(ctx, g.add)
	}()
	return g
}

func (g *gpuSampler) add(smp nvml.Sample) {
	g.mu.Lock()
	g.samples = append(g.samples, smp)
	g.mu.Unlock()
}

// markCPU remembers a process's CPU time when tracing of it begins.
func (g *gpuSampler) markCPU(pid uint32) {
	if t, ok := cpuTicks(pid); ok {
		g.mu.Lock()
		g.cpu0[pid] = cpuMark{t, time.Now()}
		g.mu.Unlock()
	}
}

// finish stops sampling and fills the result's counters and GPU report.
func (g *gpuSampler) finish(r *model.Result) {
	if g.s == nil {
		r.GPU.Status = g.status
		return
	}
	g.cancel()
	<-g.done
	_, bound := g.s.ClockOffset()
	g.s.Close()
	g.mu.Lock()
	defer g.mu.Unlock()
	r.GPU.ClockErrorNs = bound
	for _, smp := range g.samples {
		r.Counters = append(r.Counters, model.Counter{Device: smp.Device, Name: fmt.Sprintf("GPU %d %s", smp.Device, smp.Name), TS: smp.TS, Values: smp.Counters()})
	}
	sums := nvml.Summarize(g.samples)
	for _, d := range sums {
		line := fmt.Sprintf("GPU %d %s: %d samples, utilization mean %.0f%% peak %.0f%%, memory peak %s of %s, power mean %.0f W peak %.0f W",
			d.Device.Index, d.Device.Name, d.Samples, d.GPUUtilMean, d.GPUUtilPeak, units.Bytes(d.MemPeak), units.Bytes(d.Device.MemTotal), d.PowerMeanW, d.PowerPeakW)
		if len(d.Throttled) > 0 {
			line += ", throttle reasons seen: " + strings.Join(d.Throttled, ", ")
		}
		r.GPU.Devices = append(r.GPU.Devices, line)
	}
	hostBusy, calls := map[uint32]float64{}, map[uint32]int{}
	for _, p := range r.Processes {
		calls[p.PID] = int(p.NCalls)
		if m, ok := g.cpu0[p.PID]; ok {
			if t, ok := cpuTicks(p.PID); ok {
				wall := time.Since(m.at).Seconds()
				var blocked uint64
				for _, s := range p.Streams {
					blocked += s.Stats.SyncBlockedNs
				}
				// CPU time outside synchronizations (CUDA spins while it waits).
				busy := float64(t-m.ticks)/clockTicks - float64(blocked)/1e9
				if wall > 0 {
					hostBusy[p.PID] = min(max(busy/wall, 0), 1)
				}
			}
		}
	}
	for _, v := range nvml.Verdicts(sums, g.samples, hostBusy, calls) {
		r.GPU.Verdicts = append(r.GPU.Verdicts, v.String())
	}
	for _, e := range g.events {
		r.GPU.Verdicts = append(r.GPU.Verdicts, fmt.Sprintf("GPU %d: %s event (data %d)", e.Device, e.Kind, e.Data))
	}
}

// clockTicks is USER_HZ, the unit of utime/stime in /proc (100 on Linux).
const clockTicks = 100

// cpuTicks is utime+stime of a process.
func cpuTicks(pid uint32) (uint64, bool) {
	st, err := procfs.Stat(int(pid))
	return st.CPUTicks, err == nil
}
