package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export/metrics"
	"github.com/cudatap/cudatap/export/pprofout"
	"github.com/cudatap/cudatap/export/profilestore"
	"github.com/cudatap/cudatap/internal/kube"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

type agentOptions struct {
	listen, token string
	tokenFile     string
	container     string
	window, every time.Duration
	continuous    bool
	ringBuffer    int
	profilesDir   string
	profilesMax   int64
	push          string
	gpuTimes      bool
	maxCPU        float64
	nvml          time.Duration
	perLaunch     bool
	launchTimes   bool
	kubelet       string
	maxRequests   int
	captureMax    int64
}

func newAgentCmd(g *globalOptions) *cobra.Command {
	o := &agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Trace every CUDA process of the node, always on, and serve Prometheus metrics",
		Long: `agent traces every CUDA process on the node (or of one container) through shared probes,
one link set per CUDA library file, and serves what it finds as Prometheus metrics at /metrics:
calls and launches, synchronization waits by kind, copy bytes by direction and host memory, NCCL
bytes and operations, CUDA API time, per process (pid, comm, container), cumulative.

It traces in windows (--window, once every --every) or without gaps (--continuous). Launches are
counted in BPF maps per process, API and stream (--launch-times also times them there). After
each window (under --continuous, every --every), each process's profile (pprof, labelled pid,
comm, container, pod) is served at /profile, written to --profiles-dir (bounded by
--profiles-max-bytes) and pushed to --push. Its own CPU time stays under --max-cpu: when tracing
every process in every window would cost more, the busiest are traced in fewer windows (under
--continuous, intervals), each with a probability p of its own (quiet processes keep p = 1) and
its counts in the windows it is traced in weighted 1/p, so totals stay unbiased
(cudatap_process_sample_probability, cudatap_process_windows_total). It listens on
127.0.0.1 by default; to listen beyond loopback it needs --token, which every request but
/healthz must then carry as "Authorization: Bearer TOKEN".

POST /capture?pid=N&duration=D (at most 60s) traces one process and answers with its Chrome
trace; it stops early when its recording reaches --capture-max-bytes, and the trace then says it
was truncated (as does the X-Cudatap-Truncated header). Requests are bounded: --max-requests
/metrics and /profile answers at a time, the others 503 at once; /metrics is rendered at most
once a second; answers are gzip-compressed for clients that accept it.`,
		Example: `  sudo cudatap agent --continuous
  sudo cudatap agent --window 10s --every 60s --listen 0.0.0.0:9400 --token "$(cat /etc/cudatap/token)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), g, o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:9400", "address to serve /metrics and /healthz on")
	f.StringVar(&o.token, "token", "", "bearer token every request but /healthz must carry (required to listen beyond loopback)")
	f.StringVar(&o.tokenFile, "token-file", "", "read the bearer token from this file (a mounted secret: not visible in the process list)")
	f.StringVar(&o.container, "container", "", "trace only this container's processes (id prefix or cgroup name)")
	f.DurationVar(&o.window, "window", 10*time.Second, "how long each tracing window lasts")
	f.DurationVar(&o.every, "every", 60*time.Second, "how often a window starts (with --continuous: how often a profile is cut and exited processes are forgotten)")
	f.BoolVar(&o.continuous, "continuous", false, "trace without gaps (--window is ignored; a profile every --every)")
	f.IntVar(&o.ringBuffer, "ring-buffer-size", 16<<20, "BPF ring buffer bytes")
	f.StringVar(&o.profilesDir, "profiles-dir", "", "write each window's (interval's) profile of each process (pprof) into this directory")
	f.Int64Var(&o.profilesMax, "profiles-max-bytes", 256<<20, "with --profiles-dir: keep at most this many bytes of profiles, removing the oldest")
	f.BoolVar(&o.perLaunch, "record-launches", false, "record every launch through the ring buffer (for profiles with launches) instead of counting them in BPF maps")
	f.BoolVar(&o.launchTimes, "launch-times", false, "also time every launch in BPF (log2 histograms per process and API, in cudatap_cuda_api_seconds): a return probe per launch, a second trap")
	f.DurationVar(&o.nvml, "nvml-interval", time.Second, "GPU sampling period through NVML for the device series (0: off)")
	f.Float64Var(&o.maxCPU, "max-cpu", 0.01, "keep the agent's own CPU time under this share of one core: the busiest processes are traced in fewer windows (--continuous: intervals of --every), each with a probability p, its counts weighted 1/p; in window mode the pause between windows lengthens when that is not enough (0: no budget)")
	f.BoolVar(&o.gpuTimes, "gpu-times", false, "let POST /capture measure GPU times with the target's CUPTI (record --gpu-times)")
	f.Int64Var(&o.captureMax, "capture-max-bytes", defaultCaptureBytes, "POST /capture stops when its recording (a file without a name in $TMPDIR) reaches this many bytes; the trace then says it was truncated")
	f.IntVar(&o.maxRequests, "max-requests", defaultMaxRequests, "answer at most this many /metrics and /profile requests at once; the others get 503 at once (counted in cudatap_agent_requests_rejected_total)")
	f.StringVar(&o.kubelet, "kubelet-socket", kube.DefaultSocket, "the kubelet's pod-resources socket, for the pod, namespace and container labels (absent: labels from each process's own view; \"\": never asked)")
	f.StringVar(&o.push, "push", "", "push each window's (interval's) profile of each process to this Pyroscope-compatible server (http://HOST:PORT; POST /ingest)")
	return cmd
}

// agentPollInterval: the agent reads the ring buffer every 100 ms, not
// every 20 ms (nothing it serves is fresher than a second; a filling ring
// still wakes it at once): a fifth of the idle wakeups.
const agentPollInterval = 100 * time.Millisecond

// checkListen refuses to serve beyond loopback without a token: the metrics
// name every CUDA process of the node.
func checkListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %v (want HOST:PORT, e.g. 127.0.0.1:9400)", addr, err)
	}
	if token != "" || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("refusing to serve on %s without --token: the metrics name every CUDA process of the node; pass --token, or listen on 127.0.0.1", addr)
}

// agentStats are the agent's own series. Events and losses are live (the
// session's once-a-second status, added to the windows before); the rest
// are known when a window ends.
type agentStats struct {
	windows, orphans, attachFailures prometheus.Counter
	// Of the windows that ended, and of the current one.
	eventsDone, eventsNow, lostDone, lostNow atomic.Uint64
}

func newAgentStats(reg prometheus.Registerer) *agentStats {
	s := &agentStats{}
	c := func(name, help string) prometheus.Counter {
		m := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		reg.MustRegister(m)
		return m
	}
	live := func(name, help string, done, now *atomic.Uint64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(done.Load() + now.Load()) }))
	}
	s.windows = c("cudatap_agent_windows_total", "Tracing windows completed.")
	s.orphans = c("cudatap_agent_orphan_returns_total", "Returns seen without their entry (windows that ended).")
	s.attachFailures = c("cudatap_agent_attach_failures_total", "Probe sets that could not be attached (windows that ended).")
	live("cudatap_agent_events_total", "Records received from the probes.", &s.eventsDone, &s.eventsNow)
	live("cudatap_agent_dropped_events_total", "Calls traced but lost (ring buffer full, entry table full, decode errors, skipped programs).", &s.lostDone, &s.lostNow)
	return s
}

// status follows the current window's counts.
func (s *agentStats) status(st tracer.Status) {
	s.eventsNow.Store(st.Events)
	s.lostNow.Store(st.Lost)
}

// windowEnded folds a window's final counts into the totals.
func (s *agentStats) windowEnded(d model.Drops) {
	s.eventsNow.Store(0)
	s.lostNow.Store(0)
	s.eventsDone.Add(d.Received)
	s.lostDone.Add(d.Lost())
	s.windows.Inc()
	s.orphans.Add(float64(d.OrphanReturns))
	s.attachFailures.Add(float64(d.AttachFailures))
}

func runAgent(ctx context.Context, g *globalOptions, o *agentOptions, stderr io.Writer) error {
	if o.tokenFile != "" {
		if o.token != "" {
			return errors.New("--token and --token-file: give one")
		}
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		if o.token = strings.TrimSpace(string(b)); o.token == "" {
			return fmt.Errorf("--token-file %s is empty", o.tokenFile)
		}
	}
	if err := checkListen(o.listen, o.token); err != nil {
		return err
	}
	if o.continuous && o.every <= 0 {
		return fmt.Errorf("--every %v: with --continuous it says how often a profile is cut; want a positive duration, e.g. 60s", o.every)
	}
	if !o.continuous && (o.window <= 0 || o.every < o.window) {
		return fmt.Errorf("--window %v --every %v: want 0 < window <= every (or --continuous)", o.window, o.every)
	}
	if o.launchTimes && o.perLaunch {
		return errors.New("--launch-times times the launches counted in BPF; with --record-launches none is: drop one of the two")
	}
	if o.maxRequests < 1 {
		return fmt.Errorf("--max-requests %d: want at least 1 (requests answered at once)", o.maxRequests)
	}
	if o.captureMax < minCaptureBytes {
		return fmt.Errorf("--capture-max-bytes %d: want at least %d (1 MiB), e.g. 33554432 (32 MiB)", o.captureMax, minCaptureBytes)
	}
	reg := prometheus.NewRegistry()
	coll := metrics.NewCollector()
	gpus := metrics.NewGPUCollector()
	reg.MustRegister(coll, gpus, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "cudatap_agent"}),
		collectors.NewGoCollector())
	if o.nvml > 0 {
		gctx, stopGPUs := context.WithCancel(ctx)
		defer stopGPUs()
		go watchGPUs(gctx, gpus, o.nvml, g.logger())
	}
	pods := newPodLabels(ctx, o.kubelet, g.logger())
	coll.SetLabeler(pods.process)
	gpus.SetLabelers(pods.process, pods.device)
	stats := newAgentStats(reg)
	if o.maxCPU < 0 {
		return fmt.Errorf("--max-cpu %v: want a share of one core, e.g. 0.01", o.maxCPU)
	}
	budget := newCPUBudget(o.maxCPU, o.every, reg)
	sampler := newProcessSampler(uint64(time.Now().UnixNano()))
	stores, err := newProfileStores(o, reg)
	if err != nil {
		return err
	}
	defer stores.wait()

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another agent running? choose another port with --listen)", o.listen, err)
	}
	gate := newRequestGate(o.maxRequests, reg)
	mux := http.NewServeMux()
	mux.Handle("/metrics", withToken(o.token, gate.limit("/metrics", &metricsPage{g: reg, max: maxAnswerBytes})))
	var profiles lastProfile
	mux.Handle("/profile", withToken(o.token, gate.limit("/profile", &profiles)))
	mux.Handle("/capture", withToken(o.token, &capturer{gpuTimes: o.gpuTimes, maxBytes: o.captureMax,
		busy: gate.rejected.WithLabelValues("/capture"), log: g.logger()}))
	// Ready once the first window's probes are live (a readiness probe).
	// It says nothing but that, so it needs no token: Kubernetes probes
	// cannot carry a secret header.
	var ready atomic.Bool
	mux.Handle("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "attaching", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	fmt.Fprintf(stderr, "cudatap agent: metrics on http://%s/metrics\n", ln.Addr())

	for {
		window := o.window
		if o.continuous {
			window = 0 // until stopped
		}
		start := time.Now()
		budget.windowStarts()
		var sampledOut map[int]uint64
		if !o.continuous {
			coll.SetWeight(budget.sampleWeight(o.window))
			sampledOut = drawWindow(sampler, coll, g.logger())
		}
		prof := pprofout.NewCollector()
		// --continuous: every --every all the same, a profile, the exited
		// processes forgotten (memory follows the live ones), and, under
		// --max-cpu, who sits the next interval out.
		var cut time.Duration
		var onCut func(*model.Result)
		var resample func() map[int]uint64
		from := start // what the next profile covers
		var storing sync.Mutex
		var stored sync.WaitGroup
		if o.continuous {
			cut = o.every
			// On the reader goroutine, the model locked: build the
			// profile there, and leave labels, files and pushes to a
			// goroutine (one at a time: a cut that finds the last still
			// storing serves its profile but does not store it, counted).
			onCut = func(r *model.Result) {
				p, err := pprofout.Build(r, prof, pprofout.Options{})
				prof.Reset()
				until := time.Now()
				coll.CutAggregates() // the interval's launches, with its weights
				if err == nil {
					profiles.set(p)
					procs := make([]*model.Process, len(r.Processes))
					for i, mp := range r.Processes {
						procs[i] = &model.Process{PID: mp.PID, Info: mp.Info} // what labels need
					}
					if storing.TryLock() {
						stored.Add(1)
						go func(from time.Time) {
							defer stored.Done()
							defer storing.Unlock()
							stores.window(ctx, p, procs, pods.profile, from, until, g.logger())
							coll.ForgetExited(procfs.Alive, until)
						}(from)
					} else {
						stores.skip(p)
					}
				}
				from = until
			}
			if o.maxCPU > 0 {
				began := start
				resample = func() map[int]uint64 {
					for _, pid := range sampler.windowEnded(budget.spent(), budget.perCycle(), processStart) {
						coll.SetSampling(pid, 1, true)
					}
					budget.intervalEnded(time.Since(began))
					began = time.Now()
					budget.windowStarts()
					return drawWindow(sampler, coll, g.logger())
				}
			}
		}
		sinks := model.Sinks{coll, prof}
		if !o.continuous || resample != nil {
			sinks = append(sinks, sampler) // it learns each window's (interval's) calls
		}
		out, err := tracer.Run(ctx, tracer.Config{All: o.container == "", Container: o.container, Duration: window,
			Stacks: probe.StacksNone, RingBufferBytes: o.ringBuffer, NVMLInterval: -1, NameWindow: -1,
			Sink: sinks, Logger: g.logger(), OnAttached: func(int) { ready.Store(true) }, OnStatus: stats.status,
			AggregateLaunches: !o.perLaunch, LaunchTimes: o.launchTimes, OnAggregates: coll.SetAggregates, SampledOut: sampledOut,
			PollInterval: agentPollInterval, Cut: cut, OnCut: onCut, Resample: resample})
		coll.FoldAggregates()
		if err != nil {
			return err
		}
		if !o.continuous {
			for _, pid := range sampler.windowEnded(budget.spent(), budget.perCycle(), processStart) {
				coll.SetSampling(pid, 1, true)
			}
		}
		stored.Wait()
		if p, err := pprofout.Build(out.Result, prof, pprofout.Options{}); err == nil {
			profiles.set(p)
			stores.window(ctx, p, out.Result.Processes, pods.profile, from, time.Now(), g.logger())
		}
		stats.windowEnded(out.Result.Drops)
		coll.ForgetExited(procfs.Alive, time.Now())
		if ctx.Err() != nil || o.continuous {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving metrics: %w", err)
			}
			return nil
		case <-time.After(time.Until(start.Add(budget.next(time.Since(start))))):
		}
	}
}

// podLabels names processes and GPUs for the series and profiles: comm
// from /proc, pod, namespace and container through the kubelet's
// pod-resources API and the process's own view (internal/kube).
type podLabels struct{ r *kube.Resolver }

func newPodLabels(ctx context.Context, socket string, log *slog.Logger) podLabels {
	r := kube.NewResolver(socket, log)
	if socket != "" {
		go r.Watch(ctx)
	}
	return podLabels{r}
}

func (p podLabels) process(pid uint32, gpus ...string) metrics.ProcLabels {
	l := p.r.Process(pid, gpus...)
	comm, _ := procfs.Comm(int(pid))
	return metrics.ProcLabels{Comm: comm, Container: l.Container, Pod: l.Pod, Namespace: l.Namespace}
}

func (p podLabels) device(uuid string) metrics.ProcLabels {
	l := p.r.Device(uuid)
	return metrics.ProcLabels{Container: l.Container, Pod: l.Pod, Namespace: l.Namespace}
}

// profile labels a window's profile of a process: what the model knew of
// it, with the pod's names where they are found.
func (p podLabels) profile(mp *model.Process) profilestore.Labels {
	l := profilestore.LabelsOf(mp)
	if k := p.r.Process(mp.PID); k != (kube.Labels{}) {
		l.Container, l.Pod, l.Namespace = k.Container, k.Pod, k.Namespace
	}
	return l
}
