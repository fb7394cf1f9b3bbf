package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

// TestAgentFlightRecorder: the agent with --flight-recorder, and simulated
// workloads under it. POST /dump?pid=N answers once the dump of that
// process is written, with where it is; the dump holds every call the
// process made and its report leads with why it was made. SIGUSR2 dumps
// every traced process. A workload killed by a signal is dumped by itself
// (the kernel's process connector says so). /metrics counts the dumps by
// trigger; POST /dump of a process the agent never traced says so.
func TestAgentFlightRecorder(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	base := startAgent(t, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Minute, RingBufferBytes: DefaultRingBuffer,
		PIDLabel: true, FlightRecorder: time.Hour, DumpsDir: dir})
	get := func() string {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	// Traced to its end: its last call, cudaDeviceSynchronize, is in.
	tracedToEnd := func(pid int, within time.Duration) bool {
		p := `pid="` + strconv.Itoa(pid) + `"`
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if metricValue(get(), "cudatap_cuda_calls_total", p, `api="cudaDeviceSynchronize"`) > 0 {
				return true
			}
		}
		return false
	}
	// The first process to map the simulated runtime is traced only once
	// the agent hooked the file (TestAgentMetrics): run some until one is.
	hooked := false
	for i := 0; i < 50 && !hooked; i++ {
		hooked = tracedToEnd(testutil.RunWorkload(t, b, nil, "--iters", "2").PID, 2*time.Second)
	}
	if !hooked {
		t.Fatal("50 workloads ran and none was traced")
	}

	post := func(query string) (int, string) {
		resp, err := http.Post(base+"/dump"+query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := post("?pid=1"); code != http.StatusNotFound || !strings.Contains(body, "process 1: not traced") {
		t.Errorf("POST /dump?pid=1: %d %q", code, body)
	}

	// On demand: a workload that waits, done, to be let go.
	w := startHeld(t, b, "--iters", "20")
	if !tracedToEnd(w.pid, time.Minute) {
		t.Fatalf("workload %d not traced", w.pid)
	}
	code, body := post("?pid=" + strconv.Itoa(w.pid))
	if code != http.StatusOK {
		t.Fatalf("POST /dump: %d %s", code, body)
	}
	var ans DumpAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	rep := w.release(t)
	if ans.Trigger != "on_demand" || !slices.Equal(ans.PIDs, []uint32{uint32(w.pid)}) || filepath.Dir(ans.Path) != dir || ans.Report == "" {
		t.Errorf("answer %+v", ans)
	}
	res, fl := readDump(t, ans.Path)
	if fl.Trigger != "on_demand" || !strings.Contains(fl.Detail, "POST /dump") {
		t.Errorf("flight header %+v", fl)
	}
	// Every call it made: the dump's counts are the workload's own. The
	// agent traces the whole host, other test runs' floods among them: a
	// call lost there (the ring buffer, shared by all, full) or dropped by
	// the recorder's bounds must be counted, never missing silently.
	d := res.Drops
	lost := d.RingbufFull + d.InflightFull + d.DecodeErrors + d.ProgramSkips + fl.Dropped + fl.StateDropped
	for _, api := range []string{"cudaStreamSynchronize", "cudaMemcpyAsync", "cudaEventRecord", "cudaMalloc", "cudaDeviceSynchronize"} {
		got, want := callsOf(res, w.pid)[api], int64(rep.Calls[api])
		switch {
		case got == want:
		case got < want && lost > 0:
			t.Logf("%s: %d in the dump, the workload made %d; counted as lost: %d (ring buffer full %d, recorder %d+%d)",
				api, got, want, lost, d.RingbufFull, fl.Dropped, fl.StateDropped)
		default:
			t.Errorf("%s: %d in the dump, the workload made %d, and nothing counted as lost (drops %+v, dump %+v)", api, got, want, d, fl)
		}
	}
	if page, err := os.ReadFile(ans.Report); err != nil || !strings.Contains(string(page), "flight recorder, trigger on_demand") {
		t.Errorf("the report %s does not lead with the trigger (%v)", ans.Report, err)
	}

	// SIGUSR2: every traced process (the one alive, held).
	w2 := startHeld(t, b, "--iters", "5")
	if !tracedToEnd(w2.pid, time.Minute) {
		t.Fatalf("workload %d not traced", w2.pid)
	}
	syscall.Kill(os.Getpid(), syscall.SIGUSR2)
	waitFor("the SIGUSR2 dump", func() bool { return metricValue(get(), "cudatap_flight_dumps_total", `trigger="on_demand"`) == 2 })
	var usr2 *recording.Flight
	for _, p := range dumpsIn(t, dir) {
		if _, f := readDump(t, p); strings.Contains(f.Detail, "SIGUSR2") {
			usr2 = f
		}
	}
	if usr2 == nil || !slices.Contains(usr2.PIDs, uint32(w2.pid)) {
		t.Errorf("no SIGUSR2 dump of %d: %+v", w2.pid, usr2)
	}

	// Killed by a signal: dumped by itself. (The agent traces the whole
	// host: other CUDA processes killed meanwhile are dumped too.)
	syscall.Kill(w2.pid, syscall.SIGKILL)
	w2.cmd.Wait()
	var killed *recording.Flight
	waitFor("the signal dump", func() bool {
		for _, p := range dumpsIn(t, dir) {
			if _, f := readDump(t, p); f.Trigger == "signal" && f.PID == uint32(w2.pid) {
				killed = f
			}
		}
		return killed != nil
	})
	if want := fmt.Sprintf("process %d was killed by SIGKILL", w2.pid); killed.Detail != want || !slices.Equal(killed.PIDs, []uint32{uint32(w2.pid)}) {
		t.Errorf("signal dump %+v, want %q", killed, want)
	}
	waitFor("the signal dump counted", func() bool { return metricValue(get(), "cudatap_flight_dumps_total", `trigger="signal"`) >= 1 })
	body = get()
	for _, series := range []string{"cudatap_flight_dropped_events_total", "cudatap_flight_bytes", "cudatap_flight_processes"} {
		if metricValue(body, series) < 0 {
			t.Errorf("no %s in /metrics", series)
		}
	}
	promtoolCheck(t, body)
}

// held is a simulated workload that waits, once done, to be let go.
type held struct {
	cmd   *exec.Cmd
	pid   int
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startHeld(t *testing.T, b *sim.Build, args ...string) *held {
	t.Helper()
	cmd := exec.Command(b.Workload, append(args, "--wait-before-exit")...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	h := &held{cmd: cmd, pid: cmd.Process.Pid, stdin: stdin, out: bufio.NewReader(stdout)}
	if l, err := h.out.ReadString('\n'); err != nil || !strings.HasPrefix(l, "done ") {
		t.Fatalf("workload: %q %v", l, err)
	}
	return h
}

// release lets it exit and returns its report.
func (h *held) release(t *testing.T) *sim.Report {
	t.Helper()
	io.WriteString(h.stdin, "exit\n")
	out, _ := io.ReadAll(h.out)
	h.cmd.Wait()
	rep, err := sim.ParseReport(out)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func dumpsIn(t *testing.T, dir string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, "cudatap-flight-*.cudatap"))
	return paths
}

func readDump(t *testing.T, path string) (*model.Result, *recording.Flight) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, rp, err := replay.Load(f, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if rp.Header.Flight == nil {
		t.Fatalf("%s is no flight recorder dump", path)
	}
	return res, rp.Header.Flight
}

func callsOf(res *model.Result, pid int) map[string]int64 {
	for _, p := range res.Processes {
		if int(p.PID) == pid {
			return p.CallCounts()
		}
	}
	return nil
}
