package model

import (
	"reflect"
	"testing"
)

func TestEventDependencies(t *testing.T) {
	p := run1(t,
		streamCreate(1, 1000, stream),         // 0
		streamCreateFlags(1, 2000, nbStrm, 1), // 1
		launch(1, 10_000, stream, kern),       // 2, op 0
		eventRecord(1, 11_000, 0xe1, stream),  // 3
		streamWait(2, 12_000, nbStrm, 0xe1),   // 4: stream 2 waits for op 0
		launch(2, 13_000, nbStrm, kern),       // 5, op 1
		streamWait(2, 14_000, 0x2, 0xe9),      // 6: never recorded: no dependency
		eventRecord(1, 15_000, 0xe1, 0),       // 7: re-recorded on the legacy stream, nothing queued there
		streamWait(2, 16_000, 0x2, 0xe1),      // 8: per-thread stream of tid 2 waits on it
		launch(2, 17_000, 0x2, kern),          // 9, op 2
	)
	want := []Dependency{
		{Event: 0xe1, RecordCall: 3, WaitCall: 4, FromStream: 1, ToStream: 2},
		{Event: 0xe1, RecordCall: 7, WaitCall: 8, FromStream: 0, ToStream: 3},
	}
	if !reflect.DeepEqual(p.Deps, want) {
		t.Errorf("deps:\n got %+v\nwant %+v", p.Deps, want)
	}
	// Only the first op after a wait on a recorded position waits.
	for i, w := range []int{-1, 0, -1} {
		if p.GPUOps[i].After != w {
			t.Errorf("op %d: After %d, want %d", i, p.GPUOps[i].After, w)
		}
	}
}

// TestWaitEventOrdersInferredOps: an op queued after cudaStreamWaitEvent
// never starts before the op the event was recorded after has ended.
func TestWaitEventOrdersInferredOps(t *testing.T) {
	t.Run("waited-for stream synced first", func(t *testing.T) {
		p := run1(t,
			streamCreate(1, 1000, stream),
			streamCreateFlags(1, 2000, nbStrm, 1),
			launch(1, 10_000, stream, kern), // op 0 (A)
			eventRecord(1, 11_000, 0xe1, stream),
			streamWait(1, 12_000, nbStrm, 0xe1),
			launch(1, 13_000, nbStrm, kern),      // op 1 (B) waits for A
			launch(1, 14_000, nbStrm, kern),      // op 2 (C)
			streamSync(1, 20_000, 10*ms, stream), // A ends at 10.02 ms
			streamSync(1, 10_100_000, 2*ms, nbStrm),
		)
		wantOps(t, p,
			[3]uint64{10_000, 10_020_000, 1},
			[3]uint64{10_020_000, 10_020_000, 1}, // not at its enqueue (13 µs): after A
			[3]uint64{10_020_000, 12_100_000, 1},
		)
	})
	t.Run("waiting stream synced first", func(t *testing.T) {
		p := run1(t,
			streamCreate(1, 1000, stream),
			streamCreateFlags(1, 2000, nbStrm, 1),
			launch(1, 10_000, stream, kern), // op 0 (A)
			eventRecord(1, 11_000, 0xe1, stream),
			streamWait(1, 12_000, nbStrm, 0xe1),
			launch(1, 13_000, nbStrm, kern), // op 1 (B) waits for A
			// B done by 5.02 ms, so A was too.
			streamSync(1, 20_000, 5*ms, nbStrm),
			launch(1, 6*ms, stream, kern),          // op 2
			streamSync(1, 6_100_000, 5*us, stream), // only op 2 left
		)
		wantOps(t, p,
			[3]uint64{10_000, 5_020_000, 1},
			[3]uint64{5_020_000, 5_020_000, 1},
			[3]uint64{6_000_000, 6_100_000, 1},
		)
		if q := p.Syncs[1].QueuedOps; q != 1 {
			t.Errorf("second sync found %d ops queued, want 1", q)
		}
	})
	t.Run("laid out by Finish", func(t *testing.T) {
		p := run1(t,
			streamCreate(1, 1000, stream),
			streamCreateFlags(1, 2000, nbStrm, 1),
			launch(1, 3000, stream, kern),      // op 0
			streamSync(1, 4000, 10*ms, stream), // stream 1 busy until 10.004 ms
			launch(2, 5000, stream, kern),      // op 1 (A): thread 2's call, seen after the sync returned
			eventRecord(2, 6000, 0xe1, stream),
			streamWait(2, 7000, nbStrm, 0xe1),
			launch(2, 8000, nbStrm, kern), // op 2 (B)
		)
		wantOps(t, p,
			[3]uint64{3000, 10_004_000, 1},
			[3]uint64{10_004_000, 10_004_000, 0},
			[3]uint64{10_004_000, 10_004_000, 0}, // not at 8 µs: after A
		)
	})
	t.Run("a later wait replaces an earlier one", func(t *testing.T) {
		p := run1(t,
			launch(1, 1000, stream, kern), // op 0
			eventRecord(1, 2000, 0xe1, stream),
			launch(1, 3000, nbStrm, kern), // op 1
			eventRecord(1, 4000, 0xe2, nbStrm),
			streamWait(1, 5000, 0xc0, 0xe1),
			streamWait(1, 6000, 0xc0, 0xe2),
			launch(1, 7000, 0xc0, kern), // op 2
		)
		if p.GPUOps[2].After != 1 || len(p.Deps) != 2 {
			t.Errorf("After %d, %d deps; want 1, 2", p.GPUOps[2].After, len(p.Deps))
		}
	})
}

// TestEventHandleReuse: a destroyed event's recorded position is gone; a
// re-created handle waits on nothing until recorded again.
func TestEventHandleReuse(t *testing.T) {
	p := run1(t,
		eventCreate(1, 1000, 0xe1),
		launch(1, 2000, stream, kern),
		eventRecord(1, 3000, 0xe1, stream),
		eventDestroy(1, 4000, 0xe1),
		eventCreate(1, 5000, 0xe1),        // the runtime hands the handle out again
		streamWait(1, 6000, nbStrm, 0xe1), // waits on nothing
		launch(1, 7000, nbStrm, kern),
		eventSync(1, 8000, ms, 0xe1), // returns at once in CUDA: nothing recorded
		eventRecord(1, 2*ms, 0xe2, stream),
		eventCreate(1, 3*ms, 0xe2), // creation seen without the destroy
		streamWait(1, 4*ms, nbStrm, 0xe2),
	)
	if len(p.Deps) != 0 {
		t.Errorf("deps on a re-created event: %+v", p.Deps)
	}
	if p.GPUOps[1].After != -1 {
		t.Errorf("op after the wait: After %d, want -1", p.GPUOps[1].After)
	}
	wantSyncs(t, p, []Sync{{Kind: SyncEvent, Call: 7, TID: 1, Stream: -1, Start: 8000, BlockedNs: ms, QueuedOps: 0}})
	if p.GPUOps[0].Bounded {
		t.Error("sync on a re-created event bounded the old record's work")
	}
}
