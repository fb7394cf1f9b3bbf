package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/export/metrics"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
)

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:9400", "", true},
		{"localhost:9400", "", true},
		{"[::1]:9400", "", true},
		{"0.0.0.0:9400", "", false},
		{":9400", "", false},
		{"10.0.0.5:9400", "", false},
		{"0.0.0.0:9400", "s3cret", true},
		{"nonsense", "", false},
	} {
		if err := checkListen(tc.addr, tc.token); (err == nil) != tc.ok {
			t.Errorf("checkListen(%q, %q) = %v, want ok=%v", tc.addr, tc.token, err, tc.ok)
		}
	}
}

func TestAgentToken(t *testing.T) {
	h := withToken("s3cret", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	for _, tc := range []struct {
		header string
		code   int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer wrong", http.StatusUnauthorized},
		{"s3cret", http.StatusUnauthorized},
		{"Basic s3cret", http.StatusUnauthorized},
		{"Bearers3cret", http.StatusUnauthorized},
		{"Bearer s3cret2", http.StatusUnauthorized},
		{"Bearer s3cret", http.StatusOK},
		// The scheme in any case (RFC 7235), one or more spaces after it.
		{"bearer s3cret", http.StatusOK},
		{"BEARER s3cret", http.StatusOK},
		{"Bearer   s3cret", http.StatusOK},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code {
			t.Errorf("Authorization %q: %d, want %d", tc.header, w.Code, tc.code)
		}
	}
}

// withDefaults gives o the defaults of the flags a test leaves out.
func withDefaults(o *Options) *Options {
	if o.MaxRequests == 0 {
		o.MaxRequests = DefaultMaxRequests
	}
	if o.CaptureMaxBytes == 0 {
		o.CaptureMaxBytes = DefaultCaptureMaxBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return o
}

// startAgent runs the agent until the test ends and returns its base URL.
func startAgent(t *testing.T, o *Options) string {
	t.Helper()
	a, err := New(*withDefaults(o))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return "http://" + a.Addr().String()
}

// TestAgentMetrics runs the agent and a simulated workload under it, and
// reads the workload's exact counts back from /metrics.
func TestAgentMetrics(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	// The process's own series: with its pid.
	base := startAgent(t, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Minute, RingBufferBytes: 16 << 20, LaunchTimes: true, PIDLabel: true})
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("the agent to be ready", func() bool { code, _ := get("/healthz"); return code == http.StatusOK })

	// The first process to map the simulated runtime is traced only once
	// the agent has hooked the file (it was short-lived: gone before its
	// discovery). Run workloads until one is traced, then count the next.
	run := func() *sim.Report {
		t.Helper()
		// Each launch spends 300 µs on the host: every launch time the
		// agent keeps is above the 262.144 µs bound.
		return testutil.RunWorkload(t, b, []string{"SIM_LAUNCH_HOST_US=300"}, "--scenario", "basic", "--iters", "20")
	}
	metricsOf := func(pid int) string {
		_, body := get("/metrics")
		var own []string
		for _, l := range strings.Split(body, "\n") {
			if strings.Contains(l, `pid="`+strconv.Itoa(pid)+`"`) {
				own = append(own, l)
			}
		}
		return strings.Join(own, "\n")
	}
	hooked := false
	for i := 0; i < 50 && !hooked; i++ {
		warm := run()
		// Traced once its sync shows up: the last call it makes. The
		// agent reads its ring buffer every 100 ms: give it 2 s (a slow
		// machine only costs a retry).
		for deadline := time.Now().Add(2 * time.Second); !hooked && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			hooked = strings.Contains(metricsOf(warm.PID), `api="cudaFree"`)
		}
	}
	if !hooked {
		t.Fatal("50 workloads ran and none was traced")
	}
	rep := run()
	pid := strconv.Itoa(rep.PID)
	value := func(body, metric string, labels ...string) float64 {
		return metricValue(body, metric, append(labels, `pid="`+pid+`"`)...)
	}
	launches := 0
	for sym, n := range rep.Calls {
		if strings.HasPrefix(sym, "cudaLaunchKernel") {
			launches += n
		}
	}
	var body string
	waitFor(fmt.Sprintf("%d launches of process %s in /metrics", launches, pid), func() bool {
		_, body = get("/metrics")
		return value(body, "cudatap_kernel_launches_total") == float64(launches)
	})
	// By stream: the basic scenario's relu runs on the legacy default
	// stream (0) once an iteration (20), its gemms on its own two streams.
	if got := value(body, "cudatap_stream_launches_total", `stream="0"`); got != 20 {
		t.Errorf("launches on the legacy stream: /metrics says %v, want 20", got)
	}
	for _, api := range []string{"cudaStreamSynchronize", "cudaMemcpyAsync", "cudaEventRecord"} {
		if got, want := value(body, "cudatap_cuda_calls_total", `api="`+api+`"`), float64(rep.Calls[api]); got != want {
			t.Errorf("%s calls: /metrics says %v, the workload made %v", api, got, want)
		}
	}
	if got := value(body, "cudatap_syncs_total", `kind="pageable_memcpy"`); got <= 0 {
		t.Errorf("no pageable_memcpy syncs in /metrics:\n%s", body)
	}
	// Live: the session's status is once a second.
	waitFor("the agent's own event count", func() bool {
		_, all := get("/metrics")
		return metricValue(all, "cudatap_agent_events_total") > 0
	})
	if !strings.Contains(body, `comm="workload"`) || !strings.Contains(body, "cudatap_agent_process_resident_memory_bytes") {
		t.Errorf("labels or the agent's own series missing:\n%s", body)
	}
	// Only the metrics are served.
	if code, _ := get("/etc/passwd"); code != http.StatusNotFound {
		t.Errorf("GET /etc/passwd: %d", code)
	}
	promtoolCheck(t, body) // with pids and histograms
	// A real Prometheus server scrapes the agent and its query API gives
	// the same exact values.
	promQuery(t, base, map[string]float64{
		`cudatap_kernel_launches_total{pid="` + pid + `"}`:                            float64(launches),
		`cudatap_cuda_calls_total{pid="` + pid + `",api="cudaStreamSynchronize"}`:     float64(rep.Calls["cudaStreamSynchronize"]),
		`cudatap_cuda_calls_total{pid="` + pid + `",api="cudaMemcpyAsync"}`:           float64(rep.Calls["cudaMemcpyAsync"]),
		`sum(cudatap_syncs_total{pid="` + pid + `",kind="pageable_memcpy"}) > bool 0`: 1,
		// --launch-times: every launch timed, none under 300 µs.
		`cudatap_cuda_api_seconds_count{pid="` + pid + `",api="cuLaunchKernel"}`:                                                                    float64(launches),
		`cudatap_cuda_api_seconds_bucket{pid="` + pid + `",api="cuLaunchKernel",le="0.000262144"}`:                                                  0,
		`cudatap_cuda_api_seconds_sum{pid="` + pid + `",api="cuLaunchKernel"} > bool ` + strconv.FormatFloat(float64(launches)*300e-6, 'f', -1, 64): 1,
		// The agent traces every process on the host, other test runs'
		// among them: its lost count is theirs too (this workload's launches
		// are all timed, above); the series is there.
		`cudatap_launch_times_lost_total >= bool 0`: 1,
	})
}

// TestAgentDefaultSeries: what an agent with the defaults serves of a
// simulated process, as an operator meets it: no pid label, streams
// labelled by small numbers, no histograms, the node on every series,
// fewer series for the process's group than metrics.SeriesBound, and
// nothing promtool check metrics objects to.
func TestAgentDefaultSeries(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	base := startAgent(t, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Minute, RingBufferBytes: DefaultRingBuffer, Node: "node-7"})
	get := func() string {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// Workloads until one is traced to its end (its cudaFree: see
	// TestAgentMetrics) and its launches, counted in BPF, are in too (they
	// reach /metrics once a second).
	var body string
	traced := func() bool {
		body = get()
		return metricValue(body, "cudatap_cuda_calls_total", `comm="workload"`, `api="cudaFree"`) > 0 &&
			metricValue(body, "cudatap_stream_launches_total", `comm="workload"`, `stream="2"`) > 0
	}
	for i := 0; i < 50 && !traced(); i++ {
		testutil.RunWorkload(t, b, nil, "--scenario", "basic", "--iters", "20")
		for deadline := time.Now().Add(2 * time.Second); !traced() && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		}
	}
	if !traced() {
		t.Fatal("50 workloads ran and none was traced")
	}
	series, streams := 0, map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if !strings.Contains(l, `Hostname="node-7"`) {
			t.Errorf("a series without the node: %s", l)
		}
		switch {
		case strings.Contains(l, `pid="`):
			t.Errorf("a pid label without --pid-label: %s", l)
		case strings.HasPrefix(l, "cudatap_cuda_api_seconds"):
			t.Errorf("a histogram without --histograms: %s", l)
		}
		if !strings.Contains(l, `comm="workload"`) || !strings.HasPrefix(l, "cudatap_") {
			continue
		}
		series++
		if _, v, ok := strings.Cut(l, `stream="`); ok {
			v, _, _ = strings.Cut(v, `"`)
			streams[v] = true
			if _, err := strconv.Atoi(v); err != nil && v != "other" && v != "unknown" {
				t.Errorf("stream labelled %q, not by its number: %s", v, l)
			}
		}
	}
	// The basic scenario launches on the legacy stream and two of its own.
	for _, want := range []string{"0", "1", "2"} {
		if !streams[want] {
			t.Errorf("no launches on stream %s: streams %v", want, streams)
		}
	}
	bound := metrics.SeriesBound(metrics.Options{})
	t.Logf("the workloads' group has %d series (streams %v); a group can have %d", series, streams, bound)
	if series == 0 || series > bound {
		t.Errorf("the workloads' group has %d series: want some, and at most %d", series, bound)
	}
	promtoolCheck(t, body)
}

// TestAgentOOM: the simulated job that runs out of device memory (asks
// for 2 GiB of 1 twice, the second time after letting its cache go, as
// PyTorch's caching allocator does) shows one request refused in
// cudatap_oom_total, however many calls it took.
func TestAgentOOM(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	base := startAgent(t, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Minute, RingBufferBytes: DefaultRingBuffer, PIDLabel: true})
	get := func() string {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// Traced to its end: its last call, cudaDeviceSynchronize, is in. The
	// first process to map the simulated runtime is traced only once the
	// agent has hooked the file (see TestAgentMetrics): one until traced,
	// then the one counted.
	traced := func(pid int) bool {
		p := `pid="` + strconv.Itoa(pid) + `"`
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if metricValue(get(), "cudatap_cuda_calls_total", p, `api="cudaDeviceSynchronize"`) > 0 {
				return true
			}
		}
		return false
	}
	hooked := false
	for i := 0; i < 50 && !hooked; i++ {
		hooked = traced(testutil.RunWorkload(t, b, nil, "--scenario", "oom").PID)
	}
	if !hooked {
		t.Fatal("50 workloads ran and none was traced")
	}
	rep := testutil.RunWorkload(t, b, nil, "--scenario", "oom")
	if !traced(rep.PID) {
		t.Fatalf("the workload (pid %d) was not traced to its end", rep.PID)
	}
	if got := metricValue(get(), "cudatap_oom_total", `pid="`+strconv.Itoa(rep.PID)+`"`); got != 1 {
		t.Errorf("cudatap_oom_total of the job: %v, want 1 (one request, two attempts; %d cudaMalloc calls)", got, rep.Calls["cudaMalloc"])
	}
}

// promtoolCheck runs promtool check metrics (Debian's prometheus package;
// make test-deps installs it) on a /metrics answer: it must have nothing
// to say.
func promtoolCheck(t *testing.T, body string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI needs promtool (Debian's prometheus package; make test-deps installs it)")
		}
		t.Log("no promtool: the check of /metrics is skipped (make test-deps installs it)")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// promQuery runs Debian's prometheus (make test-deps installs it; without
// it the check is skipped, except in CI) scraping the agent at base every
// second, and waits until every query returns its value.
func promQuery(t *testing.T, base string, queries map[string]float64) {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI needs Debian's prometheus package for this test (make test-deps installs it)")
		}
		t.Log("no prometheus binary: the Prometheus server check is skipped (make test-deps installs it)")
		return
	}
	dir := t.TempDir()
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: cudatap\n    static_configs:\n      - targets: [%q]\n",
		strings.TrimPrefix(base, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for q, want := range queries {
		var got string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("Prometheus: %s = %s, want %v\n%s", q, got, want, logs.String())
			}
			resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
			if err != nil {
				continue
			}
			var r struct {
				Data struct {
					Result []struct {
						Value [2]any `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if err != nil || len(r.Data.Result) != 1 {
				got = fmt.Sprintf("%d results", len(r.Data.Result))
				continue
			}
			got = fmt.Sprint(r.Data.Result[0].Value[1])
			if v, err := strconv.ParseFloat(got, 64); err == nil && v == want {
				break
			}
		}
	}
}

// TestAgentWindowProfiles runs the agent in one-second windows, and
// --continuous cutting a profile every second: once a window or interval
// has ended, /profile serves its pprof profile, and ?pid= the samples of
// one traced process, while it runs.
func TestAgentWindowProfiles(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	t.Run("windows", func(t *testing.T) {
		testAgentProfiles(t, &Options{Listen: "127.0.0.1:0", Window: time.Second, Every: time.Second, RingBufferBytes: 16 << 20})
	})
	t.Run("continuous", func(t *testing.T) {
		testAgentProfiles(t, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Second, RingBufferBytes: 16 << 20})
	})
}

func testAgentProfiles(t *testing.T, o *Options) {
	b := testutil.Sim(t)
	base := startAgent(t, o)
	get := func(path string) (int, []byte) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	if code, _ := get("/profile"); code != http.StatusServiceUnavailable {
		t.Errorf("/profile before any window ended: %d, want 503", code)
	}
	// A workload that runs until killed, so that some window sees it with
	// its files hooked (each window is a fresh session), however slow the
	// agent is to start (a 200,000-launch one was over before the first
	// window on a loaded machine).
	cmd := exec.Command(b.Workload, "--scenario", "launches", "--iters", "100000000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := strconv.Itoa(cmd.Process.Pid)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the workload did not show in a window's profile within a minute")
		}
		code, body := get("/profile?pid=" + pid)
		if code != http.StatusOK {
			continue
		}
		p, err := profile.ParseData(body)
		if err != nil {
			t.Fatalf("/profile?pid: %v", err)
		}
		if len(p.Sample) == 0 {
			t.Fatal("empty profile served")
		}
		for _, s := range p.Sample {
			if s.Label["pid"][0] != pid {
				t.Fatalf("sample of pid %v in the profile of %s", s.Label["pid"], pid)
			}
		}
		break
	}
	if code, _ := get("/profile?pid=nonsense"); code != http.StatusBadRequest {
		t.Errorf("/profile?pid=nonsense: %d, want 400", code)
	}
}

// TestAgentProfileStores: each window's profile of a workload lands in
// --profiles-dir and at a Pyroscope-compatible receiver (--push), parsing
// as pprof and labelled with the workload's comm, and its pid only with
// --pid-label (the file's name has it either way).
func TestAgentProfileStores(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	t.Run("windows", func(t *testing.T) {
		testAgentProfileStores(t, &Options{Window: time.Second, Every: time.Second})
	})
	// --continuous: stored from a goroutine of its own at each cut.
	t.Run("continuous", func(t *testing.T) {
		testAgentProfileStores(t, &Options{Continuous: true, Every: time.Second, PIDLabel: true})
	})
}

func testAgentProfileStores(t *testing.T, o *Options) {
	b := testutil.Sim(t)
	var mu sync.Mutex
	pushed := map[string]*profile.Profile{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, _, err := r.FormFile("profile")
		if err != nil || r.URL.Path != "/ingest" || r.URL.Query().Get("format") != "pprof" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		data, _ := io.ReadAll(f)
		p, err := profile.ParseData(data)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		pushed[r.URL.Query().Get("name")] = p
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close) // after the agent's cleanup: its last window is pushed here
	dir := t.TempDir()
	o.Listen, o.RingBufferBytes, o.ProfilesDir, o.ProfilesMaxBytes, o.Push = "127.0.0.1:0", 16<<20, dir, 1<<20, rcv.URL
	startAgent(t, o)
	cmd := exec.Command(b.Workload, "--scenario", "launches", "--iters", "100000000") // runs until killed: see testAgentProfiles
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := strconv.Itoa(cmd.Process.Pid)
	name, samplePID := "cudatap.cuda{comm=workload,service_name=workload}", ""
	if o.PIDLabel {
		name, samplePID = "cudatap.cuda{pid="+pid+",comm=workload,service_name=workload}", pid
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no profile of pid %s pushed and written within a minute (pushed %d)", pid, len(pushed))
		}
		mu.Lock()
		p := pushed[name]
		mu.Unlock()
		files, _ := filepath.Glob(filepath.Join(dir, "cudatap-*-"+pid+"-workload.pb.gz"))
		if p == nil || len(files) == 0 {
			continue
		}
		if len(p.Sample) == 0 || strings.Join(p.Sample[0].Label["pid"], "") != samplePID || p.Sample[0].Label["comm"][0] != "workload" {
			t.Fatalf("pushed profile: %v", p)
		}
		f, err := os.Open(files[0])
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if fp, err := profile.Parse(f); err != nil || len(fp.Sample) == 0 {
			t.Fatalf("%s: %v", files[0], err)
		}
		break
	}
}

// TestAgentCapture: POST /capture traces one process for the duration asked
// and answers with its Chrome trace; bad requests are refused.
func TestAgentCapture(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	// With NVML sampling on: absent on a machine without a GPU, the agent
	// runs on and says so.
	base := startAgent(t, &Options{Listen: "127.0.0.1:0", Window: time.Second, Every: time.Second, RingBufferBytes: 16 << 20, NVMLInterval: time.Second})
	if resp, err := http.Get(base + "/metrics"); err != nil {
		t.Fatal(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "\ncudatap_agent_nvml_up{") {
			t.Error("/metrics has no cudatap_agent_nvml_up")
		}
	}
	// Started and waiting (its CUDA libraries mapped) before it is
	// captured, then let go; it launches until killed (200,000 launches
	// were over, under the agent's probes, before the capture began).
	cmd := exec.Command(b.Workload, "--wait-stdin", "--scenario", "launches", "--iters", "100000000") // runs until killed
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if l, _ := bufio.NewReader(stdout).ReadString('\n'); !strings.HasPrefix(l, "ready") {
		t.Fatalf("workload: %q", l)
	}
	go io.Copy(io.Discard, stdout)
	io.WriteString(stdin, "go\n")
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := strconv.Itoa(cmd.Process.Pid)
	post := func(query string) (int, []byte) {
		resp, err := http.Post(base+"/capture?"+query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	for q, want := range map[string]int{"pid=abc": 400, "pid=" + pid + "&duration=1h": 400, "pid=999999999": 404, "pid=" + strconv.Itoa(os.Getpid()) + "&duration=100ms": 422} {
		if code, body := post(q); code != want {
			t.Errorf("POST /capture?%s: %d %s, want %d", q, code, body, want)
		}
	}
	if resp, err := http.Get(base + "/capture?pid=" + pid); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /capture: %v %v, want 405", resp.StatusCode, err)
	}
	code, body := post("pid=" + pid + "&duration=1s")
	if code != http.StatusOK {
		t.Fatalf("capture: %d %s", code, body)
	}
	var trace struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(body, &trace); err != nil {
		t.Fatalf("capture is not a Chrome trace: %v", err)
	}
	launches := 0
	for _, ev := range trace.TraceEvents {
		if ev["ph"] == "X" && ev["name"] == "cudaLaunchKernel" && fmt.Sprint(ev["pid"]) == pid {
			launches++
		}
	}
	if launches == 0 {
		t.Errorf("the capture of pid %s has no launch of it (%d events)", pid, len(trace.TraceEvents))
	}
}

// TestAgentSamplesBusyProcess: a process that calls more than --max-cpu
// lets the agent trace is traced in fewer windows (a probability below 1
// in /metrics, windows sat out counted), instead of losing calls inside a
// window.
func TestAgentSamplesBusyProcess(t *testing.T) {
	testutil.RequireRoot(t)
	// Every launch a record (the agent's cost per call is what is budgeted):
	// 3% of a core is 15 ms a 500 ms cycle (30 ms a 1 s interval), far less
	// than tracing a workload that launches flat out costs.
	t.Run("windows", func(t *testing.T) {
		testAgentSamples(t, &Options{Listen: "127.0.0.1:0", Window: 500 * time.Millisecond, Every: 500 * time.Millisecond, PIDLabel: true,
			RingBufferBytes: 16 << 20, RecordLaunches: true, MaxCPU: 0.03})
	})
	// --continuous: the same, interval by interval, in one session (the
	// process sits an interval out through its flag in BPF).
	t.Run("continuous", func(t *testing.T) {
		testAgentSamples(t, &Options{Listen: "127.0.0.1:0", Continuous: true, Every: time.Second, PIDLabel: true,
			RingBufferBytes: 16 << 20, RecordLaunches: true, MaxCPU: 0.03})
	})
}

func testAgentSamples(t *testing.T, o *Options) {
	b := testutil.Sim(t)
	base := startAgent(t, o)
	cmd := exec.Command(b.Workload, "--scenario", "launches", "--iters", "100000000") // runs until killed
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := `pid="` + strconv.Itoa(cmd.Process.Pid) + `"`
	value := func(body, metric string, labels ...string) float64 {
		return metricValue(body, metric, append(labels, pid)...)
	}
	// A window sat out is followed by one traced at p = 1 when nothing else
	// calls (the window cost nothing): wait for a scrape that shows both a
	// window sat out and the probability of the window now drawn below 1.
	var body string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the busy process sat no window out with a probability in (0, 1) within 2 minutes:\n%s", body)
		}
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		p := value(body, "cudatap_process_sample_probability")
		if value(body, "cudatap_process_windows_total", `traced="false"`) >= 1 && p > 0 && p < 1 {
			break
		}
	}
	if n := value(body, "cudatap_process_windows_total", `traced="true"`); n < 1 {
		t.Errorf("traced in %v windows, want at least the first", n)
	}
}

// metricValue is the value of the first series of metric in a /metrics
// text whose line holds every one of labels (`name="value"`), -1 if none.
func metricValue(body, metric string, labels ...string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, metric+"{") {
			continue
		}
		match := true
		for _, lb := range labels {
			match = match && strings.Contains(l, lb)
		}
		if match {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			return v
		}
	}
	return -1
}
