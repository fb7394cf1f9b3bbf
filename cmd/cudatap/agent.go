package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export/metrics"
	"github.com/cudatap/cudatap/internal/agent"
	"github.com/cudatap/cudatap/internal/kube"
)

func newAgentCmd(g *globalOptions) *cobra.Command {
	o := agent.Options{}
	var fl flightFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Trace every CUDA process of the node, always on, and serve Prometheus metrics",
		Long: `agent traces every CUDA process on the node (or of one container) through shared probes,
one link set per CUDA library file, and serves what it finds as Prometheus metrics at /metrics:
calls and launches (by stream: 0 the legacy default stream, then 1, 2, ... in the order a process
first used them), synchronization waits by kind, copy bytes by direction and host memory, NCCL
bytes and operations, cumulative, per process group (comm, container, pod, namespace: the
processes alike share their series; --pid-label gives each process its own), every series
labelled with the node (Hostname). API time histograms only with --histograms. docs/agent.md
lists the series, their labels and how many a process can have.

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
once a second; answers are gzip-compressed for clients that accept it.

With --flight-recorder DURATION it keeps the last DURATION of every traced process's calls in
memory (--flight-max-bytes each; every launch recorded, stacks on the calls that may block: the
cost of record) and writes them to --dumps-dir as a .cudatap with its HTML report when something
goes wrong: an allocation fails for want of memory, NVML reports an Xid or a throttle on the
process's GPU, NCCL ranks stop arriving, a synchronization blocks past --flight-sync, the process
dies of a signal; and on demand: POST /dump?pid=N (cudatap dump PID), SIGUSR2 (every process).
It implies --continuous and --max-cpu 0. docs/flight-recorder.md says what a dump holds.`,
		Example: `  sudo cudatap agent --continuous
  sudo cudatap agent --window 10s --every 60s --listen 0.0.0.0:9401 --token "$(cat /etc/cudatap/token)"
  sudo cudatap agent --flight-recorder 30s --dumps-dir /var/tmp/cudatap-dumps`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Logger, o.Version = g.logger(), version
			if err := fl.check(cmd); err != nil {
				return err
			}
			if fl.window > 0 {
				// Every process's last seconds: no gaps, no process left out.
				if !cmd.Flags().Changed("continuous") && !cmd.Flags().Changed("window") {
					o.Continuous = true
				}
				if !cmd.Flags().Changed("max-cpu") {
					o.MaxCPU = 0
				}
				o.FlightRecorder, o.FlightMaxBytes, o.DumpsDir, o.DumpsMaxBytes = fl.window, fl.maxBytes, fl.dir, fl.dirMaxBytes
				o.FlightHostMaxBytes = fl.hostMaxBytes
				o.FlightSync, o.FlightNCCL, o.FlightCooldown = fl.sync, fl.nccl, fl.cooldown
			}
			a, err := agent.New(o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "cudatap agent: metrics on http://%s/metrics\n", a.Addr())
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Listen, "listen", agent.DefaultListen, "address to serve /metrics, /profile, POST /capture, POST /dump and /healthz on")
	f.StringVar(&o.Token, "token", "", "bearer token every request but /healthz must carry (required to listen beyond loopback)")
	f.StringVar(&o.TokenFile, "token-file", "", "read the bearer token from this file (a mounted secret: not visible in the process list)")
	f.StringVar(&o.Container, "container", "", "trace only this container's processes (id prefix or cgroup name)")
	f.DurationVar(&o.Window, "window", agent.DefaultWindow, "how long each tracing window lasts")
	f.DurationVar(&o.Every, "every", agent.DefaultEvery, "how often a window starts (with --continuous: how often a profile is cut and exited processes are forgotten)")
	f.BoolVar(&o.Continuous, "continuous", false, "trace without gaps (--window is ignored; a profile every --every)")
	f.IntVar(&o.RingBufferBytes, "ring-buffer-size", agent.DefaultRingBuffer, "BPF ring buffer bytes")
	f.StringVar(&o.ProfilesDir, "profiles-dir", "", "write each window's (interval's) profile of each process (pprof) into this directory")
	f.Int64Var(&o.ProfilesMaxBytes, "profiles-max-bytes", agent.DefaultProfilesMax, "with --profiles-dir: keep at most this many bytes of profiles, removing the oldest")
	f.BoolVar(&o.RecordLaunches, "record-launches", false, "record every launch through the ring buffer (for profiles with launches) instead of counting them in BPF maps")
	f.BoolVar(&o.LaunchTimes, "launch-times", false, "also time every launch in BPF (log2 histograms per process and API, in cudatap_cuda_api_seconds): a return probe per launch, a second trap")
	f.DurationVar(&o.NVMLInterval, "nvml-interval", agent.DefaultNVML, "GPU sampling period through NVML for the device series (0: off)")
	f.Float64Var(&o.MaxCPU, "max-cpu", agent.DefaultMaxCPU, "keep the agent's own CPU time under this share of one core: the busiest processes are traced in fewer windows (--continuous: intervals of --every), each with a probability p, its counts weighted 1/p; in window mode the pause between windows lengthens when that is not enough (0: no budget)")
	onOffFlag(cmd, &o.GPUTimes, "gpu-times", true, "POST /capture measures GPU times with the target's CUPTI, as record does (the collector is loaded into the target by ptrace): on or off")
	f.Int64Var(&o.CaptureMaxBytes, "capture-max-bytes", agent.DefaultCaptureMaxBytes, "POST /capture stops when its recording (a file without a name in $TMPDIR) reaches this many bytes; the trace then says it was truncated")
	f.IntVar(&o.MaxRequests, "max-requests", agent.DefaultMaxRequests, "answer at most this many /metrics and /profile requests at once; the others get 503 at once (counted in cudatap_agent_requests_rejected_total)")
	f.StringVar(&o.KubeletSocket, "kubelet-socket", kube.DefaultSocket, "the kubelet's pod-resources socket, for the pod, namespace and container labels (absent: labels from each process's own view; \"\": never asked)")
	f.StringVar(&o.Push, "push", "", "push each window's (interval's) profile of each process to this Pyroscope-compatible server (http://HOST:PORT; POST /ingest); on SIGTERM the last are pushed, for 10s at most")
	f.BoolVar(&o.PIDLabel, "pid-label", false, "label each process's series and pushed profiles with its pid (a set of series per process; by default the processes with the same comm, container, pod and namespace share theirs)")
	f.BoolVar(&o.Histograms, "histograms", false, "export the CUDA API time histograms (cudatap_cuda_api_seconds: 14 series per API timed; --launch-times implies it)")
	f.IntVar(&o.MaxStreams, "max-streams", metrics.DefaultMaxStreams, "label the launches of at most this many streams of a process besides the legacy default stream; later ones count as stream \"other\"")
	f.StringVar(&o.Node, "node-name", "", "the node's name, the Hostname label of every series (default: $NODE_NAME, else the host name)")
	fl.add(cmd, "/var/tmp/cudatap-dumps")
	return cmd
}
