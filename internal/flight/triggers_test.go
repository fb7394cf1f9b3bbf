package flight

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cudatap/cudatap/export/oom"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/gpusample"
	"github.com/cudatap/cudatap/tracer/probe"
)

// TestOOMDump: the simulated job that runs out of device memory (scenario
// oom: 1004 MiB held at four places, 2 GiB asked twice, then it recovers)
// under the flight recorder makes exactly one dump, "oom": its window holds
// every call the job made (it fits), its report leads with the trigger
// and then the failure, which names the holders and says it recovered.
func TestOOMDump(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	r := newRecorder(t, Options{})
	tr := runUnder(t, r, "", b.Workload, "--scenario", "oom")
	ds := dumps(t, r)
	if len(ds) != 1 || ds[0].flight.Trigger != "oom" {
		t.Fatalf("dumps %+v, want one oom", ds)
	}
	d := ds[0]
	if d.flight.PID != uint32(tr.rep.PID) || d.flight.Dropped != 0 || d.flight.Restated != 0 {
		t.Errorf("flight header %+v", d.flight)
	}
	checkWholeRun(t, d, tr)
	if !strings.HasPrefix(d.rep.Summary, "flight recorder, trigger oom: cudaMalloc of 2.0 GiB failed (out of memory)") {
		t.Errorf("the report does not lead with the trigger:\n%s", d.rep.Summary)
	}
	if f := d.rep.Findings; len(f) < 2 || !strings.HasPrefix(f[0].Title, "flight recorder, trigger oom") || !strings.HasPrefix(f[1].Title, "out of memory: ") {
		t.Errorf("findings %+v", f)
	}
	recs := oom.Records(d.res)
	if len(recs) != 1 || !recs[0].Recovered || len(recs[0].Holders) < 3 {
		t.Errorf("out-of-memory records %+v, want one, recovered, with its holders", recs)
	}
	if s := r.Stats(); s.Dumps["oom"] != 1 || s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestSyncDumpOnce: with SyncAfter 1 ns every synchronization that blocks
// fires; the first writes the dump, the others within the cool-down are
// counted and write nothing. The dump holds the whole run.
func TestSyncDumpOnce(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	r := newRecorder(t, Options{SyncAfter: 1})
	tr := runUnder(t, r, "", b.Workload, "--iters", "30")
	ds := dumps(t, r)
	if len(ds) != 1 || ds[0].flight.Trigger != "sync" {
		t.Fatalf("dumps %+v, want one sync", ds)
	}
	checkWholeRun(t, ds[0], tr)
	if !strings.HasPrefix(ds[0].rep.Summary, "flight recorder, trigger sync: ") || !strings.Contains(ds[0].rep.Summary, " blocked the host ") {
		t.Errorf("the report does not lead with the trigger:\n%s", ds[0].rep.Summary)
	}
	// basic syncs stream 0 every 10 iterations, copies to pageable memory
	// every iteration, and syncs the device at the end: many blocked.
	if s := r.Stats(); s.Dumps["sync"] != 1 || s.Suppressed["sync"] < 3 {
		t.Errorf("%d sync dumps, %d suppressed by the cool-down; want 1 and more than 3", s.Dumps["sync"], s.Suppressed["sync"])
	}
}

// TestGPUDumps: NVML's word reaches the recorder through its GPUSample and
// GPUEvent (there is no NVML on the simulator: the agent's sampler calls
// them; this tests what the recorder does with them). A throttle of the
// workload's GPU and an Xid on it each write one dump of it; the same Xid
// again, within the cool-down, none; a throttle reason that is no trouble
// (the GPU idle) none.
func TestGPUDumps(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	r := newRecorder(t, Options{})
	l := startUnder(t, r, b.Workload, "--wait-before-exit", "--iters", "20")
	pid := workloadPID(t, l.wait("done "))
	on := []gpusample.ProcSample{{PID: uint32(pid)}, {PID: 1}} // pid 1: not traced
	r.GPUSample(gpusample.Sample{TS: monoNow(), Device: 0, Name: "Simulated", Processes: on, ThrottleReasons: []string{"gpu_idle"}})
	r.GPUSample(gpusample.Sample{TS: monoNow(), Device: 0, Name: "Simulated", Processes: on, ThrottleReasons: []string{"sw_power_cap", "hw_thermal_slowdown"}})
	r.GPUEvent(gpusample.Event{TS: monoNow(), Device: 0, Kind: "xid", Data: 79})
	r.GPUEvent(gpusample.Event{TS: monoNow(), Device: 0, Kind: "xid", Data: 79})
	io.WriteString(l.in, "exit\n")
	tr := l.end()
	ds := dumps(t, r)
	if len(ds) != 2 {
		t.Fatalf("%d dumps, want 2 (throttle, xid)", len(ds))
	}
	want := map[string]string{"gpu_throttle": "GPU 0 (Simulated) slowed down: hw_thermal_slowdown; the traced processes on it",
		"gpu_xid": "NVML reported Xid 79 on GPU 0; the traced processes on it"}
	for _, d := range ds {
		if w, ok := want[d.flight.Trigger]; !ok || d.flight.Detail != w || !slices.Equal(d.flight.PIDs, []uint32{uint32(pid)}) {
			t.Errorf("dump %+v, want one of %v for pid %d alone", d.flight, want, pid)
		}
		delete(want, d.flight.Trigger)
		checkWholeRun(t, d, tr)
	}
	if s := r.Stats(); s.Suppressed["gpu_xid"] != 1 {
		t.Errorf("suppressed %v, want the second Xid", s.Suppressed)
	}
}

// TestSignalDump: a workload killed by a signal makes one dump, "signal",
// that holds every call it made (as the same workload made them untraced).
func TestSignalDump(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	want := testutil.RunWorkload(t, b, nil, "--iters", "20")
	r := newRecorder(t, Options{})
	l := startUnder(t, r, b.Workload, "--wait-before-exit", "--iters", "20")
	pid := workloadPID(t, l.wait("done "))
	// Every call it made read, then killed.
	eventually(t, "call read", func() bool { return r.Stats().PerProcess[uint32(pid)].Read >= uint64(calls(want)) })
	syscall.Kill(pid, syscall.SIGKILL)
	l.in.Close()
	<-l.done
	// What record does for the command it launched (the process
	// connector may have said it already: then this changes nothing).
	if l.out != nil && l.out.Exit.Signal != 0 {
		r.Exited(uint32(pid), uint32(l.out.Exit.Signal), 0)
	}
	tr := l.end()
	want.PID = pid
	tr.rep = want
	ds := dumps(t, r)
	if len(ds) != 1 || ds[0].flight.Trigger != "signal" || ds[0].flight.Detail != fmt.Sprintf("process %d was killed by SIGKILL", pid) {
		t.Fatalf("dumps %+v, want one: signal", ds)
	}
	checkWholeRun(t, ds[0], tr)
	if !strings.HasPrefix(ds[0].rep.Summary, "flight recorder, trigger signal: process ") {
		t.Errorf("the report does not lead with the trigger:\n%s", ds[0].rep.Summary)
	}
}

// calls is how many calls a workload's report counts, its runtime's
// driver calls underneath included: at least the events a tracer reads.
func calls(rep *sim.Report) int {
	n := 0
	for _, k := range rep.Calls {
		n += k
	}
	return n
}

func workloadPID(t *testing.T, line string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "done ")))
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return pid
}

// TestNCCLStallDump: three ranks of a simulated NCCL job, rank 1 stops
// arriving after its third all-reduce (SIM_NCCL_STOP_AFTER) while the
// others, having enqueued all eight, wait in the fourth (blocked in their
// next synchronization): once they have waited NCCLAfter, one dump of the
// three ranks, rank 1 first, whose windows hold each rank's all-reduces
// (8, 3, 8) and whose report leads with who stopped.
func TestNCCLStallDump(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	run, id := fmt.Sprintf("flight-%d", os.Getpid()), 0xf11e<<32|uint64(os.Getpid())
	var ranks []*exec.Cmd
	var stdins []io.Writer
	var pids []int
	for rank := range 3 {
		cmd := exec.Command(b.NCCLWorkload, "--wait-stdin", "--scenario", "nccl", "--iters", "8")
		cmd.Env = append(os.Environ(), "SIM_NCCL_RUN="+run, fmt.Sprintf("SIM_NCCL_ID=%#x", id), "SIM_NCCL_NRANKS=3", fmt.Sprintf("SIM_NCCL_RANK=%d", rank))
		if rank == 1 {
			cmd.Env = append(cmd.Env, "SIM_NCCL_STOP_AFTER=3")
		}
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); os.Remove(sim.NCCLSegment(run, id)) })
		if l, _ := bufio.NewReader(stdout).ReadString('\n'); !strings.HasPrefix(l, "ready") {
			t.Fatalf("rank %d: %q", rank, l)
		}
		ranks, stdins, pids = append(ranks, cmd), append(stdins, stdin), append(pids, cmd.Process.Pid)
	}
	r := newRecorder(t, Options{NoExitWatch: true})
	attached := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := tracer.Run(context.Background(), tracer.Config{PIDs: pids, Stacks: probe.StacksSync, NVMLInterval: -1, NameWindow: -1,
			Recording: r, Sink: r, Observer: tracer.Funcs{OnAttached: func(int) { close(attached) }}})
		done <- err
	}()
	<-attached
	for _, in := range stdins {
		io.WriteString(in, "go\n")
	}
	eventually(t, "nccl_stall dump", func() bool { return r.Stats().Dumps["nccl_stall"] == 1 })
	for _, cmd := range ranks {
		cmd.Process.Kill()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.Close()
	var stall []readDump
	for _, d := range dumps(t, r) {
		if d.flight.Trigger == "nccl_stall" {
			stall = append(stall, d)
		}
	}
	if len(stall) != 1 {
		t.Fatalf("%d nccl_stall dumps, want 1", len(stall))
	}
	d := stall[0]
	if want := []uint32{uint32(pids[1]), uint32(pids[0]), uint32(pids[2])}; d.flight.PID != uint32(pids[1]) || !slices.Equal(d.flight.PIDs, want) {
		t.Errorf("dump of %v about %d, want %v about rank 1", d.flight.PIDs, d.flight.PID, want)
	}
	for _, s := range []string{fmt.Sprintf("rank 1 (pid %d) stopped arriving after collective #3", pids[1]),
		fmt.Sprintf("ranks 0 (pid %d), 2 (pid %d) waiting for collective #4", pids[0], pids[2])} {
		if !strings.Contains(d.flight.Detail, s) || !strings.HasPrefix(d.rep.Summary, "flight recorder, trigger nccl_stall: NCCL communicator ") {
			t.Errorf("the dump says %q; want %q in it, and its report to lead with it:\n%s", d.flight.Detail, s, d.rep.Summary)
		}
	}
	for i, want := range []int{8, 3, 8} {
		if got := counts(d.res, pids[i])["ncclAllReduce"]; got != want {
			t.Errorf("rank %d: %d all-reduces in the dump, want %d", i, got, want)
		}
	}
}
