package gputime

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/tracer/model"
)

// recorder is a Sink that keeps everything.
type recorder struct {
	mu       sync.Mutex
	started  map[uint32]Hello
	refused  map[uint32]string
	measured map[uint32][]model.Measurement
	marks    map[uint32]int
	lost     map[uint32]Lost
	stopped  chan uint32
}

func newRecorder() *recorder {
	return &recorder{started: map[uint32]Hello{}, refused: map[uint32]string{}, measured: map[uint32][]model.Measurement{},
		marks: map[uint32]int{}, lost: map[uint32]Lost{}, stopped: make(chan uint32, 16)}
}

func (r *recorder) Started(pid uint32, h Hello) {
	r.mu.Lock()
	r.started[pid] = h
	r.mu.Unlock()
}
func (r *recorder) HandedOver(pid uint32, t uint64) {}
func (r *recorder) Kept(pid uint32, why string)     {}
func (r *recorder) Refused(pid uint32, why string) {
	r.mu.Lock()
	r.refused[pid] = why
	r.mu.Unlock()
	r.stopped <- pid
}
func (r *recorder) Measure(pid uint32, m *model.Measurement) {
	r.mu.Lock()
	r.measured[pid] = append(r.measured[pid], *m)
	r.mu.Unlock()
}
func (r *recorder) Mark(pid uint32, t uint64) { r.mu.Lock(); r.marks[pid]++; r.mu.Unlock() }
func (r *recorder) Stopped(pid uint32, lost Lost) {
	r.mu.Lock()
	r.lost[pid] = lost
	r.mu.Unlock()
	r.stopped <- pid
}

var (
	buildOnce sync.Once
	build     *sim.Build
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if build != nil {
		os.RemoveAll(build.Dir) // the simulator this package's tests built
	}
	os.Exit(code)
}

func simBuild(t testing.TB) *sim.Build {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cudatap-gputime-sim")
		if err != nil {
			buildErr = err
			return
		}
		build, buildErr = sim.Compile(dir)
	})
	if buildErr != nil {
		t.Skip(buildErr)
	}
	return build
}

// runInjected runs the basic workload with the collector injected the way
// the CUDA driver does it, and returns its report and the pid the listener
// saw stop.
func runInjected(t *testing.T, l *Listener, r *recorder, env ...string) (*sim.Report, uint32) {
	t.Helper()
	return runInjectedArgs(t, l, r, []string{"--iters", "20", "--streams", "3"}, env...)
}

func runInjectedArgs(t *testing.T, l *Listener, r *recorder, args []string, env ...string) (*sim.Report, uint32) {
	t.Helper()
	b := simBuild(t)
	cmd := exec.Command(b.Workload, args...)
	cmd.Env = append(os.Environ(), append(env, "CUDA_INJECTION64_PATH="+l.LibraryPath())...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("workload: %v", err)
	}
	rep, err := sim.ParseReport(out)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case pid := <-r.stopped:
		return rep, pid
	case <-time.After(30 * time.Second):
		t.Fatal("the collector never said it stopped") // a hang, not a timing threshold
	}
	return nil, 0
}

func listen(t *testing.T, r *recorder) *Listener {
	t.Helper()
	return listenJoin(t, r, "")
}

func listenJoin(t *testing.T, r *recorder, join string) *Listener {
	t.Helper()
	l, err := Listen(Config{Root: "/", UID: -1, GID: -1, FlushEvery: 20 * time.Millisecond, Join: join}, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Stop(time.Second) })
	return l
}

// TestInjectedCollector: loaded by the (simulated) driver at cuInit, the
// collector measures every GPU op of the workload: as many measurements as
// ops, durations summing exactly to the modeled GPU time, each inside the
// workload's lifetime on cudatap's clock, joined to a thread of it. So
// with either join: CUPTI callbacks on the enqueuing calls (the default),
// or CUPTI's API records (asked for, or where CUPTI names no callbacks).
// Without CUPTI's timestamp callback (older CUPTI), the same holds after
// the clock offset is applied. With callbacks each call's record spans it,
// entry to exit, and where a runtime call wraps the driver's (as every
// runtime reports its calls) the runtime call's record is the one kept.
func TestInjectedCollector(t *testing.T) {
	for _, tc := range []struct {
		name, join, want string
		env              []string
	}{
		{"monotonic clock", "", "join=callbacks", nil},
		{"CUPTI's clock", "", "join=callbacks", []string{"SIM_CUPTI_NO_TIMESTAMP_CALLBACK=1"}},
		{"API records", "api", "join=api", nil},
		{"API records, CUPTI's clock", "api", "join=api", []string{"SIM_CUPTI_NO_TIMESTAMP_CALLBACK=1"}},
		{"no callback names", "", "join=api", []string{"SIM_CUPTI_NO_CALLBACK_NAMES=1"}},
		{"runtime calls around the driver's", "", "join=callbacks", []string{"SIM_CUPTI_RUNTIME_CALLS=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder()
			l := listenJoin(t, r, tc.join)
			before := monoNow()
			rep, pid := runInjected(t, l, r, tc.env...)
			after := monoNow()
			r.mu.Lock()
			defer r.mu.Unlock()
			if uint32(rep.PID) != pid {
				t.Fatalf("the collector that stopped is pid %d, the workload %d", pid, rep.PID)
			}
			h := r.started[pid]
			if h.CUPTI != filepath.Join(simBuild(t).Dir, sim.CUPTISoname) {
				t.Errorf("started: %q, want the CUPTI next to the workload's libcudart", h.Info)
			}
			if !strings.Contains(h.Info, tc.want) || h.TID == 0 || h.Since < before || h.Since > after {
				t.Errorf("started: %+v, want %s, the collector's thread, and when it started in the run [%d, %d]", h, tc.want, before, after)
			}
			ms := r.measured[pid]
			wantOps := 20 * (3 + 4) // per iteration: a launch per stream, two copies, a memset, a launch on the legacy stream
			if len(ms) != wantOps {
				t.Errorf("%d measurements, want %d (one per GPU op)", len(ms), wantOps)
			}
			var measured, modeled int64
			for _, m := range ms {
				measured += int64(m.End - m.Start)
				if m.Start < before || m.End > after+uint64(time.Second) || m.APIStart < before || m.APIEnd < m.APIStart || m.APIEnd > after {
					t.Fatalf("measurement off cudatap's clock: %+v (run [%d, %d])", m, before, after)
				}
				if m.APIEnd == m.APIStart {
					// A call's entry alone: a static runtime's (cuBLASLt's)
					// starts before the driver call cudatap traces in it.
					t.Fatalf("measurement %+v: its call's record is an instant, not the call", m)
				}
				if m.TID < uint32(pid) || m.Kind == 0 {
					t.Fatalf("measurement %+v: no thread or kind", m)
				}
				if (m.Kind == model.OpKernel) != (m.Name != "") {
					t.Fatalf("measurement %+v: a kernel has a name, nothing else", m)
				}
			}
			for _, ns := range rep.BusyNs {
				modeled += ns
			}
			if measured != modeled {
				t.Errorf("measured GPU time %d ns, modeled %d ns: want them equal", measured, modeled)
			}
			if r.lost[pid].Total() != 0 {
				t.Errorf("lost %+v records", r.lost[pid])
			}
			if r.marks[pid] == 0 {
				t.Error("no mark")
			}
		})
	}
}

// TestCollectorRefuses: with another CUPTI subscriber in the process, or
// no CUPTI where the config points, the collector says why and the
// workload runs as it would without it.
func TestCollectorRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, cupti, env, want string
	}{
		{"another profiler", "", "SIM_CUPTI_SUBSCRIBED=1", "another CUPTI client"},
		{"no CUPTI", "/nonexistent/libcupti.so", "", "no CUPTI found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder()
			l, err := Listen(Config{Root: "/", UID: -1, GID: -1, CUPTI: tc.cupti}, r)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Stop(time.Second)
			var env []string
			if tc.env != "" {
				env = append(env, tc.env)
			}
			rep, pid := runInjected(t, l, r, env...)
			r.mu.Lock()
			defer r.mu.Unlock()
			if !strings.Contains(r.refused[pid], tc.want) {
				t.Errorf("refused: %q, want %q", r.refused[pid], tc.want)
			}
			if len(r.measured[pid]) != 0 || rep.Calls["cudaLaunchKernel"] == 0 {
				t.Errorf("%d measurements, %d launches: want none, and the workload's own", len(r.measured[pid]), rep.Calls["cudaLaunchKernel"])
			}
		})
	}
}

// TestCollectorJoinNone: with join=none (what CUPTI's GPU records alone
// cost, for the benchmarks), every GPU record comes but none is joined:
// each is counted as having no call record, none is guessed.
func TestCollectorJoinNone(t *testing.T) {
	r := newRecorder()
	l := listenJoin(t, r, "none")
	_, pid := runInjected(t, l, r)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, lost := len(r.measured[pid]), r.lost[pid]; n != 0 || lost.NoAPI != 20*(3+4) || lost.Total() != lost.NoAPI {
		t.Errorf("%d measured, lost %+v: want none measured, %d without their call's record", n, lost, 20*(3+4))
	}
}

// TestCollectorDrops: with room for few records between flushes, CUPTI
// drops the rest; the loss is counted, never silent.
func TestCollectorDrops(t *testing.T) {
	r := newRecorder()
	l := listen(t, r)
	_, pid := runInjected(t, l, r, "SIM_CUPTI_MAX_RECORDS=8")
	r.mu.Lock()
	defer r.mu.Unlock()
	if got := uint64(len(r.measured[pid])); r.lost[pid].CUPTI == 0 || got >= 140 {
		t.Errorf("%d measured, %d lost: want losses counted", got, r.lost[pid])
	}
}

// TestCollectorAPIRecordsOfEnqueuingCalls: with join=api the collector has
// CUPTI record the enqueuing calls only (cuptiActivityEnableRuntimeApi,
// ...DriverApi), not the calls around them (PyTorch makes three
// cudaGetDevice per launch, SIM_CUPTI_OTHER_CALLS here): per GPU op the
// runtime call and the driver call inside it, and every op still measured.
// A CUPTI that cannot name its calls records them all, and the collector
// says so.
func TestCollectorAPIRecordsOfEnqueuingCalls(t *testing.T) {
	const ops = 20 * (3 + 4)
	for _, tc := range []struct {
		name, join string
		env        []string
		calls      int // API records per GPU op
		every      bool
	}{
		{"enqueuing calls", "api", nil, 2, false},
		{"no callback names", "", []string{"SIM_CUPTI_NO_CALLBACK_NAMES=1"}, 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			debugDir, debug = dir, true
			defer func() { debugDir, debug = "", false }()
			r := newRecorder()
			l, err := Listen(Config{Root: "/", UID: -1, GID: -1, FlushEvery: 20 * time.Millisecond, Join: tc.join}, r)
			if err != nil {
				t.Fatal(err)
			}
			_, pid := runInjected(t, l, r, append(tc.env, "SIM_CUPTI_RUNTIME_CALLS=1", "SIM_CUPTI_OTHER_CALLS=3")...)
			l.Stop(time.Second) // the diagnosis file is complete once its connection is served
			r.mu.Lock()
			defer r.mu.Unlock()
			if h := r.started[pid].Info; !strings.Contains(h, "join=api") || strings.Contains(h, "every_call") != tc.every {
				t.Errorf("hello %q: want join=api, every call recorded %v", h, tc.every)
			}
			if n := len(r.measured[pid]); n != ops || r.lost[pid].Total() != 0 {
				t.Errorf("%d measured, lost %+v: want %d, none", n, r.lost[pid], ops)
			}
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("gputime-%d.tsv", pid)))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), "\ncall\t"); n != tc.calls*ops {
				t.Errorf("%d API records, want %d per GPU op (%d)", n, tc.calls, tc.calls*ops)
			}
		})
	}
}
