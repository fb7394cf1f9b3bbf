package tracer

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer/gpusample"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/nvml"
)

// gpuSampler runs the NVML sampler beside a recording and turns its samples
// into model counters and the numbers of the GPU report.
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

// finish stops sampling and fills the result's counters and GPU report:
// numbers only, which the summary judges and words.
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
	r.GPU.GPUs = gpuStats(gpusample.Summarize(g.samples))
	for _, p := range r.Processes {
		r.GPU.Traced = append(r.GPU.Traced, model.TracedHost{PID: p.PID, CUDACalls: p.NCalls, HostBusy: model.Reading(g.hostBusy(p))})
	}
	for _, e := range g.events {
		r.GPU.Events = append(r.GPU.Events, model.GPUEvent{TS: e.TS, Device: e.Device, Kind: e.Kind, Data: e.Data})
	}
	r.GPU.Moments = oomMoments(g.samples, r.Processes, procName)
}

// maxMoments bounds the NVML samples kept whole for failed allocations.
const maxMoments = 256

// oomMoments keeps, for every out-of-memory failure of procs, each
// device's sample that shows it best (model.Nearer), whole: its memory and
// the processes on it, named by name. samples are in poll order.
func oomMoments(samples []nvml.Sample, procs []*model.Process, name func(pid uint32) (comm, container string)) []model.GPUMoment {
	var out []model.GPUMoment
	kept := map[[2]uint64]bool{} // device, time
	named := map[uint32][2]string{}
	for _, p := range procs {
		for i := range p.OOMs {
			o := &p.OOMs[i]
			best := map[int]*nvml.Sample{}
			for j := range samples {
				smp := &samples[j]
				if b := best[smp.Device]; b == nil || model.Nearer(smp.TS, b.TS, o.End) {
					best[smp.Device] = smp
				}
			}
			for _, smp := range best {
				k := [2]uint64{uint64(smp.Device), smp.TS}
				if kept[k] || len(out) >= maxMoments {
					continue
				}
				kept[k] = true
				m := model.GPUMoment{TS: smp.TS, Device: smp.Device, MemUsed: smp.MemUsed, MemTotal: smp.MemTotal}
				for _, ps := range smp.Processes {
					n, ok := named[ps.PID]
					if !ok {
						n[0], n[1] = name(ps.PID)
						named[ps.PID] = n
					}
					m.Processes = append(m.Processes, model.GPUHolder{PID: ps.PID, MemUsed: ps.MemUsed, Comm: n[0], Container: n[1]})
				}
				slices.SortStableFunc(m.Processes, func(a, b model.GPUHolder) int { return cmp.Compare(b.MemUsed, a.MemUsed) })
				out = append(out, m)
			}
		}
	}
	slices.SortFunc(out, func(a, b model.GPUMoment) int {
		return cmp.Or(cmp.Compare(a.TS, b.TS), cmp.Compare(a.Device, b.Device))
	})
	return out
}

// procName names a process holding GPU memory: its command and container,
// "" once it has exited.
func procName(pid uint32) (comm, container string) {
	comm, _ = procfs.Comm(int(pid))
	if cg, err := procfs.Cgroup(int(pid)); err == nil {
		container, _ = procfs.ContainerFromCgroup(cg)
	}
	return comm, container
}

// hostBusy is the share of wall time since tracing of p began that its
// threads spent on a CPU outside synchronizations (CUDA spins while it
// waits), 0..1; NaN when its CPU time could not be read.
func (g *gpuSampler) hostBusy(p *model.Process) float64 {
	m, ok := g.cpu0[p.PID]
	if !ok {
		return math.NaN()
	}
	t, ok := cpuTicks(p.PID)
	wall := time.Since(m.at).Seconds()
	if !ok || wall <= 0 {
		return math.NaN()
	}
	var blocked uint64
	for _, s := range p.Streams {
		blocked += s.Stats.SyncBlockedNs
	}
	busy := float64(t-m.ticks)/clockTicks - float64(blocked)/1e9
	return min(max(busy/wall, 0), 1)
}

// gpuStats copies the sampler's device summaries into the result's report.
func gpuStats(sums []gpusample.DeviceSummary) []model.GPUStats {
	out := make([]model.GPUStats, 0, len(sums))
	for _, d := range sums {
		st := model.GPUStats{
			Index: d.Device.Index, UUID: d.Device.UUID, Name: d.Device.Name,
			Samples: d.Samples, StartNs: d.Start, EndNs: d.End,
			UtilMean: model.Reading(d.GPUUtilMean), UtilPeak: model.Reading(d.GPUUtilPeak), MemUtilMean: model.Reading(d.MemUtilMean),
			MemPeak: d.MemPeak, MemTotal: d.Device.MemTotal,
			MemPeakPID: d.PeakHolder.PID, MemPeakPIDBytes: d.PeakHolder.MemUsed,
			PowerMeanW: model.Reading(d.PowerMeanW), PowerPeakW: model.Reading(d.PowerPeakW), PowerLimitW: model.Reading(d.Device.PowerLimitW),
			TempPeakC:      model.Reading(d.TempPeakC),
			SMClockMeanMHz: model.Reading(d.SMClockMeanMHz), SMClockMinMHz: d.SMClockMinMHz, SMClockMaxMHz: d.Device.MaxSMClock,
			ThrottlePolls: d.ThrottlePolls,
		}
		for _, p := range d.Processes {
			st.Processes = append(st.Processes, model.GPUProcess{PID: p.PID, MemPeak: p.MemPeak, Polls: p.Polls, SMUtilMean: model.Reading(p.SMUtilMean)})
		}
		out = append(out, st)
	}
	return out
}

// clockTicks is USER_HZ, the unit of utime/stime in /proc (100 on Linux).
const clockTicks = 100

// cpuTicks is utime+stime of a process.
func cpuTicks(pid uint32) (uint64, bool) {
	st, err := procfs.Stat(int(pid))
	return st.CPUTicks, err == nil
}
