package perfetto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/chrome"
	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/export/perfetto/perfettotest"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// fixtureWithAll is the exporters' fixture with what it lacks for a
// trace: a hold, NVML samples, GPUs, and a cut.
func fixtureWithAll() *fixture.Fixture {
	f := fixture.New()
	f.Result.Counters = []model.Counter{
		{Device: 0, Name: "GPU 0 NVIDIA H200", TS: fixture.Base + 10, Values: map[string]float64{"sm_util": 50, "mem_used": 1 << 30}},
		{Device: 0, Name: "GPU 0 NVIDIA H200", TS: fixture.Base + 20, Values: map[string]float64{"sm_util": 60, "mem_used": 1 << 31}},
		{Device: 1, Name: "GPU 1 NVIDIA H200", TS: fixture.Base + 20, Values: map[string]float64{"sm_util": 7}},
	}
	f.Result.GPU.GPUs = []model.GPUStats{{Index: 0, Name: "NVIDIA H200", MemTotal: 141 << 30, UUID: "GPU-1234"}}
	f.Result.Truncated = "cut at byte 1234"
	return f
}

// feed hands f to both writers, with a hold on process A's main thread
// inside its first call.
func feed(f *fixture.Fixture, sinks ...model.Sink) {
	p := f.Result.Processes[0]
	first := f.Traces[p.PID].Calls[0]
	for _, s := range sinks {
		s.Hold(p, &model.Hold{TID: first.TID, Start: first.Start + 100, End: first.Start + 900})
	}
	f.Feed(model.Sinks(sinks))
}

func writeBoth(t *testing.T, f *fixture.Fixture) (*perfettotest.Trace, []map[string]any, int, int) {
	t.Helper()
	var pbuf, cbuf bytes.Buffer
	// As a merged trace: process A ran elsewhere, under another pid.
	origins := map[uint32]describe.Origin{fixture.PIDA: {Host: "node7", PID: 77}}
	pw := NewWriter(&pbuf, f.Names, Options{Version: "v-test", Merge: json.RawMessage(`{"clock":"one"}`), Origins: origins})
	cw := chrome.NewWriter(&cbuf, f.Names, chrome.Options{Version: "v-test", Origins: origins})
	feed(f, pw, cw)
	if err := pw.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	if err := cw.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Read(pbuf.Bytes())
	if err != nil {
		t.Fatalf("the trace does not parse with Perfetto's .proto: %v", err)
	}
	var ct struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(cbuf.Bytes(), &ct); err != nil {
		t.Fatal(err)
	}
	return tr, ct.TraceEvents, pbuf.Len(), cbuf.Len()
}

// perfettoOnly: slices the Perfetto trace has and the Chrome trace draws
// otherwise: the anchors of event-dependency flows (flow events in
// Chrome), and the recording's slice (its "cudatap" block).
func perfettoOnly(s *perfettotest.Slice) bool {
	return s.Category == "cuda_event" || (s.Category == "cudatap" && strings.HasPrefix(s.Name, "recording: "))
}

// argRenames: Chrome's µs times are ns in Perfetto, as its timestamps.
var argRenames = map[string]string{"earliest_start": "earliest_start_ns", "latest_end": "latest_end_ns", "arrivals_after_first_us": "arrivals_after_first_ns"}

// TestSameAsChrome writes the fixture as both traces and reads the
// Perfetto one back with Perfetto's .proto: every slice of the Chrome
// trace is there, by category and name, with the same arguments, on a
// track of the same kind; so are the tracks, flows and counters.
func TestSameAsChrome(t *testing.T) {
	f := fixtureWithAll()
	tr, events, psize, csize := writeBoth(t, f)
	for _, p := range tr.Problems {
		t.Error(p)
	}

	// Slices: (category, name) → count, and argument names.
	type key struct{ cat, name string }
	chromeSlices, perfSlices := map[key]int{}, map[key]int{}
	chromeArgs, perfArgs := map[key]map[string]bool{}, map[key]map[string]bool{}
	for _, ev := range events {
		if ev["ph"] != "X" && ev["ph"] != "i" {
			continue
		}
		k := key{str(ev["cat"]), str(ev["name"])}
		if k.cat == "" {
			k.cat = "cudatap" // the truncation instant
		}
		chromeSlices[k]++
		if chromeArgs[k] == nil {
			chromeArgs[k] = map[string]bool{}
		}
		a, _ := ev["args"].(map[string]any)
		for n := range a {
			if r, ok := argRenames[n]; ok {
				n = r
			}
			chromeArgs[k][n] = true
		}
	}
	for i := range tr.Slices {
		s := &tr.Slices[i]
		if perfettoOnly(s) {
			continue
		}
		k := key{s.Category, s.Name}
		perfSlices[k]++
		if perfArgs[k] == nil {
			perfArgs[k] = map[string]bool{}
		}
		for n := range s.Args {
			perfArgs[k][n] = true
		}
	}
	if !maps.Equal(chromeSlices, perfSlices) {
		t.Errorf("slices by category and name:\nchrome   %v\nperfetto %v", chromeSlices, perfSlices)
	}
	for k, want := range chromeArgs {
		if got := perfArgs[k]; !maps.Equal(got, want) {
			t.Errorf("%v: arguments %v, chrome has %v", k, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
	if len(chromeSlices) < 10 {
		t.Fatalf("only %d kinds of slices: the fixture is not what this test expects", len(chromeSlices))
	}

	// Each slice is on a track of its kind: host calls and holds on
	// thread tracks, syncs under them, GPU ops on a stream of a device.
	for i := range tr.Slices {
		s := &tr.Slices[i]
		track := tr.Tracks[s.Track]
		var ok bool
		switch s.Category {
		case "cuda_runtime", "cuda_driver", "nccl":
			ok = track.Thread
		case chrome.SyncCategory:
			ok = track.Name == syncTrackName && tr.Tracks[track.Parent].Thread
		case "kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_event":
			ok = strings.HasPrefix(track.Name, "stream ") && strings.HasPrefix(tr.Tracks[track.Parent].Name, "GPU ")
		case "cudatap":
			ok = track.Thread || track.Name == recordingTrack
		}
		if !ok {
			t.Errorf("slice %s %q is on track %+v", s.Category, s.Name, track)
		}
	}

	// Tracks: named as Chrome's process and thread names.
	var chromeProcs, chromeThreads, perfGroups, perfThreads []string
	for _, ev := range events {
		a, _ := ev["args"].(map[string]any)
		switch ev["name"] {
		case "process_name":
			chromeProcs = append(chromeProcs, str(a["name"]))
		case "thread_name":
			chromeThreads = append(chromeThreads, str(a["name"]))
		}
	}
	for _, track := range tr.Tracks {
		switch {
		case track.Thread, strings.HasPrefix(track.Name, "stream "):
			perfThreads = append(perfThreads, track.Name)
		case track.Process, track.Parent == 0 && track.Name != recordingTrack:
			perfGroups = append(perfGroups, track.Name)
		}
	}
	slices.Sort(chromeProcs)
	slices.Sort(chromeThreads)
	slices.Sort(perfGroups)
	slices.Sort(perfThreads)
	if !slices.Equal(chromeProcs, perfGroups) || !slices.ContainsFunc(perfGroups, func(s string) bool { return strings.Contains(s, "(pid 77 on node7") }) {
		t.Errorf("process tracks:\nchrome   %q\nperfetto %q", chromeProcs, perfGroups)
	}
	if !slices.Equal(chromeThreads, perfThreads) {
		t.Errorf("thread and stream tracks:\nchrome   %q\nperfetto %q", chromeThreads, perfThreads)
	}

	// Flows: each of Chrome's arrows joins two slices here.
	starts := map[uint64]*perfettotest.Slice{}
	for i := range tr.Slices {
		for _, id := range tr.Slices[i].Flows {
			starts[id] = &tr.Slices[i]
		}
	}
	perfFlows := map[string]int{}
	for i := range tr.Slices {
		s := &tr.Slices[i]
		for _, id := range s.Terminating {
			from := starts[id]
			if from == nil {
				t.Errorf("flow %d into %q starts nowhere", id, s.Name)
				continue
			}
			if from.Start > s.Start {
				t.Errorf("flow %d goes back in time: %q at %d → %q at %d", id, from.Name, from.Start, s.Name, s.Start)
			}
			if id >= depFlowBase {
				perfFlows["cuda_event"]++
			} else {
				perfFlows["ac2g"]++
				if c, ok := s.Args["correlation"].(uint64); !ok || c != id || from.Args["correlation"] != c {
					t.Errorf("ac2g flow %d: from %q (correlation %v) to %q (correlation %v)", id, from.Name, from.Args["correlation"], s.Name, s.Args["correlation"])
				}
			}
		}
	}
	chromeFlows := map[string]int{}
	for _, ev := range events {
		if ev["ph"] == "f" {
			chromeFlows[str(ev["cat"])]++
		}
	}
	if !maps.Equal(chromeFlows, perfFlows) || chromeFlows["ac2g"] == 0 || chromeFlows["cuda_event"] == 0 {
		t.Errorf("flows: chrome %v, perfetto %v", chromeFlows, perfFlows)
	}

	// Counters: a track per series, under the GPU's, and every value.
	chromeValues := 0
	for _, ev := range events {
		if ev["ph"] == "C" {
			a, _ := ev["args"].(map[string]any)
			chromeValues += len(a)
		}
	}
	if len(tr.Counters) != chromeValues || chromeValues != 5 {
		t.Errorf("%d counter values, chrome has %d", len(tr.Counters), chromeValues)
	}
	for _, c := range tr.Counters {
		track := tr.Tracks[c.Track]
		if !track.Counter || !strings.HasSuffix(tr.Tracks[track.Parent].Name, "(NVML)") {
			t.Errorf("counter on track %+v", track)
		}
	}

	// The loss account and Kineto's blocks, on the recording's slice.
	var rec *perfettotest.Slice
	for i := range tr.Slices {
		if strings.HasPrefix(tr.Slices[i].Name, "recording: ") {
			rec = &tr.Slices[i]
		}
	}
	if rec == nil {
		t.Fatal("no recording slice")
	}
	drops, _ := rec.Args["drops"].(map[string]any)
	limits, _ := rec.Args["limits"].(map[string]any)
	gpu, _ := rec.Args["gpu 0"].(map[string]any)
	if rec.Name != "recording: cut short, events lost unknown" || rec.Start != f.Result.Start || rec.End != f.Result.End || len(drops) != 19 || len(limits) != 10 ||
		rec.Args["truncated"] != "cut at byte 1234" || rec.Args["drops_known"] != false || rec.Args["merge"] != `{"clock":"one"}` ||
		gpu["name"] != "NVIDIA H200" || rec.Args["version"] != "v-test" || !strings.Contains(str(rec.Args["loss"]), "recording truncated") {
		t.Errorf("recording slice: %+v", rec)
	}
	if tr.Clocks[1]-tr.Clocks[6] != uint64(f.Result.WallOffsetNs) {
		t.Errorf("clock snapshot %v: want realtime - boottime = %d", tr.Clocks, f.Result.WallOffsetNs)
	}
	t.Logf("Perfetto %d bytes, Chrome %d bytes (%.1f×), %d packets", psize, csize, float64(csize)/float64(psize), tr.Packets)
}

func str(v any) string { s, _ := v.(string); return s }

// TestNesting: on every track the slices nest, so that trace_processor
// (which sorts by time, ties in file order, and closes the innermost open
// slice at each end) draws them as written: a sync inside its call, a
// hold inside its call, GPU ops one after the other; and a query-poll
// sync, which spans several calls, on its own track.
func TestNesting(t *testing.T) {
	f := fixtureWithAll()
	p := f.Result.Processes[0]
	tid := f.Traces[p.PID].Calls[0].TID
	var buf bytes.Buffer
	w := NewWriter(&buf, f.Names, Options{})
	feed(f, w)
	// Three polls and the sync they make: from the first poll's start to
	// the last one's end, handed over after the last.
	base := f.Result.End + 1000
	for i := range uint64(3) {
		c := model.Call{Start: base + i*100, End: base + i*100 + 50, TID: tid, API: event.CudaStreamQuery, Stream: 2, GPUOp: -1, Stack: -1, PyStack: -1, HasRet: true}
		w.Call(p, &c)
	}
	w.Sync(p, &model.Sync{Kind: model.SyncQueryPoll, TID: tid, Stream: 2, Start: base, BlockedNs: 250, Polls: 3, Stack: -1, PyStack: -1})
	if err := w.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Read(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tr.Problems {
		t.Error(p)
	}
	nested := map[string]string{}
	for _, s := range tr.Slices {
		if s.Parent >= 0 {
			nested[s.Name] = tr.Slices[s.Parent].Name
		}
	}
	if nested["cudatap: target held while a library is hooked"] != "cudaStreamCreateWithFlags" {
		t.Errorf("the hold is not inside its call: %v", nested)
	}
	for _, s := range tr.Slices {
		if s.Name == "sync: query_poll" && (s.Start != base || s.End != base+250 || s.Parent >= 0) {
			t.Errorf("query poll sync %+v", s)
		}
	}
}

// TestInterningBounded: past its bounds the interner starts afresh, so a
// trace with more distinct names than it keeps is still read back right,
// while the writer (and a reader) holds at most the bound.
func TestInterningBounded(t *testing.T) {
	f := fixture.New()
	p := f.Result.Processes[0]
	var buf bytes.Buffer
	w := NewWriter(&buf, f.Names, Options{})
	const limit = 1000
	w.intern.maxHeld = limit
	const n = 3 * limit
	for i := range n {
		f.Names.Kernels[model.NameKey{PID: p.PID, Key: uint64(0x10000 + i)}] = fmt.Sprintf("_Z%dkernel%dv", len(fmt.Sprint("kernel", i)), i)
		op := model.GPUOp{ID: i, Kind: model.OpKernel, Func: uint64(0x10000 + i), Start: uint64(1000 + 10*i), End: uint64(1005 + 10*i), AfterStream: -1}
		w.GPUOp(p, &op)
		if held := w.intern.held; held > limit {
			t.Fatalf("the writer holds %d interned strings, more than %d", held, limit)
		}
	}
	if err := w.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Read(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tr.Problems {
		t.Error(p)
	}
	i := 0
	for _, s := range tr.Slices {
		if s.Category != "kernel" {
			continue
		}
		if want := fmt.Sprintf("kernel%d()", i); s.Name != want {
			t.Fatalf("kernel slice %d is %q, want %q", i, s.Name, want)
		}
		i++
	}
	if i != n {
		t.Errorf("%d kernel slices, want %d", i, n)
	}
	// Each kernel name and its mangled and short forms: the tables fill
	// about every limit/3 kernels.
	if tr.Cleared < 6 || w.intern.resets != uint64(tr.Cleared-1) || tr.MaxInterned > limit {
		t.Errorf("sequence cleared %d times, the writer counted %d resets; the reader held up to %d strings", tr.Cleared, w.intern.resets, tr.MaxInterned)
	}
	var rec perfettotest.Slice
	for _, s := range tr.Slices {
		if strings.HasPrefix(s.Name, "recording: ") {
			rec = s
		}
	}
	in, _ := rec.Args["interning"].(map[string]any)
	if in["tables_cleared"] != w.intern.resets || in["strings_written_in_full"] != w.intern.inline || w.intern.inline == 0 {
		t.Errorf("interning counts %v, writer %d cleared, %d in full", in, w.intern.resets, w.intern.inline)
	}
}

// TestNoAllocationPerEvent: once its names are interned, writing an event
// allocates nothing, so the writer's memory cannot grow with a recording.
func TestNoAllocationPerEvent(t *testing.T) {
	f := fixture.New()
	p := f.Result.Processes[0]
	tr := f.Traces[p.PID]
	w := NewWriter(discard{}, f.Names, Options{})
	feed(f, w) // interns the names
	allocs := testing.AllocsPerRun(100, func() {
		for i := range tr.Calls {
			w.Call(p, &tr.Calls[i])
		}
		for i := range tr.Syncs {
			w.Sync(p, &tr.Syncs[i])
		}
		for i := range tr.GPUOps {
			w.GPUOp(p, &tr.GPUOps[i])
		}
	})
	// Only the NCCL call's comm_id is formatted anew (fmt), and only when
	// a communicator is known; the fixture's is not.
	if allocs != 0 {
		t.Errorf("%.1f allocations per pass over %d events", allocs, len(tr.Calls)+len(tr.Syncs)+len(tr.GPUOps))
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// TestSmallerThanChrome: for the flood of launches a big recording is
// made of (a launch, its kernel, the flow between), the Perfetto trace is
// at least 5× smaller than the Chrome trace.
func TestSmallerThanChrome(t *testing.T) {
	f := fixture.New()
	p := f.Result.Processes[0]
	var pbuf, cbuf bytes.Buffer
	pw := NewWriter(&pbuf, f.Names, Options{})
	cw := chrome.NewWriter(&cbuf, f.Names, chrome.Options{})
	sinks := model.Sinks{pw, cw}
	for i := range 20_000 {
		c, op := floodLaunch(i)
		sinks.Call(p, &c)
		sinks.GPUOp(p, &op)
	}
	if err := pw.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	if err := cw.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	ratio := float64(cbuf.Len()) / float64(pbuf.Len())
	t.Logf("20,000 launches: Chrome %d bytes, Perfetto %d bytes: %.2f× smaller (%.0f bytes per launch)", cbuf.Len(), pbuf.Len(), ratio, float64(pbuf.Len())/20_000)
	if ratio < 5 {
		t.Errorf("the Perfetto trace is only %.2f× smaller than the Chrome trace", ratio)
	}
}

// floodLaunch is the i-th of a flood of launches (a launch, its kernel),
// as a big recording is made of.
func floodLaunch(i int) (model.Call, model.GPUOp) {
	ts := uint64(fixture.Base) + uint64(i)*7_350 // ~136k launches/s
	c := model.Call{Start: ts, End: ts + 2_100, TID: fixture.TIDMain, API: event.CuLaunchKernel, ViaRuntime: true, Stream: 2,
		GPUOp: i, Correlation: uint64(i + 1), Stack: -1, PyStack: -1, HasRet: true,
		Args: event.Args{HasStream: true, Func: fixture.StubVecAdd, Grid: event.Dim3{X: 1, Y: 1, Z: 1}, Block: event.Dim3{X: 1, Y: 1, Z: 1}}}
	op := model.GPUOp{ID: i, Stream: 2, Correlation: uint64(i + 1), Enqueued: ts, Start: ts + 3_000, End: ts + 7_000, Func: fixture.StubVecAdd,
		Kind: model.OpKernel, AfterStream: -1, Bounded: true, Grid: c.Args.Grid, Block: c.Args.Block}
	return c, op
}

// BenchmarkFlood writes launches and their kernels as the Chrome trace
// (the baseline) and as the Perfetto trace: compare their ns/op.
func BenchmarkFlood(b *testing.B) {
	f := fixture.New()
	p := f.Result.Processes[0]
	for _, format := range []string{"chrome", "perfetto"} {
		b.Run(format, func(b *testing.B) {
			var w interface {
				model.Sink
				Close(*model.Result) error
			}
			if format == "chrome" {
				w = chrome.NewWriter(discard{}, f.Names, chrome.Options{})
			} else {
				w = NewWriter(discard{}, f.Names, Options{})
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				c, op := floodLaunch(i)
				w.Call(p, &c)
				w.GPUOp(p, &op)
				i++
			}
			w.Close(f.Result)
		})
	}
}
