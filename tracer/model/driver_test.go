package model

import (
	"reflect"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

func cuLaunch(tid uint32, t, stream, f uint64) *ev {
	// cuLaunchKernel(f, gx, gy, gz, bx, by, bz=[rsp+8], shmem=[rsp+16], hStream=[rsp+24])
	return call(event.CuLaunchKernel, tid, t, 0, f, 64, 1, 1, 128, 1, 1, 0, stream)
}

// TestDriverAndNCCL: the driver and NCCL layers go through the same stream
// model; kernels launched through a CUfunction are named by the load-time
// call that created it, or by the runtime stub the BPF side paired with it.
func TestDriverAndNCCL(t *testing.T) {
	getFn := call(event.CuModuleGetFunction, 1, 1000, 5*us, 0x7ffd0000, 0x6000, 0x7ffd1000).out(0xf1)
	getFn.HasStack, getFn.Copy = true, []byte("_Z3addPfS_i\x00junk")
	paired := cuLaunch(1, 30_000, 0xd1, 0xf2).out(0x401000) // the stub a runtime launch left
	p := run1(t,
		getFn,
		call(event.CuStreamCreate, 1, 2000, 5*us, 0x7ffd2000, 1).out(0xd1),
		call(event.CuMemAlloc, 1, 3000, 5*us, 0x7ffd3000, 1<<20).out(devA),
		cuLaunch(1, 20_000, 0xd1, 0xf1),
		paired,
		cuLaunch(1, 40_000, 0xd1, 0xf2), // named already
		cuLaunch(1, 50_000, 0xd1, 0xf3), // unnamed: the symbolizer is asked
		call(event.NcclAllReduce, 1, 60_000, 0, 0x7f1000, 0x7f2000, 1000, 7, 0, 0xc0, 0xd1),
		call(event.CuMemcpyDtoHAsync, 1, 70_000, 2*ms, hostQ, devA, 4096, 0xd1),
		call(event.CuStreamSynchronize, 1, 3*ms, ms, 0xd1),
		call(event.CuMemFree, 1, 5*ms, 100*us, devA),
		call(event.CuCtxSynchronize, 1, 6*ms, 50*us),
	)
	if want := []Stream{{ID: 0, Kind: StreamLegacy}, {ID: 1, Handle: 0xd1, Kind: StreamCreated, NonBlocking: true, CreatedAt: 2000}}; !reflect.DeepEqual(streamsNoStats(p), want) {
		t.Errorf("streams %+v", streamsNoStats(p))
	}
	// Named by the load-time call, by the stub's symbol, by its own address.
	for _, w := range []struct {
		f, addr uint64
		name    string
	}{{0xf1, 0, "_Z3addPfS_i"}, {0xf2, 0x401000, ""}, {0xf3, 0xf3, ""}} {
		if name, addr := p.KernelSymbol(w.f); name != w.name || addr != w.addr {
			t.Errorf("kernel %#x: name %q at %#x, want %q at %#x", w.f, name, addr, w.name, w.addr)
		}
	}
	st := p.Streams[1].Stats
	if st.Launches != 4 || st.Collectives != 1 || st.CommBytes != 4000 || st.Memcpys != 1 || st.BytesDtoH != 4096 || st.BytesPageable != 4096 {
		t.Errorf("stream stats %+v", st)
	}
	kinds := []OpKind{OpKernel, OpKernel, OpKernel, OpKernel, OpCollective, OpMemcpy}
	for i, k := range kinds {
		if p.GPUOps[i].Kind != k || p.GPUOps[i].Stream != 1 {
			t.Errorf("op %d: kind %v stream %d, want %v on 1", i, p.GPUOps[i].Kind, p.GPUOps[i].Stream, k)
		}
	}
	if op := p.GPUOps[4]; op.Bytes != 4000 || op.API != event.NcclAllReduce || op.Kind.Category() != "kernel" {
		t.Errorf("collective op %+v", op)
	}
	if got := syncKinds(p); !reflect.DeepEqual(got, []SyncKind{SyncPageableMemcpy, SyncStream, SyncFree, SyncDevice}) {
		t.Errorf("syncs %v", got)
	}
	if p.DeviceMemInUse != 0 || p.DeviceMemPeak != 1<<20 {
		t.Errorf("device memory %d peak %d", p.DeviceMemInUse, p.DeviceMemPeak)
	}
}

// TestCommInitRank: a process's rank and world size come from its widest
// NCCL communicator; a failed init or a smaller sub-communicator changes
// nothing.
func TestCommInitRank(t *testing.T) {
	p := run1(t,
		call(event.NcclCommInitRank, 1, 1000, 100, 0x7ff0, 2, 1).out(0xc0), // rank 1 of 2
		call(event.NcclCommInitRank, 1, 2000, 100, 0x7ff0, 8, 5).out(0xc1), // rank 5 of 8: wider
		call(event.NcclCommInitRank, 1, 3000, 100, 0x7ff0, 4, 3).out(0xc2), // a sub-group
		call(event.NcclCommInitRank, 1, 4000, 100, 0x7ff0, 16, 9).ret(5),   // failed
	)
	if p.Rank != 5 || p.WorldSize != 8 {
		t.Errorf("rank %d of %d, want 5 of 8", p.Rank, p.WorldSize)
	}
	if got := p.Label(); got != "process (pid 100, rank 5 of 8)" {
		t.Errorf("label %q", got)
	}
}

// TestNCCLGroupDefers: collectives called inside ncclGroupStart/End are
// enqueued by NCCL at the group's end: a "ready" answer for their stream
// before it proves nothing about them; a synchronization after it does.
func TestNCCLGroupDefers(t *testing.T) {
	allGather := func(t0 uint64) *ev {
		return call(event.NcclAllGather, 1, t0, 0, 0x7f1000, 0x7f2000, 1000, 7, 0xc0, 0xd1)
	}
	p := run1(t,
		streamCreateFlags(1, 1000, 0xd1, 1),
		call(event.NcclGroupStart, 1, 2000, 0),
		allGather(3000),
		streamQuery(1, 4000, 1*us, 0xd1, 0), // ready: nothing launched yet
		call(event.NcclGroupEnd, 1, 5000, 0),
		streamSync(1, 6000, 20*ms, 0xd1), // the all-gather ends in here
	)
	var coll *GPUOp
	for i := range p.GPUOps {
		if p.GPUOps[i].Kind == OpCollective {
			coll = &p.GPUOps[i]
		}
	}
	if coll == nil {
		t.Fatal("no collective op")
	}
	if got, want := coll.End, 6000+20*ms; !coll.Bounded || got != want {
		t.Errorf("the group's collective ends at %d (bounded: %v), want at the sync's return %d (not by the query inside the group)", got, coll.Bounded, want)
	}
	if coll.Enqueued != 5000 {
		t.Errorf("enqueued at %d, want at the group's end (5000)", coll.Enqueued)
	}
}

// TestOpRingGrownEmptySlots: once op 0 went out and the ring grew, the
// grown ring's empty slot 0 is not op 0 (a zero slot passed for it, and a
// late lookup handed an empty op 0 to the sink: a flake of the GPU-time
// tests, 2 runs in 6).
func TestOpRingGrownEmptySlots(t *testing.T) {
	m := New(NewCollector())
	m.Handle(&launch(1, 1000, 0, 0xf0).Event)
	m.Handle(&call(event.CudaDeviceSynchronize, 1, 2000, 10*us).Event) // op 0 out
	for i := range uint64(100) {                                       // pending: the ring grows past 64
		m.Handle(&launch(1, 3000+i*1000, 0, 0xf0).Event)
	}
	ps := m.procs[testPID]
	if len(ps.ops) <= 64 {
		t.Fatalf("the ring did not grow (%d slots)", len(ps.ops))
	}
	if op := ps.op(0); op != nil {
		t.Errorf("op 0 went out before the ring grew, yet a slot passes for it: %+v", *op)
	}
	if op := ps.op(100); op == nil || op.ID != 100 {
		t.Errorf("op 100 not found after the growth: %+v", op)
	}
}
