package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/flight"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/targets"
)

type recordOptions struct {
	pids        []int
	all         bool
	container   string
	duration    time.Duration
	outputs     []string
	format      string
	stacks      string
	ringBuffer  int
	waitForCUDA bool
	nvml        time.Duration
	nameWindow  time.Duration
	perSymbol   bool
	gpuTimes    bool
	cupti       string
	kernelArgs  bool
	json        bool
	report      string
	follow      bool // -p: also what the processes start from now on
	noFollow    bool // a command: only the command's own process
	flight      flightFlags
}

func newRecordCmd(g *globalOptions) *cobra.Command {
	o := &recordOptions{}
	cmd := &cobra.Command{
		Use:   "record [-p PID]... [-o FILE]... [-- COMMAND [ARGS...]]",
		Short: "Trace running CUDA processes (or a command) and write traces, profiles and a summary",
		Example: `  sudo cudatap record -p 4123 -d 30s -o trace.json -o profile.pb.gz
  sudo cudatap record -o run.cudatap -- python3 train.py
  sudo cudatap record -q -p 4123 -d 10s -o - --format pprof > profile.pb.gz`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRecord(cmd, g, o, args)
		},
	}
	f := cmd.Flags()
	f.IntSliceVarP(&o.pids, "pid", "p", nil, "process to trace (repeatable or comma-separated)")
	f.BoolVar(&o.all, "all", false, "trace every process on the host that maps CUDA, now or later")
	f.StringVar(&o.container, "container", "", "trace every process of this container (id or prefix, or cgroup name), now or later")
	f.DurationVarP(&o.duration, "duration", "d", 0, "stop after this long (default: until Ctrl-C or every target exits)")
	f.StringArrayVarP(&o.outputs, "output", "o", nil, "output file; the extension picks the format: .json/.json.gz Chrome trace, .perfetto-trace Perfetto trace, .pb.gz pprof, .cudatap raw recording (repeatable); - is stdout (with --format; the summary and a launched command's stdout then go to stderr)")
	f.StringVar(&o.format, "format", "", "the format of -o - and of outputs whose extension names none: chrome, perfetto, pprof or cudatap")
	f.StringVar(&o.stacks, "stacks", "sync", "capture user stacks on: none, sync (calls that may block) or all")
	f.IntVar(&o.ringBuffer, "ring-buffer-size", 16<<20, "BPF ring buffer size in bytes (power of two)")
	f.DurationVar(&o.nameWindow, "name-window", 5*time.Second, "after attaching to a running process, also probe runtime launches this long to name kernels loaded earlier (two traps per launch meanwhile; 0: never)")
	f.BoolVar(&o.perSymbol, "per-symbol-uprobes", false, "use one perf-event uprobe per symbol instead of uprobe_multi links (what kernels before 6.6 get; slower to detach)")
	f.DurationVar(&o.nvml, "nvml-interval", 100*time.Millisecond, "GPU sampling period through NVML (negative: off)")
	f.BoolVar(&o.waitForCUDA, "wait-for-cuda", false, "accept target processes that have not loaded CUDA yet and hook it when they do")
	onOffFlag(cmd, &o.gpuTimes, "gpu-times", true, "measure GPU ops with the target's own CUPTI (a collector loaded through CUDA_INJECTION64_PATH for a command, by ptrace into a running process), handed over to a profiler the target starts itself: on or off (--all and --container: off unless given); without CUPTI, or off, GPU ops are drawn within proven bounds")
	f.BoolVar(&o.kernelArgs, "kernel-args", false, "copy each launch's kernel parameter values (512 bytes behind kernelParams), so that the cross-stream-race lint sees which device memory each kernel was given (docs/lints.md; a launch record grows from 192 to 760 bytes)")
	f.StringVar(&o.cupti, "cupti", "", "the libcupti GPU times use, as the target sees it (default: the one it loaded, the one next to its libcudart, or the toolkit's)")
	f.BoolVar(&o.json, "json", false, "write the summary as JSON (schema: docs/formats.md, \"JSON output\"); also with --quiet; a launched command's stdout then goes to stderr, so that stdout is the JSON alone")
	f.StringVar(&o.report, "report", "", "also write the HTML report (see cudatap report) to this file, and the device memory profile beside it")
	f.BoolVar(&o.follow, "follow", false, "with -p: also trace every process the traced processes start from now on, and those they started already (a launched command is followed by default)")
	f.BoolVar(&o.noFollow, "no-follow", false, "trace only the launched command's own process, not the processes it starts")
	o.flight.add(cmd, "cudatap-dumps")
	return cmd
}

// following says whether record follows process trees: a command's by
// default, running processes' with --follow.
func (o *recordOptions) following(command []string) (bool, error) {
	switch {
	case o.follow && o.noFollow:
		return false, usageError(errors.New("--follow and --no-follow contradict each other: give one"))
	case o.follow && len(o.pids) == 0:
		return false, usageError(errors.New("--follow goes with -p PID (a launched command is followed by default; --all and --container trace every matching process anyway)"))
	case o.noFollow && len(command) == 0:
		return false, usageError(errors.New("--no-follow goes with a command to launch (after --): -p traces only the given processes unless --follow"))
	}
	return o.follow || (len(command) > 0 && !o.noFollow), nil
}

// nameWindow maps the flag (0: never) to tracer.Config.NameWindow (0: default, negative: never).
func nameWindow(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

func parseStacks(s string) (probe.StackMode, error) {
	switch s {
	case "none":
		return probe.StacksNone, nil
	case "sync":
		return probe.StacksSync, nil
	case "all":
		return probe.StacksAll, nil
	}
	return 0, fmt.Errorf("--stacks %q: use none, sync or all", s)
}

func runRecord(cmd *cobra.Command, g *globalOptions, o *recordOptions, command []string) error {
	if len(o.pids) == 0 && len(command) == 0 && !o.all && o.container == "" {
		return usageError(fmt.Errorf("nothing to trace: give -p PID (a running process), --container ID, --all, or a command after -- (see cudatap record --help)"))
	}
	if len(command) > 0 && cmd.ArgsLenAtDash() != 0 {
		return usageError(fmt.Errorf("unexpected arguments %q: put the command to launch after --", command))
	}
	stacks, err := parseStacks(o.stacks)
	if err != nil {
		return usageError(err)
	}
	follow, err := o.following(command)
	if err != nil {
		return err
	}
	if err := o.flight.check(cmd); err != nil {
		return err
	}
	if (o.all || o.container != "") && !cmd.Flags().Changed("gpu-times") {
		o.gpuTimes = false // host-wide: CUPTI in every CUDA process only when asked (--gpu-times)
	}
	// Before the outputs: without the privileges to trace, that is the
	// error to give (not that the default recording cannot be written).
	if err := probe.CheckPrivileges(); err != nil {
		return err
	}
	paths, byDefault := o.outputs, false
	if len(paths) == 0 && o.flight.window == 0 {
		// Never a run lost for a forgotten -o: a recording, as perf
		// record writes perf.data.
		paths, byDefault = []string{defaultRecording(command, o.pids, o.container, time.Now())}, true
	}
	outs, piped, err := planOutputs(cmd, paths, o.format)
	if err != nil {
		return err
	}
	if err := checkTargets(o.pids, command); err != nil {
		return err
	}
	rep, err := newRecordReport(o.report, outs) // before tracing: a bad path must not cost a recording
	if err != nil {
		return err
	}
	defer rep.cleanup()
	to, err := newTraceOutputs(outs)
	if err != nil {
		return err
	}
	to.summary, to.notes, to.json = g.summary(cmd, piped, o.json), g.notes(cmd), o.json
	stderr := to.notes // --quiet: no attach line, status line or hang note
	status := newStatusLine(stderr)
	commandOut := io.Writer(os.Stdout)
	if piped || o.json {
		commandOut = os.Stderr // not into the trace or the JSON: stdout stays one document
	}
	cfg := tracer.Config{
		PIDs: o.pids, Command: command, All: o.all, Container: o.container, Duration: o.duration, Stacks: stacks,
		RingBufferBytes: o.ringBuffer, WaitForCUDA: o.waitForCUDA, NVMLInterval: o.nvml, NameWindow: nameWindow(o.nameWindow), PerSymbolUprobes: o.perSymbol,
		GPUTimes: o.gpuTimes, CUPTIPath: o.cupti, Follow: follow, KernelArgs: o.kernelArgs,
		Stdin: os.Stdin, Stdout: commandOut, Stderr: os.Stderr, Logger: g.logger(),
	}
	hangs := &hangWatch{progress: to.agg.Progress, w: stderr, status: status}
	obs := tracer.Funcs{OnAttached: printAttached(stderr), OnStatus: func(st tracer.Status) {
		status.update(st)
		hangs.check()
	}}
	switch {
	case follow:
		obs.OnAttached = printFollowing(stderr)
	case o.container != "":
		obs.OnAttached = func(n int) {
			printAttached(stderr)(n)
			if n == 0 {
				fmt.Fprintln(stderr, "cudatap: "+containerHint(o.container))
			}
		}
	}
	cfg.Observer = obs
	cfg.Recording, cfg.Sink, cfg.Names = rep.tee(to.recording()), to.sink(), to.names
	cfg.Guardian = to.guard(stderr, len(command) > 0)
	var fr *flight.Recorder
	if o.flight.window > 0 {
		// The flight recorder takes the session's records (the whole
		// recording, when one is asked for, goes through it) and calls.
		nvmlCtx, stopNVML := context.WithCancel(cmd.Context())
		defer stopNVML()
		if fr, err = o.flight.recorder(nvmlCtx, stderr, cfg.Recording, o.nvml >= 0, g.logger()); err != nil {
			to.abort()
			return err
		}
		defer fr.Close()
		cfg.Recording, cfg.Sink = fr, model.Sinks{cfg.Sink, fr}
	}
	ctx := cmd.Context()
	if len(command) > 0 {
		// Ctrl-C or kill reaches the command as it would without cudatap,
		// which traces it until it exits; a second one stops at once.
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		defer signal.Stop(sigs)
		cfg.Interrupts = sigs
		ctx = context.WithoutCancel(ctx)
	}
	outcome, err := tracer.Run(ctx, cfg)
	status.clear()
	if fr != nil {
		fr.Close() // the dumps due are written
		if err == nil {
			err = fr.AlsoErr()
		}
	}
	if outcome == nil || outcome.Result == nil {
		to.abort()
		return err
	}
	if len(command) > 0 {
		to.command = newCommandJSON(outcome.Exit)
	}
	// A session that failed late (its recording could not be written)
	// still has everything it modeled: every other output is written.
	// cudatap's own failure then decides the status (6), not the command's.
	ferr := errors.Join(to.finish(cmd, outcome.Result), rep.write(stderr))
	if byDefault && ferr == nil {
		fmt.Fprintf(stderr, "cudatap: open it with: cudatap report %[1]s -o report.html (the report), cudatap export %[1]s -o trace.json (a trace for Perfetto), cudatap lint %[1]s\n", paths[0])
	}
	if ferr != nil || err != nil {
		return partialError(errors.Join(err, ferr))
	}
	return commandStatus(stderr, outcome.Exit, len(command) > 0)
}

// defaultRecording names the recording record writes without -o, in the
// current directory: cudatap-COMMAND-YYYYMMDD-HHMMSS.cudatap (the
// command's name, the first process's, the container's, or "all"), not
// one that exists.
func defaultRecording(command []string, pids []int, container string, now time.Time) string {
	name := "all"
	switch {
	case len(command) > 0:
		name = filepath.Base(command[0])
	case len(pids) > 0:
		name = "pid" + strconv.Itoa(pids[0])
		if comm, err := procfs.Comm(pids[0]); err == nil && comm != "" {
			name = comm
		}
	case container != "":
		name = "container-" + container
	}
	clean := []byte(name)
	for i, c := range clean {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			clean[i] = '_'
		}
	}
	if len(clean) > 40 {
		clean = clean[:40]
	}
	base := fmt.Sprintf("cudatap-%s-%s", clean, now.Format("20060102-150405"))
	path := base + ".cudatap"
	for i := 2; ; i++ {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return path
		}
		path = fmt.Sprintf("%s-%d.cudatap", base, i)
	}
}

// commandStatus is record's exit status: the launched command's own, as a
// shell reports it (128+N when signal N killed it), said in words when a
// signal ended it. A command cudatap itself stopped (-d, Ctrl-C) does not
// fail the recording.
func commandStatus(w io.Writer, e tracer.Exit, launched bool) error {
	switch {
	case !launched:
		return nil
	case e.Stopped:
		fmt.Fprintf(w, "cudatap: stopped the traced command at the end of the recording\n")
		return nil
	case e.Signal != 0:
		fmt.Fprintf(w, "cudatap: the traced command was killed by %s (exit status %d)\n", signalName(e.Signal), e.Code)
	}
	if e.Code > 0 {
		return &exitError{code: e.Code}
	}
	return nil
}

// signalName is "SIGSEGV" for syscall.SIGSEGV.
func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

// containerHint says why --container attached to nothing: no process of
// that container at all (a typo?), or none that maps CUDA yet.
func containerHint(container string) string {
	pids, _ := procfs.PIDs()
	n := 0
	for _, pid := range pids {
		if cg, err := procfs.Cgroup(pid); err == nil && targets.CgroupMatches(cg, container) {
			n++
		}
	}
	if n == 0 {
		return fmt.Sprintf("no process on this host belongs to container %q: check the id or name (docker ps, crictl ps); waiting for one to start", container)
	}
	return fmt.Sprintf("%d process(es) of container %q, none uses CUDA yet; waiting for one to load it", n, container)
}
