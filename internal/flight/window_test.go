package flight

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

// fakeSession feeds a recorder as a session does: each call to a model
// whose sink is the recorder, then its record to a recording writer on
// the recorder (its tap).
type fakeSession struct {
	t   *testing.T
	r   *Recorder
	w   *recording.Writer
	m   *model.Model
	pid uint32
	now uint64 // the next call's start, ns
}

func newFakeSession(t *testing.T, r *Recorder, pid uint32) *fakeSession {
	w, err := recording.NewWriter(r, recording.NewHeader("test", 0))
	if err != nil {
		t.Fatal(err)
	}
	w.Process(pid, model.ProcessInfo{Comm: "fake", Cmdline: "fake"})
	return &fakeSession{t: t, r: r, w: w, m: model.New(r), pid: pid, now: 1_000_000_000}
}

// call makes one call of api with args, its return out and ret, lasting
// dur (0: an entry-only probe); the next starts step later.
func (s *fakeSession) call(api event.API, out uint64, ret int64, dur, step uint64, args ...uint64) {
	ev := event.Event{Start: s.now, Cookie: uint64(api), PID: s.pid, TID: s.pid, Ret: ret, Out: out}
	if dur > 0 {
		ev.End, ev.Flags = s.now+dur, event.FlagHasRet
	}
	copy(ev.Args[:], args)
	raw := event.Encode(nil, &ev)
	s.m.Handle(&ev)
	s.w.Event(raw)
	s.now += step
}

func (s *fakeSession) launch(stream uint64) {
	s.call(event.CudaLaunchKernel, 0, 0, 0, 1000, 0x401000, 1, 1, 1, 1, 0, 0, stream)
}

// end closes the session (the recorder writes what is due).
func (s *fakeSession) end() { s.w.Close() }

// dumpNow dumps every process (the session ended: written at once) and
// reads it back.
func dumpNow(t *testing.T, r *Recorder) (*Result, *model.Result, *replay.Replay) {
	t.Helper()
	res, err := r.Dump(context.Background(), nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	d := dumps(t, r)
	for _, x := range d {
		if x.path == res.Path {
			return res, x.res, &replay.Replay{Header: recording.Header{Flight: x.flight}}
		}
	}
	t.Fatalf("%s not found", res.Path)
	return nil, nil, nil
}

// self is the fake sessions' process: one alive (the recorder lets go of
// a process gone).
var self = uint32(os.Getpid())

const (
	stream  = 0x5000
	kept    = 0xa000 // an allocation never freed
	freed   = 0xb000 // one freed
	mib     = 1 << 20
	budget  = 64 << 10
	launchN = 5000
)

// TestWindowBudget: a process floods its window (5,000 launches, 200 bytes
// each, into a 64 KiB budget): the oldest go first, each counted as
// dropped; what the recorder holds stays within its budget; the stream,
// and the allocation still live, made before the window, are restated in
// the dump (the freed one is not), and the dump holds the window's
// launches and says how many were dropped.
func TestWindowBudget(t *testing.T) {
	r := newRecorder(t, Options{MaxBytes: budget, NoExitWatch: true, NoReport: true})
	s := newFakeSession(t, r, self)
	s.call(event.CudaStreamCreateWithFlags, stream, 0, 1000, 1000, 0x7ff0, 1)
	s.call(event.CudaMalloc, kept, 0, 1000, 1000, 0x7ff8, mib)
	s.call(event.CudaMalloc, freed, 0, 1000, 1000, 0x7ff8, 2*mib)
	s.call(event.CudaFree, 0, 0, 1000, 1000, freed)
	for range launchN {
		s.launch(stream)
		// The model's own window of pending ops is larger than the
		// recorder's budget: a sync now and then proves them complete.
	}
	s.call(event.CudaStreamSynchronize, 0, 0, 1000, 1000, stream)
	for range 100 {
		s.launch(stream)
	}
	s.call(event.CudaStreamSynchronize, 0, 0, 1000, 1000, stream)
	s.end()

	st := r.Stats()
	ps := st.PerProcess[self]
	const calls = 4 + launchN + 1 + 100 + 1
	if ps.Read != calls || ps.Held+ps.Dropped+ps.Expired != ps.Read {
		t.Errorf("read %d (want %d) = held %d + dropped %d + expired %d", ps.Read, calls, ps.Held, ps.Dropped, ps.Expired)
	}
	if ps.Expired != 0 || ps.Dropped < launchN/2 || st.Dropped != ps.Dropped {
		t.Errorf("dropped %d (total %d), expired %d: the budget should have dropped most launches", ps.Dropped, st.Dropped, ps.Expired)
	}
	// The bound: the window within its share, plus the chunk being filled.
	if ps.WindowBytes > int64(r.windowMax+r.chunkSize) || ps.WindowBytes+ps.StateBytes+ps.NameBytes > budget+int64(r.chunkSize) {
		t.Errorf("holds %d window + %d state + %d names bytes, budget %d (window %d)", ps.WindowBytes, ps.StateBytes, ps.NameBytes, budget, r.windowMax)
	}
	if ps.Restated != 2 {
		t.Errorf("%d state records kept, want 2 (the stream, the live allocation)", ps.Restated)
	}

	res, mr, rp := dumpNow(t, r)
	if res.Dropped != ps.Dropped || res.Events != ps.Held || res.Restated != 2 || rp.Header.Flight.Dropped != ps.Dropped {
		t.Errorf("dump %+v, flight %+v; recorder %+v", res, rp.Header.Flight, ps)
	}
	p := mr.Processes[0]
	if p.DeviceMemInUse != mib {
		t.Errorf("the dump's process holds %d bytes, want the live allocation's %d", p.DeviceMemInUse, mib)
	}
	var created bool
	for _, st := range p.Streams {
		created = created || (st.Handle == stream && st.Kind == model.StreamCreated && st.NonBlocking)
	}
	if !created {
		t.Errorf("the stream made before the window is not known as created non-blocking: %+v", p.Streams)
	}
	if n := uint64(p.NCalls); n != ps.Held+2 {
		t.Errorf("the dump holds %d calls, want the window's %d and the 2 restated", n, ps.Held)
	}
}

// TestWindowTime: a window keeps the last Window of the process's own
// activity: older events leave it as expired, not dropped.
func TestWindowTime(t *testing.T) {
	r := newRecorder(t, Options{Window: 100 * time.Millisecond, NoExitWatch: true, NoReport: true})
	s := newFakeSession(t, r, self)
	const n, step = 2000, uint64(time.Millisecond) // 2 s of launches, one a millisecond
	for range n {
		s.launch(stream)
	}
	s.end()
	ps := r.Stats().PerProcess[self]
	if ps.Dropped != 0 || ps.Held+ps.Expired != n {
		t.Fatalf("%+v", ps)
	}
	// 100 launches a 100 ms, and what shares the oldest chunk with the
	// first of them.
	perChunk := uint64(r.chunkSize / (recHeader + event.HeaderSize))
	if ps.Held < 2 || ps.Held > 2*perChunk+100 {
		t.Errorf("holds %d launches of the last 100 ms, want about 100 (chunks of %d)", ps.Held, perChunk)
	}
	_ = step
}

// TestPendingRestated: a launch whose GPU work the model has not seen
// complete stays in the dump after the window left it (what a hang waits
// for); once a synchronization proves it complete it goes.
func TestPendingRestated(t *testing.T) {
	r := newRecorder(t, Options{Window: time.Millisecond, MaxBytes: budget, NoExitWatch: true, NoReport: true})
	s := newFakeSession(t, r, self)
	s.launch(stream)                                           // pending
	s.call(event.CudaMalloc, kept, 0, 1000, 1000, 0x7ff8, mib) // lasting
	s.now += uint64(time.Second)
	for range 200 {
		s.call(event.CudaSetDevice, 0, 0, 10, uint64(time.Millisecond), 0)
	}
	// The launch and the allocation (the thread's device was set again
	// within the window).
	if ps := r.Stats().PerProcess[self]; ps.Restated != 2 || ps.Expired == 0 {
		t.Fatalf("%d restated, want 2: %+v", ps.Restated, ps)
	}
	s.call(event.CudaStreamSynchronize, 0, 0, 1000, 1000, stream)
	if ps := r.Stats().PerProcess[self]; ps.Restated != 1 {
		t.Fatalf("%d restated once the launch was proven complete, want 1: %+v", ps.Restated, ps)
	}
	s.end()
}

// TestDumpsDirBound: the dumps in Dir stay under DirMaxBytes: each new one
// removes the oldest until they fit (counted), never a file that is not
// the recorder's; a dump larger than the bound by itself is removed too,
// and that is its error.
func TestDumpsDirBound(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, make([]byte, 10<<10), 0o644)
	r := newRecorder(t, Options{Dir: dir, MaxBytes: budget, DirMaxBytes: budget, NoExitWatch: true, NoReport: true})
	s := newFakeSession(t, r, self)
	for range 100 { // about 20 KB a dump
		s.launch(stream)
	}
	s.end()
	var paths []string
	for i := range 5 {
		res, err := r.Dump(context.Background(), nil, "test")
		if err != nil {
			t.Fatalf("dump %d: %v", i, err)
		}
		paths = append(paths, res.Path)
	}
	var total int64
	var remaining []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			fi, _ := e.Info()
			total += fi.Size()
			remaining = append(remaining, filepath.Join(dir, e.Name()))
		}
	}
	if total > budget || len(remaining) < 2 || !slices.Equal(remaining, paths[len(paths)-len(remaining):]) {
		t.Errorf("%d bytes of dumps kept (bound %d): %v; want the newest of %v", total, budget, remaining, paths)
	}
	if st := r.Stats(); st.Removed != uint64(len(paths)-len(remaining)) || st.Dumps["on_demand"] != 5 {
		t.Errorf("stats %+v: %d removed", st, len(paths)-len(remaining))
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file not the recorder's was removed: %v", err)
	}

	// A dump larger than the whole bound by itself (its HTML report is:
	// the page's scripts alone are more than 64 KiB).
	r2 := newRecorder(t, Options{Dir: t.TempDir(), MaxBytes: budget, DirMaxBytes: budget, NoExitWatch: true})
	s2 := newFakeSession(t, r2, self)
	for range 100 {
		s2.launch(stream)
	}
	s2.end()
	if _, err := r2.Dump(context.Background(), nil, "test"); err == nil || !strings.Contains(err.Error(), "larger than --dumps-max-bytes") {
		t.Errorf("a dump over the bound: %v", err)
	}
	if st := r2.Stats(); st.Failures != 1 {
		t.Errorf("%d failures, want 1", st.Failures)
	}
	if left, _ := filepath.Glob(filepath.Join(r2.o.Dir, prefix+"*")); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
