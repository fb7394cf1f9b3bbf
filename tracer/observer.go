package tracer

import (
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Observer hears what a session reports while it runs (Config.Observer).
// Funcs makes one from functions, each optional.
type Observer interface {
	// Attached: probes are live in every target (processes: how many;
	// with Follow, the processes followed so far). Once.
	Attached(processes int)
	// Status: about once a second while recording.
	Status(Status)
	// Live: once probes are live, a function that returns every traced
	// stream's counters so far, safe to call at any time while the
	// session runs (cudatap top).
	Live(snapshot func() []model.StreamSnap)
	// GPUTimes: whether a process's GPU ops are measured ("measured (…)")
	// or why not ("not measured: …").
	GPUTimes(pid uint32, status string)
	// Aggregates: what BPF counted (Config.AggregateLaunches), per
	// process, API and stream, about once a second and at the end.
	Aggregates(event.Aggregates)
	// Cut: with Config.Cut, the interval's processes, named, on the
	// reader goroutine (the sinks' goroutine: it may read and reset them).
	Cut(*model.Result)
	// Resample: with Config.Cut, after each Cut, the processes that sit
	// the next interval out (as Config.SampledOut, replacing the last
	// set); nil keeps the last set.
	Resample() map[int]uint64
}

// Funcs is an Observer made of functions; a nil one hears nothing.
type Funcs struct {
	OnAttached   func(processes int)
	OnStatus     func(Status)
	OnLive       func(snapshot func() []model.StreamSnap)
	OnGPUTimes   func(pid uint32, status string)
	OnAggregates func(event.Aggregates)
	OnCut        func(*model.Result)
	OnResample   func() map[int]uint64
}

func (f Funcs) Attached(n int) {
	if f.OnAttached != nil {
		f.OnAttached(n)
	}
}

func (f Funcs) Status(st Status) {
	if f.OnStatus != nil {
		f.OnStatus(st)
	}
}

func (f Funcs) Live(snapshot func() []model.StreamSnap) {
	if f.OnLive != nil {
		f.OnLive(snapshot)
	}
}

func (f Funcs) GPUTimes(pid uint32, status string) {
	if f.OnGPUTimes != nil {
		f.OnGPUTimes(pid, status)
	}
}

func (f Funcs) Aggregates(a event.Aggregates) {
	if f.OnAggregates != nil {
		f.OnAggregates(a)
	}
}

func (f Funcs) Cut(r *model.Result) {
	if f.OnCut != nil {
		f.OnCut(r)
	}
}

func (f Funcs) Resample() map[int]uint64 {
	if f.OnResample != nil {
		return f.OnResample()
	}
	return nil
}
