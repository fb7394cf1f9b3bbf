package metrics

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// gather returns metric name → the value of its series whose labels
// include want.
// families gathers c's metrics.
func families(t *testing.T, c *Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func gather(t *testing.T, c *Collector, name string, want map[string]string) float64 {
	t.Helper()
	for _, f := range families(t, c) {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestCollector(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{"python3", "abc123", "pod-uid", "ml"} }
	p := &model.Process{PID: 42}
	call := func(api event.API, x model.Call) *model.Call { x.API = api; return &x }
	c.Call(p, call(event.CuLaunchKernel, model.Call{ViaRuntime: true}))
	c.Call(p, call(event.CuLaunchKernel, model.Call{}))
	c.Call(p, call(event.CudaLaunchKernel, model.Call{Captured: true})) // into a graph: not a launch
	c.Call(p, call(event.CudaMemcpyAsync, model.Call{Start: 0, End: 3000, HasRet: true, Pageable: true,
		Args: event.Args{Bytes: 4096, Kind: event.DeviceToHost}}))
	c.Call(p, call(event.NcclAllReduce, model.Call{Args: event.Args{Bytes: 1 << 20}}))
	c.Sync(p, &model.Sync{Kind: model.SyncPageableMemcpy, BlockedNs: 2_500_000})
	id := map[string]string{"pid": "42", "comm": "python3", "container": "abc123", "pod": "pod-uid", "namespace": "ml"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for a, b := range id {
			m[a] = b
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cudatap_kernel_launches_total", id, 2},
		{"cudatap_cuda_calls_total", with("api", "cudaLaunchKernel"), 2}, // via the runtime, and captured
		{"cudatap_cuda_calls_total", with("api", "cuLaunchKernel"), 1},
		{"cudatap_memcpy_bytes_total", map[string]string{"pid": "42", "direction": "DtoH", "host_memory": "pageable"}, 4096},
		{"cudatap_nccl_bytes_total", with("op", "ncclAllReduce"), 1 << 20},
		{"cudatap_syncs_total", with("kind", "pageable_memcpy"), 1},
		{"cudatap_sync_wait_seconds_total", with("kind", "pageable_memcpy"), 0.0025},
		{"cudatap_cuda_api_seconds", with("api", "cudaMemcpyAsync"), 1},
	} {
		if got := gather(t, c, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// Beyond MaxProcesses, the series of the process seen least recently go,
// and are counted.
func TestCollectorBounded(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "w"} }
	for pid := uint32(1); pid <= MaxProcesses+10; pid++ {
		c.Call(&model.Process{PID: pid}, &model.Call{API: event.CudaMemsetAsync})
	}
	if len(c.procs) != MaxProcesses {
		t.Errorf("%d processes kept, want %d", len(c.procs), MaxProcesses)
	}
	if got := gather(t, c, "cudatap_metrics_processes_evicted_total", nil); got != 10 {
		t.Errorf("evicted %v, want 10", got)
	}
	if got := gather(t, c, "cudatap_cuda_calls_total", map[string]string{"pid": "1"}); got != -1 {
		t.Errorf("the oldest process still has series: %v", got)
	}
}

// TestLaunchCounts: launches counted in BPF show live, per API, and fold
// into the totals when the session ends; the next session adds to them.
func TestLaunchCounts(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {{API: event.CuLaunchKernel}: 100}}})
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {{API: event.CuLaunchKernel}: 150}}}) // cumulative: replaces
	check := func(want float64) {
		t.Helper()
		if got := gather(t, c, "cudatap_kernel_launches_total", map[string]string{"pid": "7"}); got != want {
			t.Errorf("launches %v, want %v", got, want)
		}
		if got := gather(t, c, "cudatap_cuda_calls_total", map[string]string{"pid": "7", "api": "cuLaunchKernel"}); got != want {
			t.Errorf("cuLaunchKernel calls %v, want %v", got, want)
		}
	}
	check(150)
	c.FoldAggregates()
	check(150)
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {{API: event.CuLaunchKernel}: 5}}}) // a new session
	check(155)
}

// TestStreamLaunches: launches by stream, from BPF counts (live, then
// folded) and from traced launch calls, under one label per stream handle.
// TestLaunchTimes: launch times kept in BPF (log2 buckets) join the API
// time histogram in its power-of-two bounds exactly, with the times traced
// from user space; live, then folded, then added to by the next session.
func TestLaunchTimes(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	var h event.TimeHistogram
	h.Count[11], h.Ns[11] = 3, 9000 // [2048, 4096) ns
	h.Count[12], h.Ns[12] = 1, 5000 // [4096, 8192) ns
	h.Count[31], h.Ns[31] = 1, 3e9  // beyond the last bound (2^30 ns)
	c.SetAggregates(event.Aggregates{Times: map[uint32]map[event.API]*event.TimeHistogram{7: {event.CuLaunchKernel: &h}}, TimesLost: 2})
	// A launch traced from user space too (the ring buffer, counters full): 1000 ns.
	c.Call(&model.Process{PID: 7}, &model.Call{API: event.CuLaunchKernel, HasRet: true, Start: 0, End: 1000})
	check := func(count uint64, sum float64, buckets map[float64]uint64) {
		t.Helper()
		for _, f := range families(t, c) {
			if f.GetName() != "cudatap_cuda_api_seconds" {
				continue
			}
			m := f.GetMetric()[0].GetHistogram()
			if m.GetSampleCount() != count || math.Abs(m.GetSampleSum()-sum) > 1e-12 {
				t.Errorf("count %d, sum %v s; want %d, %v", m.GetSampleCount(), m.GetSampleSum(), count, sum)
			}
			for _, b := range m.GetBucket() {
				if want, ok := buckets[b.GetUpperBound()]; ok && b.GetCumulativeCount() != want {
					t.Errorf("le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
				}
			}
			return
		}
		t.Fatal("no cudatap_cuda_api_seconds")
	}
	check(6, 3.000015, map[float64]uint64{1.024e-6: 1, 4.096e-6: 4, 16.384e-6: 5, 1.073741824: 5})
	if got := gather(t, c, "cudatap_launch_times_lost_total", nil); got != 2 {
		t.Errorf("times lost %v, want 2", got)
	}
	c.FoldAggregates()
	check(6, 3.000015, map[float64]uint64{1.024e-6: 1, 4.096e-6: 4, 16.384e-6: 5, 1.073741824: 5})
	var next event.TimeHistogram
	next.Count[10], next.Ns[10] = 1, 1500
	c.SetAggregates(event.Aggregates{Times: map[uint32]map[event.API]*event.TimeHistogram{7: {event.CuLaunchKernel: &next}}, TimesLost: 1})
	check(7, 3.0000165, map[float64]uint64{1.024e-6: 1, 4.096e-6: 5, 16.384e-6: 6, 1.073741824: 6})
	if got := gather(t, c, "cudatap_launch_times_lost_total", nil); got != 3 {
		t.Errorf("times lost %v, want 3", got)
	}
}

func TestStreamLaunches(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	k := func(api event.API, stream uint64) event.LaunchKey { return event.LaunchKey{API: api, Stream: stream} }
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {k(event.CuLaunchKernel, 0x7f00): 100, k(event.CuLaunchKernelEx, 0x7f00): 1,
		k(event.CuLaunchKernel, 0): 20, k(event.CuLaunchKernel, event.AggregateUnknownStream): 3}}})
	check := func(stream string, want float64) {
		t.Helper()
		if got := gather(t, c, "cudatap_stream_launches_total", map[string]string{"pid": "7", "stream": stream}); got != want {
			t.Errorf("stream %s: %v launches, want %v", stream, got, want)
		}
	}
	check("1", 101) // 0x7f00, the first stream seen but the legacy one
	check("0", 20)
	check("unknown", 3)
	c.FoldAggregates()
	// The per-thread default stream: the next one seen.
	c.Call(&model.Process{PID: 7}, &model.Call{API: event.CuLaunchKernel, Args: event.Args{Stream: 2, HasStream: true}})
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {k(event.CuLaunchKernel, 0x7f00): 4}}}) // the next session
	check("1", 105)
	check("0", 20)
	check("2", 1)
}

// TestWeight: with a weight, every count (calls, launches counted in BPF,
// syncs and their wait, bytes) counts that many times; histograms do not.
func TestWeight(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	p := &model.Process{PID: 7}
	c.SetWeight(6)
	c.Call(p, &model.Call{API: event.CudaMemcpyAsync, Pageable: true, HasRet: true, Start: 0, End: 1000,
		Args: event.Args{Kind: event.HostToDevice, Bytes: 100}})
	c.Sync(p, &model.Sync{Kind: model.SyncPageableMemcpy, BlockedNs: 1e9})
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {{API: event.CuLaunchKernel}: 10}}})
	c.FoldAggregates()
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cudatap_cuda_calls_total", map[string]string{"api": "cudaMemcpyAsync"}, 6},
		{"cudatap_memcpy_bytes_total", map[string]string{"direction": "HtoD"}, 600},
		{"cudatap_syncs_total", map[string]string{"kind": "pageable_memcpy"}, 6},
		{"cudatap_sync_wait_seconds_total", map[string]string{"kind": "pageable_memcpy"}, 6},
		{"cudatap_kernel_launches_total", nil, 60},
	} {
		if got := gather(t, c, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// TestSampling: a process traced with probability p in a window counts
// 1/p of it, on top of the window weight; its windows in and out and its
// probability are series of their own.
func TestSampling(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	p := &model.Process{PID: 7}
	c.SetWeight(2)
	c.SetSampling(7, 0.25, false) // sits a window out
	c.SetSampling(7, 0.25, true)
	c.Call(p, &model.Call{API: event.CudaMemcpyAsync, Args: event.Args{Kind: event.HostToDevice, Bytes: 100}})
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {{API: event.CuLaunchKernel}: 10}}})
	c.FoldAggregates()
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cudatap_cuda_calls_total", map[string]string{"api": "cudaMemcpyAsync"}, 8},
		{"cudatap_memcpy_bytes_total", map[string]string{"direction": "HtoD"}, 800},
		{"cudatap_kernel_launches_total", nil, 80},
		{"cudatap_process_sample_probability", nil, 0.25},
		{"cudatap_process_windows_total", map[string]string{"traced": "true"}, 1},
		{"cudatap_process_windows_total", map[string]string{"traced": "false"}, 1},
	} {
		if got := gather(t, c, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}

// TestCommCollectives: each rank's collectives on a communicator, by the
// communicator's id, exact whatever the weight: a rank behind the others
// has stopped arriving.
func TestCommCollectives(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	c.SetWeight(5)
	for r := range 2 {
		p := &model.Process{PID: uint32(10 + r)}
		c.Call(p, &model.Call{API: event.NcclCommInitRank, HasRet: true, Args: event.Args{Comm: 0xc0, CommID: 0x5eed, Peer: int32(r), Size: 2}})
		for k := range 3 - r { // rank 1 stops after 2
			c.Call(p, &model.Call{API: event.NcclAllReduce, Start: 1, GPUOp: k, Args: event.Args{Comm: 0xc0, Bytes: 4}})
		}
		// Each saw its first two complete: rank 0 waits in its third.
		for k := range 2 {
			c.GPUOp(p, &model.GPUOp{ID: k, Kind: model.OpCollective, Measured: true, End: 2})
		}
		c.GPUOp(p, &model.GPUOp{ID: 7, Kind: model.OpKernel, Measured: true, End: 2}) // not a collective
	}
	for r := range 2 {
		if got := gather(t, c, "cudatap_nccl_comm_completed_collectives", map[string]string{"rank": strconv.Itoa(r)}); got != 2 {
			t.Errorf("rank %d: %v collectives complete, want 2", r, got)
		}
	}
	if got := gather(t, c, "cudatap_nccl_comm_last_completed_collective_timestamp_seconds", map[string]string{"rank": "1"}); got < 1e9 {
		t.Errorf("last completion at %v, want a Unix time", got)
	}
	for r, want := range []float64{3, 2} {
		if got := gather(t, c, "cudatap_nccl_comm_collectives", map[string]string{"rank": strconv.Itoa(r), "communicator": "0000000000005eed", "world_size": "2"}); got != want {
			t.Errorf("rank %d: %v collectives, want %v", r, got, want)
		}
	}
	if got := gather(t, c, "cudatap_nccl_comm_last_collective_timestamp_seconds", map[string]string{"rank": "0"}); got < 1e9 {
		t.Errorf("last collective at %v, want a Unix time", got)
	}
}

// TestForgetExited: a process's series stay while it runs and for
// ExitedGrace after it is found gone, then go; one that comes back to life
// (found alive again) keeps them.
func TestForgetExited(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	for _, pid := range []uint32{7, 8} {
		c.Call(&model.Process{PID: pid}, &model.Call{API: event.CudaMemcpyAsync})
	}
	alive := map[int]bool{7: true, 8: false}
	t0 := time.Unix(1000, 0)
	has := func(pid string) bool {
		return gather(t, c, "cudatap_cuda_calls_total", map[string]string{"pid": pid}) != -1
	}
	c.ForgetExited(func(pid int) bool { return alive[pid] }, t0)
	c.ForgetExited(func(pid int) bool { return alive[pid] }, t0.Add(ExitedGrace-time.Second))
	if !has("7") || !has("8") {
		t.Fatal("series dropped before the grace ended")
	}
	alive[7] = false
	c.ForgetExited(func(pid int) bool { return alive[pid] }, t0.Add(ExitedGrace))
	if !has("7") || has("8") {
		t.Errorf("after the grace: pid 7 kept %v (want true: gone only now), pid 8 kept %v (want false)", has("7"), has("8"))
	}
	c.ForgetExited(func(pid int) bool { return alive[pid] }, t0.Add(2*ExitedGrace))
	if has("7") {
		t.Error("pid 7's series kept after its grace")
	}
}

// TestCutAggregates: under --continuous one session's BPF counts span many
// sampling intervals: each cut folds the counts since the last one with
// the weight of its interval, and the counting goes on from there.
func TestCutAggregates(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	launches := func(n uint64) event.Aggregates {
		return event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {{API: event.CuLaunchKernel}: n}}}
	}
	c.SetSampling(7, 0.5, true) // interval 1: traced with p = 1/2
	c.SetAggregates(launches(10))
	c.CutAggregates()
	if got := gather(t, c, "cudatap_kernel_launches_total", nil); got != 20 {
		t.Errorf("after the first cut: %v launches, want 10 × 2", got)
	}
	c.SetSampling(7, 1, true) // interval 2: p = 1
	c.SetAggregates(launches(15))
	if got := gather(t, c, "cudatap_kernel_launches_total", nil); got != 25 {
		t.Errorf("live in the second interval: %v launches, want 20 + 5", got)
	}
	c.CutAggregates()
	c.FoldAggregates()           // the session ends: nothing more to fold
	c.SetAggregates(launches(3)) // a new session counts from zero
	if got := gather(t, c, "cudatap_kernel_launches_total", nil); got != 28 {
		t.Errorf("in a new session: %v launches, want 25 + 3", got)
	}
}

// TestStreamLabelsBounded: past Options.MaxStreams streams, a process's
// launches go under stream="other".
func TestStreamLabelsBounded(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	counts := map[event.LaunchKey]uint64{}
	for i := range DefaultMaxStreams + 10 {
		counts[event.LaunchKey{API: event.CuLaunchKernel, Stream: 0x1000 + uint64(i)}] = 1
	}
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: counts}})
	series := 0
	for _, f := range families(t, c) {
		if f.GetName() == "cudatap_stream_launches_total" {
			series = len(f.GetMetric())
		}
	}
	if other := gather(t, c, "cudatap_stream_launches_total", map[string]string{"stream": "other"}); other != 10 || series != DefaultMaxStreams+1 {
		t.Errorf("%d stream series, %v launches on \"other\"; want %d and 10", series, other, DefaultMaxStreams+1)
	}
}

// TestFinalAggregates: a process's last counts (Final) go into its totals,
// and a new process under the same PID counts from zero in the same
// session, even after a cut set a baseline.
func TestFinalAggregates(t *testing.T) {
	c := NewCollector(Options{PID: true, Histograms: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	launches := func(n uint64, final ...uint32) event.Aggregates {
		return event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {{API: event.CuLaunchKernel}: n}}, Final: final}
	}
	c.SetAggregates(launches(100))
	c.CutAggregates() // baseline 100
	c.SetAggregates(launches(150, 7))
	if got := gather(t, c, "cudatap_kernel_launches_total", nil); got != 150 {
		t.Errorf("after the last counts: %v launches, want 150", got)
	}
	c.SetAggregates(launches(3)) // PID 7 again, a new process
	if got := gather(t, c, "cudatap_kernel_launches_total", nil); got != 153 {
		t.Errorf("a reused PID: %v launches, want 150 + 3", got)
	}
}
