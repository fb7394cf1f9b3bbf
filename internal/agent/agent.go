// Package agent is cudatap's fleet agent (`cudatap agent`): it traces every
// CUDA process of a node, always on, and serves what it finds as Prometheus
// metrics (/metrics), per-process profiles (/profile, a directory, a push
// endpoint) and on-demand Chrome traces (POST /capture).
//
// Its parts, one file each: serving and its bounds (serve.go), the capture
// (capture.go), the tracing cycles, in windows or continuous (cycle.go),
// the CPU budget (budget.go) and per-process sampling (sampling.go) that
// keep the agent within --max-cpu, the profiles' stores and pushes
// (profiles.go), and the GPU series and pod names (gpu.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cudatap/cudatap/export/metrics"
	"github.com/cudatap/cudatap/internal/flight"
)

// Defaults of the options the command line leaves out.
const (
	// DefaultListen's port, 9401, is not dcgm-exporter's 9400: GPU nodes
	// run both.
	DefaultListen      = "127.0.0.1:9401"
	DefaultWindow      = 10 * time.Second
	DefaultEvery       = 60 * time.Second
	DefaultRingBuffer  = 16 << 20
	DefaultProfilesMax = 256 << 20
	DefaultMaxCPU      = 0.01
	DefaultNVML        = time.Second
	// DefaultMaxRequests: Prometheus servers scraping (two for high
	// availability), and a person asking.
	DefaultMaxRequests = 4
	// DefaultCaptureMaxBytes is half the /tmp the DaemonSet gives the agent
	// (deploy/daemonset.yaml). A launch records about 200 bytes (its
	// runtime and driver calls: 19.9 MB for 100,000, record -o x.cudatap
	// -- workload --scenario launches --iters 100000), so 32 MiB holds
	// 170,000 launches: 17 s of a process that launches 10,000 kernels a
	// second.
	DefaultCaptureMaxBytes = 32 << 20
	// MinCaptureMaxBytes: the smallest CaptureMaxBytes (the recording is
	// written a megabyte at a time).
	MinCaptureMaxBytes = 1 << 20
)

// Options configure an agent; each field is the flag of `cudatap agent`
// named beside it, and the errors New returns name the flags.
type Options struct {
	Listen    string // --listen HOST:PORT
	Token     string // --token: required beyond loopback
	TokenFile string `json:",omitempty"` // --token-file: the token from a file (a mounted secret)
	Container string // --container: only this container's processes

	Window     time.Duration // --window: each window's length
	Every      time.Duration // --every: how often a window starts (Continuous: a profile is cut)
	Continuous bool          // --continuous: trace without gaps

	RingBufferBytes  int    // --ring-buffer-size
	ProfilesDir      string // --profiles-dir
	ProfilesMaxBytes int64  // --profiles-max-bytes
	Push             string // --push http://HOST:PORT

	RecordLaunches bool          // --record-launches: a ring record per launch, not BPF counts
	LaunchTimes    bool          // --launch-times: time every launch in BPF
	MaxCPU         float64       // --max-cpu: a share of one core (0: no budget)
	NVMLInterval   time.Duration // --nvml-interval (0: no GPU series)
	GPUTimes       bool          // --gpu-times: /capture measures GPU times
	KubeletSocket  string        // --kubelet-socket ("": never asked)

	MaxRequests     int   // --max-requests
	CaptureMaxBytes int64 // --capture-max-bytes

	// The flight recorder (flight.go; 0: off): each process's last
	// seconds kept (--flight-recorder) within FlightMaxBytes each
	// (--flight-max-bytes), all their windows within FlightHostMaxBytes
	// (--flight-host-max-bytes), dumped into DumpsDir (--dumps-dir) bounded by
	// DumpsMaxBytes (--dumps-max-bytes) when a trigger fires; the
	// triggers' thresholds (--flight-sync, --flight-nccl) and cool-down
	// (--flight-cooldown). It needs --continuous, and every launch
	// recorded (not counted in BPF), with stacks on the calls that may
	// block (as record's default).
	FlightRecorder     time.Duration
	FlightMaxBytes     int64
	FlightHostMaxBytes int64
	DumpsDir           string
	DumpsMaxBytes      int64
	FlightSync         time.Duration
	FlightNCCL         time.Duration
	FlightCooldown     time.Duration

	// The series: a pid label on each process's (--pid-label; else the
	// processes alike share theirs), the API time histograms
	// (--histograms; LaunchTimes implies them), how many streams of a
	// process are labelled (--max-streams; 0: metrics.DefaultMaxStreams),
	// and the node every series is labelled with (--node-name, Hostname;
	// empty: $NODE_NAME, else the host name).
	PIDLabel   bool
	Histograms bool
	MaxStreams int
	Node       string

	// Version names the build in the traces /capture answers with.
	Version string
	// Logger takes the agent's logs (nil: discarded).
	Logger *slog.Logger `json:"-"`
}

// Agent is a fleet agent whose port is open: Run traces and serves.
type Agent struct {
	o   Options
	log *slog.Logger
	ln  net.Listener

	reg      *prometheus.Registry
	series   prometheus.Registerer // reg, every series labelled Hostname
	coll     *metrics.Collector
	gpus     *metrics.GPUCollector
	stats    *stats
	budget   *cpuBudget
	sampler  *processSampler
	stores   *profileStores
	profiles lastProfile
	flight   *flight.Recorder // nil: off
	handler  http.Handler
	// ready: the first window's probes are live (/healthz).
	ready atomic.Bool
}

// New checks o and opens the agent's port; Run does the rest.
func New(o Options) (*Agent, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.Node == "" {
		if o.Node = os.Getenv("NODE_NAME"); o.Node == "" {
			o.Node, _ = os.Hostname()
		}
	}
	a := &Agent{o: o, log: o.Logger, reg: prometheus.NewRegistry(),
		coll:    metrics.NewCollector(metrics.Options{PID: o.PIDLabel, Histograms: o.Histograms || o.LaunchTimes, MaxStreams: o.MaxStreams}),
		gpus:    metrics.NewGPUCollector(metrics.GPUOptions{Host: o.Node, PID: o.PIDLabel}),
		sampler: newProcessSampler(uint64(time.Now().UnixNano()))}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	// Every series is labelled with the node (the GPU collector's carry
	// it already, as dcgm-exporter's do): a dashboard filters by node
	// whatever the scrape configuration.
	a.series = prometheus.WrapRegistererWith(prometheus.Labels{"Hostname": o.Node}, a.reg)
	a.reg.MustRegister(a.gpus)
	a.series.MustRegister(a.coll, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "cudatap_agent"}),
		collectors.NewGoCollector())
	a.stats = newStats(a.series)
	a.budget = newCPUBudget(o.MaxCPU, o.Every, a.series)
	var err error
	if a.stores, err = newProfileStores(o.ProfilesDir, o.ProfilesMaxBytes, o.Push, o.PIDLabel, a.series, a.log); err != nil {
		return nil, err
	}
	if err := a.newFlight(); err != nil {
		return nil, err
	}
	a.handler = a.routes()
	if a.ln, err = net.Listen("tcp", o.Listen); err != nil {
		if a.flight != nil {
			a.flight.Close()
		}
		return nil, fmt.Errorf("listen on %s: %w (is another agent running? choose another port with --listen)", o.Listen, err)
	}
	return a, nil
}

// Addr is the address the agent serves on (the port chosen when --listen
// asked for port 0).
func (a *Agent) Addr() net.Addr { return a.ln.Addr() }

// Run traces and serves until ctx ends (or serving fails), then detaches,
// hands the last profiles to their stores (pushes get a bounded time to
// finish: a SIGTERM does not drop them) and closes the port.
func (a *Agent) Run(ctx context.Context) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer a.stores.close()
	if a.flight != nil {
		defer a.flight.Close() // after the session: the dumps due are written
		a.dumpOnSIGUSR2(ctx)
	}
	srv := &http.Server{Handler: a.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(a.ln); !errors.Is(err, http.ErrServerClosed) {
			stop(fmt.Errorf("serving metrics: %w", err))
		}
	}()
	defer func() {
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	if a.o.NVMLInterval > 0 {
		go watchGPUs(ctx, a.gpus, a.flight, a.o.NVMLInterval, a.log)
	} else if a.flight != nil {
		a.log.Warn("--nvml-interval 0: the flight recorder hears of no Xid or throttle")
	}
	pods := newPodLabels(ctx, a.o.KubeletSocket, a.log)
	a.coll.SetLabeler(pods.process)
	a.gpus.SetLabelers(pods.process, pods.device)
	a.stores.name = pods.profile

	var err error
	if a.o.Continuous {
		err = a.runContinuous(ctx)
	} else {
		err = a.runWindows(ctx)
	}
	if err == nil {
		err = context.Cause(ctx)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = nil // stopped, as asked
		}
	}
	return err
}

// check refuses options the agent cannot run with, saying which flag to
// change; it reads the token file.
func (o *Options) check() error {
	if o.TokenFile != "" {
		if o.Token != "" {
			return errors.New("--token and --token-file: give one")
		}
		b, err := os.ReadFile(o.TokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		if o.Token = strings.TrimSpace(string(b)); o.Token == "" {
			return fmt.Errorf("--token-file %s is empty", o.TokenFile)
		}
	}
	if err := checkListen(o.Listen, o.Token); err != nil {
		return err
	}
	switch {
	case o.Continuous && o.Every <= 0:
		return fmt.Errorf("--every %v: with --continuous it says how often a profile is cut; want a positive duration, e.g. 60s", o.Every)
	case !o.Continuous && (o.Window <= 0 || o.Every < o.Window):
		return fmt.Errorf("--window %v --every %v: want 0 < window <= every (or --continuous)", o.Window, o.Every)
	case o.LaunchTimes && o.RecordLaunches:
		return errors.New("--launch-times times the launches counted in BPF; with --record-launches none is: drop one of the two")
	case o.MaxRequests < 1:
		return fmt.Errorf("--max-requests %d: want at least 1 (requests answered at once)", o.MaxRequests)
	case o.CaptureMaxBytes < MinCaptureMaxBytes:
		return fmt.Errorf("--capture-max-bytes %d: want at least %d (1 MiB), e.g. 33554432 (32 MiB)", o.CaptureMaxBytes, MinCaptureMaxBytes)
	case o.MaxCPU < 0:
		return fmt.Errorf("--max-cpu %v: want a share of one core, e.g. 0.01", o.MaxCPU)
	case o.MaxStreams < 0:
		return fmt.Errorf("--max-streams %d: want how many streams of a process to label, e.g. %d", o.MaxStreams, metrics.DefaultMaxStreams)
	case o.FlightRecorder < 0:
		return fmt.Errorf("--flight-recorder %v: want how much of each process's activity to keep, e.g. 30s (0: off)", o.FlightRecorder)
	case o.FlightRecorder > 0 && !o.Continuous:
		return errors.New("--flight-recorder keeps every process's last seconds: it needs --continuous (windows leave gaps)")
	case o.FlightRecorder > 0 && o.MaxCPU > 0:
		return errors.New("--flight-recorder keeps every call of every process; --max-cpu would leave processes out of the trace: give --max-cpu 0")
	case o.FlightRecorder > 0 && o.LaunchTimes:
		return errors.New("--launch-times times the launches counted in BPF; with --flight-recorder each is recorded: drop --launch-times")
	}
	return nil
}

// checkListen refuses to serve beyond loopback without a token: the metrics
// name every CUDA process of the node.
func checkListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %v (want HOST:PORT, e.g. %s)", addr, err, DefaultListen)
	}
	if token != "" || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("refusing to serve on %s without --token: the metrics name every CUDA process of the node; pass --token, or listen on 127.0.0.1", addr)
}
