package gputime

import (
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/tracer/event"
)

// nvtxRecorder is a Sink that takes NVTX records too.
type nvtxRecorder struct {
	*recorder
	mu   sync.Mutex
	evs  map[uint32][]event.Event
	lost map[uint32]uint64
	done chan uint32
}

func newNVTXRecorder() *nvtxRecorder {
	return &nvtxRecorder{recorder: newRecorder(), evs: map[uint32][]event.Event{}, lost: map[uint32]uint64{}, done: make(chan uint32, 16)}
}

func (r *nvtxRecorder) NVTX(pid uint32, raw []byte) {
	var e event.Event
	if err := event.Decode(raw, &e); err != nil {
		panic(err)
	}
	e.Copy = append([]byte(nil), e.Copy...) // Decode aliases raw
	r.mu.Lock()
	r.evs[pid] = append(r.evs[pid], e)
	r.mu.Unlock()
}

func (r *nvtxRecorder) NVTXDone(pid uint32, lost uint64) {
	r.mu.Lock()
	r.lost[pid] = lost
	r.mu.Unlock()
	r.done <- pid
}

// TestNVTXInjected: a program whose NVTX library loads the collector as
// its injection library (NVTX_INJECTION64_PATH, no CUPTI asked for) hands
// every NVTX call to the listener, in order, as events of the NVTX APIs:
// the message of each (ASCII, Ex, registered), the domain of a domain's
// ranges, a started range's id on its end, the thread, and times within
// the run; nothing is lost. Without a listener, the program runs as ever.
func TestNVTXInjected(t *testing.T) {
	b := simBuild(t)
	r := newNVTXRecorder()
	l, err := Listen(Config{Root: "/", UID: -1, GID: -1}, r)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Stop(time.Second)
	const iters = 5
	before := monoNow()
	cmd := exec.Command(b.NVTXWorkload, "--scenario", "train-nvtx", "--iters", "5")
	cmd.Env = append(os.Environ(), "NVTX_INJECTION64_PATH="+l.LibraryPath())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	after := monoNow()
	rep, err := sim.ParseReport(out)
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	select {
	case pid = <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the NVTX side never said it stopped") // a hang, not a timing threshold
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid != uint32(rep.PID) || r.lost[pid] != 0 {
		t.Fatalf("NVTX of pid %d (lost %d), the workload is %d", pid, r.lost[pid], rep.PID)
	}
	type call struct {
		api    event.API
		msg    string
		domain bool
	}
	var want []call
	want = append(want, call{event.NvtxRangeStartA, "epoch", false})
	for i := 1; i <= iters; i++ {
		want = append(want, call{event.NvtxRangePushA, "train step " + string(rune('0'+i)), false},
			call{event.NvtxRangePushA, "batch", true}, call{event.NvtxRangePop, "", true},
			call{event.NvtxRangePushA, "forward", false}, call{event.NvtxRangePop, "", false}, call{event.NvtxRangePop, "", false})
	}
	want = append(want, call{event.NvtxRangeEnd, "", false}, call{event.NvtxMarkA, "checkpoint", false})
	evs := r.evs[pid]
	if len(evs) != len(want) {
		t.Fatalf("%d NVTX calls, want %d", len(evs), len(want))
	}
	var startID uint64
	for i, e := range evs {
		w := want[i]
		if e.API() != w.api || e.String() != w.msg || (e.Ext[0] != 0) != w.domain || e.Flags&event.FlagInjected == 0 ||
			e.TID != pid || e.Start < before || e.Start > after || (i > 0 && e.Start < evs[i-1].Start) {
			t.Errorf("call %d: %v %q domain %d tid %d at %d, want %v %q (domain %v) by %d within [%d, %d]",
				i, e.API(), e.String(), e.Ext[0], e.TID, e.Start, w.api, w.msg, w.domain, pid, before, after)
		}
		var a event.Args
		e.Decode(&a)
		switch e.API() {
		case event.NvtxRangeStartA:
			startID = a.Event
		case event.NvtxRangeEnd:
			if a.Event == 0 || a.Event != startID {
				t.Errorf("the range ended is %d, the one started %d", a.Event, startID)
			}
		}
	}
	if rep.Calls["nvtxRangePushA"] != iters || rep.Calls["nvtxRangePop"] != 2*iters || rep.Calls["nvtxDomainRangePop"] != iters {
		t.Errorf("the workload's own counts: %v", rep.Calls)
	}

	// Without cudatap listening the calls are no-ops.
	cmd = exec.Command(b.NVTXWorkload, "--scenario", "train-nvtx", "--iters", "2")
	cmd.Env = append(os.Environ(), "NVTX_INJECTION64_PATH=/nonexistent/libcudatap_collector.so")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("without a collector: %v\n%s", err, out)
	}
}
