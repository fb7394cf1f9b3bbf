package flight

import (
	"os"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// TestHostBound: three processes launching in turn, each within its own
// budget, and their windows together within HostMaxBytes, smaller than
// what their budgets add up to. The windows never hold more than the
// host's bound (and the chunk being filled), checked at every record; the
// largest gives way, so each keeps some of its calls; every launch read is
// held or dropped, counted.
func TestHostBound(t *testing.T) {
	const perProcess, host, each = 256 << 10, 256 << 10, 20_000
	r := newRecorder(t, Options{MaxBytes: perProcess, HostMaxBytes: host, NoExitWatch: true, NoReport: true})
	// Live processes: the recorder forgets those it finds gone.
	pids := []uint32{1, uint32(os.Getppid()), self}
	var peak int
	r.onRecord = func(*proc) {
		sum := 0
		for _, p := range r.procs {
			sum += p.window.bytes
		}
		if sum != r.windows {
			t.Fatalf("the windows hold %d bytes, the recorder counts %d", sum, r.windows)
		}
		peak = max(peak, r.windows)
	}
	var sessions []*fakeSession
	for _, pid := range pids {
		sessions = append(sessions, newFakeSession(t, r, pid))
	}
	for range each {
		for _, s := range sessions {
			s.launch(stream)
		}
	}
	st := r.Stats()
	if limit := host + r.chunkSize; peak > limit {
		t.Errorf("the windows held up to %d bytes, the host's bound %d (+ the chunk being filled: %d)", peak, host, limit)
	}
	if peak <= host-r.chunkSize {
		t.Errorf("the windows held at most %d bytes: the bound %d was never reached, so never tested", peak, host)
	}
	for _, pid := range pids {
		ps := st.PerProcess[pid]
		if ps.Read < each || ps.Held+ps.Dropped+ps.Expired != ps.Read || ps.Held == 0 || ps.Dropped == 0 {
			t.Errorf("process %d: read %d = held %d + dropped %d + expired %d (%d launches)", pid, ps.Read, ps.Held, ps.Dropped, ps.Expired, each)
		}
		if ps.WindowBytes > int64(r.windowMax+r.chunkSize) {
			t.Errorf("process %d: window %d bytes, its share %d", pid, ps.WindowBytes, r.windowMax)
		}
	}
	t.Logf("peak %d bytes held in the windows (bound %d); per process %+v", peak, host, st.PerProcess)
}

// TestChunksReused: a window that turns over many times reuses its
// chunks: the recorder allocates about one window's worth, not one chunk
// per chunk of calls read (a busy process's calls would otherwise become
// garbage at the rate they come, and the heap grow to twice what the
// recorder holds between collections).
func TestChunksReused(t *testing.T) {
	r := newRecorder(t, Options{MaxBytes: 256 << 10, NoExitWatch: true, NoReport: true})
	s := newFakeSession(t, r, self)
	const n = 100_000
	for range n {
		s.launch(stream)
	}
	ps := r.Stats().PerProcess[self]
	if ps.Dropped < n/2 {
		t.Fatalf("dropped %d of %d: the window did not turn over", ps.Dropped, n)
	}
	turned := int(ps.Read) * (recHeader + event.HeaderSize) / r.chunkSize // chunks of calls read
	// The window's full chunks and the spares, and the small ones a
	// window begins with (4 KiB, doubling).
	limit := r.windowMax/r.chunkSize + 1 + maxSpare + 8
	if r.chunks.made > limit {
		t.Errorf("%d chunks made for %d chunks of calls read, want at most %d", r.chunks.made, turned, limit)
	}
	t.Logf("%d chunks made for %d chunks of calls read (%d launches; %d bytes a chunk)", r.chunks.made, turned, ps.Read, r.chunkSize)
}
