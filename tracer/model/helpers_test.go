package model

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

const (
	testPID = 100
	us      = uint64(1_000)
	ms      = uint64(1_000_000)
)

// ev is a hand-built call; the builders below place arguments where the
// x86-64 ABI puts them (CUDA_API.md).
type ev struct{ event.Event }

// call builds an event of api made by thread tid at start; return-probed
// APIs get End = start+dur, FlagHasRet and Ret 0.
func call(api event.API, tid uint32, start, dur uint64, args ...uint64) *ev {
	s := event.Lookup(api)
	if s == nil {
		panic("unknown API")
	}
	e := &ev{event.Event{Cookie: s.Cookie(0), PID: testPID, TID: tid, Start: start}}
	copy(e.Args[:], args)
	if s.Return {
		e.End = start + dur
		e.Flags |= event.FlagHasRet
	}
	return e
}

// ptsz switches to the _ptsz/_ptds symbol (index 1).
func (e *ev) ptsz() *ev {
	s := e.Spec()
	e.Cookie = s.Cookie(1)
	if !s.PerThreadDefault(1) {
		panic(s.Name + " has no per-thread variant")
	}
	return e
}
func (e *ev) out(v uint64) *ev { e.Out = v; return e }
func (e *ev) ret(r int64) *ev  { e.Ret = r; return e }
func (e *ev) pid(p uint32) *ev { e.PID = p; return e }
func (e *ev) frames(pc ...uint64) *ev {
	e.Cookie |= event.CookieStack
	e.HasStack = true
	e.NStack = copy(e.Stack[:], pc)
	return e
}

func xy(x, y uint32) uint64 { return uint64(x) | uint64(y)<<32 }

// Builders for the calls the tests use.

func streamCreate(tid uint32, t, handle uint64) *ev {
	return call(event.CudaStreamCreate, tid, t, 5*us, 0x7ffd0000).out(handle)
}
func streamCreateFlags(tid uint32, t, handle uint64, flags uint64) *ev {
	return call(event.CudaStreamCreateWithFlags, tid, t, 5*us, 0x7ffd0000, flags).out(handle)
}
func streamCreatePrio(tid uint32, t, handle uint64, flags uint64, prio int32) *ev {
	return call(event.CudaStreamCreateWithPriority, tid, t, 5*us, 0x7ffd0000, flags, uint64(uint32(prio))).out(handle)
}
func streamDestroy(tid uint32, t, handle uint64) *ev {
	return call(event.CudaStreamDestroy, tid, t, 0, handle)
}
func launch(tid uint32, t, stream, fn uint64) *ev {
	return call(event.CudaLaunchKernel, tid, t, 0, fn, xy(128, 1), 1, xy(256, 1), 1, 0x7ffe0000, 0, stream)
}
func memcpyAsync(tid uint32, t, dur, dst, src, bytes uint64, kind event.MemcpyKind, stream uint64) *ev {
	return call(event.CudaMemcpyAsync, tid, t, dur, dst, src, bytes, uint64(kind), stream)
}
func memcpySync(tid uint32, t, dur, dst, src, bytes uint64, kind event.MemcpyKind) *ev {
	return call(event.CudaMemcpy, tid, t, dur, dst, src, bytes, uint64(kind))
}
func memsetAsync(tid uint32, t, dst, bytes, stream uint64) *ev {
	return call(event.CudaMemsetAsync, tid, t, 0, dst, 0, bytes, stream)
}
func memsetSync(tid uint32, t, dur, dst, bytes uint64) *ev {
	return call(event.CudaMemset, tid, t, dur, dst, 0, bytes)
}
func eventCreate(tid uint32, t, handle uint64) *ev {
	return call(event.CudaEventCreate, tid, t, us, 0x7ffd1000).out(handle)
}
func eventDestroy(tid uint32, t, handle uint64) *ev {
	return call(event.CudaEventDestroy, tid, t, 0, handle)
}
func eventRecord(tid uint32, t, e, stream uint64) *ev {
	return call(event.CudaEventRecord, tid, t, 0, e, stream)
}
func streamWait(tid uint32, t, stream, e uint64) *ev {
	return call(event.CudaStreamWaitEvent, tid, t, 0, stream, e, 0)
}
func eventSync(tid uint32, t, dur, e uint64) *ev {
	return call(event.CudaEventSynchronize, tid, t, dur, e)
}
func eventQuery(tid uint32, t, dur, e uint64, ret int64) *ev {
	return call(event.CudaEventQuery, tid, t, dur, e).ret(ret)
}
func streamSync(tid uint32, t, dur, stream uint64) *ev {
	return call(event.CudaStreamSynchronize, tid, t, dur, stream)
}
func streamQuery(tid uint32, t, dur, stream uint64, ret int64) *ev {
	return call(event.CudaStreamQuery, tid, t, dur, stream).ret(ret)
}
func deviceSync(tid uint32, t, dur uint64) *ev {
	return call(event.CudaDeviceSynchronize, tid, t, dur)
}
func malloc(tid uint32, t, dur, ptr, size uint64) *ev {
	return call(event.CudaMalloc, tid, t, dur, 0x7ffd2000, size).out(ptr)
}
func mallocAsync(tid uint32, t, ptr, size, stream uint64) *ev {
	return call(event.CudaMallocAsync, tid, t, us, 0x7ffd2000, size, stream).out(ptr)
}
func free(tid uint32, t, dur, ptr uint64) *ev { return call(event.CudaFree, tid, t, dur, ptr) }
func freeAsync(tid uint32, t, ptr, stream uint64) *ev {
	return call(event.CudaFreeAsync, tid, t, 0, ptr, stream)
}
func hostAlloc(tid uint32, t, ptr, size uint64) *ev {
	return call(event.CudaHostAlloc, tid, t, 100*us, 0x7ffd3000, size, 0).out(ptr)
}
func mallocHost(tid uint32, t, ptr, size uint64) *ev {
	return call(event.CudaMallocHost, tid, t, 100*us, 0x7ffd3000, size).out(ptr)
}
func freeHost(tid uint32, t, dur, ptr uint64) *ev { return call(event.CudaFreeHost, tid, t, dur, ptr) }
func hostRegister(tid uint32, t, ptr, size uint64) *ev {
	return call(event.CudaHostRegister, tid, t, 100*us, ptr, size, 0)
}
func hostUnregister(tid uint32, t, ptr uint64) *ev {
	return call(event.CudaHostUnregister, tid, t, 0, ptr)
}

// traced is a process with everything a Collector kept of it.
type traced struct {
	*Process
	Trace
}

// run feeds events to a new model with a collector and finishes it.
func run(t testing.TB, evs ...*ev) []*traced {
	t.Helper()
	c := NewCollector()
	m := New(c)
	for _, e := range evs {
		m.Handle(&e.Event)
	}
	return finish(m, c)
}

// finish finishes m and joins each process with what c kept of it.
func finish(m *Model, c *Collector) []*traced {
	r := m.Finish()
	var out []*traced
	for _, p := range r.Processes {
		tp := &traced{Process: p}
		if tr := c.Traces[p.PID]; tr != nil {
			tp.Trace = *tr
		}
		out = append(out, tp)
	}
	return out
}

func run1(t testing.TB, evs ...*ev) *traced {
	t.Helper()
	ps := run(t, evs...)
	if len(ps) != 1 {
		t.Fatalf("%d processes, want 1", len(ps))
	}
	return ps[0]
}

// syncKinds lists the kinds of a process's syncs in order.
func syncKinds(p *traced) []SyncKind {
	var out []SyncKind
	for _, s := range p.Syncs {
		out = append(out, s.Kind)
	}
	return out
}
