package tracer

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/replay"
)

// TestGPUTimesLaunch: with --gpu-times, a launched workload's GPU ops are
// measured by (simulated) CUPTI through the collector the driver loads:
// every op is measured, each stream's busy time is exactly the modeled GPU
// time (not a bound), and nothing is unmatched, late or lost.
//
// Each scenario twice: joined by callbacks (the default), and by CUPTI's
// API records of the enqueuing calls with each call reported as a runtime
// call around the driver's after three calls that enqueue nothing, as
// PyTorch's launches are (SIM_CUPTI_RUNTIME_CALLS, SIM_CUPTI_OTHER_CALLS).
func TestGPUTimesLaunch(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	for _, tc := range []struct {
		scenario, join string
	}{
		{"basic", ""}, {"ptsz", ""}, {"all", ""}, {"timing", ""}, {"devices", ""}, {"nccl", ""},
		{"basic", "api"}, {"ptsz", "api"}, {"all", "api"}, {"timing", "api"}, {"devices", "api"}, {"nccl", "api"},
	} {
		scenario := tc.scenario
		name := scenario
		if tc.join != "" {
			name += "/join=" + tc.join
		}
		t.Run(name, func(t *testing.T) {
			if tc.join != "" {
				t.Setenv("CUDATAP_GPU_JOIN", tc.join)
				t.Setenv("SIM_CUPTI_RUNTIME_CALLS", "1")
				t.Setenv("SIM_CUPTI_OTHER_CALLS", "3")
			}
			bin := b.Workload
			if scenario == "nccl" {
				bin = b.NCCLWorkload // collectives: NCCL launches their kernels inside its calls
			}
			out, rep := launchWith(t, Config{Command: []string{bin, "--scenario", scenario, "--iters", "20"},
				Stacks: probe.StacksNone, Stderr: os.Stderr, Duration: time.Minute, GPUTimes: true})
			p := tracedOf(t, out, rep.PID)
			if !p.Measured {
				t.Fatal("the process was not measured")
			}
			measured, grouped := 0, 0
			hostFuncs := map[int]int{} // by stream
			for _, op := range p.GPUOps {
				switch {
				case op.ID < 0:
				case op.Kind == model.OpCollective && op.Measured != (op.ID < 80):
					t.Errorf("op %d (%v) measured %v: want the loop's measured, the group's after it not", op.ID, op.API, op.Measured)
				case op.Kind == model.OpCollective && op.ID >= 80:
					// One NCCL group's: their GPU records cannot be told
					// apart (NCCL may fuse them into one kernel).
					grouped++
				case op.Kind == model.OpHostFunc:
					// CUPTI does not time host functions: they stay bounded.
					hostFuncs[op.Stream]++
					if op.Measured {
						t.Errorf("host function op %d measured", op.ID)
					}
				case !op.Measured:
					t.Errorf("op %d (%v on stream %d) not measured", op.ID, op.API, op.Stream)
				default:
					measured++
				}
			}
			nHostFuncs := 0
			if scenario == "devices" {
				// As the model attributes them without CUPTI, and CUPTI
				// reports them: a created stream's ops on its device.
				byDevice := map[int8]int{}
				for _, op := range p.GPUOps {
					byDevice[op.Device]++
				}
				if want := map[int8]int{1: 80, 0: 60}; !maps.Equal(byDevice, want) {
					t.Errorf("ops by device %v, want %v", byDevice, want)
				}
			}
			for handle, busy := range rep.BusyNs {
				s := streamOfHandle(t, p, handle)
				if s == nil {
					if busy > 0 {
						t.Errorf("stream %s: %d ns of GPU work, not traced", handle, busy)
					}
					continue
				}
				st := s.Stats
				if n := hostFuncs[s.ID]; n > 0 {
					// A host function takes 1 µs on the modeled GPU.
					nHostFuncs += n
					if st.BusyNs+uint64(n)*1000 != uint64(busy) || uint64(busy) > st.BusyMaxNs {
						t.Errorf("%s: busy [%d, %d] ns, modeled %d with %d µs of host functions", s.Label(), st.BusyNs, st.BusyMaxNs, busy, n)
					}
				} else if grouped > 0 && s.ID == commStream(p) {
					if st.BusyNs >= uint64(busy) || uint64(busy) > st.BusyMaxNs {
						t.Errorf("%s: busy [%d, %d] ns, modeled %d with a group unmeasured", s.Label(), st.BusyNs, st.BusyMaxNs, busy)
					}
				} else if uint64(busy) != st.BusyNs || st.BusyNs != st.BusyMaxNs {
					t.Errorf("%s: busy [%d, %d] ns, modeled %d: want exactly the modeled time", s.Label(), st.BusyNs, st.BusyMaxNs, busy)
				}
			}
			if scenario == "nccl" && grouped != 6 {
				t.Errorf("%d grouped collectives, want 6", grouped)
			}
			d := out.Result.Drops
			if d.GPUTimesLate+d.GPUTimesLost != 0 || d.GPUTimesUnmatched != uint64(grouped) || d.GPUTimesUnmeasured != uint64(nHostFuncs+grouped) {
				t.Errorf("unmatched %d late %d lost %d unmeasured %d, want none but the %d host functions and the %d grouped collectives (unmatched: ambiguous)",
					d.GPUTimesUnmatched, d.GPUTimesLate, d.GPUTimesLost, d.GPUTimesUnmeasured, nHostFuncs, grouped)
			}
			t.Logf("%d ops measured", measured)
		})
	}
}

// TestGPUTimesCUPTIOnly: GPU ops CUPTI times whose calls cudatap does not
// trace are shown from CUPTI's records, on their streams, and never measure
// a traced op of another kind. static-runtime plays the H200's GPT-2
// backward: cuBLASLt's statically linked runtime memsets through driver
// calls cudatap leaves alone where a runtime is present, on PyTorch's
// autograd thread, between the kernels it launches (traced in the driver);
// there the old join gave 202 memset records "late" and 236 "second
// measurements" of kernel ops. mixed: copies a program makes through the
// driver beside the runtime. Both with CUPTI reporting the driver calls as
// they come and wrapped in runtime calls, as a static runtime's are
// (SIM_CUPTI_RUNTIME_CALLS). Every traced op is measured by its own record,
// every stream's ops and busy time are the modeled GPU's, nothing is
// unmatched, late or lost.
func TestGPUTimesCUPTIOnly(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	for _, tc := range []struct {
		scenario string
		hidden   []string // the workload's calls cudatap does not trace: CUPTI alone sees their ops
	}{
		{"static-runtime", []string{"cuMemsetD32Async", "cuMemsetD8Async", "cuMemcpyDtoDAsync_v2"}},
		{"mixed", []string{"cuMemcpyDtoHAsync_v2"}},
	} {
		for _, wrapped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/runtime-calls=%v", tc.scenario, wrapped), func(t *testing.T) {
				if wrapped {
					t.Setenv("SIM_CUPTI_RUNTIME_CALLS", "1")
				}
				out, rep := launchWith(t, Config{Command: []string{b.DriverWorkload, "--scenario", tc.scenario, "--iters", "20"},
					Stacks: probe.StacksNone, Stderr: os.Stderr, Duration: time.Minute, GPUTimes: true, CUPTIPath: b.CUPTI})
				p := tracedOf(t, out, rep.PID)
				hidden := 0
				for _, c := range tc.hidden {
					hidden += rep.Calls[c]
				}
				traced, cuptiOnly := map[int]int{}, map[int]int{}
				for _, op := range p.GPUOps {
					switch {
					case op.ID < 0:
					case op.CUPTIOnly():
						cuptiOnly[op.Stream]++
						if op.Kind != model.OpMemset && op.Kind != model.OpMemcpy {
							t.Errorf("CUPTI-only op %d: %v, want a memset or a copy", op.ID, op.Kind)
						}
					case !op.Measured:
						t.Errorf("op %d (%v on stream %d) not measured", op.ID, op.API, op.Stream)
					default:
						traced[op.Stream]++
					}
				}
				n := 0
				for sid, k := range cuptiOnly {
					n += k
					if traced[sid] == 0 {
						t.Errorf("%d CUPTI-only ops on stream %d, where no traced op ran", k, sid)
					}
				}
				if n != hidden {
					t.Errorf("%d CUPTI-only ops, want the %d the workload made through calls cudatap does not trace (%v)", n, hidden, tc.hidden)
				}
				for handle, busy := range rep.BusyNs {
					s := streamOfHandle(t, p, handle)
					if s == nil {
						if busy > 0 {
							t.Errorf("stream %s: %d ns of GPU work, not traced", handle, busy)
						}
						continue
					}
					st := s.Stats
					if uint64(busy) != st.BusyNs || st.BusyNs != st.BusyMaxNs || st.CUPTIOnly != int64(cuptiOnly[s.ID]) ||
						st.GPUOps != int64(traced[s.ID]+cuptiOnly[s.ID]) {
						t.Errorf("%s: busy [%d, %d] ns, modeled %d; %d ops, %d CUPTI only: want exactly the modeled time, %d ops, %d CUPTI only",
							s.Label(), st.BusyNs, st.BusyMaxNs, busy, st.GPUOps, st.CUPTIOnly, traced[s.ID]+cuptiOnly[s.ID], cuptiOnly[s.ID])
					}
				}
				d := out.Result.Drops
				if d.GPUTimesLate+d.GPUTimesLost+d.GPUTimesUnmatched+d.GPUTimesUnmeasured != 0 || d.GPUOpsCUPTIOnly != uint64(hidden) {
					t.Errorf("unmatched %d late %d lost %d unmeasured %d CUPTI only %d, want none but %d CUPTI only",
						d.GPUTimesUnmatched, d.GPUTimesLate, d.GPUTimesLost, d.GPUTimesUnmeasured, d.GPUOpsCUPTIOnly, hidden)
				}
			})
		}
	}
}

// TestGPUTimesReplay: a recording made with --gpu-times rebuilds the same
// measured ops and busy times on replay (cudatap export).
func TestGPUTimesReplay(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	var rec bytes.Buffer
	out, rep := launchWith(t, Config{Command: []string{b.Workload, "--scenario", "basic", "--iters", "20"},
		Stacks: probe.StacksNone, Stderr: os.Stderr, Duration: time.Minute, GPUTimes: true, Recording: &rec})
	live := tracedOf(t, out, rep.PID)
	col := model.NewCollector()
	res, _, err := replay.Load(bytes.NewReader(rec.Bytes()), func(*replay.Replay) model.Sink { return col }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var replayed *model.Process
	for _, p := range res.Processes {
		if int(p.PID) == rep.PID {
			replayed = p
		}
	}
	if replayed == nil || !replayed.Measured {
		t.Fatal("the replay has no measured process")
	}
	for i, s := range live.Streams {
		if got, want := replayed.Streams[i].Stats, s.Stats; got.BusyNs != want.BusyNs || got.Measured != want.Measured || got.BusyMaxNs != want.BusyMaxNs {
			t.Errorf("stream %d: replay busy [%d, %d] (%d measured), live [%d, %d] (%d)", i, got.BusyNs, got.BusyMaxNs, got.Measured, want.BusyNs, want.BusyMaxNs, want.Measured)
		}
	}
	ops := col.Traces[uint32(rep.PID)].GPUOps
	for i, op := range live.GPUOps {
		if i >= len(ops) || ops[i].Start != op.Start || ops[i].End != op.End || ops[i].Measured != op.Measured {
			t.Fatalf("op %d: replay differs from live: %+v vs %+v", i, ops[min(i, len(ops)-1)], op)
		}
	}
}

// TestGPUTimesAttach: record -p --gpu-times loads the collector into a
// running workload with ptrace; every op it enqueues afterwards is measured
// exactly, and the workload finishes normally once cudatap is gone.
func TestGPUTimesAttach(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	cmd := exec.Command(b.Workload, "--wait-after-setup", "--wait-before-exit", "--scenario", "basic", "--iters", "20")
	var sess *Session
	out, col, rep := attachAfterSetupWith(t, cmd, Config{Stacks: probe.StacksNone, NVMLInterval: -1, GPUTimes: true},
		func(s *Session) { sess = s })
	if st := sess.GPUTimeStatus()[uint32(rep.PID)]; !strings.HasPrefix(st, "measured") {
		t.Fatalf("GPU time status %q", st)
	}
	p := &traced{Process: out.Result.Processes[0], Trace: *col.Traces[uint32(rep.PID)]}
	if !p.Measured {
		t.Fatal("not measured")
	}
	ops := 0
	for _, op := range p.GPUOps {
		if op.ID >= 0 {
			ops++
			if !op.Measured {
				t.Errorf("op %d (%v) not measured", op.ID, op.API)
			}
		}
	}
	if ops != 20*(2+4) {
		t.Errorf("%d ops, want %d", ops, 20*(2+4))
	}
	for handle, busy := range rep.BusyNs {
		if s := streamOfHandle(t, p, handle); s != nil && (uint64(busy) != s.Stats.BusyNs || s.Stats.BusyNs != s.Stats.BusyMaxNs) {
			t.Errorf("%s: busy [%d, %d], modeled %d", s.Label(), s.Stats.BusyNs, s.Stats.BusyMaxNs, busy)
		}
	}
}

// TestGPUTimesNamesKernelsLoadedBefore: attached after a driver-API program
// loaded its kernels, cudatap never saw their names given; with --gpu-times
// (and --cupti: the program has no libcudart to find CUPTI beside) CUPTI's
// records name them.
func TestGPUTimesNamesKernelsLoadedBefore(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	for _, gpuTimes := range []bool{false, true} {
		cmd := exec.Command(b.DriverWorkload, "--wait-after-setup", "--wait-before-exit", "--scenario", "driver", "--iters", "5")
		out, col, _ := attachAfterSetupWith(t, cmd, Config{Stacks: probe.StacksNone, NVMLInterval: -1, GPUTimes: gpuTimes, CUPTIPath: b.CUPTI}, nil)
		names := map[string]int{}
		p := out.Result.Processes[0]
		for _, op := range col.Traces[p.PID].GPUOps {
			if op.Kind == model.OpKernel {
				// As the exporters name it (export/internal/describe).
				name, addr := p.KernelSymbol(op.Func)
				if name == "" {
					name = out.Result.Names.Kernel(p.PID, addr)
				}
				if name == "" {
					name = p.MeasuredNames[op.Func]
				}
				names[name]++
			}
		}
		want := map[string]int{"triton_matmul_kernel": 5, "triton_softmax_kernel": 5}
		if gpuTimes && !maps.Equal(names, want) {
			t.Errorf("--gpu-times: kernels named %v, want %v", names, want)
		}
		if !gpuTimes && names["triton_matmul_kernel"] != 0 {
			t.Errorf("without --gpu-times the kernels were named %v: the test proves nothing", names)
		}
	}
}

// TestGPUTimesAll: under --all, a CUDA process that appears is measured
// too (the collector loaded once cudatap adopts it); every op it enqueues
// once measured has CUPTI's times.
func TestGPUTimesAll(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	statuses := make(chan [2]string, 1024) // other CUDA processes of the host may report too
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	col := model.NewCollector()
	attached := make(chan struct{})
	done := make(chan *Outcome, 1)
	go func() {
		out, err := Run(ctx, Config{All: true, Stacks: probe.StacksNone, NVMLInterval: -1, NameWindow: -1, GPUTimes: true, Sink: col,
			Observer: Funcs{OnAttached: func(int) { close(attached) }, OnGPUTimes: func(pid uint32, st string) {
				select {
				case statuses <- [2]string{strconv.Itoa(int(pid)), st}:
				default: // never block the session
				}
			}}})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	<-attached
	cmd := exec.Command(b.Workload, "--wait-after-setup", "--wait-before-exit", "--scenario", "basic", "--iters", "20")
	w := startWaiterCmd(t, "setup ", cmd)
	defer cmd.Process.Kill()
	pid := strconv.Itoa(w.pid())
	for st := range statuses { // cudatap adopts the process and loads the collector
		if st[0] != pid {
			continue
		}
		if !strings.HasPrefix(st[1], "measured") {
			t.Fatalf("process %s: %s", pid, st[1])
		}
		break
	}
	w.start()
	if line := w.line(t); !strings.HasPrefix(line, "done ") {
		t.Fatalf("workload did not finish: %q", line)
	}
	cancel()
	out := <-done
	w.start()
	w.result(t)
	if out == nil {
		t.FailNow()
	}
	ops, measured := 0, 0
	for _, op := range col.Traces[uint32(w.pid())].GPUOps {
		if op.ID >= 0 {
			ops++
			if op.Measured {
				measured++
			}
		}
	}
	if ops != 20*(2+4) || measured != ops {
		t.Errorf("%d of %d ops measured, want all %d", measured, ops, 20*(2+4))
	}
}

// commStream is the stream of p's collectives.
func commStream(p *traced) int {
	for _, op := range p.GPUOps {
		if op.Kind == model.OpCollective {
			return op.Stream
		}
	}
	return -1
}

// TestGPUTimesHandOver: a program that starts its own profiler (a CUPTI
// client of its own, as torch.profiler is) while cudatap's collector holds
// CUPTI gets CUPTI: its cuptiSubscribe succeeds and its profiler gets a
// record of every op it ran while profiling. cudatap lets CUPTI go before
// that call proceeds (the thread held at it), draws those ops bounded and
// keeps when CUPTI was away, and takes it back once the profiler finalized
// it: the ops before and after are measured, none unmatched or late.
func TestGPUTimesHandOver(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	const iters = 20
	var rec bytes.Buffer
	out, rep := launchWith(t, Config{Command: []string{b.Workload, "--scenario", "profiler", "--iters", strconv.Itoa(iters)},
		Stacks: probe.StacksNone, Stderr: os.Stderr, Duration: time.Minute, GPUTimes: true, Recording: &rec})
	pr := rep.Profiler
	if pr == nil || pr.SubscribeStatus != 0 || !pr.HeldBefore || !pr.Resumed {
		t.Fatalf("the program's profiler: %+v, want it let in (status 0) from a collector holding CUPTI, which took it back after", pr)
	}
	if pr.Records != pr.Ops || pr.Ops != 3*iters {
		t.Errorf("the program's profiler got %d records of its %d ops, want every one", pr.Records, pr.Ops)
	}
	p := tracedOf(t, out, rep.PID)
	for _, op := range p.GPUOps {
		phase := op.ID / (3 * iters) // before, under, after the program's profiler
		if op.ID >= 0 && op.Measured != (phase != 1) {
			t.Errorf("op %d (%v, phase %d) measured %v", op.ID, op.API, phase, op.Measured)
		}
	}
	if len(p.CUPTIAway) != 1 || p.CUPTIAway[0].End <= p.CUPTIAway[0].Start {
		t.Errorf("CUPTI away %v, want one interval", p.CUPTIAway)
	}
	// A replay of the recording draws the same.
	res, _, err := replay.Load(bytes.NewReader(rec.Bytes()), func(*replay.Replay) model.Sink { return model.NewCollector() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rp := range res.Processes {
		if int(rp.PID) == rep.PID && !slices.Equal(rp.CUPTIAway, p.CUPTIAway) {
			t.Errorf("replayed CUPTI away %v, live %v", rp.CUPTIAway, p.CUPTIAway)
		}
	}
	if d := out.Result.Drops; d.GPUTimesUnmatched+d.GPUTimesLate+d.GPUTimesLost != 0 || d.GPUTimesUnmeasured != 3*iters {
		t.Errorf("unmatched %d late %d lost %d unmeasured %d, want only the %d ops of the profiler's time unmeasured",
			d.GPUTimesUnmatched, d.GPUTimesLate, d.GPUTimesLost, d.GPUTimesUnmeasured, 3*iters)
	}
}

// TestGPUTimesInjectionTaken: a command whose environment names another
// CUDA injection library (the driver loads one) runs as it would, its GPU
// ops drawn within bounds: the run says why once, and the process is not
// marked measured, nothing held for a measurement.
func TestGPUTimesInjectionTaken(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	t.Setenv("CUDA_INJECTION64_PATH", "/nonexistent/other-tool.so")
	var logs bytes.Buffer
	out, rep := launchWith(t, Config{Command: []string{b.Workload, "--scenario", "basic", "--iters", "5"},
		Stacks: probe.StacksNone, Stderr: os.Stderr, Duration: time.Minute, GPUTimes: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p := tracedOf(t, out, rep.PID)
	if p.Measured || len(p.GPUOps) == 0 {
		t.Errorf("measured %v with %d ops, want its ops, not measured", p.Measured, len(p.GPUOps))
	}
	if n := strings.Count(logs.String(), "CUDA_INJECTION64_PATH is already set"); n != 1 {
		t.Errorf("said why %d times, want once:\n%s", n, logs.String())
	}
	if d := out.Result.Drops; d.GPUTimesUnmeasured != 0 {
		t.Errorf("%d ops counted unmeasured, want none: the process was never measured", d.GPUTimesUnmeasured)
	}
}
