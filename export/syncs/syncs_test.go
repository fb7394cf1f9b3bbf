package syncs

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// result: one process with two .item()-like syncs at the same Python line,
// one at another line, and a cudaFree without a stack.
// A stream sync from the same place on stream 2 joins the site too.
func result() (*model.Result, *Collector) {
	const pid = 42
	py := []model.PyKey{{Code: 1, Instr: 10}, {Code: 2, Instr: 20}}
	p := &model.Process{PID: pid, Stacks: [][]uint64{{0x100, 0x200}}, PyStacks: [][]model.PyKey{py, {{Code: 3, Instr: 30}}}}
	n := model.NewNames()
	n.Procs[pid] = model.ProcessInfo{Comm: "python3"}
	n.Frames[model.NameKey{PID: pid, Key: 0x100}] = "cudaStreamSynchronize (libcudart.so.13)"
	n.Frames[model.NameKey{PID: pid, Key: 0x200}] = "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)"
	for k, name := range map[model.PyKey]string{py[0]: "train.py:12 step", py[1]: "train.py:30 <module>", {Code: 3, Instr: 30}: "train.py:40 eval"} {
		n.Py[model.PyNameKey{PID: pid, PyKey: k}] = name
	}
	r := &model.Result{Processes: []*model.Process{p}}
	r.Name(n)
	c := NewCollector()
	var at uint64 // one sync after the other, on the main thread
	add := func(api event.API, kind model.SyncKind, stream int, blocked uint64, stack, pystack int32) {
		c.Sync(p, &model.Sync{Kind: kind, API: api, TID: pid, Stream: stream, Start: at, BlockedNs: blocked, QueuedOps: 3, Stack: stack, PyStack: pystack})
		at += blocked + 100
	}
	add(event.CudaStreamSynchronize, model.SyncStream, 1, 1000, 0, 0)
	add(event.CudaStreamSynchronize, model.SyncStream, 1, 2000, 0, 0)
	add(event.CudaStreamSynchronize, model.SyncStream, 2, 1000, 0, 0)
	add(event.CudaStreamSynchronize, model.SyncStream, 1, 500, 0, 1)
	add(event.CudaFree, model.SyncFree, -1, 9000, -1, -1)
	return r, c
}

func TestSites(t *testing.T) {
	r, c := result()
	if len(c.entries) != 4 {
		t.Errorf("%d entries, want 4: the same sync on the same stream is one", len(c.entries))
	}
	sites := Sites(r, c)
	if len(sites) != 3 {
		t.Fatalf("%d sites, want 3: %+v", len(sites), sites)
	}
	free, item, eval := sites[0], sites[1], sites[2]
	if free.Kind != "free_sync" || free.BlockedNs != 9000 || free.Where() != "" {
		t.Errorf("first site %+v, want the cudaFree (most blocked, no stack)", free)
	}
	if item.Count != 3 || item.BlockedNs != 4000 || item.MaxBlockedNs != 2000 || item.Where() != "train.py:12 step" ||
		item.NativeStack[0] != "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)" || len(item.PythonStack) != 2 || !item.Explicit ||
		!slices.Equal(item.Streams, []int{1, 2}) || item.QueuedOps != 3 {
		t.Errorf("item site %+v", item)
	}
	if eval.Where() != "train.py:40 eval" || eval.Count != 1 {
		t.Errorf("eval site %+v", eval)
	}
	if got := ProcessSites(r, c, 42); !slices.EqualFunc(got, sites, func(a, b Site) bool { return a.Where() == b.Where() && a.Count == b.Count }) {
		t.Errorf("ProcessSites %+v", got)
	}
	if got := ProcessSites(r, c, 43); got != nil {
		t.Errorf("sites of an unknown process: %+v", got)
	}
}

func TestStreamTotals(t *testing.T) {
	_, c := result()
	want := map[int]Totals{
		1:  {Explicit: 3, ExplicitNs: 3500},
		2:  {Explicit: 1, ExplicitNs: 1000},
		-1: {Implicit: 1, ImplicitNs: 9000},
	}
	if got := c.StreamTotals(42); !maps.Equal(got, want) {
		t.Errorf("StreamTotals = %v, want %v", got, want)
	}
}

// Adding a sync to a known entry allocates nothing.
func TestCollectorBounded(t *testing.T) {
	p := &model.Process{PID: 1}
	s := &model.Sync{Kind: model.SyncStream, API: event.CudaStreamSynchronize, Stack: -1, PyStack: -1}
	c := NewCollector()
	c.Sync(p, s)
	if a := testing.AllocsPerRun(1000, func() { s.BlockedNs++; c.Sync(p, s) }); a != 0 {
		t.Errorf("%v allocations per sync", a)
	}
	// Nor does a call of a known thread, nor a GPU op that extends the
	// time work was queued.
	call := &model.Call{API: event.CudaLaunchKernel, TID: 7, GPUOp: 0, Stack: -1, PyStack: -1}
	op := &model.GPUOp{}
	c.Call(p, call)
	c.GPUOp(p, op)
	if a := testing.AllocsPerRun(1000, func() {
		call.Start += 1000
		op.Enqueued, op.End = call.Start, call.Start+5000
		c.Call(p, call)
		c.GPUOp(p, op)
	}); a != 0 {
		t.Errorf("%v allocations per call and op", a)
	}
}

func TestWriters(t *testing.T) {
	r, c := result()
	sites := Sites(r, c)
	var js bytes.Buffer
	if err := WriteJSON(&js, r, sites, Hosts(r, c)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Sites []Site `json:"sites"`
		Lost  uint64 `json:"lost_events"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || len(doc.Sites) != 3 || doc.Sites[1].PythonLine != "train.py:12 step" {
		t.Fatalf("JSON %v: %s", err, js.String())
	}
	var txt bytes.Buffer
	WriteText(&txt, r, sites, Hosts(r, c), TextOptions{Top: 10})
	for _, want := range []string{"3 synchronization site(s)", "train.py:12 step", "fix: ", "--full-stacks", "dropped events: 0"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	if strings.Contains(txt.String(), "py  train.py:30 <module>") {
		t.Errorf("full stacks without --full-stacks:\n%s", txt.String())
	}
	txt.Reset()
	WriteText(&txt, r, sites, Hosts(r, c), TextOptions{Top: 10, FullStacks: true})
	for _, want := range []string{"py  train.py:30 <module>", "c   at::native::_local_scalar_dense_cuda (libtorch_cuda.so)"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("full stacks lack %q:\n%s", want, txt.String())
		}
	}
}

// TestEntriesBounded: a recording can give every synchronization a thread
// and a stack of its own; past maxEntries they are told apart by process,
// kind and API only, as one site that says so, and none is lost.
func TestEntriesBounded(t *testing.T) {
	const extra = 10
	p := &model.Process{PID: 1}
	r := &model.Result{Processes: []*model.Process{p}}
	r.Name(nil)
	c := NewCollector()
	for i := range maxEntries + extra {
		c.Sync(p, &model.Sync{Kind: model.SyncStream, API: event.CudaStreamSynchronize, TID: uint32(i), Start: uint64(i) * 100, BlockedNs: 10, Stack: -1, PyStack: -1})
	}
	if len(c.entries) != maxEntries+1 {
		t.Fatalf("%d entries, want %d", len(c.entries), maxEntries+1)
	}
	count, other := 0, 0
	for _, s := range Sites(r, c) {
		count += s.Count
		if s.Site == otherSite {
			other += s.Count
		}
	}
	if count != maxEntries+extra || other != extra {
		t.Errorf("%d syncs in the sites, %d under %q; want %d and %d", count, other, otherSite, maxEntries+extra, extra)
	}
}
