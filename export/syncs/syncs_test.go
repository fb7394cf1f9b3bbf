package syncs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// result: one process with two .item()-like syncs at the same Python line,
// one at another line, and a cudaFree without a stack.
func result() *model.Result {
	py := []model.PyKey{{Code: 1, Instr: 10}, {Code: 2, Instr: 20}}
	p := &model.Process{
		PID:      42,
		Info:     model.ProcessInfo{Comm: "python3"},
		Stacks:   [][]uint64{{0x100, 0x200}},
		Frames:   map[uint64]string{0x100: "cudaStreamSynchronize (libcudart.so.13)", 0x200: "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)"},
		PyStacks: [][]model.PyKey{py, {{Code: 3, Instr: 30}}},
		PyFrames: map[model.PyKey]string{py[0]: "train.py:12 step", py[1]: "train.py:30 <module>", {Code: 3, Instr: 30}: "train.py:40 eval"},
	}
	add := func(api event.API, kind model.SyncKind, blocked uint64, stack, pystack int32) {
		p.Calls = append(p.Calls, model.Call{API: api, Stack: stack, PyStack: pystack, Stream: 1})
		p.Syncs = append(p.Syncs, model.Sync{Kind: kind, Call: len(p.Calls) - 1, Stream: 1, BlockedNs: blocked, QueuedOps: 3})
	}
	add(event.CudaStreamSynchronize, model.SyncStream, 1000, 0, 0)
	add(event.CudaStreamSynchronize, model.SyncStream, 3000, 0, 0)
	add(event.CudaStreamSynchronize, model.SyncStream, 500, 0, 1)
	add(event.CudaFree, model.SyncFree, 9000, -1, -1)
	return &model.Result{Processes: []*model.Process{p}}
}

func TestSites(t *testing.T) {
	sites := Sites(result())
	if len(sites) != 3 {
		t.Fatalf("%d sites, want 3: %+v", len(sites), sites)
	}
	free, item, eval := sites[0], sites[1], sites[2]
	if free.Kind != "free_sync" || free.BlockedNs != 9000 || free.Where() != "" {
		t.Errorf("first site %+v, want the cudaFree (most blocked, no stack)", free)
	}
	if item.Count != 2 || item.BlockedNs != 4000 || item.MaxBlockedNs != 3000 || item.Where() != "train.py:12 step" ||
		item.NativeStack[0] != "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)" || len(item.PythonStack) != 2 || !item.Explicit {
		t.Errorf("item site %+v", item)
	}
	if eval.Where() != "train.py:40 eval" || eval.Count != 1 {
		t.Errorf("eval site %+v", eval)
	}
}

func TestWriters(t *testing.T) {
	r := result()
	sites := Sites(r)
	var js bytes.Buffer
	if err := WriteJSON(&js, r, sites); err != nil {
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
	WriteText(&txt, r, sites, 10)
	for _, want := range []string{"3 synchronization site(s)", "train.py:12 step", "py  train.py:30 <module>", "fix: ", "dropped events: 0"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
}
