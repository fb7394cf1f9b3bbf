package chrome

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
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

// write streams the fixture through a Writer, as the model would.
func write(t *testing.T, f *fixture.Fixture, opts Options) (traceFile, string) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, f.Names, opts)
	f.Feed(w)
	if err := w.Close(f.Result); err != nil {
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
	f := fixture.New()
	r := f.Result
	tf, raw := write(t, f, Options{Version: "v0.1.0-test"})

	if tf.SchemaVersion == nil || *tf.SchemaVersion != 1 || tf.DisplayTimeUnit != "ns" || tf.DeviceProperties == nil {
		t.Errorf("Kineto header: schemaVersion %v, displayTimeUnit %q, deviceProperties %v", tf.SchemaVersion, tf.DisplayTimeUnit, tf.DeviceProperties)
	}
	cats := map[string]bool{"cuda_runtime": true, "cuda_driver": true, "nccl": true, SyncCategory: true,
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
			// HTA rounds starts up and ends down to whole µs: a slice of
			// no duration must sit on one, or it comes out at -1 µs.
			if ts := num(t, ev["ts"]); num(t, ev["dur"]) <= 0.001 && ts != math.Trunc(ts) {
				t.Errorf("slice of no duration inside a microsecond: %v", ev)
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
		// "stream" only on GPU activity (HTA takes any event with one
		// for a kernel); host slices say which stream they target.
		if s, ok := args(ev)["stream"]; ok {
			if integer(t, s); integer(t, ev["pid"]) < gpuPIDBase {
				t.Errorf("host event with a stream: %v", ev)
			}
		}
	}

	// Exactly three decimals, absolute monotonic µs: the first launch of A.
	if !strings.Contains(raw, `"ts":1000000010.000`) {
		t.Error("launch ts not written as absolute µs with three decimals")
	}

	// Every call, sync and GPU op is there, on the right tracks.
	var calls, syncs, ops int
	for _, tr := range f.Traces {
		calls += len(tr.Calls)
		syncs += len(tr.Syncs)
		ops += len(tr.GPUOps)
	}
	host := func(ev map[string]any) bool {
		return ev["ph"] == "X" && (ev["cat"] == "cuda_runtime" || ev["cat"] == "cuda_driver" || ev["cat"] == "nccl")
	}
	if n := len(find(tf, host)); n != calls {
		t.Errorf("%d host call slices, want %d", n, calls)
	}
	if n := len(find(tf, func(ev map[string]any) bool { return ev["cat"] == SyncCategory })); n != syncs {
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
	limits, _ := d["limits"].(map[string]any)
	if len(limits) != reflect.TypeFor[model.Limits]().NumField() {
		t.Errorf("drops.limits %v does not carry every Limits field", limits)
	}
	delete(d, "limits")
	maps.Copy(d, limits)
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
	f := fixture.New()
	tf, _ := write(t, f, Options{})

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
	for _, tr := range f.Traces {
		correlated += len(tr.GPUOps)
	}
	if n := len(find(tf, func(ev map[string]any) bool { return ev["ph"] == "s" && ev["cat"] == "ac2g" })); n != correlated {
		t.Errorf("%d ac2g flows, want %d", n, correlated)
	}
	a := f.Traces[fixture.PIDA]
	s, fin := starts["ac2g/1"], finishes["ac2g/1"]
	launch, op := a.Calls[a.GPUOps[0].Call], a.GPUOps[0]
	drawn := one(t, tf, "op 0", func(ev map[string]any) bool {
		return ev["ph"] == "X" && ev["args"] != nil && args(ev)["correlation"] != nil && integer(t, args(ev)["correlation"]) == 1 && integer(t, ev["pid"]) != fixture.PIDA
	})
	if s != (end{fixture.PIDA, int64(launch.TID), float64(launch.Start) / 1000}) ||
		fin != (end{int64(GPUPID(fixture.PIDA)), int64(op.Stream), num(t, drawn["ts"])}) {
		t.Errorf("ac2g/1: start %v finish %v, want the launch and where op 0 is drawn (%v)", s, fin, drawn["ts"])
	}

	// The event dependency runs from the last op on stream 2 before the
	// record (the pageable copy) to the first op on stream 3 after the wait.
	// The host-side wait (cudaEventSynchronize) draws no arrow.
	deps := find(tf, func(ev map[string]any) bool { return ev["ph"] == "s" && ev["cat"] == "cuda_event" })
	if len(deps) != 1 {
		t.Fatalf("%d dependency flows, want 1", len(deps))
	}
	id := fmt.Sprint("cuda_event/", deps[0]["id"])
	// Both ends where the ops are drawn (marks: CUPTI did not time them).
	drawnAt := func(op *model.GPUOp) float64 {
		ev := one(t, tf, fmt.Sprint("op ", op.ID), func(ev map[string]any) bool {
			return ev["ph"] == "X" && integer(t, ev["pid"]) == int64(GPUPID(fixture.PIDA)) && args(ev)["correlation"] != nil &&
				integer(t, args(ev)["correlation"]) == int64(op.Correlation)
		})
		return num(t, ev["ts"])
	}
	if s, fin := starts[id], finishes[id]; s != (end{int64(GPUPID(fixture.PIDA)), 2, drawnAt(&a.GPUOps[4])}) ||
		fin != (end{int64(GPUPID(fixture.PIDA)), 3, drawnAt(&a.GPUOps[6])}) {
		t.Errorf("dependency flow: start %v finish %v", s, fin)
	}
	if integer(t, deps[0]["id"]) < depFlowBase {
		t.Errorf("dependency flow id %v shares the correlation range", deps[0]["id"])
	}
}

func TestHostCalls(t *testing.T) {
	tf, _ := write(t, fixture.New(), Options{})
	onThread := func(tid int64, name string) func(map[string]any) bool {
		return func(ev map[string]any) bool {
			return ev["ph"] == "X" && ev["name"] == name && integer(t, ev["pid"]) == fixture.PIDA && integer(t, ev["tid"]) == tid
		}
	}

	ptsz := args(one(t, tf, "launch on the worker thread", onThread(4130, "cudaLaunchKernel")))
	if ptsz["symbol"] != "cudaLaunchKernel_ptsz" || !reflect.DeepEqual(dims(t, ptsz["grid"]), []int64{128, 1, 1}) ||
		!reflect.DeepEqual(dims(t, ptsz["block"]), []int64{256, 1, 1}) ||
		integer(t, ptsz["shared_mem"]) != 1024 || ptsz["kernel"] != "kernel@0x409990" || ptsz["stream"] != nil ||
		integer(t, ptsz["target_stream"]) != 1 || integer(t, ptsz["correlation"]) != 2 || ptsz["dur_measured"] != false {
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
	if _, ok := args(one(t, tf, "device sync", onThread(4123, "cudaDeviceSynchronize")))["target_stream"]; ok {
		t.Error("cudaDeviceSynchronize carries a stream")
	}

	// Process B: a driver launch of a kernel named through its runtime
	// stub, and an all-reduce.
	drv := one(t, tf, "driver launch", named("X", "cuLaunchKernel"))
	if drv["cat"] != "cuda_driver" || args(drv)["kernel"] != "fill" {
		t.Errorf("driver launch: %v", drv)
	}
	ar := one(t, tf, "all-reduce", func(ev map[string]any) bool {
		return named("X", "ncclAllReduce")(ev) && integer(t, ev["pid"]) == fixture.PIDB
	})
	if aa := args(ar); ar["cat"] != "nccl" || integer(t, aa["bytes"]) != 1<<20 || integer(t, aa["count"]) != 1<<18 ||
		aa["datatype"] != "float32" || aa["peer"] != nil {
		t.Errorf("all-reduce: %v", ar)
	}
}

func TestSyncSlices(t *testing.T) {
	tf, _ := write(t, fixture.New(), Options{})

	ps := one(t, tf, "pageable sync", named("X", "sync: pageable_memcpy"))
	pa := args(ps)
	wantStack := []any{"cudaMemcpyAsync (libcudart.so.13)", "train_step (train.py)", "0x555500003000"}
	if !reflect.DeepEqual(pa["stack"], wantStack) {
		t.Errorf("stack %v, want %v", pa["stack"], wantStack)
	}
	if pa["kind"] != "pageable_memcpy" || pa["explicit"] != false || integer(t, pa["blocked_ns"]) != 30_000 ||
		integer(t, pa["target_stream"]) != 2 || pa["stream"] != nil || integer(t, pa["queued_ops"]) != 4 || pa["hint"] != model.SyncPageableMemcpy.Hint() ||
		num(t, ps["dur"]) != 30 || integer(t, ps["tid"]) != 4123 {
		t.Errorf("pageable sync: %v", ps)
	}
	if _, ok := pa["python_stack"]; ok {
		t.Errorf("python_stack on a sync without one: %v", pa)
	}
	ss := args(one(t, tf, "stream sync", named("X", "sync: stream_sync")))
	if ss["explicit"] != true {
		t.Errorf("stream sync: %v", ss)
	}
	// The Python lines that led to the event sync, innermost first; the
	// unnamed frame keeps its code object's address.
	es := args(one(t, tf, "event sync", named("X", "sync: event_sync")))
	if want := []any{"train.py:88 step", "<python code 0x7f00bb00>"}; !reflect.DeepEqual(es["python_stack"], want) {
		t.Errorf("python_stack %v, want %v", es["python_stack"], want)
	}
	for _, ev := range find(tf, named("X", "sync: device_sync")) {
		if _, ok := args(ev)["target_stream"]; ok {
			t.Errorf("device-wide sync carries a stream: %v", ev)
		}
	}
}

func TestGPUSlices(t *testing.T) {
	tf, _ := write(t, fixture.New(), Options{})

	full := symbolize.Demangle(fixture.KernelLong)
	long := args(one(t, tf, "templated kernel", named("X", full)))
	if long["kernel_short"] != symbolize.Shorten(full, 120) || long["kernel_mangled"] != fixture.KernelLong || long["bounded"] != true {
		t.Errorf("kernel args: %v", long)
	}
	one(t, tf, "unresolved kernel", named("X", "kernel@0x409990"))
	// Copies and memsets named as Kineto names them.
	one(t, tf, "pinned copy", named("X", "Memcpy HtoD (Pinned -> Device)"))
	one(t, tf, "pageable copy", named("X", "Memcpy DtoH (Device -> Pageable)"))
	one(t, tf, "device copy", named("X", "Memcpy DtoD (Device -> Device)"))
	// An op CUPTI did not time: a 1 µs mark within its bounds.
	if ms := one(t, tf, "memset", named("X", "Memset (Device)")); num(t, ms["dur"]) != 1 || ms["cat"] != "gpu_memset" || args(ms)["inferred"] != true ||
		num(t, ms["ts"]) < num(t, args(ms)["earliest_start"]) {
		t.Errorf("memset: %v, want a 1 µs mark in its bounds", ms)
	}
	fill := args(one(t, tf, "driver-launched kernel", named("X", "fill(float*, int)")))
	if fill["kernel_mangled"] != fixture.KernelFill || fill["kernel_short"] != "fill" ||
		!reflect.DeepEqual(dims(t, fill["grid"]), []int64{1, 1, 1}) || !reflect.DeepEqual(dims(t, fill["block"]), []int64{32, 1, 1}) {
		t.Errorf("driver-launched kernel args: %v", fill)
	}
	if nc := one(t, tf, "collective", func(ev map[string]any) bool {
		return named("X", "ncclAllReduce")(ev) && integer(t, ev["pid"]) == int64(GPUPID(fixture.PIDB))
	}); nc["cat"] != "kernel" || integer(t, nc["tid"]) != 1 || integer(t, args(nc)["bytes"]) != 1<<20 {
		t.Errorf("collective slice: %v", nc)
	}
}

func TestMetadata(t *testing.T) {
	tf, _ := write(t, fixture.New(), Options{})
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
	f := fixture.New()
	f.Result.Counters = []model.Counter{
		{Device: 1, Name: "GPU 1 NVIDIA H200", TS: fixture.Base + 10, Values: map[string]float64{"sm_util": 50}},
		{Device: 1, Name: "GPU 1 NVIDIA H200", TS: fixture.Base + 20, Values: map[string]float64{"sm_util": 60}},
	}
	tf, raw := write(t, f, Options{Counters: []Counter{
		{Name: "GPU 0 \"util\"", PID: GPUPID(4123), TS: fixture.Base, Values: map[string]float64{"sm": 87.5, "mem": 12, "bad": math.NaN()}},
	}})
	c := one(t, tf, "counter", func(ev map[string]any) bool { return ev["ph"] == "C" && integer(t, ev["pid"]) == int64(GPUPID(4123)) })
	if c["name"] != `GPU 0 "util"` || num(t, args(c)["sm"]) != 87.5 || args(c)["bad"] != nil {
		t.Errorf("counter: %v", c)
	}
	// The result's NVML samples: on the device's own track, named once.
	if n := len(find(tf, func(ev map[string]any) bool { return ev["ph"] == "C" && integer(t, ev["pid"]) == int64(DevicePID(1)) })); n != 2 {
		t.Errorf("%d NVML samples, want 2", n)
	}
	if dev := one(t, tf, "device track name", func(ev map[string]any) bool {
		return named("M", "process_name")(ev) && integer(t, ev["pid"]) == int64(DevicePID(1))
	}); args(dev)["name"] != "GPU 1 NVIDIA H200 (NVML)" {
		t.Errorf("device track: %v", dev)
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

type failWriter struct{ n int }

func (f *failWriter) Write(b []byte) (int, error) {
	if f.n -= len(b); f.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(b), nil
}

// A write error anywhere in the trace is the one Close returns.
func TestWriteError(t *testing.T) {
	f := fixture.New()
	w := NewWriter(&failWriter{n: 1000}, f.Names, Options{})
	f.Feed(w)
	if err := w.Close(f.Result); err == nil || err.Error() != "disk full" {
		t.Errorf("Close = %v, want the write error", err)
	}
}

// synthetic is one process that launches a kernel, with a named stack and
// a Python stack for its syncs, and the events of one launch: the call, its
// GPU op (waiting for an op on another stream) and a sync.
func synthetic() (*model.Names, *model.Process, *model.Call, *model.GPUOp, *model.Sync) {
	n := model.NewNames()
	n.Kernels[model.NameKey{PID: 1, Key: 0x1000}] = fixture.KernelLong
	for i, f := range []string{"a (x.so)", "b (x.so)"} {
		n.Frames[model.NameKey{PID: 1, Key: uint64(0x10 * (i + 1))}] = f
	}
	py := model.PyKey{Code: 0x50, Instr: 1}
	n.Py[model.PyNameKey{PID: 1, PyKey: py}] = "train.py:3 step"
	p := &model.Process{
		PID: 1, Threads: map[uint32]struct{}{1: {}}, KernelNames: map[uint64]string{}, Stubs: map[uint64]uint64{},
		Streams:  []*model.Stream{{ID: 0, Kind: model.StreamLegacy}, {ID: 1, Kind: model.StreamCreated}},
		Stacks:   [][]uint64{{0x10, 0x20, 0x30}},
		PyStacks: [][]model.PyKey{{py, {Code: 0x60}}},
	}
	ts := uint64(fixture.Base)
	c := &model.Call{Start: ts, End: ts, TID: 1, API: event.CudaLaunchKernel, Correlation: 1, Stream: 1, GPUOp: 0,
		Stack: -1, PyStack: -1, Args: event.Args{Func: 0x1000, HasStream: true}}
	op := &model.GPUOp{Kind: model.OpKernel, Stream: 1, Correlation: 1, Func: 0x1000, Enqueued: ts, TID: 1,
		Start: ts + 1000, End: ts + 4000, After: 0, AfterStream: 0, AfterStart: ts + 500}
	s := &model.Sync{Kind: model.SyncStream, TID: 1, Stream: 1, Start: ts, BlockedNs: 1000, Stack: 0, PyStack: 0}
	return n, p, c, op, s
}

// TestAllocsPerEvent guards the streaming design: once the kernel names are
// cached, writing a call, a sync or a GPU op allocates nothing, so the
// writer's memory does not grow with the recording.
func TestAllocsPerEvent(t *testing.T) {
	n, p, c, op, s := synthetic()
	w := NewWriter(io.Discard, n, Options{})
	w.Call(p, c)
	w.GPUOp(p, op)
	w.Sync(p, s)
	for name, f := range map[string]func(){
		"call":   func() { c.Start++; w.Call(p, c) },
		"GPU op": func() { op.Start++; w.GPUOp(p, op) },
		"sync":   func() { s.Start++; w.Sync(p, s) },
	} {
		if a := testing.AllocsPerRun(1000, f); a != 0 {
			t.Errorf("%v allocations per %s", a, name)
		}
	}
	if err := w.Close(&model.Result{Processes: []*model.Process{p}}); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkWriter(b *testing.B) {
	n, p, c, op, s := synthetic()
	var buf bytes.Buffer
	w := NewWriter(&buf, n, Options{})
	w.out.Flush()
	head := buf.Len()
	w.Call(p, c)
	w.GPUOp(p, op)
	w.out.Flush()
	b.SetBytes(int64(buf.Len() - head)) // one launch
	w = NewWriter(io.Discard, n, Options{})
	b.ReportAllocs()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for b.Loop() {
		c.Start++
		op.Start++
		w.Call(p, c)
		w.GPUOp(p, op)
		if c.Start%100 == 0 {
			w.Sync(p, s)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	const events = 6 // per launch: the call, its GPU op, both ends of its ac2g and of its cuda_event flow
	b.ReportMetric(events*float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/(events*float64(b.N)), "allocs/event")
	w.Close(&model.Result{Processes: []*model.Process{p}})
}

// dims reads a launch dimension, written as a JSON array as Kineto does.
func dims(t *testing.T, v any) []int64 {
	t.Helper()
	a, ok := v.([]any)
	if !ok {
		t.Errorf("launch dimension %v (%T), want an array", v, v)
		return nil
	}
	out := make([]int64, len(a))
	for i, x := range a {
		out[i] = integer(t, x)
	}
	return out
}

// Host slices with no whole microsecond in them (an entry-only launch, a
// call shorter than a microsecond: the flaky HTA failure on a 0.4 µs
// cudaEventCreateWithFlags) sit on the whole microsecond they start in,
// with no duration (the wall time in args) and with the flows that bind to
// them: HTA rounds starts up and ends down, and one inside a microsecond
// would come out at -1 µs. Slices across a whole microsecond keep their
// exact time; an op CUPTI did not time is a 1 µs mark at half a microsecond.
func TestNoNegativeDurationInHTA(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, nil, Options{})
	p := &model.Process{PID: 7}
	w.Call(p, &model.Call{Seq: 1, API: event.CudaLaunchKernel, TID: 7, Start: 1_000_300, End: 1_000_300, Stream: 0, Correlation: 1, GPUOp: 0})
	w.Call(p, &model.Call{Seq: 2, API: event.CudaEventCreateWithFlags, TID: 7, Start: 1_002_300, End: 1_002_700, HasRet: true})
	w.Call(p, &model.Call{Seq: 3, API: event.CudaMemcpyAsync, TID: 7, Start: 1_003_300, End: 1_004_100, HasRet: true})
	w.Call(p, &model.Call{Seq: 4, API: event.CudaLaunchKernel, TID: 7, Start: 1_005_200, End: 1_005_900, Stream: 0, Correlation: 2, GPUOp: 1})
	w.GPUOp(p, &model.GPUOp{Call: 1, Kind: model.OpKernel, Correlation: 1, Enqueued: 1_000_300, EnqueueOnly: true, Start: 1_004_400, End: 1_004_400, After: -1, AfterStream: -1})
	w.GPUOp(p, &model.GPUOp{ID: 1, Call: 4, Kind: model.OpKernel, Correlation: 2, Enqueued: 1_005_200, Start: 1_006_000, End: 1_007_000, After: -1, AfterStream: -1})
	if err := w.Close(&model.Result{}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]float64{"cudaLaunchKernel": {1000, 1005}, "cudaEventCreateWithFlags": {1002}, "cudaMemcpyAsync": {1003.3}, "kernel@0x0": {1004.5, 1006.5}}
	flows := map[string][]float64{"s": {1000, 1005}, "f": {1004.5, 1006.5}}
	for _, ev := range parse(t, buf.Bytes()).TraceEvents {
		switch ev["ph"] {
		case "X":
			name := ev["name"].(string)
			if len(want[name]) == 0 || num(t, ev["ts"]) != want[name][0] {
				t.Errorf("%v at %v, want %v", name, ev["ts"], want[name])
			} else {
				want[name] = want[name][1:]
			}
			if start, dur := num(t, ev["ts"]), num(t, ev["dur"]); math.Ceil(start) > math.Floor(start+dur) {
				t.Errorf("%v [%v +%v]: HTA reads a negative duration", name, start, dur)
			}
		case "s", "f":
			ph := ev["ph"].(string)
			if len(flows[ph]) == 0 || num(t, ev["ts"]) != flows[ph][0] {
				t.Errorf("flow %v at %v, want %v", ph, ev["ts"], flows[ph])
			} else {
				flows[ph] = flows[ph][1:]
			}
		}
	}
}

// The GPUs NVML described are the trace's deviceProperties, as in Kineto.
func TestDeviceProperties(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, nil, Options{})
	r := &model.Result{}
	r.GPU.GPUs = []model.GPUStats{{Index: 0, Name: "NVIDIA H200", MemTotal: 150_000_000_000, UUID: "GPU-1"}, {Index: 1, Name: "NVIDIA H200"}}
	if err := w.Close(r); err != nil {
		t.Fatal(err)
	}
	dp := parse(t, buf.Bytes()).DeviceProperties
	if len(dp) != 2 {
		t.Fatalf("deviceProperties %v", dp)
	}
	d0 := dp[0].(map[string]any)
	if integer(t, d0["id"]) != 0 || d0["name"] != "NVIDIA H200" || integer(t, d0["totalGlobalMem"]) != 150_000_000_000 || integer(t, dp[1].(map[string]any)["id"]) != 1 {
		t.Errorf("deviceProperties %v", dp)
	}
}

// Each device a process's work ran on gets its own track, named after it,
// with the streams that served it; work cudatap cannot attribute goes to
// "GPU ?".
func TestDeviceTracks(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, nil, Options{})
	p := &model.Process{PID: 7, Devices: model.DeviceBitsOf(1) | model.DeviceBitsOf(model.DeviceUnknown),
		Streams: []*model.Stream{{ID: 0, Kind: model.StreamLegacy, Devices: model.DeviceBitsOf(1)},
			{ID: 1, Kind: model.StreamPreExisting, Device: model.DeviceUnknown, Devices: model.DeviceBitsOf(model.DeviceUnknown)}}}
	w.GPUOp(p, &model.GPUOp{Kind: model.OpMemset, Stream: 0, Device: 1, Start: 5000, End: 9000, After: -1, AfterStream: -1})
	w.GPUOp(p, &model.GPUOp{Kind: model.OpMemset, Stream: 1, Device: model.DeviceUnknown, Start: 5000, End: 9000, After: -1, AfterStream: -1})
	if err := w.Close(&model.Result{Processes: []*model.Process{p}}); err != nil {
		t.Fatal(err)
	}
	tracks := map[int64]string{}
	ops := map[int64]int64{}
	for _, ev := range parse(t, buf.Bytes()).TraceEvents {
		switch {
		case ev["ph"] == "M" && ev["name"] == "process_name":
			tracks[integer(t, ev["pid"])] = args(ev)["name"].(string)
		case ev["ph"] == "X":
			ops[integer(t, ev["pid"])] = integer(t, args(ev)["device"])
		}
	}
	d1, unknown := int64(DeviceTrackPID(7, 1)), int64(DeviceTrackPID(7, model.DeviceUnknown))
	if !strings.HasPrefix(tracks[d1], "GPU 1 — ") || !strings.HasPrefix(tracks[unknown], "GPU ? — ") || ops[d1] != 1 || ops[unknown] != -1 {
		t.Errorf("tracks %v, ops by track %v", tracks, ops)
	}
}

// A kernel nothing named when its launch was written takes the name CUPTI
// gave it by the time its GPU op is written (--gpu-times), measured times
// to the nanosecond.
func TestMeasuredKernelName(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, nil, Options{})
	p := &model.Process{PID: 7, MeasuredNames: map[uint64]string{}}
	w.Call(p, &model.Call{API: event.CuLaunchKernel, TID: 7, Start: 1_000_000, End: 1_002_000, HasRet: true, Correlation: 1, GPUOp: 0,
		Args: event.Args{Func: 0xf00}})
	p.MeasuredNames[0xf00] = "_Z6matmulPf"
	w.GPUOp(p, &model.GPUOp{Kind: model.OpKernel, Func: 0xf00, Correlation: 1, Enqueued: 1_000_000, Start: 1_003_333, End: 1_004_567,
		Measured: true, After: -1, AfterStream: -1})
	if err := w.Close(&model.Result{}); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range parse(t, buf.Bytes()).TraceEvents {
		if ev["ph"] == "X" && ev["cat"] == "kernel" {
			found = true
			args := ev["args"].(map[string]any)
			if ev["name"] != "matmul(float*)" || args["timing"] != "measured" || num(t, ev["ts"]) != 1003.333 || num(t, ev["dur"]) != 1.234 {
				t.Errorf("kernel slice %v", ev)
			}
		}
	}
	if !found {
		t.Error("no kernel slice")
	}
}

// distributedInfo is written as Kineto writes it for a trace of one NCCL
// rank; a trace of several ranks names each in its process track instead.
func TestDistributedInfo(t *testing.T) {
	for _, tc := range []struct {
		procs []*model.Process
		want  string
	}{
		{[]*model.Process{{PID: 7, Rank: 1, WorldSize: 2}, {PID: 8}}, `"distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2, "pg_count": 1, ` +
			`"pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}], "nccl_version": "unknown"}`},
		{[]*model.Process{{PID: 7, Rank: 0, WorldSize: 2}, {PID: 8, Rank: 1, WorldSize: 2}}, ""},
		{[]*model.Process{{PID: 7}}, ""},
	} {
		var buf bytes.Buffer
		w := NewWriter(&buf, nil, Options{})
		if err := w.Close(&model.Result{Processes: tc.procs}); err != nil {
			t.Fatal(err)
		}
		parse(t, buf.Bytes())
		got := strings.Contains(buf.String(), `"distributedInfo"`)
		if got != (tc.want != "") || (tc.want != "" && !strings.Contains(buf.String(), tc.want)) {
			t.Errorf("%d processes: distributedInfo %v, want %q", len(tc.procs), got, tc.want)
		}
	}
}
