package agent

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/internal/kube"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
)

// The agent under load, in a process of its own: this test binary run
// again as TestAgentChild, so that its peak RSS and CPU time are the
// agent's alone, not the clients'.

// agentChildEnv holds the agent's Options (JSON) in the child.
const agentChildEnv = "CUDATAP_AGENT_CHILD"

// TestAgentChild is the agent process of the load tests and benchmarks:
// it runs only as their child, until SIGTERM, as cudatap agent does.
func TestAgentChild(t *testing.T) {
	js := os.Getenv(agentChildEnv)
	if js == "" {
		t.Skip("the agent process that startAgentProcess runs; not a test of its own")
	}
	var o Options
	if err := json.Unmarshal([]byte(js), &o); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	a, err := New(*withDefaults(&o))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "cudatap agent: metrics on http://%s/metrics\n", a.Addr())
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "%s%d\n", peakLine, vmHWM(os.Getpid()))
}

// peakLine starts the child's last line: its peak RSS in bytes. Not its
// rusage seen by the parent: Go starts a child sharing the parent's memory
// until it execs, so the child's ru_maxrss starts at the parent's peak (a
// test before, reading a 53 MB trace, took it to 1 GB).
const peakLine = "cudatap agent: peak RSS "

// vmHWM is process pid's peak RSS so far, 0 if unknown.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	_, v, _ := strings.Cut(string(b), "VmHWM:")
	kb, _ := strconv.ParseInt(strings.Fields(v + " 0")[0], 10, 64)
	return kb << 10
}

// asDaemonSet are the flags' defaults that the agent's tests in a
// process of their own run with, as deploy/daemonset.yaml runs it, with o's
// fields.
func asDaemonSet(o Options) Options {
	o.MaxCPU, o.KubeletSocket, o.RingBufferBytes = DefaultMaxCPU, kube.DefaultSocket, DefaultRingBuffer
	return o
}

// agentProcess is an agent running as a child process.
type agentProcess struct {
	cmd  *exec.Cmd
	base string // http://ADDR
	// peak is the peak RSS it reported as it ended (peakLine), once its
	// stderr is drained.
	peak    int64
	drained chan struct{}
}

// startAgentProcess runs the agent with o (listening on 127.0.0.1:0) in a
// child process with env added to this one's, and waits until it serves.
func startAgentProcess(t testing.TB, env []string, o Options) *agentProcess {
	t.Helper()
	o.Listen = "127.0.0.1:0"
	js, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), append(env, agentChildEnv+"="+string(js))...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProcess{cmd: cmd, drained: make(chan struct{})}
	t.Cleanup(func() { a.stop() })
	r := bufio.NewReader(stderr)
	var lines []string
	for a.base == "" {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the agent process ended before serving: %v\n%s", err, strings.Join(lines, ""))
		}
		lines = append(lines, l)
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cudatap agent: metrics on "); ok {
			a.base = strings.TrimSuffix(rest, "/metrics")
		}
	}
	go func() {
		defer close(a.drained)
		for {
			l, err := r.ReadString('\n')
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), peakLine); ok {
				a.peak, _ = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				return
			}
		}
	}()
	return a
}

// stop ends the agent (SIGTERM) and returns its peak RSS in bytes (0 when
// it did not say: killed).
func (a *agentProcess) stop() int64 {
	if a.cmd.ProcessState == nil {
		a.cmd.Process.Signal(syscall.SIGTERM)
		<-a.drained
		a.cmd.Wait()
	}
	<-a.drained
	return a.peak
}

// cpu is the agent's CPU time so far.
func (a *agentProcess) cpu() time.Duration {
	st, err := procfs.Stat(a.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return time.Duration(st.CPUTicks) * time.Second / procfs.ClockTicks
}

// peakRSS is the agent's peak RSS so far (VmHWM), 0 if unknown.
func (a *agentProcess) peakRSS() int64 { return vmHWM(a.cmd.Process.Pid) }

// waitReady waits until the agent's probes are live.
func waitReady(t testing.TB, base string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent was not ready within a minute")
		}
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
	}
}

// manyStreams runs n workloads of 1,024 streams each under the agent at
// base, so that its /metrics holds n×1,024 stream series (6.8 MB for
// 1,024 processes in the 2026-12-01 review): the first only once the
// agent has hooked the simulated runtime (see TestAgentMetrics).
func manyStreams(t testing.TB, b *sim.Build, get func(path string) (int, string), n int) {
	t.Helper()
	run := func() int {
		return testutil.RunWorkload(t, b, nil, "--scenario", "basic", "--streams", "1024", "--iters", "1").PID
	}
	hooked := false
	for i := 0; i < 50 && !hooked; i++ {
		pid := `pid="` + strconv.Itoa(run()) + `"`
		for deadline := time.Now().Add(2 * time.Second); !hooked && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			_, body := get("/metrics")
			hooked = strings.Contains(body, pid)
		}
	}
	if !hooked {
		t.Fatal("50 workloads ran and none was traced")
	}
	for range n {
		run()
	}
}

// clientLoad is what a crowd of clients got.
type clientLoad struct {
	codes    map[int]int
	maxBytes int64 // the largest body, uncompressed
	gzipped  int   // answers gzip-compressed
	errs     []error
}

// hammer runs clients goroutines, each asking each of paths in turn,
// until each made requests requests (or until stop closes, when
// requests is 0), with the Authorization header auth. Half of them
// accept gzip.
func hammer(base, auth string, clients, requests int, stop <-chan struct{}, paths ...string) clientLoad {
	var mu sync.Mutex
	load := clientLoad{codes: map[int]int{}}
	var wg sync.WaitGroup
	for c := range clients {
		tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: c%2 == 1}
		client := &http.Client{Transport: tr}
		wg.Go(func() {
			defer tr.CloseIdleConnections()
			for i := 0; requests == 0 || i < requests; i++ {
				if requests == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
				req, _ := http.NewRequest("GET", base+paths[(c+i)%len(paths)], nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := client.Do(req)
				var n int64
				if err == nil {
					n, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				mu.Lock()
				if err != nil {
					load.errs = append(load.errs, err)
				} else {
					load.codes[resp.StatusCode]++
					load.maxBytes = max(load.maxBytes, n)
					if resp.Uncompressed { // the transport asked for gzip and undid it
						load.gzipped++
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return load
}

// The DaemonSet's memory limit, and the Go heap's limit under it
// (deploy/daemonset.yaml; deploy_test.go checks the one is under the other).
const (
	daemonSetMemory = 256 << 20
	daemonSetGoMem  = "GOMEMLIMIT=160MiB"
)

// TestAgentManyClients: 200 clients at once ask /metrics (with 8,192
// stream series: 8 processes of 1,024 streams, each labelled: --pid-label
// --max-streams 1024, the most an agent can be made to serve) and /profile
// of an agent run as the DaemonSet runs it (its GOMEMLIMIT), in a process of its own,
// while it traces a busy process. Every request is answered, 200 or 503;
// the 503s are exactly what the agent counts; no answer passes
// maxAnswerBytes, and the clients that accept gzip get it. The agent's
// peak RSS stays under the DaemonSet's memory limit, and what the clients
// added to it under 48 MiB: before requests were bounded they added 108 MiB
// (from 146 to 254 MiB with this test, the agent crawling at its
// GOMEMLIMIT: 146 s for what now takes 10). The clients send the token's scheme in lower case.
func TestAgentManyClients(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	a := startAgentProcess(t, []string{daemonSetGoMem}, asDaemonSet(Options{Continuous: true, Every: time.Second, Token: "t0k", PIDLabel: true, MaxStreams: 1024}))
	waitReady(t, a.base)
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", a.base+path, nil)
		req.Header.Set("Authorization", "bearer t0k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	const procs = 8
	manyStreams(t, b, get, procs)
	busy := exec.Command(b.Workload, "--scenario", "launches", "--iters", "100000000") // runs until killed
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer busy.Wait()
	defer busy.Process.Kill()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no profile of the busy process within a minute")
		}
		if code, _ := get("/profile?pid=" + strconv.Itoa(busy.Process.Pid)); code == http.StatusOK {
			break
		}
	}
	_, body := get("/metrics")
	if n := strings.Count(body, "cudatap_stream_launches_total{"); n < procs*1024 {
		t.Fatalf("/metrics has %d stream series, want the %d processes' %d", n, procs, procs*1024)
	}

	before := a.peakRSS()
	load := hammer(a.base, "bearer t0k", 200, 10, nil, "/metrics", "/profile")
	after := a.peakRSS()
	if len(load.errs) > 0 {
		t.Fatalf("%d requests failed, the first: %v", len(load.errs), load.errs[0])
	}
	if load.codes[http.StatusOK]+load.codes[http.StatusServiceUnavailable] != 2000 {
		t.Errorf("answers %v: want 2,000, each 200 or 503", load.codes)
	}
	if load.maxBytes > maxAnswerBytes {
		t.Errorf("an answer of %d bytes, over the bound of %d", load.maxBytes, maxAnswerBytes)
	}
	if load.gzipped == 0 {
		t.Error("no answer was gzip-compressed, though half the clients accept it")
	}
	// Counted, exactly (/metrics may be a second old: wait for it).
	rejected := func(body string) float64 {
		return max(0, metricValue(body, "cudatap_agent_requests_rejected_total", `path="/metrics"`)) +
			max(0, metricValue(body, "cudatap_agent_requests_rejected_total", `path="/profile"`))
	}
	want := float64(load.codes[http.StatusServiceUnavailable])
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, body = get("/metrics")
		if rejected(body) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent counts %v rejected requests, the clients got %v answers 503", rejected(body), want)
		}
	}
	cpu := a.cpu()
	peak := a.stop()
	t.Logf("answers %v (%d gzip); the largest %d bytes; agent CPU %v, peak RSS %.1f MiB (%.1f MiB before the clients, %.1f MiB after)",
		load.codes, load.gzipped, load.maxBytes, cpu, mib(peak), mib(before), mib(after))
	if before == 0 || after-before >= 48<<20 {
		t.Errorf("the clients took the agent's peak RSS from %.1f to %.1f MiB: want less than 48 MiB more", mib(before), mib(after))
	}
	if peak <= 0 || peak >= daemonSetMemory {
		t.Errorf("the agent's peak RSS was %.1f MiB: want under the DaemonSet's limit of %d MiB", mib(peak), daemonSetMemory>>20)
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// quietTarget starts a workload that has the simulated CUDA libraries
// mapped and waits (for a line on stdin that never comes) until the test
// ends: a capture of it runs its whole duration.
func quietTarget(t *testing.T, b *sim.Build) int {
	t.Helper()
	cmd := exec.Command(b.Workload, "--wait-stdin")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if l, _ := bufio.NewReader(stdout).ReadString('\n'); !strings.HasPrefix(l, "ready") {
		t.Fatalf("workload: %q", l)
	}
	return cmd.Process.Pid
}

// TestAgentPushOnSIGTERM: the last window's profiles (here the only ones:
// --every 1h) are pushed when the agent gets SIGTERM, as it does when its
// pod is deleted; they were cancelled with the tracing before (the
// 2026-12-01 review: "pushing a profile failed ... terminated signal
// received" with the receiver up).
func TestAgentPushOnSIGTERM(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	t.Run("windows", func(t *testing.T) { testPushOnSIGTERM(t, Options{Window: time.Hour, Every: time.Hour}) })
	t.Run("continuous", func(t *testing.T) { testPushOnSIGTERM(t, Options{Continuous: true, Every: time.Hour}) })
}

func testPushOnSIGTERM(t *testing.T, o Options) {
	b := testutil.Sim(t)
	pushed := make(chan string, 64) // the names of the profiles pushed
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, _, err := r.FormFile("profile")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		data, _ := io.ReadAll(f)
		if p, err := profile.ParseData(data); err != nil || len(p.Sample) == 0 {
			http.Error(w, fmt.Sprintf("not a profile with samples: %v", err), http.StatusBadRequest)
			return
		}
		select {
		case pushed <- r.URL.Query().Get("name"):
		default:
		}
	}))
	defer rcv.Close()
	o.Push, o.PIDLabel = rcv.URL, true
	a := startAgentProcess(t, nil, asDaemonSet(o))
	waitReady(t, a.base)
	cmd := exec.Command(b.Workload, "--scenario", "launches", "--iters", "100000000") // runs until killed
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := strconv.Itoa(cmd.Process.Pid)
	// Traced: its syncs (recorded, so in the profile) are in /metrics.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the workload was not traced within a minute")
		}
		resp, err := http.Get(a.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if metricValue(string(body), "cudatap_cuda_calls_total", `pid="`+pid+`"`, `api="cudaDeviceSynchronize"`) > 0 {
			break
		}
	}
	select {
	case name := <-pushed:
		t.Fatalf("a profile was pushed before the agent was stopped: %s", name)
	default:
	}
	a.stop() // SIGTERM, and wait for it to exit
	want := "cudatap.cuda{pid=" + pid + ",comm=workload,service_name=workload}"
	var got []string
	for len(pushed) > 0 {
		got = append(got, <-pushed)
	}
	if !slices.Contains(got, want) {
		t.Errorf("pushed after SIGTERM: %q, want %s among them", got, want)
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the agent exited %d after SIGTERM, want 0", code)
	}
}

// TestAgentCaptureLeavesNothing: a capture's recording has no name in
// TMPDIR, while it runs and after the agent is killed (kill -9) in the
// middle of it: nothing is left behind (empty /tmp/cudatap-capture-*
// directories were, 14 after 15 kills in the 2026-12-01 review).
func TestAgentCaptureLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	tmp := t.TempDir()
	a := startAgentProcess(t, []string{"TMPDIR=" + tmp}, asDaemonSet(Options{Continuous: true, Every: DefaultEvery}))
	waitReady(t, a.base)
	pid := quietTarget(t, b)
	answered := make(chan error, 1)
	go func() {
		resp, err := http.Post(a.base+"/capture?duration=60s&pid="+strconv.Itoa(pid), "", nil)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("the capture ended before the agent was killed: %d %s", resp.StatusCode, body)
		}
		answered <- err
	}()
	// Recording: the agent holds a descriptor of a file in tmp.
	fds := fmt.Sprintf("/proc/%d/fd", a.cmd.Process.Pid)
	for recording := false; !recording; time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-answered:
			t.Fatal(err)
		default:
		}
		ents, _ := os.ReadDir(fds)
		for _, e := range ents {
			if l, err := os.Readlink(fds + "/" + e.Name()); err == nil && strings.HasPrefix(l, tmp+"/") {
				recording = true
			}
		}
	}
	left := func(when string) {
		t.Helper()
		ents, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			t.Errorf("%s: %s/%s is there", when, tmp, e.Name())
		}
	}
	left("while the capture runs")
	a.cmd.Process.Kill()
	a.cmd.Wait()
	<-answered
	left("after kill -9 of the agent")
}

// TestAgentCaptureBounded: a capture of a process that launches flat out
// stops when its recording reaches --capture-max-bytes (1 MiB here; the
// review's 60 s capture wrote 21.8 GB), and says so: in the header and in
// the trace, which holds what was recorded until then and streams
// gzip-compressed to a client that accepts it. Nothing is left in TMPDIR.
func TestAgentCaptureBounded(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t) // built before TMPDIR changes: it is shared
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	base := startAgent(t, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Minute, RingBufferBytes: 16 << 20,
		CaptureMaxBytes: MinCaptureMaxBytes})
	cmd := exec.Command(b.Workload, "--wait-stdin", "--scenario", "launches", "--iters", "100000000") // runs until killed
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if l, _ := bufio.NewReader(stdout).ReadString('\n'); !strings.HasPrefix(l, "ready") {
		t.Fatalf("workload: %q", l)
	}
	go io.Copy(io.Discard, stdout)
	io.WriteString(stdin, "go\n")
	pid := strconv.Itoa(cmd.Process.Pid)
	req, _ := http.NewRequest("POST", base+"/capture?duration=60s&pid="+pid, nil)
	req.Header.Set("Accept-Encoding", "gzip") // set by hand: the client leaves the body compressed
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("capture: %d, Content-Encoding %q: %s", resp.StatusCode, resp.Header.Get("Content-Encoding"), body)
	}
	truncated := resp.Header.Get("X-Cudatap-Truncated")
	t.Logf("X-Cudatap-Truncated: %s; X-Cudatap-Recording-Bytes: %s", truncated, resp.Header.Get("X-Cudatap-Recording-Bytes"))
	if !strings.Contains(truncated, "--capture-max-bytes") {
		t.Errorf("X-Cudatap-Truncated %q: want the cap named", truncated)
	}
	if n, err := strconv.ParseInt(resp.Header.Get("X-Cudatap-Recording-Bytes"), 10, 64); err != nil || n <= 0 || n > MinCaptureMaxBytes {
		t.Errorf("X-Cudatap-Recording-Bytes %q: want at most %d", resp.Header.Get("X-Cudatap-Recording-Bytes"), MinCaptureMaxBytes)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var trace struct {
		TraceEvents []map[string]any `json:"traceEvents"`
		Cudatap     map[string]any   `json:"cudatap"`
	}
	if err := json.NewDecoder(zr).Decode(&trace); err != nil {
		t.Fatalf("the capture is not a Chrome trace: %v", err)
	}
	launches, marked := 0, false
	for _, ev := range trace.TraceEvents {
		switch {
		case ev["ph"] == "X" && ev["name"] == "cudaLaunchKernel" && fmt.Sprint(ev["pid"]) == pid:
			launches++
		case ev["name"] == "recording truncated":
			marked = fmt.Sprint(ev["args"].(map[string]any)["reason"]) == truncated
		}
	}
	if launches == 0 || !marked {
		t.Errorf("the trace has %d launches of %s, truncation marked %v (%d events)", launches, pid, marked, len(trace.TraceEvents))
	}
	if !strings.Contains(fmt.Sprint(trace.Cudatap), truncated) {
		t.Errorf("the trace's cudatap section does not say it was truncated: %v", trace.Cudatap)
	}
	ents, _ := os.ReadDir(tmp)
	for _, e := range ents {
		t.Errorf("%s/%s was left behind", tmp, e.Name())
	}
}

// BenchmarkAgentClients runs the agent as the DaemonSet does (its
// GOMEMLIMIT; --continuous here), a process of its own, with the /metrics of
// CUDATAP_CLIENT_PROCS exited processes of 1,024 streams each, labelled
// (--pid-label --max-streams 1024; default 30: 4.5 MB) and one busy process, while CUDATAP_CLIENTS clients (default 200)
// ask /metrics and /profile in a loop for CUDATAP_CLIENT_SOAK (default
// 10s). It reports the agent's CPU over that time as a share of one core,
// its peak RSS before and after the clients, the answers 200 per second
// and the largest.
//
//	go test -run '^$' -bench AgentClients -benchtime 1x ./internal/agent/
func BenchmarkAgentClients(b *testing.B) {
	testutil.RequireRoot(b)
	sb := testutil.Sim(b)
	clients, procs := envInt("CUDATAP_CLIENTS", 200), envInt("CUDATAP_CLIENT_PROCS", 30)
	soak := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("CUDATAP_CLIENT_SOAK")); err == nil && d > 0 {
		soak = d
	}
	for range b.N {
		a := startAgentProcess(b, []string{daemonSetGoMem}, asDaemonSet(Options{Continuous: true, Every: 5 * time.Second, Token: "bench", PIDLabel: true, MaxStreams: 1024}))
		waitReady(b, a.base)
		get := func(path string) (int, string) {
			req, _ := http.NewRequest("GET", a.base+path, nil)
			req.Header.Set("Authorization", "Bearer bench")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		manyStreams(b, sb, get, procs)
		busy := exec.Command(sb.Workload, "--scenario", "launches", "--iters", "100000000") // runs until killed
		if err := busy.Start(); err != nil {
			b.Fatal(err)
		}
		stop := make(chan struct{})
		before, cpu0, t0 := a.peakRSS(), a.cpu(), time.Now()
		time.AfterFunc(soak, func() { close(stop) })
		load := hammer(a.base, "Bearer bench", clients, 0, stop, "/metrics", "/profile")
		cpu, wall, after := a.cpu()-cpu0, time.Since(t0), a.peakRSS()
		busy.Process.Kill()
		busy.Wait()
		a.stop()
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu%_of_core")
		b.ReportMetric(mib(before), "peak_rss_MiB_before")
		b.ReportMetric(mib(after), "peak_rss_MiB_after")
		b.ReportMetric(float64(load.maxBytes)/(1<<20), "max_answer_MiB")
		b.ReportMetric(float64(load.codes[200])/wall.Seconds(), "answers_200/s")
		b.Logf("%d clients for %v (%v with the last answers): answers %v, %d of them gzip, %d errors", clients, soak, wall.Round(time.Millisecond), load.codes, load.gzipped, len(load.errs))
	}
}
