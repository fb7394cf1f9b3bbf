package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// TestTracesWrittenLive: record models the run once. Its traces are
// written from the session's model, through the sink it hands the session,
// as each event is concluded: a trace alone asks for no recording (before,
// a spill file took every record, and the trace was written by replaying
// it through a second model once the session ended), every event handed
// to the sink is in the trace, and no file of it shows beside the target
// until it is complete (a cudatap killed meanwhile leaves none).
func TestTracesWrittenLive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.json")
	outs, err := export.Plan([]string{path}, "")
	if err != nil {
		t.Fatal(err)
	}
	to, err := newTraceOutputs(outs)
	if err != nil {
		t.Fatal(err)
	}
	if w := to.recording(); w != nil {
		t.Errorf("a trace alone records the events (%T) to model them again", w)
	}
	// What the session does: it names, then its model concludes events
	// into the sink.
	p := &model.Process{PID: 7, Threads: map[uint32]struct{}{7: {}}}
	to.names.Threads[model.NameKey{PID: 7, Key: 7}] = "main"
	for i := range 5000 { // past the writer's buffer
		ts := uint64(1_000_000 + 10_000*i)
		to.sink().Call(p, &model.Call{Seq: i, TID: 7, API: event.CudaMalloc, Start: ts, End: ts + 5000, Stream: -1, GPUOp: -1, Stack: -1, PyStack: -1})
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("files beside the trace while it is written: %v", ents)
	}
	var out, notes bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&notes)
	if err := to.finish(cmd, &model.Result{Processes: []*model.Process{p}, Names: to.names}); err != nil {
		t.Fatalf("finish: %v\n%s", err, notes.String())
	}
	tr := readChrome(t, path)
	calls, named := 0, false
	for _, e := range tr.TraceEvents {
		if e["name"] == "cudaMalloc" && e["ph"] == "X" {
			calls++
		}
		if args, _ := e["args"].(map[string]any); e["name"] == "thread_name" && args["name"] == "main" {
			named = true
		}
	}
	if calls != 5000 || !named {
		t.Errorf("the trace has %d of the 5000 calls handed to the sink, thread named: %v", calls, named)
	}
}
