package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/probe"
)

type demoOptions struct {
	iters   int
	streams int
	dir     string
	keep    bool
}

func newDemoCmd(g *globalOptions) *cobra.Command {
	o := &demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Trace the bundled simulated CUDA workload end to end (no GPU needed)",
		Long: `demo compiles the bundled simulated CUDA runtime and workload with the system C compiler,
launches the workload under cudatap with real uprobes, and writes trace.json and
profile.pb.gz. The simulated runtime exports the real libcudart ABI and models a GPU clock
per stream, so synchronizations block for real and pageable copies stall the host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd, g, o)
		},
	}
	cmd.Flags().IntVar(&o.iters, "iters", 50, "iterations of the workload")
	cmd.Flags().IntVar(&o.streams, "streams", 3, "CUDA streams the workload creates")
	cmd.Flags().StringVar(&o.dir, "out-dir", ".", "where to write trace.json and profile.pb.gz")
	cmd.Flags().BoolVar(&o.keep, "keep-build", false, "keep the compiled simulated runtime and workload")
	return cmd
}

func runDemo(cmd *cobra.Command, g *globalOptions, o *demoOptions) error {
	build, err := os.MkdirTemp("", "cudatap-demo-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(build)
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "building the simulated CUDA runtime and workload in %s\n", build)
	b, err := sim.Compile(build)
	if err != nil {
		return err
	}
	outs, err := export.Plan([]string{filepath.Join(o.dir, "trace.json"), filepath.Join(o.dir, "profile.pb.gz")}, "")
	if err != nil {
		return err
	}
	command := []string{b.Workload, "--scenario", "basic", "--iters", strconv.Itoa(o.iters), "--streams", strconv.Itoa(o.streams)}
	fmt.Fprintf(stderr, "tracing: %s\n", strings.Join(command, " "))
	workloadOut, err := os.CreateTemp("", "cudatap-demo-stdout-")
	if err != nil {
		return err
	}
	defer os.Remove(workloadOut.Name())
	defer workloadOut.Close()
	to, err := newTraceOutputs(outs)
	if err != nil {
		return err
	}
	outcome, err := tracer.Run(cmd.Context(), tracer.Config{
		Command: command, Stacks: probe.StacksSync, Stdout: workloadOut, Stderr: stderr, Logger: g.logger(),
		OnAttached: printAttached(stderr), Recording: to.recording(), Sink: to.agg.Sink(),
	})
	if err != nil {
		to.abort()
		return err
	}
	if err := to.finish(cmd, outcome.Result); err != nil {
		return err
	}
	trace, prof := outs[0].Path, outs[1].Path
	fmt.Fprintf(cmd.OutOrStdout(), `
Open the results:
  trace:   %s  →  https://ui.perfetto.dev (Open trace file) or chrome://tracing
  profile: go tool pprof -http=:8080 %s   (sample types: sync_wait, cuda_api_time, cuda_api, memcpy)
Trace your own job: sudo cudatap record -p PID -o trace.json -o profile.pb.gz
`, trace, prof)
	return nil
}
