package model

import (
	"reflect"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

const (
	devA   = 0x7f10_0000_0000 // device allocations (cudaMalloc)
	devB   = 0x7f20_0000_0000
	hostP  = 0x7f40_0000_0000 // pinned host memory (cudaHostAlloc)
	hostQ  = 0x5555_0000_0000 // pageable host memory
	stream = 0xa0             // a created blocking stream
	nbStrm = 0xb0             // a created non-blocking stream
)

func wantSyncs(t *testing.T, p *traced, want []Sync) {
	t.Helper()
	// A sync carries its call's API and stacks; the tables leave them out.
	got := make([]Sync, len(p.Syncs))
	for i, s := range p.Syncs {
		c := &p.Calls[s.Call]
		if s.API != c.API || s.Symbol != c.Symbol || s.Stack != c.Stack || s.PyStack != c.PyStack {
			t.Errorf("sync %d: API %v/%d stacks %d/%d, its call's %v/%d %d/%d", i, s.API, s.Symbol, s.Stack, s.PyStack,
				c.API, c.Symbol, c.Stack, c.PyStack)
		}
		s.API, s.Symbol, s.Stack, s.PyStack = 0, 0, 0, 0
		got[i] = s
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("syncs:")
		for i := range max(len(got), len(want)) {
			var g, w any = "-", "-"
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			t.Errorf("  [%d] got  %+v\n       want %+v", i, g, w)
		}
	}
	// A call points at its last sync (a legacy-stream copy is both
	// serialized and synchronous).
	for i, s := range p.Syncs {
		last := i
		for j := i + 1; j < len(p.Syncs); j++ {
			if p.Syncs[j].Call == s.Call {
				last = j
			}
		}
		if c := p.Calls[s.Call]; c.Sync != p.Syncs[last].Kind || c.BlockedNs != p.Syncs[last].BlockedNs {
			t.Errorf("sync %d: its call %d says %v blocked %d, want sync %d's %v", i, s.Call, c.Sync, c.BlockedNs, last, p.Syncs[last].Kind)
		}
	}
}

func wantOps(t *testing.T, p *traced, want ...[3]uint64) {
	t.Helper()
	if len(p.GPUOps) != len(want) {
		t.Fatalf("%d GPU ops, want %d", len(p.GPUOps), len(want))
	}
	for i, w := range want {
		op := p.GPUOps[i]
		if op.Start != w[0] || op.End != w[1] || op.Bounded != (w[2] == 1) {
			t.Errorf("op %d: start %d end %d bounded %v, want %d %d %v", i, op.Start, op.End, op.Bounded, w[0], w[1], w[2] == 1)
		}
	}
}

func TestSyncStream(t *testing.T) {
	p := run1(t,
		streamCreate(1, 1000, stream),
		launch(1, 10_000, stream, kern),
		launch(1, 20_000, stream, kern),
		launch(1, 30_000, stream, kern),
		streamSync(1, 40_000, 2*ms, stream),    // blocks: bound = its end
		streamSync(1, 2_100_000, 3*us, stream), // nothing queued
		launch(1, 3*ms, stream, kern),
		streamSync(1, 3_100_000, 10*us, stream), // did not block: bound = its start
		launch(1, 4*ms, 0x2, kern),              // per-thread stream 2
		streamSync(2, 4_500_000, ms, 0),         // legacy stream: nothing of its own
	)
	wantSyncs(t, p, []Sync{
		{Kind: SyncStream, Call: 4, TID: 1, Stream: 1, Start: 40_000, BlockedNs: 2 * ms, QueuedOps: 3},
		{Kind: SyncStream, Call: 5, TID: 1, Stream: 1, Start: 2_100_000, BlockedNs: 3 * us, QueuedOps: 0},
		{Kind: SyncStream, Call: 7, TID: 1, Stream: 1, Start: 3_100_000, BlockedNs: 10 * us, QueuedOps: 1},
		{Kind: SyncStream, Call: 9, TID: 2, Stream: 0, Start: 4_500_000, BlockedNs: ms, QueuedOps: 0},
	})
	// Three ops share [first enqueue, sync end] evenly; the fourth ran
	// between its enqueue and the start of a sync that did not block; the
	// per-thread stream is blocking, so the legacy sync bounds it too.
	wantOps(t, p,
		[3]uint64{10_000, 686_666, 1},
		[3]uint64{686_666, 1_363_333, 1},
		[3]uint64{1_363_333, 2_040_000, 1},
		[3]uint64{3_000_000, 3_100_000, 1},
		[3]uint64{4_000_000, 5_500_000, 1},
	)
	st := p.Streams[1].Stats
	if st.Syncs != 3 || st.SyncBlockedNs != 2*ms+13*us {
		t.Errorf("stream 1: %d syncs, %d ns blocked", st.Syncs, st.SyncBlockedNs)
	}
	if st := p.Streams[0].Stats; st.Syncs != 1 || st.SyncBlockedNs != ms {
		t.Errorf("stream 0: %d syncs, %d ns blocked", st.Syncs, st.SyncBlockedNs)
	}
}

func TestSyncDevice(t *testing.T) {
	p := run1(t,
		streamCreate(1, 1000, stream),
		streamCreateFlags(1, 2000, nbStrm, 1),
		launch(1, 10_000, stream, kern),
		launch(1, 20_000, stream, kern),
		launch(1, 30_000, nbStrm, kern),
		launch(2, 40_000, 0x2, kern),
		deviceSync(1, 100_000, ms),
	)
	wantSyncs(t, p, []Sync{{Kind: SyncDevice, Call: 6, TID: 1, Stream: -1, Start: 100_000, BlockedNs: ms, QueuedOps: 4}})
	for i, op := range p.GPUOps {
		if !op.Bounded || op.End > 1_100_000 {
			t.Errorf("op %d: bounded %v end %d, want bounded by 1100000", i, op.Bounded, op.End)
		}
	}
	if p.GPUOps[1].End != 1_100_000 || p.GPUOps[2].End != 1_100_000 || p.GPUOps[3].End != 1_100_000 {
		t.Errorf("last op of each stream ends at %d %d %d, want the sync's end", p.GPUOps[1].End, p.GPUOps[2].End, p.GPUOps[3].End)
	}
	// Device-wide waits are booked on the legacy stream.
	if st := p.Streams[0].Stats; st.Syncs != 1 || st.SyncBlockedNs != ms {
		t.Errorf("legacy stream stats %+v", st)
	}
	if !SyncDevice.Explicit() || p.Syncs[0].Kind.String() != "device_sync" {
		t.Error("device sync not explicit or misnamed")
	}
}

func TestSyncEventBoundsUpToRecord(t *testing.T) {
	p := run1(t,
		streamCreate(1, 1000, stream),
		launch(1, 10_000, stream, kern),      // op 0
		launch(1, 20_000, stream, kern),      // op 1
		eventRecord(1, 30_000, 0xe1, stream), // after op 1
		launch(1, 40_000, stream, kern),      // op 2: not covered
		eventSync(1, 50_000, ms, 0xe1),
		eventSync(1, 2*ms, ms, 0xe9), // never recorded
		// Recorded before any work: covers nothing.
		eventRecord(1, 3*ms, 0xe2, nbStrm),
		eventSync(1, 3_100_000, 5*us, 0xe2),
	)
	wantSyncs(t, p, []Sync{
		{Kind: SyncEvent, Call: 5, TID: 1, Stream: 1, Start: 50_000, BlockedNs: ms, QueuedOps: 2},
		{Kind: SyncEvent, Call: 6, TID: 1, Stream: -1, Start: 2 * ms, BlockedNs: ms, QueuedOps: 0},
		{Kind: SyncEvent, Call: 8, TID: 1, Stream: 2, Start: 3_100_000, BlockedNs: 5 * us, QueuedOps: 0},
	})
	wantOps(t, p,
		[3]uint64{10_000, 530_000, 1},
		[3]uint64{530_000, 1_050_000, 1},
		[3]uint64{1_050_000, 1_050_000, 0}, // laid out by Finish after the bounded ones
	)
	want := []Dependency{
		{Event: 0xe1, RecordCall: 3, WaitCall: 5, FromStream: 1, ToStream: -1},
		{Event: 0xe2, RecordCall: 7, WaitCall: 8, FromStream: 2, ToStream: -1},
	}
	if !reflect.DeepEqual(p.Deps, want) {
		t.Errorf("deps %+v, want %+v", p.Deps, want)
	}
	if p.Calls[5].Stream != 1 || p.Calls[6].Stream != -1 {
		t.Errorf("event sync calls on streams %d %d, want 1 -1", p.Calls[5].Stream, p.Calls[6].Stream)
	}
}

func TestSyncMemcpyAndMemset(t *testing.T) {
	p := run1(t,
		malloc(1, 1000, us, devA, 1<<20),
		streamCreate(1, 2000, stream),
		launch(1, 10_000, 0, kern),                                              // op 0 on legacy
		launch(1, 11_000, stream, kern),                                         // op 1 on a blocking stream
		memcpySync(1, 20_000, ms, hostQ, devA, 4096, event.DeviceToHost),        // op 2
		memcpySync(1, 2*ms, 20*us, devB, devA, 4096, event.DeviceToDevice),      // op 3: no host wait
		memcpySync(1, 3*ms, 20*us, hostQ, hostQ+8192, 4096, event.HostToHost),   // op 4: no GPU
		memsetSync(1, 4*ms, 500*us, devA, 1<<20),                                // op 5
		memcpySync(2, 5*ms, 200*us, hostQ, devA, 64, event.DeviceToHost).ptsz(), // op 6, per-thread stream
		memsetSync(2, 6*ms, 100*us, devA, 64).ptsz(),                            // op 7
	)
	wantSyncs(t, p, []Sync{
		// The copy on the legacy stream waits behind the blocking stream's
		// kernel, and the host waits for the copy.
		{Kind: SyncLegacyStream, Call: 4, TID: 1, Stream: 0, Start: 20_000, BlockedNs: 0, QueuedOps: 1},
		{Kind: SyncMemcpy, Call: 4, TID: 1, Stream: 0, Start: 20_000, BlockedNs: ms, QueuedOps: 1},
		{Kind: SyncMemset, Call: 7, TID: 1, Stream: 0, Start: 4 * ms, BlockedNs: 500 * us, QueuedOps: 2},
		{Kind: SyncMemcpy, Call: 8, TID: 2, Stream: 2, Start: 5 * ms, BlockedNs: 200 * us, QueuedOps: 0},
		{Kind: SyncMemset, Call: 9, TID: 2, Stream: 2, Start: 6 * ms, BlockedNs: 100 * us, QueuedOps: 0},
	})
	// The legacy copy waited for the blocking stream's kernel too.
	for _, i := range []int{0, 1, 2} {
		if op := p.GPUOps[i]; !op.Bounded || op.End > 1_020_000 {
			t.Errorf("op %d: bounded %v end %d, want bounded by the copy's end 1020000", i, op.Bounded, op.End)
		}
	}
	if p.GPUOps[2].End != 1_020_000 || p.GPUOps[1].End != 1_020_000 {
		t.Errorf("copy ends %d, kernel on the blocking stream %d, want 1020000", p.GPUOps[2].End, p.GPUOps[1].End)
	}
	// D2D and H2H copies are queued, not waited for, until the memset drains them.
	if op := p.GPUOps[5]; !op.Bounded || op.End != 4_500_000 || op.Kind != OpMemset || op.Bytes != 1<<20 {
		t.Errorf("memset op %+v", op)
	}
	if st := p.Streams[0].Stats; st.Memcpys != 3 || st.Memsets != 1 || st.BytesDtoH != 4096 || st.BytesDtoD != 4096 ||
		st.BytesOther != 4096 || st.BytesPageable != 4096 || st.BytesPinned != 0 {
		t.Errorf("legacy stream stats %+v", st)
	}
	if st := p.Streams[2].Stats; st.Memcpys != 1 || st.Memsets != 1 || st.BytesDtoH != 64 || st.Syncs != 2 {
		t.Errorf("per-thread stream stats %+v", st)
	}
}

func TestSyncPageableMemcpy(t *testing.T) {
	p := run1(t,
		malloc(1, 1000, us, devA, 1<<20),
		hostAlloc(1, 2000, hostP, 1<<20),
		streamCreate(1, 300_000, stream),
		launch(1, 400_000, stream, kern),
		memcpyAsync(1, 500_000, 300*us, devA, hostQ, 4096, event.HostToDevice, stream), // pageable: blocks
		memcpyAsync(1, 900_000, 5*us, devA, hostP, 4096, event.HostToDevice, stream),   // pinned: async
		memcpyAsync(1, 1*ms, 5*us, hostP+4096, devA, 4096, event.DeviceToHost, stream), // pinned
		memcpyAsync(1, 2*ms, 2*ms, hostQ, devA, 100, event.DeviceToHost, stream),       // pageable
		memcpyAsync(1, 5*ms, 5*us, devB, devA, 100, event.DeviceToDevice, stream),      // no host side
	)
	wantSyncs(t, p, []Sync{
		{Kind: SyncPageableMemcpy, Call: 4, TID: 1, Stream: 1, Start: 500_000, BlockedNs: 300 * us, QueuedOps: 1},
		{Kind: SyncPageableMemcpy, Call: 7, TID: 1, Stream: 1, Start: 2 * ms, BlockedNs: 2 * ms, QueuedOps: 2},
	})
	pageable := []bool{false, true, false, false, true, false}
	for i, w := range pageable {
		if p.GPUOps[i].Pageable != w {
			t.Errorf("op %d: pageable %v, want %v", i, p.GPUOps[i].Pageable, w)
		}
	}
	wantOps(t, p,
		[3]uint64{400_000, 600_000, 1},
		[3]uint64{600_000, 800_000, 1},
		// The 3.1 ms from the first pending enqueue to the pageable copy's
		// return are split evenly.
		[3]uint64{900_000, 1_933_333, 1},
		[3]uint64{1_933_333, 2_966_666, 1},
		[3]uint64{2_966_666, 4_000_000, 1},
		[3]uint64{5_000_000, 5_000_000, 0},
	)
	st := p.Streams[1].Stats
	if st.BytesPageable != 4196 || st.BytesPinned != 8192 || st.BytesHtoD != 8192 || st.BytesDtoH != 4196 || st.BytesDtoD != 100 || st.Memcpys != 5 {
		t.Errorf("stream stats %+v", st)
	}
	if SyncPageableMemcpy.Explicit() || SyncPageableMemcpy.Hint() == "" {
		t.Error("pageable copies are implicit and have a hint")
	}
}

func TestSyncFree(t *testing.T) {
	p := run1(t,
		malloc(1, 1000, us, devA, 1000),
		malloc(1, 2000, us, devB, 500),
		mallocHost(1, 3000, hostP, 4096),
		launch(1, 10_000, 0x2, kern),
		free(1, 20_000, 5*us, 0),         // cudaFree(NULL): context init, no sync
		free(1, 30_000, ms, devA),        // syncs the device
		freeAsync(1, 2*ms, devB, stream), // stream-ordered: no sync
		freeHost(1, 3*ms, 200*us, hostP), // syncs the device
	)
	wantSyncs(t, p, []Sync{
		{Kind: SyncFree, Call: 5, TID: 1, Stream: -1, Start: 30_000, BlockedNs: ms, QueuedOps: 1},
		{Kind: SyncFree, Call: 7, TID: 1, Stream: -1, Start: 3 * ms, BlockedNs: 200 * us, QueuedOps: 0},
	})
	if op := p.GPUOps[0]; !op.Bounded || op.End != 1_030_000 {
		t.Errorf("kernel before cudaFree: bounded %v end %d", op.Bounded, op.End)
	}
	if p.DeviceMemInUse != 0 || p.DeviceMemPeak != 1500 || p.PinnedBytes != 0 {
		t.Errorf("device in use %d peak %d pinned %d", p.DeviceMemInUse, p.DeviceMemPeak, p.PinnedBytes)
	}
}

func TestSyncMalloc(t *testing.T) {
	p := run1(t,
		malloc(1, 1000, 2*ms, devA, 100), // slow, but nothing queued
		launch(1, 3*ms, stream, kern),
		malloc(1, 4*ms, 500*us, devA+100, 100),      // queued work, but fast
		mallocAsync(1, 5*ms, devA+200, 100, stream), // stream-ordered
		malloc(1, 6*ms, 2*ms, devA+300, 100),        // slow with work queued
		malloc(1, 9*ms, 1*ms, devA+400, 100),        // exactly the threshold: not over it
	)
	wantSyncs(t, p, []Sync{{Kind: SyncMalloc, Call: 4, TID: 1, Stream: -1, Start: 6 * ms, BlockedNs: 2 * ms, QueuedOps: 1}})
	// A malloc does not tell when the work finished.
	if p.GPUOps[0].Bounded {
		t.Error("cudaMalloc bounded GPU work")
	}
	if p.DeviceMemInUse != 500 || p.DeviceMemPeak != 500 {
		t.Errorf("in use %d peak %d", p.DeviceMemInUse, p.DeviceMemPeak)
	}
}

func TestSyncLegacyStream(t *testing.T) {
	p := run1(t,
		streamCreate(1, 1000, stream),
		streamCreateFlags(1, 2000, nbStrm, 1),
		launch(1, 10_000, stream, kern), // blocking stream: pending
		launch(1, 11_000, nbStrm, kern), // non-blocking: does not count
		launch(1, 12_000, stream, kern),
		launch(1, 20_000, 0, kern), // serializes behind the blocking stream's 2 ops
		launch(1, 30_000, 0, kern), // nothing new on blocking streams
		launch(1, 40_000, stream, kern),
		launch(2, 41_000, 0x2, kern),          // a per-thread default stream is blocking too
		memsetAsync(1, 50_000, devA, 64, 0x1), // cudaStreamLegacy
		// A sync on the legacy stream waits for the blocking streams only.
		streamSync(1, 60_000, ms, 0),
	)
	wantSyncs(t, p, []Sync{
		{Kind: SyncLegacyStream, Call: 5, TID: 1, Stream: 0, Start: 20_000, BlockedNs: 0, QueuedOps: 2},
		{Kind: SyncLegacyStream, Call: 9, TID: 1, Stream: 0, Start: 50_000, BlockedNs: 0, QueuedOps: 4},
		{Kind: SyncStream, Call: 10, TID: 1, Stream: 0, Start: 60_000, BlockedNs: ms, QueuedOps: 3},
	})
	if st := p.Streams[0].Stats; st.Syncs != 3 || st.SyncBlockedNs != ms {
		t.Errorf("legacy stream stats %+v", st)
	}
	for i, op := range p.GPUOps {
		if want := op.Stream != 2; op.Bounded != want || (want && op.End > 1_060_000) {
			t.Errorf("op %d on stream %d: bounded %v end %d after the legacy sync", i, op.Stream, op.Bounded, op.End)
		}
	}
	if SyncLegacyStream.String() != "legacy_stream" || SyncLegacyStream.Explicit() {
		t.Error("legacy stream serialization misnamed or explicit")
	}
}

func TestSyncQueryPoll(t *testing.T) {
	p := run1(t,
		streamCreate(1, 1000, stream),
		launch(1, 10_000, stream, kern),
		launch(1, 11_000, stream, kern),
		eventRecord(1, 12_000, 0xe1, stream),
		launch(1, 13_000, stream, kern),
		// Thread 1 spins on the stream: 3 not-ready answers, then ready.
		streamQuery(1, 100_000, 2*us, stream, 600),
		streamQuery(1, 200_000, 2*us, stream, 600),
		streamQuery(2, 250_000, 2*us, stream, 600), // another thread: its own loop
		streamQuery(1, 300_000, 2*us, stream, 600),
		streamQuery(1, 400_000, 3*us, stream, 0),
		// A single not-ready answer is no loop.
		launch(1, 500_000, stream, kern),
		streamQuery(1, 510_000, 2*us, stream, 600),
		streamQuery(1, 520_000, 2*us, stream, 0),
		// Thread 2 finishes its loop (2 not-ready answers).
		streamQuery(2, 600_000, 2*us, stream, 600),
		streamQuery(2, 700_000, 4*us, stream, 0),
		// An event poll loop.
		launch(3, 800_000, nbStrm, kern),
		eventRecord(3, 810_000, 0xe2, nbStrm),
		launch(3, 820_000, nbStrm, kern),
		eventQuery(3, 900_000, us, 0xe2, 600),
		eventQuery(3, 950_000, us, 0xe2, 600),
		eventQuery(3, 1_000_000, us, 0xe2, 0),
		// Polling an event never recorded: not ready, then ready; no stream to blame.
		eventQuery(3, 2*ms, us, 0xe9, 600),
		eventQuery(3, 2*ms+10, us, 0xe9, 600),
		eventQuery(3, 2*ms+20, us, 0xe9, 0),
	)
	wantSyncs(t, p, []Sync{
		{Kind: SyncQueryPoll, Call: 9, TID: 1, Stream: 1, Start: 100_000, BlockedNs: 303_000, QueuedOps: 3, Polls: 4},
		{Kind: SyncQueryPoll, Call: 14, TID: 2, Stream: 1, Start: 250_000, BlockedNs: 454_000, QueuedOps: 0, Polls: 3},
		{Kind: SyncQueryPoll, Call: 20, TID: 3, Stream: 2, Start: 900_000, BlockedNs: 101_000, QueuedOps: 2, Polls: 3},
	})
	// The ready answer bounds what it covers: everything on the stream, or
	// up to the event's position.
	wantOps(t, p,
		[3]uint64{10_000, 141_000, 1},
		[3]uint64{141_000, 272_000, 1},
		[3]uint64{272_000, 403_000, 1},
		[3]uint64{500_000, 522_000, 1},
		[3]uint64{800_000, 1_001_000, 1},
		[3]uint64{1_001_000, 1_001_000, 0},
	)
	if st := p.Streams[1].Stats; st.Syncs != 2 || st.SyncBlockedNs != 303_000+454_000 {
		t.Errorf("stream 1: %d syncs, %d ns blocked", st.Syncs, st.SyncBlockedNs)
	}
	if st := p.Streams[2].Stats; st.Syncs != 1 || st.SyncBlockedNs != 101_000 {
		t.Errorf("stream 2: %d syncs, %d ns blocked", st.Syncs, st.SyncBlockedNs)
	}
}

func TestSyncKindNames(t *testing.T) {
	want := map[SyncKind]string{SyncNone: "", SyncStream: "stream_sync", SyncDevice: "device_sync", SyncEvent: "event_sync",
		SyncMemcpy: "sync_memcpy", SyncMemset: "sync_memset", SyncPageableMemcpy: "pageable_memcpy", SyncFree: "free_sync",
		SyncMalloc: "malloc_sync", SyncLegacyStream: "legacy_stream", SyncQueryPoll: "query_poll", 99: "unknown"}
	for k, w := range want {
		if k.String() != w {
			t.Errorf("SyncKind(%d) = %q, want %q", k, k.String(), w)
		}
		explicit := k == SyncStream || k == SyncDevice || k == SyncEvent
		if k.Explicit() != explicit {
			t.Errorf("%v.Explicit() = %v", k, k.Explicit())
		}
		if (k.Hint() != "") != (k != SyncNone && k != 99) {
			t.Errorf("%v.Hint() = %q", k, k.Hint())
		}
	}
}
