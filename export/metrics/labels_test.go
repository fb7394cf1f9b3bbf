package metrics

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/gpusample"
	"github.com/cudatap/cudatap/tracer/model"
)

// worstProcess makes process pid use every series a process can have:
// every API (timed when it returns), launches on more streams than are labelled, every
// copy direction from pageable and pinned memory, every sync kind, every
// collective, more communicators than are kept, sampling, and launch
// counts and times from BPF.
func worstProcess(c *Collector, pid uint32) {
	p := &model.Process{PID: pid}
	// Communicators first: collectives count on those known.
	var inits, others []*event.Spec
	for _, l := range []event.Layer{event.Runtime, event.Driver, event.NCCL} {
		for _, s := range event.Specs(l) {
			if s.Class == event.ClassCommInit {
				inits = append(inits, s)
			} else {
				others = append(others, s)
			}
		}
	}
	var launchAPIs []event.API
	for _, s := range append(inits, others...) {
		x := &model.Call{API: s.API, HasRet: s.Return, Start: 1, End: 2000, GPUOp: -1}
		switch s.Class {
		case event.ClassLaunch:
			launchAPIs = append(launchAPIs, s.API)
			for i := range c.o.MaxStreams + 5 {
				x.Args = event.Args{Stream: 0x7f0000 + uint64(i), HasStream: true}
				c.Call(p, x)
			}
			x.Args = event.Args{Stream: 0, HasStream: true}
		case event.ClassMemcpy:
			for k := range 6 {
				for _, pageable := range []bool{true, false} {
					x.Args, x.Pageable = event.Args{Kind: event.MemcpyKind(k), Bytes: 8}, pageable
					if k == 5 {
						x.Args.Kind = 200 // not a cudaMemcpyKind: "unknown"
					}
					c.Call(p, x)
				}
			}
		case event.ClassCommInit:
			for comm := range maxComms + 6 {
				x.Args = event.Args{Comm: uint64(0xc000 + comm), CommID: uint64(0x5eed + comm), Peer: 1, Size: 8}
				c.Call(p, x)
			}
		case event.ClassCollective:
			for comm := range maxComms + 6 {
				x.Args, x.GPUOp = event.Args{Comm: uint64(0xc000 + comm), Bytes: 4}, comm
				c.Call(p, x)
				c.GPUOp(p, &model.GPUOp{ID: comm, Kind: model.OpCollective, Measured: true, End: 3000})
			}
		}
		c.Call(p, x)
	}
	for k := model.SyncKind(1); k.String() != "unknown"; k++ {
		c.Sync(p, &model.Sync{Kind: k, BlockedNs: 1000})
	}
	c.SetSampling(pid, 0.5, false)
	c.SetSampling(pid, 0.5, true)
	var h event.TimeHistogram
	h.Count[12], h.Ns[12] = 1, 5000
	agg := event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{pid: {{API: event.CuLaunchKernel, Stream: event.AggregateUnknownStream}: 3}},
		Times: map[uint32]map[event.API]*event.TimeHistogram{pid: {}}}
	for _, api := range launchAPIs {
		agg.Times[pid][api] = &h
	}
	c.SetAggregates(agg)
}

// seriesOf counts the series of families whose labels include want, as
// Prometheus stores them: a histogram's buckets, +Inf, sum and count each
// one series.
func seriesOf(fams []*dto.MetricFamily, want map[string]string) (n int) {
	for _, f := range fams {
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
			if h := m.GetHistogram(); h != nil {
				n += len(h.GetBucket()) + 3
			} else {
				n++
			}
		}
	}
	return n
}

// TestSeriesBound: a process that uses every series a process can have
// has exactly SeriesBound of them, with the defaults and with histograms;
// the defaults' bound is asserted (docs/agent.md gives it), and no series
// carries a pid, a stream handle or a histogram unless asked.
func TestSeriesBound(t *testing.T) {
	for _, o := range []Options{{}, {Histograms: true}, {PID: true, Histograms: true, MaxStreams: 4}} {
		c := NewCollector(o)
		c.label = func(uint32, ...string) ProcLabels { return ProcLabels{"python3", "main", "trainer-0", "ml"} }
		worstProcess(c, 7)
		fams := families(t, c)
		got, bound := seriesOf(fams, map[string]string{"comm": "python3"}), SeriesBound(o)
		t.Logf("%+v: %d series, bound %d", o, got, bound)
		if got != bound {
			t.Errorf("%+v: the worst process has %d series, SeriesBound says %d", o, got, bound)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					switch {
					case l.GetName() == "pid" && !o.PID:
						t.Errorf("%+v: %s has a pid label", o, f.GetName())
					case l.GetName() == "stream" && strings.HasPrefix(l.GetValue(), "0x"):
						t.Errorf("%+v: %s labels a stream by its handle %s", o, f.GetName(), l.GetValue())
					}
				}
			}
			if f.GetName() == "cudatap_cuda_api_seconds" && !o.Histograms {
				t.Errorf("%+v: histograms not asked for, %d exported", o, len(f.GetMetric()))
			}
		}
	}
	// What an operator can count on: with the defaults, at most this many
	// series per process (or group), whatever it calls.
	const defaultBound = 450
	if b := SeriesBound(Options{}); b > defaultBound {
		t.Errorf("with the defaults a process can have %d series, over %d", b, defaultBound)
	}
}

// TestGroups: without the pid label, processes with the same labels share
// their series: counts added, the sampling probability the smallest, the
// processes counted. When one of them is forgotten its counts stay (a
// counter that went down would read as a restart); when the last is, the
// group's series go.
func TestGroups(t *testing.T) {
	c := NewCollector(Options{})
	c.label = func(pid uint32, _ ...string) ProcLabels {
		if pid == 9 {
			return ProcLabels{Comm: "other"}
		}
		return ProcLabels{"python3", "main", "trainer-0", "ml"}
	}
	for pid, n := range map[uint32]int{7: 3, 8: 5, 9: 1} {
		for range n {
			c.Call(&model.Process{PID: pid}, &model.Call{API: event.CudaMemcpyAsync})
		}
	}
	c.SetSampling(7, 0.25, true)
	c.SetSampling(8, 1, true)
	group := map[string]string{"comm": "python3"}
	check := func(when string, calls, procs, prob float64) {
		t.Helper()
		if got := gather(t, c, "cudatap_cuda_calls_total", group); got != calls {
			t.Errorf("%s: %v calls, want %v", when, got, calls)
		}
		if got := gather(t, c, "cudatap_processes", group); got != procs {
			t.Errorf("%s: %v processes, want %v", when, got, procs)
		}
		if got := gather(t, c, "cudatap_process_sample_probability", group); got != prob {
			t.Errorf("%s: probability %v, want %v", when, got, prob)
		}
	}
	check("both live", 8, 2, 0.25)
	if got := gather(t, c, "cudatap_cuda_calls_total", map[string]string{"comm": "other"}); got != 1 {
		t.Errorf("the other group: %v calls, want 1", got)
	}
	alive := map[int]bool{8: true, 9: true}
	c.ForgetExited(func(pid int) bool { return alive[pid] }, testTime)
	c.ForgetExited(func(pid int) bool { return alive[pid] }, testTime.Add(ExitedGrace))
	check("7 forgotten", 8, 1, 1)
	c.Call(&model.Process{PID: 8}, &model.Call{API: event.CudaMemcpyAsync})
	check("8 calls on", 9, 1, 1)
	delete(alive, 8)
	c.ForgetExited(func(pid int) bool { return alive[pid] }, testTime.Add(2*ExitedGrace))
	c.ForgetExited(func(pid int) bool { return alive[pid] }, testTime.Add(3*ExitedGrace))
	if got := gather(t, c, "cudatap_cuda_calls_total", group); got != -1 {
		t.Errorf("the group's last process forgotten: its calls still say %v", got)
	}
	if len(c.retired) != 0 {
		t.Errorf("%d groups' counts kept with no process left", len(c.retired))
	}
}

// TestStreamOrdinals: streams are numbered in the order the process first
// launched on them, the legacy default stream 0 (handle 0 or 0x1), and keep
// their number across sessions.
func TestStreamOrdinals(t *testing.T) {
	c := NewCollector(Options{PID: true})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	p := &model.Process{PID: 7}
	for _, stream := range []uint64{0x9000, 0x1, 0x5000, 0x9000, 0x2, 0} {
		c.Call(p, &model.Call{API: event.CudaLaunchKernel, Args: event.Args{Stream: stream, HasStream: true}})
	}
	c.FoldAggregates() // a session ends
	c.SetAggregates(event.Aggregates{Launches: map[uint32]map[event.LaunchKey]uint64{7: {{API: event.CuLaunchKernel, Stream: 0x5000}: 10}}})
	for stream, want := range map[string]float64{"0": 2, "1": 2, "2": 11, "3": 1} {
		if got := gather(t, c, "cudatap_stream_launches_total", map[string]string{"stream": stream}); got != want {
			t.Errorf("stream %s: %v launches, want %v", stream, got, want)
		}
	}
}

// TestPromtool: promtool check metrics (Debian's prometheus package; make
// test-deps installs it) finds nothing to say of the collectors' output:
// worst-case processes, with the defaults, with histograms and pids, and
// a GPU's series.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI needs promtool (Debian's prometheus package; make test-deps installs it)")
		}
		t.Skip("no promtool: make test-deps installs it")
	}
	for _, o := range []Options{{}, {PID: true, Histograms: true}} {
		c := NewCollector(o)
		c.label = func(uint32, ...string) ProcLabels { return ProcLabels{"python3", "main", "trainer-0", "ml"} }
		worstProcess(c, 7)
		worstProcess(c, 8)
		reg := prometheus.NewRegistry()
		reg.MustRegister(c, gpuCollector(o.PID))
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		for _, f := range fams {
			if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = &text
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("%+v: promtool check metrics: %v\n%s", o, err, out)
		}
	}
}

var testTime = time.Unix(1000, 0)

// gpuCollector has one GPU with every series, used by two processes of one
// group.
func gpuCollector(pid bool) *GPUCollector {
	g := NewGPUCollector(GPUOptions{Host: "node-7", PID: pid})
	g.SetLabelers(func(uint32, ...string) ProcLabels { return ProcLabels{"python3", "main", "trainer-0", "ml"} }, func(string) ProcLabels { return ProcLabels{} })
	g.SetUp(true)
	g.Add(gpusample.Sample{Device: 0, UUID: "GPU-0", Name: "NVIDIA H200", GPUUtil: 50, MemUtil: 5, MemUsed: 1 << 30, MemTotal: 141 << 30,
		TempC: 40, PowerW: 205.5, PowerLimitW: 700, SMClockMHz: 1980, MemClockMHz: 2619, PCIeRxBps: 1e6, PCIeTxBps: 2e6,
		Processes: []gpusample.ProcSample{{PID: 4123, MemUsed: 880 << 20}, {PID: 4124, MemUsed: 100 << 20}}})
	g.Event(gpusample.Event{Device: 0, Kind: "xid", Data: 79})
	return g
}

// TestOOM: a process's allocations refused for want of memory, as the
// model counts them (one per request), exact whatever the weight, from 0
// as soon as the process is seen (so that increase() sees the first); a
// new session's model counts from zero again and adds to them; without
// the pid label a group adds its processes'.
func TestOOM(t *testing.T) {
	c := NewCollector(Options{})
	c.label = func(uint32, ...string) ProcLabels { return ProcLabels{Comm: "python3"} }
	c.SetWeight(4)
	p, q := &model.Process{PID: 7}, &model.Process{PID: 8}
	call := func(mp *model.Process) { c.Call(mp, &model.Call{API: event.CudaMalloc, HasRet: true, Ret: 2}) }
	check := func(when string, want float64) {
		t.Helper()
		if got := gather(t, c, "cudatap_oom_total", map[string]string{"comm": "python3"}); got != want {
			t.Errorf("%s: %v out-of-memory failures, want %v", when, got, want)
		}
	}
	call(p)
	check("none yet", 0)
	p.OOMCount = 1
	call(p)
	call(p) // a retry of the same request: the model counts it once
	check("one", 1)
	q.OOMCount = 2
	call(q)
	check("another process of the group", 3)
	c.FoldAggregates() // the session ends
	call(&model.Process{PID: 7, OOMCount: 1})
	check("the next session", 4)
}
