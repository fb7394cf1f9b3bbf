// Package synctest builds, in Go, the calls a traced PyTorch process makes
// and runs them through the real model, for the tests of the sync view and
// the summary: a user's loop that calls torch.cuda.synchronize(), a DDP
// rank beside NCCL's watchdog thread, a launch-bound loop of tiny kernels
// and a loop that waits for its input. Every time is fixed: nothing sleeps,
// nothing is measured.
package synctest

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Time units in ns.
const (
	US = uint64(1_000)
	MS = uint64(1_000_000)
	S  = uint64(1_000_000_000)
)

// Base is the monotonic time recordings start at.
const Base = 1_000 * S

// errNotReady is cudaErrorNotReady.
const errNotReady = 600

// Recording is one process's calls, with the names the resolver would have
// given its threads, frames and Python lines.
type Recording struct {
	PID    uint32
	Names  *model.Names
	Events []*event.Event
	// GPU is put in the result as the NVML sampler would have.
	GPU model.GPUReport
}

// New returns an empty recording of process pid named comm.
func New(pid uint32, comm string) *Recording {
	n := model.NewNames()
	n.Procs[pid] = model.ProcessInfo{Comm: comm}
	return &Recording{PID: pid, Names: n}
}

// Thread names thread tid.
func (r *Recording) Thread(tid uint32, name string) {
	r.Names.Threads[model.NameKey{PID: r.PID, Key: uint64(tid)}] = name
}

// Frame names the native stack address addr "function (object)".
func (r *Recording) Frame(addr uint64, name string) {
	r.Names.Frames[model.NameKey{PID: r.PID, Key: addr}] = name
}

// Py names the Python frame position (code, 0) "file:line function".
func (r *Recording) Py(code uint64, line string) model.PyKey {
	k := model.PyKey{Code: code}
	r.Names.Py[model.PyNameKey{PID: r.PID, PyKey: k}] = line
	return k
}

// Call adds a call of api by thread tid at start; APIs probed at return
// last dur (entry-only ones have no duration) and return 0.
func (r *Recording) Call(api event.API, tid uint32, start, dur uint64, args ...uint64) *event.Event {
	s := event.Lookup(api)
	if s == nil {
		panic("synctest: unknown API")
	}
	e := &event.Event{Cookie: s.Cookie(0), PID: r.PID, TID: tid, Start: start}
	copy(e.Args[:], args)
	if s.Return {
		e.End = start + dur
		e.Flags |= event.FlagHasRet
	}
	r.Events = append(r.Events, e)
	return e
}

// Stack gives e a native stack, innermost first (the probed function
// first, as the BPF side walks it).
func Stack(e *event.Event, addrs ...uint64) *event.Event {
	e.Cookie |= event.CookieStack
	e.HasStack = true
	e.NStack = copy(e.Stack[:], addrs)
	return e
}

// PyStack gives e a Python stack, innermost first.
func PyStack(e *event.Event, keys ...model.PyKey) *event.Event {
	e.NPy = min(len(keys), event.MaxPy)
	for i, k := range keys[:e.NPy] {
		e.Py[i] = [2]uint64{k.Code, k.Instr}
	}
	return e
}

// Builders, arguments where the x86-64 ABI puts them (CUDA_API.md).

// StreamCreate creates a non-blocking stream with handle h.
func (r *Recording) StreamCreate(tid uint32, t, h uint64) *event.Event {
	e := r.Call(event.CudaStreamCreateWithFlags, tid, t, 5*US, 0x7ffd0000, 1)
	e.Out = h
	return e
}

// Launch launches kernel fn on stream h.
func (r *Recording) Launch(tid uint32, t, h, fn uint64) *event.Event {
	return r.Call(event.CudaLaunchKernel, tid, t, 0, fn, 1|1<<32, 1, 32|1<<32, 1, 0x7ffe0000, 0, h)
}

// AllReduce enqueues an all-reduce of n floats on stream h.
func (r *Recording) AllReduce(tid uint32, t, h, n uint64) *event.Event {
	return r.Call(event.NcclAllReduce, tid, t, 0, 0x7f1000, 0x7f2000, n, 7, 0, 0xc0, h)
}

// CopyHtoD copies bytes from pinned-or-not host memory to the device on
// stream h, returning after dur.
func (r *Recording) CopyHtoD(tid uint32, t, dur, h, bytes uint64) *event.Event {
	return r.Call(event.CudaMemcpyAsync, tid, t, dur, 0x7f5500000000, 0x10000, bytes, uint64(event.HostToDevice), h)
}

// EventRecord records event ev on stream h.
func (r *Recording) EventRecord(tid uint32, t, ev, h uint64) *event.Event {
	return r.Call(event.CudaEventRecord, tid, t, 0, ev, h)
}

// EventQuery queries event ev; ready says what it answers.
func (r *Recording) EventQuery(tid uint32, t, dur, ev uint64, ready bool) *event.Event {
	e := r.Call(event.CudaEventQuery, tid, t, dur, ev)
	if !ready {
		e.Ret = errNotReady
	}
	return e
}

// StreamSync waits dur for stream h.
func (r *Recording) StreamSync(tid uint32, t, dur, h uint64) *event.Event {
	return r.Call(event.CudaStreamSynchronize, tid, t, dur, h)
}

// DeviceSync waits dur for the device.
func (r *Recording) DeviceSync(tid uint32, t, dur uint64) *event.Event {
	return r.Call(event.CudaDeviceSynchronize, tid, t, dur)
}

// Run hands the calls, in start order, to a model feeding sink, and
// returns its named result with r.GPU.
func (r *Recording) Run(sink model.Sink) *model.Result {
	evs := slices.Clone(r.Events)
	slices.SortStableFunc(evs, func(a, b *event.Event) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	m := model.New(sink)
	for _, e := range evs {
		m.Handle(e)
	}
	res := m.Finish()
	res.Name(r.Names)
	res.GPU = r.GPU
	return res
}
