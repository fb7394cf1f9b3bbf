package model

import "github.com/cudatap/cudatap/tracer/event"

// Launches: kernels and host functions enqueued, and the calls that name
// the kernel handles they launch (driver_test.go). Graph launches are in
// graphs.go, NCCL's collectives in nccl.go.

// launch follows a kernel launch.
func (m *Model) launch(ps *procState, spec *event.Spec, ev *event.Event) {
	p, call := ps.p, &m.call
	a := &call.Args
	if len(ev.KernelArgs.Bytes) > 0 {
		call.KernelArgs = &ev.KernelArgs
	}
	if spec.Layer == event.Driver && ev.Out != 0 {
		// A driver launch made by a runtime launch carries the runtime
		// host stub (see tracer.AttachRuntimeLaunches): its ELF symbol
		// names the CUfunction.
		if _, known := p.Stubs[a.Func]; !known {
			if len(p.Stubs) < maxKernelNames {
				p.Stubs[a.Func] = ev.Out
			} else {
				m.drops.Limits.KernelNames++
			}
			ps.newStubAt, ps.launchesSinceStub = call.Start, -1
		}
	}
	ps.launchesSinceStub++
	p.Streams[call.Stream].Stats.Launches++
	m.enqueue(ps, GPUOp{Kind: OpKernel, Func: a.Func, Grid: a.Grid, Block: a.Block})
}

// hostFunc follows cudaLaunchHostFunc: the function runs on the stream.
func (m *Model) hostFunc(ps *procState, _ *event.Spec, _ *event.Event) {
	m.enqueue(ps, GPUOp{Kind: OpHostFunc, Func: m.call.Args.Func})
}

// nameFunc follows a load-time call that returns a kernel handle
// (cuModuleGetFunction, ...): the handle is named by the string the call
// took, or, for cuKernelGetFunction, by the kernel's own name.
func (m *Model) nameFunc(ps *procState, spec *event.Spec, ev *event.Event) {
	p, call := ps.p, &m.call
	a := &call.Args
	if call.failed() || a.Ptr == 0 {
		return
	}
	name := p.KernelNames[a.Func]
	if spec.API != event.CuKernelGetFunction {
		name = ev.String()
	}
	if _, known := p.KernelNames[a.Ptr]; name != "" && !known && len(p.KernelNames) >= maxKernelNames {
		m.drops.Limits.KernelNames++
	} else if name != "" {
		p.KernelNames[a.Ptr] = name
	}
}

// LastNewStub is when a launch last named a kernel from its runtime stub
// that had no name before (ns, CLOCK_MONOTONIC), 0 if never, and how many
// launches the process made since.
func (m *Model) LastNewStub(pid uint32) (at uint64, launchesSince int) {
	if ps := m.procs[pid]; ps != nil {
		return ps.newStubAt, ps.launchesSinceStub
	}
	return 0, 0
}
