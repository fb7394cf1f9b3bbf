package model

import (
	"reflect"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

const kern = 0x401000 // a kernel host stub

// streamsNoStats returns the streams with their stats cleared, for exact
// comparison of identity fields.
func streamsNoStats(p *traced) []Stream {
	var out []Stream
	for _, s := range p.Streams {
		c := *s
		c.Stats, c.Devices = StreamStats{}, 0 // devices: TestDevices
		out = append(out, c)
	}
	return out
}

func TestStreamCreation(t *testing.T) {
	p := run1(t,
		streamCreate(1, 1000, 0xa),
		streamCreateFlags(1, 2000, 0xb, 1),
		streamCreatePrio(1, 3000, 0xc, 1, -3),
		streamCreatePrio(1, 4000, 0xd, 0, -1),
		streamCreate(1, 4500, 0xe).ret(2), // failed: no stream
		streamCreateFlags(1, 4600, 0, 0),  // no handle read
		launch(1, 5000, 0xa, kern),
		launch(1, 6000, 0xc, kern),
		launch(1, 7000, 0xd, kern),
		launch(1, 8000, 0xd, kern),
	)
	want := []Stream{
		{ID: 0, Kind: StreamLegacy},
		{ID: 1, Handle: 0xa, Kind: StreamCreated, CreatedAt: 1000},
		{ID: 2, Handle: 0xb, Kind: StreamCreated, NonBlocking: true, CreatedAt: 2000},
		{ID: 3, Handle: 0xc, Kind: StreamCreated, NonBlocking: true, Priority: -3, CreatedAt: 3000},
		{ID: 4, Handle: 0xd, Kind: StreamCreated, Priority: -1, CreatedAt: 4000},
	}
	if got := streamsNoStats(p); !reflect.DeepEqual(got, want) {
		t.Errorf("streams:\n got %+v\nwant %+v", got, want)
	}
	wantStream := []int32{1, 2, 3, 4, -1, -1, 1, 3, 4, 4}
	for i, c := range p.Calls {
		if c.Stream != wantStream[i] {
			t.Errorf("call %d (%v): stream %d, want %d", i, c.API, c.Stream, wantStream[i])
		}
	}
	wantLaunches := []int64{0, 1, 0, 1, 2}
	for i, s := range p.Streams {
		if s.Stats.Launches != wantLaunches[i] {
			t.Errorf("stream %d: %d launches, want %d", i, s.Stats.Launches, wantLaunches[i])
		}
	}
	labels := []string{"stream 0 (legacy default)", "stream 1 (blocking, prio 0)", "stream 2 (non-blocking, prio 0)",
		"stream 3 (non-blocking, prio -3)", "stream 4 (blocking, prio -1)"}
	for i, s := range p.Streams {
		if s.Label() != labels[i] {
			t.Errorf("stream %d label %q, want %q", i, s.Label(), labels[i])
		}
	}
	blocking := []bool{true, true, false, false, true}
	for i, s := range p.Streams {
		if s.Blocking() != blocking[i] {
			t.Errorf("stream %d Blocking() = %v, want %v", i, s.Blocking(), blocking[i])
		}
	}
}

func TestPreExistingStream(t *testing.T) {
	p := run1(t,
		launch(1, 1000, 0x5000, kern),
		memcpyAsync(2, 2000, us, 0x10, 0x20, 64, event.DeviceToDevice, 0x5000),
		launch(1, 3000, 0x6000, kern),
		streamSync(1, 4000, us, 0x5000),
	)
	want := []Stream{
		{ID: 0, Kind: StreamLegacy},
		{ID: 1, Handle: 0x5000, Kind: StreamPreExisting, Device: DeviceUnknown},
		{ID: 2, Handle: 0x6000, Kind: StreamPreExisting, Device: DeviceUnknown},
	}
	if got := streamsNoStats(p); !reflect.DeepEqual(got, want) {
		t.Errorf("streams:\n got %+v\nwant %+v", got, want)
	}
	for i, w := range []int32{1, 1, 2, 1} {
		if p.Calls[i].Stream != w {
			t.Errorf("call %d: stream %d, want %d", i, p.Calls[i].Stream, w)
		}
	}
	if l := p.Streams[1].Label(); l != "stream 1 (pre-existing)" {
		t.Errorf("label %q", l)
	}
	if !p.Streams[1].Blocking() {
		t.Error("a pre-existing stream is assumed blocking")
	}
}

func TestLegacyDefaultStream(t *testing.T) {
	p := run1(t,
		launch(1, 1000, 0, kern),
		launch(1, 2000, 0x1, kern),        // cudaStreamLegacy
		launch(2, 3000, 0x1, kern).ptsz(), // cudaStreamLegacy from a per-thread build is still legacy
		memcpySync(1, 4000, us, 0x10, 0x20, 8, event.DeviceToDevice),
		memsetSync(2, 5000, us, 0x10, 8),
		streamSync(1, 6000, us, 0),
		eventRecord(1, 7000, 0xe1, 0x1),
	)
	if len(p.Streams) != 1 {
		t.Fatalf("%d streams, want only the legacy one: %+v", len(p.Streams), streamsNoStats(p))
	}
	for i, c := range p.Calls {
		if c.Stream != 0 {
			t.Errorf("call %d (%s): stream %d, want 0", i, c.SymbolName(), c.Stream)
		}
	}
	if s := p.Streams[0]; s.Stats.Launches != 3 || s.Stats.Memcpys != 1 || s.Stats.Memsets != 1 {
		t.Errorf("legacy stream stats %+v", s.Stats)
	}
}

func TestPerThreadDefaultStream(t *testing.T) {
	p := run1(t,
		launch(1, 1000, 0x2, kern),                                          // cudaStreamPerThread, thread 1 → stream 1
		launch(2, 2000, 0x2, kern),                                          // thread 2 → stream 2
		launch(1, 3000, 0, kern).ptsz(),                                     // _ptsz with 0: thread 1's own → stream 1
		launch(3, 4000, 0, kern).ptsz(),                                     // thread 3 → stream 3
		launch(3, 5000, 0, kern),                                            // plain symbol with 0: legacy
		memcpySync(2, 6000, us, 0x10, 0x20, 8, event.DeviceToDevice).ptsz(), // cudaMemcpy_ptds → stream 2
		memsetSync(4, 7000, us, 0x10, 8).ptsz(),                             // thread 4 → stream 4
		memcpyAsync(3, 8000, us, 0x10, 0x20, 8, event.DeviceToDevice, 0x2),  // stream 3
		streamSync(2, 9000, us, 0).ptsz(),                                   // stream 2
	)
	want := []Stream{
		{ID: 0, Kind: StreamLegacy},
		{ID: 1, Handle: 0x2, Kind: StreamPerThread, OwnerTID: 1, CreatedAt: 1000},
		{ID: 2, Handle: 0x2, Kind: StreamPerThread, OwnerTID: 2, CreatedAt: 2000},
		{ID: 3, Handle: 0x2, Kind: StreamPerThread, OwnerTID: 3, CreatedAt: 4000},
		{ID: 4, Handle: 0x2, Kind: StreamPerThread, OwnerTID: 4, CreatedAt: 7000},
	}
	if got := streamsNoStats(p); !reflect.DeepEqual(got, want) {
		t.Errorf("streams:\n got %+v\nwant %+v", got, want)
	}
	for i, w := range []int32{1, 2, 1, 3, 0, 2, 4, 3, 2} {
		if p.Calls[i].Stream != w {
			t.Errorf("call %d (%s, tid %d): stream %d, want %d", i, p.Calls[i].SymbolName(), p.Calls[i].TID, p.Calls[i].Stream, w)
		}
	}
	if l := p.Streams[3].Label(); l != "stream 3 (per-thread default, tid 3)" {
		t.Errorf("label %q", l)
	}
	// The per-thread default stream is not a non-blocking stream: it
	// synchronizes with the legacy default stream (CUDA runtime docs,
	// "Stream synchronization behavior").
	if !p.Streams[1].Blocking() {
		t.Error("per-thread default stream reported non-blocking")
	}
}

func TestStreamHandleReuse(t *testing.T) {
	p := run1(t,
		streamCreate(1, 1000, 0xa),
		launch(1, 2000, 0xa, kern),
		streamDestroy(1, 3000, 0xa),
		streamCreateFlags(1, 4000, 0xa, 1), // the runtime hands the same handle out again
		launch(1, 5000, 0xa, kern),
		// Creation seen again without a destroy in between: still a new stream.
		streamCreate(1, 6000, 0xa),
		launch(1, 7000, 0xa, kern),
	)
	want := []Stream{
		{ID: 0, Kind: StreamLegacy},
		{ID: 1, Handle: 0xa, Kind: StreamCreated, CreatedAt: 1000, DestroyedAt: 3000},
		{ID: 2, Handle: 0xa, Kind: StreamCreated, NonBlocking: true, CreatedAt: 4000},
		{ID: 3, Handle: 0xa, Kind: StreamCreated, CreatedAt: 6000},
	}
	if got := streamsNoStats(p); !reflect.DeepEqual(got, want) {
		t.Errorf("streams:\n got %+v\nwant %+v", got, want)
	}
	for i, w := range []int32{1, 1, 1, 2, 2, 3, 3} {
		if p.Calls[i].Stream != w {
			t.Errorf("call %d (%v): stream %d, want %d", i, p.Calls[i].API, p.Calls[i].Stream, w)
		}
	}
	if p.GPUOps[0].Stream != 1 || p.GPUOps[1].Stream != 2 || p.GPUOps[2].Stream != 3 {
		t.Errorf("ops on streams %d %d %d, want 1 2 3", p.GPUOps[0].Stream, p.GPUOps[1].Stream, p.GPUOps[2].Stream)
	}
}

func TestStreamDestroyUnknownAndLegacy(t *testing.T) {
	p := run1(t,
		streamDestroy(1, 1000, 0), // the legacy stream cannot be destroyed
		streamDestroy(1, 2000, 0x77),
	)
	if p.Streams[0].DestroyedAt != 0 {
		t.Error("legacy stream marked destroyed")
	}
	want := []Stream{{ID: 0, Kind: StreamLegacy}, {ID: 1, Handle: 0x77, Kind: StreamPreExisting, Device: DeviceUnknown, DestroyedAt: 2000}}
	if got := streamsNoStats(p); !reflect.DeepEqual(got, want) {
		t.Errorf("streams:\n got %+v\nwant %+v", got, want)
	}
}
