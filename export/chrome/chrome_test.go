package chrome

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

type traceFile struct {
	SchemaVersion    *int             `json:"schemaVersion"`
	DeviceProperties []any            `json:"deviceProperties"`
	DisplayTimeUnit  string           `json:"displayTimeUnit"`
	TraceEvents      []map[string]any `json:"traceEvents"`
	Cudatap          map[string]any   `json:"cudatap"`
}

func parse(t *testing.T, data []byte) traceFile {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // keep ints distinguishable from fractions
	var tf traceFile
	if err := dec.Decode(&tf); err != nil {
		t.Fatalf("trace is not valid JSON: %v", err)
	}
	return tf
}

func write(t *testing.T, r *model.Result, opts Options) (traceFile, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, r, opts); err != nil {
		t.Fatal(err)
	}
	return parse(t, buf.Bytes()), buf.String()
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v (%T) is not a number", v, v)
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func integer(t *testing.T, v any) int64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v (%T) is not a number", v, v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatalf("%v is not an integer", v)
	}
	return i
}

func args(ev map[string]any) map[string]any {
	a, _ := ev["args"].(map[string]any)
	return a
}

// find returns the events for which match holds.
func find(tf traceFile, match func(ev map[string]any) bool) []map[string]any {
	var out []map[string]any
	for _, ev := range tf.TraceEvents {
		if match(ev) {
			out = append(out, ev)
		}
	}
	return out
}

func named(ph, name string) func(map[string]any) bool {
	return func(ev map[string]any) bool { return ev["ph"] == ph && ev["name"] == name }
}

func one(t *testing.T, tf traceFile, what string, match func(ev map[string]any) bool) map[string]any {
	t.Helper()
	evs := find(tf, match)
	if len(evs) != 1 {
		t.Fatalf("%s: %d events, want 1", what, len(evs))
	}
	return evs[0]
}

func TestSchema(t *testing.T) {
	r := fixture.Result()
	tf, raw := write(t, r, Options{Version: "v0.1.0-test"})

	if tf.SchemaVersion == nil || *tf.SchemaVersion != 1 || tf.DisplayTimeUnit != "ns" || tf.DeviceProperties == nil {
		t.Errorf("Kineto header: schemaVersion %v, displayTimeUnit %q, deviceProperties %v", tf.SchemaVersion, tf.DisplayTimeUnit, tf.DeviceProperties)
	}
	cats := map[string]bool{"cuda_runtime": true, "cuda_driver": true, "nccl": true, "cuda_sync": true,
		"kernel": true, "gpu_memcpy": true, "gpu_memset": true, "ac2g": true, "cuda_event": true}
	for _, ev := range tf.TraceEvents {
		for _, k := range []string{"ph", "pid", "tid", "ts"} {
			if _, ok := ev[k]; !ok {
				t.Fatalf("event without %q: %v", k, ev)
			}
		}
		integer(t, ev["pid"])
		integer(t, ev["tid"])
		if ts := num(t, ev["ts"]); ts < 0 {
			t.Errorf("negative ts: %v", ev)
		}
		switch ev["ph"] {
		case "X":
			if num(t, ev["dur"]) < 0 {
				t.Errorf("negative dur: %v", ev)
			}
			if !cats[ev["cat"].(string)] {
				t.Errorf("unexpected category %q", ev["cat"])
			}
		case "s", "f":
			if ev["cat"] != "ac2g" && ev["cat"] != "cuda_event" {
				t.Errorf("flow category %q", ev["cat"])
			}
		case "M":
		default:
			t.Errorf("unexpected ph %q", ev["ph"])
		}
		if s, ok := args(ev)["stream"]; ok {
			integer(t, s)
		}
	}

	// Exactly three decimals, absolute monotonic µs: the first launch of A.
	if !strings.Contains(raw, `"ts":1000000010.000`) {
		t.Error("launch ts not written as absolute µs with three decimals")
	}

	// Every call, sync and GPU op is there, on the right tracks.
	var calls, syncs, ops int
	for _, p := range r.Processes {
		calls += len(p.Calls)
		syncs += len(p.Syncs)
		ops += len(p.GPUOps)
	}
	if n := len(find(tf, func(ev map[string]any) bool { return ev["ph"] == "X" && ev["cat"] == "cuda_runtime" })); n != calls {
		t.Errorf("%d host call slices, want %d", n, calls)
	}
	if n := len(find(tf, func(ev map[string]any) bool { return ev["cat"] == "cuda_sync" })); n != syncs {
		t.Errorf("%d sync slices, want %d", n, syncs)
	}
	gpu := find(tf, func(ev map[string]any) bool { return ev["ph"] == "X" && integer(t, ev["pid"]) >= gpuPIDBase })
	if len(gpu) != ops {
		t.Errorf("%d GPU slices, want %d", len(gpu), ops)
	}
	for _, ev := range gpu {
		a := args(ev)
		if a["inferred"] != true || integer(t, a["device"]) != 0 || integer(t, a["stream"]) != integer(t, ev["tid"]) {
			t.Errorf("GPU slice args: %v", ev)
		}
	}

	d, _ := tf.Cudatap["drops"].(map[string]any)
	if len(d) != reflect.TypeFor[model.Drops]().NumField() {
		t.Errorf("drops block %v does not carry every Drops field", d)
	}
	for k, v := range d {
		if integer(t, v) != 0 {
			t.Errorf("drops.%s = %v, want 0", k, v)
		}
	}
	if tf.Cudatap["clock"] != "CLOCK_MONOTONIC" || tf.Cudatap["version"] != "v0.1.0-test" ||
		integer(t, tf.Cudatap["wall_offset_ns"]) != r.WallOffsetNs || integer(t, tf.Cudatap["lost_events"]) != 0 {
		t.Errorf("cudatap block: %v", tf.Cudatap)
	}
}

func TestFlows(t *testing.T) {
	r := fixture.Result()
	tf, _ := write(t, r, Options{})

	type end struct {
		pid, tid int64
		ts       float64
	}
	starts, finishes := map[string]end{}, map[string]end{}
	for _, ev := range tf.TraceEvents {
		ph := ev["ph"]
		if ph != "s" && ph != "f" {
			continue
		}
		key := fmt.Sprint(ev["cat"], "/", ev["id"])
		e := end{integer(t, ev["pid"]), integer(t, ev["tid"]), num(t, ev["ts"])}
		m := starts
		if ph == "f" {
			m = finishes
			if ev["bp"] != "e" {
				t.Errorf("flow finish without bp:e: %v", ev)
			}
		}
		if _, dup := m[key]; dup {
			t.Errorf("flow %s %s written twice", ph, key)
		}
		m[key] = end{e.pid, e.tid, e.ts}
	}
	for k := range starts {
		if _, ok := finishes[k]; !ok {
			t.Errorf("flow %s starts but never finishes", k)
		}
	}
	for k := range finishes {
		if _, ok := starts[k]; !ok {
			t.Errorf("flow %s finishes but never starts", k)
		}
	}

	// One ac2g flow per correlated GPU op, from the host call to the op,
	// with Kineto's id == correlation.
	var correlated int
	for _, p := range r.Processes {
		correlated += len(p.GPUOps)
	}
	if n := len(find(tf, func(ev map[string]any) bool { return ev["ph"] == "s" && ev["cat"] == "ac2g" })); n != correlated {
		t.Errorf("%d ac2g flows, want %d", n, correlated)
	}
	a := r.Processes[0]
	s, f := starts["ac2g/1"], finishes["ac2g/1"]
	launch, op := a.Calls[a.GPUOps[0].Call], a.GPUOps[0]
	if s != (end{int64(a.PID), int64(launch.TID), float64(launch.Start) / 1000}) ||
		f != (end{int64(GPUPID(a.PID)), int64(op.Stream), float64(op.Start) / 1000}) {
		t.Errorf("ac2g/1: start %v finish %v", s, f)
	}

	// The event dependency runs from the last op on stream 2 before the
	// record (the pageable copy) to the first op on stream 3 after the wait.
	// The host-side wait (cudaEventSynchronize) draws no arrow.
	deps := find(tf, func(ev map[string]any) bool { return ev["ph"] == "s" && ev["cat"] == "cuda_event" })
	if len(deps) != 1 {
		t.Fatalf("%d dependency flows, want 1", len(deps))
	}
	id := fmt.Sprint("cuda_event/", deps[0]["id"])
	if s, f := starts[id], finishes[id]; s != (end{int64(GPUPID(a.PID)), 2, float64(a.GPUOps[4].Start) / 1000}) ||
		f != (end{int64(GPUPID(a.PID)), 3, float64(a.GPUOps[6].Start) / 1000}) {
		t.Errorf("dependency flow: start %v finish %v", s, f)
	}
}

func TestHostCalls(t *testing.T) {
	r := fixture.Result()
	tf, _ := write(t, r, Options{})
	a := r.Processes[0]
	onThread := func(tid int64, name string) func(map[string]any) bool {
		return func(ev map[string]any) bool {
			return ev["ph"] == "X" && ev["name"] == name && integer(t, ev["pid"]) == int64(a.PID) && integer(t, ev["tid"]) == tid
		}
	}

	ptsz := args(one(t, tf, "launch on the worker thread", onThread(4130, "cudaLaunchKernel")))
	if ptsz["symbol"] != "cudaLaunchKernel_ptsz" || ptsz["grid"] != "[128, 1, 1]" || ptsz["block"] != "[256, 1, 1]" ||
		integer(t, ptsz["shared_mem"]) != 1024 || ptsz["kernel"] != "kernel@0x409990" ||
		integer(t, ptsz["stream"]) != 1 || integer(t, ptsz["correlation"]) != 2 || ptsz["dur_measured"] != false {
		t.Errorf("launch args: %v", ptsz)
	}

	copies := find(tf, onThread(4123, "cudaMemcpyAsync"))
	if len(copies) != 2 {
		t.Fatalf("%d cudaMemcpyAsync slices", len(copies))
	}
	for _, c := range copies {
		ca := args(c)
		want := map[string]any{"HtoD": false, "DtoH": true}[ca["kind"].(string)]
		if ca["pageable"] != want || integer(t, ca["ret"]) != 0 || ca["dur_measured"] != nil || num(t, c["dur"]) <= 0 {
			t.Errorf("copy args: %v", c)
		}
	}
	if args(one(t, tf, "sync memcpy", onThread(4131, "cudaMemcpy")))["kind"] != "DtoD" {
		t.Error("cudaMemcpy kind")
	}
	if ma := args(one(t, tf, "memset", onThread(4123, "cudaMemsetAsync"))); integer(t, ma["bytes"]) != 256 || ma["kind"] != nil {
		t.Errorf("memset args: %v", ma)
	}
	// A call that takes no stream has none.
	if _, ok := args(one(t, tf, "device sync", onThread(4123, "cudaDeviceSynchronize")))["stream"]; ok {
		t.Error("cudaDeviceSynchronize carries a stream")
	}
}

func TestSyncSlices(t *testing.T) {
	r := fixture.Result()
	tf, _ := write(t, r, Options{})

	ps := one(t, tf, "pageable sync", named("X", "sync: pageable_memcpy"))
	pa := args(ps)
	wantStack := []any{"cudaMemcpyAsync (libcudart.so.13)", "train_step (train.py)", "0x555500003000"}
	if !reflect.DeepEqual(pa["stack"], wantStack) {
		t.Errorf("stack %v, want %v", pa["stack"], wantStack)
	}
	if pa["kind"] != "pageable_memcpy" || pa["explicit"] != false || integer(t, pa["blocked_ns"]) != 30_000 ||
		integer(t, pa["stream"]) != 2 || integer(t, pa["queued_ops"]) != 4 || pa["hint"] != model.SyncPageableMemcpy.Hint() ||
		num(t, ps["dur"]) != 30 || integer(t, ps["tid"]) != 4123 {
		t.Errorf("pageable sync: %v", ps)
	}
	ss := args(one(t, tf, "stream sync", named("X", "sync: stream_sync")))
	if ss["explicit"] != true {
		t.Errorf("stream sync: %v", ss)
	}
	for _, ev := range find(tf, named("X", "sync: device_sync")) {
		if _, ok := args(ev)["stream"]; ok {
			t.Errorf("device-wide sync carries a stream: %v", ev)
		}
	}
}

func TestGPUSlices(t *testing.T) {
	r := fixture.Result()
	tf, _ := write(t, r, Options{})

	full := symbolize.Demangle(fixture.KernelLong)
	long := args(one(t, tf, "templated kernel", named("X", symbolize.Shorten(full, 120))))
	if long["kernel_full"] != full || long["kernel_mangled"] != fixture.KernelLong || long["bounded"] != true {
		t.Errorf("kernel args: %v", long)
	}
	one(t, tf, "unresolved kernel", named("X", "kernel@0x409990"))
	one(t, tf, "pinned copy", named("X", "Memcpy HtoD (Pinned)"))
	one(t, tf, "pageable copy", named("X", "Memcpy DtoH (Pageable)"))
	one(t, tf, "device copy", named("X", "Memcpy DtoD"))
	if ms := one(t, tf, "memset", named("X", "Memset")); num(t, ms["dur"]) != 0.001 || ms["cat"] != "gpu_memset" {
		t.Errorf("zero-length op: %v", ms)
	}
}

func TestMetadata(t *testing.T) {
	r := fixture.Result()
	tf, _ := write(t, r, Options{})
	type track struct {
		meta     string
		pid, tid int64
	}
	names := map[track]string{}
	for _, ev := range find(tf, func(ev map[string]any) bool { return ev["ph"] == "M" }) {
		if n, ok := args(ev)["name"].(string); ok {
			names[track{ev["name"].(string), integer(t, ev["pid"]), integer(t, ev["tid"])}] = n
		}
	}
	want := map[track]string{
		{"process_name", 4123, 0}:              "python3 (pid 4123, container abc123def456)",
		{"thread_name", 4123, 4123}:            "python3",
		{"thread_name", 4123, 4130}:            "pt_autograd_0",
		{"thread_name", 4123, 4131}:            "thread 4131",
		{"process_name", gpuPIDBase + 4123, 0}: "GPU 0 — python3 (pid 4123, container abc123def456) (inferred)",
		{"thread_name", gpuPIDBase + 4123, 0}:  "stream 0 (legacy default)",
		{"process_name", 5000, 0}:              "a.out (pid 5000)",
		{"thread_name", 5000, 5000}:            "a.out",
		{"process_name", gpuPIDBase + 5000, 0}: "GPU 0 — a.out (pid 5000) (inferred)",
	}
	for k, v := range want {
		if names[k] != v {
			t.Errorf("%v = %q, want %q", k, names[k], v)
		}
	}
	// Stream tracks, in id order.
	var streams []string
	for _, ev := range find(tf, named("M", "thread_name")) {
		if integer(t, ev["pid"]) == gpuPIDBase+4123 {
			streams = append(streams, args(ev)["name"].(string))
		}
	}
	wantStreams := []string{"stream 0 (legacy default)", "stream 1 (per-thread default, tid 4130)",
		"stream 2 (non-blocking, prio -1)", "stream 3 (pre-existing)"}
	if !reflect.DeepEqual(streams, wantStreams) {
		t.Errorf("stream tracks %q, want %q", streams, wantStreams)
	}
	// Each device track sorts right after its process.
	sortIndex := map[int64]int64{}
	for _, ev := range find(tf, named("M", "process_sort_index")) {
		sortIndex[integer(t, ev["pid"])] = integer(t, args(ev)["sort_index"])
	}
	if sortIndex[4123] != 0 || sortIndex[gpuPIDBase+4123] != 1 || sortIndex[5000] != 2 || sortIndex[gpuPIDBase+5000] != 3 {
		t.Errorf("process sort indices %v", sortIndex)
	}
}

func TestCounters(t *testing.T) {
	r := fixture.Result()
	tf, raw := write(t, r, Options{Counters: []Counter{
		{Name: "GPU 0 \"util\"", PID: GPUPID(4123), TS: fixture.Base, Values: map[string]float64{"sm": 87.5, "mem": 12, "bad": math.NaN()}},
	}})
	c := one(t, tf, "counter", func(ev map[string]any) bool { return ev["ph"] == "C" })
	if c["name"] != `GPU 0 "util"` || num(t, args(c)["sm"]) != 87.5 || args(c)["bad"] != nil {
		t.Errorf("counter: %v", c)
	}
	if !strings.Contains(raw, `"args":{"bad":null,"mem":12,"sm":87.5}`) {
		t.Error("counter values not sorted by name, or NaN not null")
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote\back`, "tab\tnl\n\x00\x1b\x7f", "em — dash ünï", "bad \xff\xfe utf8", "\u2028"} {
		got := appendString(nil, s)
		if !json.Valid(got) {
			t.Errorf("%q: invalid JSON %s", s, got)
			continue
		}
		want, _ := json.Marshal(s) // the reference: invalid UTF-8 becomes U+FFFD
		var g, w string
		json.Unmarshal(got, &g)
		json.Unmarshal(want, &w)
		if g != w {
			t.Errorf("%q round-trips to %q, want %q", s, g, w)
		}
	}
}

func TestWriteFile(t *testing.T) {
	r := fixture.Result()
	dir := t.TempDir()
	for _, name := range []string{"trace.json", "trace.json.gz"} {
		path := filepath.Join(dir, name)
		if err := WriteFile(path, r, Options{}); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if data, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if tf := parse(t, data); len(tf.TraceEvents) == 0 {
			t.Errorf("%s: no events", name)
		}
	}
	if err := WriteFile(filepath.Join(dir, "missing", "trace.json"), r, Options{}); err == nil {
		t.Error("no error for an unwritable path")
	}
}

// synthetic is a recording of n launches, each with its GPU op and flow, and
// a sync with a stack after every 100th.
func synthetic(n int) *model.Result {
	p := &model.Process{
		PID: 1, Info: model.ProcessInfo{Comm: "bench"}, Threads: map[uint32]string{1: "bench"},
		Streams: []*model.Stream{{ID: 0, Kind: model.StreamLegacy}},
		Kernels: map[uint64]string{0x1000: fixture.KernelLong},
		Stacks:  [][]uint64{{0x10, 0x20, 0x30}},
		Frames:  map[uint64]string{0x10: "a (x.so)", 0x20: "b (x.so)", 0x30: "c (x.so)"},
	}
	for i := range n {
		ts := fixture.Base + uint64(i)*5000
		p.Calls = append(p.Calls, model.Call{Start: ts, End: ts, TID: 1, API: event.CudaLaunchKernel, Correlation: uint64(i + 1),
			GPUOp: int32(i), Sync: -1, Stack: -1, Args: event.Args{Func: 0x1000, HasStream: true}})
		p.GPUOps = append(p.GPUOps, model.GPUOp{Kind: model.OpKernel, Call: i, Correlation: uint64(i + 1), Func: 0x1000, Start: ts + 1000, End: ts + 4000})
		if i%100 == 99 {
			p.Calls[i].Sync, p.Calls[i].Stack = int32(len(p.Syncs)), 0
			p.Syncs = append(p.Syncs, model.Sync{Kind: model.SyncStream, Call: i, TID: 1, Start: ts, BlockedNs: 1000})
		}
	}
	return &model.Result{Processes: []*model.Process{p}}
}

// TestAllocsPerEvent guards the streaming design: the allocations of a write
// must not grow with the number of events.
func TestAllocsPerEvent(t *testing.T) {
	allocs := func(n int) float64 {
		r := synthetic(n)
		return testing.AllocsPerRun(3, func() { Write(io.Discard, r, Options{}) })
	}
	small, large := allocs(1000), allocs(11000)
	if perEvent := (large - small) / (10000 * 4); perEvent > 0.001 { // 4 events per launch
		t.Errorf("%.4f allocations per event (%v for 1k launches, %v for 11k)", perEvent, small, large)
	}
}

func BenchmarkWrite(b *testing.B) {
	const n = 100_000
	r := synthetic(n)
	var buf bytes.Buffer
	Write(&buf, r, Options{})
	events := float64(strings.Count(buf.String(), `{"ph":`))
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	for b.Loop() {
		if err := Write(io.Discard, r, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(events*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/(events*float64(b.N)), "allocs/event")
}
