package syncs

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/syncs/synctest"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

func run(rec *synctest.Recording) (*model.Result, *Collector) {
	c := NewCollector()
	return rec.Run(c), c
}

// torch.cuda.synchronize() is reported at the user's line that called it,
// not at torch/cuda/__init__.py:1162; two user lines are two sites, with
// the full stacks kept in the JSON.
func TestTorchSyncAtUserLine(t *testing.T) {
	r, c := run(synctest.TorchSync())
	sites := Sites(r, c)
	if len(sites) != 2 {
		t.Fatalf("%d sites, want 2: %+v", len(sites), sites)
	}
	step, barrier := sites[0], sites[1]
	if step.Where() != synctest.TrainStep || !step.UserFrame || step.Via != synctest.TorchSynchronize ||
		step.Count != 10 || step.BlockedNs != 10*30*synctest.MS || step.Kind != "device_sync" {
		t.Errorf("step site %+v", step)
	}
	if barrier.Where() != synctest.TrainBarrier || barrier.Via != synctest.TorchSynchronize || barrier.Count != 2 || barrier.BlockedNs != 2*15*synctest.MS {
		t.Errorf("barrier site %+v", barrier)
	}
	if step.PythonLine != synctest.TorchSynchronize || len(step.PythonStack) != 3 || len(step.NativeStack) != 3 ||
		step.NativeStack[0] != "torch::cuda::synchronize(long) (libtorch_cuda.so)" {
		t.Errorf("stacks of the step site: %q %q", step.PythonStack, step.NativeStack)
	}

	var js bytes.Buffer
	if err := WriteJSON(&js, r, sites, Hosts(r, c)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Sites []struct {
			Site        string   `json:"site"`
			UserFrame   bool     `json:"user_frame"`
			Via         string   `json:"via"`
			PythonStack []string `json:"python_stack"`
			NativeStack []string `json:"native_stack"`
		} `json:"sites"`
		Threads []Thread `json:"threads"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if s := doc.Sites[0]; s.Site != synctest.TrainStep || !s.UserFrame || s.Via != synctest.TorchSynchronize ||
		!slices.Equal(s.PythonStack, step.PythonStack) || !slices.Equal(s.NativeStack, step.NativeStack) {
		t.Errorf("JSON site %+v", s)
	}
	if len(doc.Threads) != 1 || doc.Threads[0].Role != RoleWork || doc.Threads[0].Name != "python3" {
		t.Errorf("JSON threads %+v", doc.Threads)
	}

	var txt bytes.Buffer
	WriteText(&txt, r, sites, Hosts(r, c), TextOptions{})
	for _, want := range []string{"at  " + synctest.TrainStep, "via " + synctest.TorchSynchronize, "at  " + synctest.TrainBarrier} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
}

// NCCL's watchdog polls cudaEventQuery in overlapping loops that add up to
// more than the 8.9 s it ran: its time is counted once, it is a background
// poller, and the main thread's 2 s of syncs top the sites.
func TestWatchdogIsBackground(t *testing.T) {
	r, c := run(synctest.DDP())
	sites := Sites(r, c)
	if len(sites) != 2 {
		t.Fatalf("%d sites, want 2: %+v", len(sites), sites)
	}
	main, dog := sites[0], sites[1]
	if main.Where() != synctest.DDPStep || main.Background != "" || main.BlockedNs != 2*synctest.S || main.Count != 100 ||
		!slices.Equal(main.Threads, []string{"python3 (tid 4123)"}) {
		t.Errorf("main site %+v", main)
	}
	if dog.Kind != "query_poll" || dog.Background != RolePoller || dog.UserFrame || dog.Where() != synctest.Finished ||
		!slices.Equal(dog.Threads, []string{"pt_nccl_watchdg (tid 4200)"}) {
		t.Errorf("watchdog site %+v", dog)
	}
	if dog.BlockedNs <= main.BlockedNs {
		t.Errorf("the watchdog site tops by its time no longer: %d ≤ %d; it is last because it is background", dog.BlockedNs, main.BlockedNs)
	}

	h := HostOf(r, c, 4123)
	if h == nil || len(h.Threads) != 2 || h.WorkThreads != 1 {
		t.Fatalf("host %+v", h)
	}
	work, poller := h.Threads[0], h.Threads[1]
	if work.TID != 4123 || work.Role != RoleWork || work.Launches != 6000 || work.BlockedNs != 2*synctest.S {
		t.Errorf("main thread %+v", work)
	}
	if poller.TID != synctest.Watchdog || poller.Role != RolePoller || !strings.Contains(poller.Why, "pt_nccl_watchdg") || poller.WorkCalls != 0 {
		t.Errorf("watchdog thread %+v", poller)
	}
	for _, th := range h.Threads {
		if th.BlockedNs > th.WallNs {
			t.Errorf("%s blocked %d ns of its %d ns wall time", th.Label(), th.BlockedNs, th.WallNs)
		}
	}
	if poller.SyncNs <= poller.WallNs || dog.BlockedNs+dog.OverlappedNs != poller.SyncNs {
		t.Errorf("the watchdog's poll loops (%d ns) should overlap past its wall time (%d ns), the site keep them (%d + %d)",
			poller.SyncNs, poller.WallNs, dog.BlockedNs, dog.OverlappedNs)
	}
	if b := h.Blocked(); b <= 0 || b > 1 || h.BlockedNs != 2*synctest.S || h.ThreadWallNs != work.WallNs {
		t.Errorf("blocked share %.2f (%d of %d)", b, h.BlockedNs, h.ThreadWallNs)
	}
	// The stream table counts the syncs of the threads that launch work.
	var implicit int
	for _, tot := range c.WorkStreamTotals(r, 4123) {
		implicit += tot.Implicit
	}
	if implicit != 0 {
		t.Errorf("the watchdog's polls are in the work threads' totals: %d", implicit)
	}

	var txt bytes.Buffer
	WriteText(&txt, r, sites, Hosts(r, c), TextOptions{})
	out := txt.String()
	for _, want := range []string{"2.00 s blocked in total on the threads that launch work",
		"the thread that launches work, python3 (tid 4123), blocked 2.00 s of its",
		"pt_nccl_watchdg (tid 4200): background poller (named pt_nccl_watchdg",
		"background poller: did not hold up the threads that launch work",
		"(no frame of the user's code: a library's own thread)"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "\n1  2.00 s"), strings.Index(out, "\n2  ("); i < 0 || j < i {
		t.Errorf("the main thread's site is not first, the watchdog's not shown in parentheses:\n%s", out)
	}
}

// Nested and overlapping syncs on one thread count each nanosecond once;
// the same times on two threads count on each.
func TestNestedSyncs(t *testing.T) {
	const ms = synctest.MS
	p := &model.Process{PID: 1, Stacks: [][]uint64{{1}, {2}}}
	r := &model.Result{Processes: []*model.Process{p}}
	r.Name(nil)
	c := NewCollector()
	for _, tid := range []uint32{10, 11} {
		c.Call(p, &model.Call{TID: tid, Start: 0, End: 100 * ms, API: event.CudaStreamSynchronize, GPUOp: -1, Stack: -1, PyStack: -1})
		for _, s := range []model.Sync{
			{Kind: model.SyncStream, API: event.CudaStreamSynchronize, Start: 10 * ms, BlockedNs: 20 * ms, Stack: 0},
			{Kind: model.SyncStream, API: event.CuStreamSynchronize, Start: 11 * ms, BlockedNs: 18 * ms, Stack: 1}, // inside it
			{Kind: model.SyncQueryPoll, API: event.CudaEventQuery, Start: 50 * ms, BlockedNs: 30 * ms, Stack: 0},
			{Kind: model.SyncQueryPoll, API: event.CudaEventQuery, Start: 40 * ms, BlockedNs: 20 * ms, Stack: 0}, // began first, ended first
		} {
			s.TID = tid
			c.Sync(p, &s)
		}
	}
	h := HostOf(r, c, 1)
	for _, th := range h.Threads {
		if th.BlockedNs != 60*ms || th.SyncNs != 88*ms || th.WallNs != 100*ms {
			t.Errorf("thread %d: blocked %d, syncs %d, wall %d", th.TID, th.BlockedNs, th.SyncNs, th.WallNs)
		}
	}
	var sum, overlapped uint64
	for _, s := range Sites(r, c) {
		sum += s.BlockedNs
		overlapped += s.OverlappedNs
		if len(s.Threads) != 2 {
			t.Errorf("site %s %s on %v, want both threads", s.Kind, s.API, s.Threads)
		}
	}
	if sum != 2*60*ms || overlapped != 2*28*ms {
		t.Errorf("sites blocked %d (overlapped %d), want %d (%d)", sum, overlapped, 2*60*ms, 2*28*ms)
	}
}

// The host side of a launch loop and of a loop that waits for its input.
func TestHosts(t *testing.T) {
	r, c := run(synctest.LaunchLoop(20))
	h := HostOf(r, c, 5000)
	if h.Launches != 20_000 || h.WorkCalls != 20_000 || h.BlockedNs != 0 || h.IdleNs != 0 || h.StallNs != 0 || h.GPUOps != 20_000 {
		t.Errorf("launch loop %+v", h)
	}
	// No sync proves any op complete before the end: the GPU may have
	// been busy from the first launch on, as far as the trace can tell.
	if h.QueuedNs != h.WallNs-synctest.MS || h.AllMeasured {
		t.Errorf("launch loop queued %d of %d", h.QueuedNs, h.WallNs)
	}

	r, c = run(synctest.InputStall())
	h = HostOf(r, c, 6000)
	if h.IdleGaps != 20 || h.StallGaps != 20 || h.StallNs != h.IdleNs || h.IdleNs < 20*80*synctest.MS || h.LongestStallNs != 81*synctest.MS-5*synctest.US {
		t.Errorf("input stall %+v", h)
	}
	r, c = run(synctest.Pipelined())
	h = HostOf(r, c, 6001)
	if h.IdleGaps != 20 || h.StallNs != 0 || h.QueuedNs < h.IdleNs {
		t.Errorf("pipelined %+v", h)
	}
}
