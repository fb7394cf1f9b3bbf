package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/export/syncs/synctest"
	"github.com/cudatap/cudatap/tracer/model"
)

// judge runs rec through the model and returns the host verdicts on pid
// and the summary.
func judge(t *testing.T, rec *synctest.Recording, sink func(*syncs.Collector) model.Sink) ([]HostVerdict, string) {
	t.Helper()
	c := syncs.NewCollector()
	var s model.Sink = c
	if sink != nil {
		s = sink(c)
	}
	r := rec.Run(s)
	var buf bytes.Buffer
	if err := Summary(&buf, r, c, Options{}); err != nil {
		t.Fatal(err)
	}
	return HostVerdicts(&r.GPU, syncs.HostOf(r, c, rec.PID)), buf.String()
}

func kinds(vs []HostVerdict) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	return out
}

// A launch loop of tiny kernels with the GPU busy 20% (NVML) and no syncs
// is host bound; the same loop with the GPU busy 95% is not.
func TestVerdictLaunchBound(t *testing.T) {
	vs, out := judge(t, synctest.LaunchLoop(20), nil)
	if len(vs) != 1 || vs[0].Kind != VerdictLaunchBound || vs[0].PID != 5000 {
		t.Fatalf("verdicts %v", vs)
	}
	for _, want := range []string{"20000 launches in 201.0 ms (one every 10.0 µs)", "GPU was busy 20% of the time (NVML utilization mean of GPU 0",
		"blocked in syncs 0% of its wall time", "away from CUDA in gaps ≥ 5.0 ms 0%", "the rest, 100%, went to issuing work",
		"CUDA graph", `torch.compile(mode="reduce-overhead")`, "larger batches"} {
		if !strings.Contains(vs[0].Detail, want) {
			t.Errorf("detail lacks %q:\n%s", want, vs[0].Detail)
		}
	}
	for _, want := range []string{"\n  verdict: host bound: 20000 launches", "verdicts: none from NVML", "host: the thread that launches work, python3 (tid 5000): 20000 launches"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not host bound") {
		t.Errorf("the summary says both:\n%s", out)
	}

	rec := synctest.LaunchLoop(20)
	c := syncs.NewCollector()
	if all := AllHostVerdicts(rec.Run(c), c); len(all) != 1 || all[0] != vs[0] {
		t.Errorf("AllHostVerdicts %v", all)
	}

	if vs, out := judge(t, synctest.LaunchLoop(95), nil); len(vs) != 0 || !strings.Contains(out, "verdicts: none (not host bound") {
		t.Errorf("GPU-bound loop: %v\n%s", kinds(vs), out)
	}
	// Without NVML nor GPU times, nothing proves the GPU idle: no verdict.
	noNVML := synctest.LaunchLoop(20)
	noNVML.GPU = model.GPUReport{Status: "NVML not available"}
	if vs, _ := judge(t, noNVML, nil); len(vs) != 0 {
		t.Errorf("launch loop without NVML: %v", kinds(vs))
	}
	// With CUPTI's times: each 2 µs kernel of the 10 µs between launches.
	if vs, _ := judge(t, noNVML, measured(2*synctest.US)); len(vs) != 1 || !strings.Contains(vs[0].Detail, "busy 20% of the time (measured by CUPTI") {
		t.Errorf("launch loop timed by CUPTI: %v", vs)
	}
	if vs, _ := judge(t, noNVML, measured(9*synctest.US)); len(vs) != 0 {
		t.Errorf("busy loop timed by CUPTI: %v", vs)
	}
}

// measured hands c the ops as CUPTI would have timed them: running d from
// their enqueue.
func measured(d uint64) func(*syncs.Collector) model.Sink {
	return func(c *syncs.Collector) model.Sink { return timed{c, d} }
}

type timed struct {
	*syncs.Collector
	d uint64
}

func (s timed) GPUOp(p *model.Process, op *model.GPUOp) {
	o := *op
	o.Measured, o.Start, o.End = true, op.Enqueued, op.Enqueued+s.d
	s.Collector.GPUOp(p, &o)
}

// A loop whose host is away from CUDA 80 ms a step with nothing queued on
// the GPU stalls on its input; a loop that keeps the GPU busy while away
// does not.
func TestVerdictInputStall(t *testing.T) {
	vs, out := judge(t, synctest.InputStall(), nil)
	if len(vs) != 1 || vs[0].Kind != VerdictInputStall || vs[0].PID != 6000 {
		t.Fatalf("verdicts %v", vs)
	}
	for _, want := range []string{"away from CUDA 1.60 s of 1.73 s (92%) in 20 gaps ≥ 5.0 ms", "with no GPU work queued or running in 20 gaps, the longest 81.0 ms",
		"num_workers", "pin_memory=True", "prefetch"} {
		if !strings.Contains(vs[0].Detail, want) {
			t.Errorf("detail lacks %q:\n%s", want, vs[0].Detail)
		}
	}
	if !strings.Contains(out, "\n  verdict: input-pipeline stall: ") || strings.Contains(out, "input/host bound") {
		t.Errorf("summary:\n%s", out)
	}
	if vs, _ := judge(t, synctest.Pipelined(), nil); len(vs) != 0 {
		t.Errorf("pipelined loop: %v", vs)
	}
	// NVML alone bounds the GPU's work: away 92% of the time with the GPU
	// busy at most 6% leaves a stall, even where no sync proves the
	// streams empty.
	h := &syncs.Host{PID: 1, WorkThreads: 1, Launches: 10, WallNs: 1e9, ThreadWallNs: 1e9, IdleNs: 9e8, IdleGaps: 9, GPUOps: 10, QueuedNs: 1e9}
	g := synctest.InputStall().GPU
	g.GPUs[0].Processes = nil
	if vs := HostVerdicts(&g, h); len(vs) != 1 || vs[0].Kind != VerdictInputStall || !strings.Contains(vs[0].Detail, "with the GPU idle, at least (busy at most 6%") {
		t.Errorf("stall from NVML: %v", vs)
	}
	h.IdleGaps = 2 // one pause is not a pipeline
	if vs := HostVerdicts(&g, h); len(vs) != 0 {
		t.Errorf("two pauses: %v", vs)
	}
}

// A DDP rank beside NCCL's watchdog: the summary's blocked share is the
// main thread's, the watchdog a background poller below its site, and no
// verdict comes from either.
func TestSummaryBackgroundPoller(t *testing.T) {
	vs, out := judge(t, synctest.DDP(), nil)
	if len(vs) != 0 {
		t.Errorf("verdicts %v", vs)
	}
	for _, want := range []string{
		"host: the thread that launches work, python3 (tid 4123): 6000 launches; blocked in syncs 2.00 s of its 8.89 s wall time (22%)",
		"host: pt_nccl_watchdg (tid 4200): background poller, did not hold up the threads that launch work",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	sites := out[strings.Index(out, "top sync sites"):]
	main, dog := row(t, sites, "stream_sync"), row(t, sites, "query_poll")
	if main[2] != "2.00 s" || main[4] != synctest.DDPStep {
		t.Errorf("main site %q", main)
	}
	if !strings.HasPrefix(dog[2], "(") || dog[4] != synctest.Finished+" [no user frame]" || !strings.Contains(dog[5], "background poller on pt_nccl_watchdg (tid 4200)") {
		t.Errorf("watchdog site %q", dog)
	}
	if strings.Index(sites, "stream_sync") > strings.Index(sites, "query_poll") {
		t.Errorf("the watchdog tops the sites:\n%s", sites)
	}
	// The NCCL stream's row has none of the watchdog's polls.
	if got := row(t, out, "stream 2 "); got[10] != "-" {
		t.Errorf("NCCL stream row %q", got)
	}
}

// torch.cuda.synchronize() shows at the user's line in the summary too.
func TestSummaryUserLine(t *testing.T) {
	_, out := judge(t, synctest.TorchSync(), nil)
	if got := row(t, out[strings.Index(out, "top sync sites"):], "device_sync"); got[4] != synctest.TrainStep {
		t.Errorf("site %q", got)
	}
	if strings.Contains(out, "__init__.py:1162") {
		t.Errorf("torch's line in the summary:\n%s", out)
	}
}
