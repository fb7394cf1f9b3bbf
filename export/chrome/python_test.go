package chrome

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// A sync slice carries the Python lines that led to it.
func TestSyncPythonStack(t *testing.T) {
	py := []model.PyKey{{Code: 1, Instr: 2}}
	p := &model.Process{PID: 9, Threads: map[uint32]struct{}{9: {}}, PyStacks: [][]model.PyKey{py}}
	n := model.NewNames()
	n.Threads[model.NameKey{PID: 9, Key: 9}] = "python3"
	n.Py[model.PyNameKey{PID: 9, PyKey: py[0]}] = "train.py:12 step"
	var buf bytes.Buffer
	w := NewWriter(&buf, n, Options{})
	w.Call(p, &model.Call{API: event.CudaStreamSynchronize, TID: 9, Start: 10, End: 5010, GPUOp: -1, Stack: -1, PyStack: 0,
		Sync: model.SyncStream, BlockedNs: 5000})
	w.Sync(p, &model.Sync{Kind: model.SyncStream, Call: 0, TID: 9, Start: 10, BlockedNs: 5000, Stack: -1, PyStack: 0,
		API: event.CudaStreamSynchronize})
	if err := w.Close(&model.Result{Processes: []*model.Process{p}}); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Cat  string         `json:"cat"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(buf.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	for _, e := range tr.TraceEvents {
		if e.Cat == SyncCategory {
			st, _ := e.Args["python_stack"].([]any)
			if len(st) != 1 || st[0] != "train.py:12 step" {
				t.Errorf("python_stack %v", e.Args["python_stack"])
			}
			return
		}
	}
	t.Fatal("no sync slice")
}
