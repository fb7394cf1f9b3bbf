package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

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
launches the workload under cudatap with real uprobes, and writes into ./cudatap-demo/ (--out-dir)
the recording run.cudatap, the HTML report report.html, trace.json and profile.pb.gz; it ends with
the commands that open them. The simulated runtime exports the real libcudart ABI and models a
GPU clock per stream, so synchronizations block for real and pageable copies stall the host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd, g, o)
		},
	}
	cmd.Flags().IntVar(&o.iters, "iters", 50, "iterations of the workload")
	cmd.Flags().IntVar(&o.streams, "streams", 3, "CUDA streams the workload creates")
	cmd.Flags().StringVar(&o.dir, "out-dir", "cudatap-demo", "the directory to write the recording, the report, the trace and the profile into (made if missing)")
	cmd.Flags().BoolVar(&o.keep, "keep-build", false, "keep the compiled simulated runtime and workload")
	return cmd
}

// demoFiles are what the demo writes, in its directory.
type demoFiles struct{ dir, recording, report, trace, profile string }

func newDemoFiles(dir string) demoFiles {
	in := func(name string) string { return filepath.Join(dir, name) }
	return demoFiles{dir: dir, recording: in("run.cudatap"), report: in("report.html"), trace: in("trace.json"), profile: in("profile.pb.gz")}
}

func runDemo(cmd *cobra.Command, g *globalOptions, o *demoOptions) error {
	files := newDemoFiles(o.dir)
	if err := os.MkdirAll(files.dir, 0o755); err != nil {
		return fmt.Errorf("demo: %w (give another directory with --out-dir)", err)
	}
	outs, err := export.Plan([]string{files.recording, files.trace, files.profile}, "")
	if err != nil {
		return err
	}
	rep, err := newRecordReport(files.report, outs) // replays files.recording once it is written
	if err != nil {
		return err
	}
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
		Observer: tracer.Funcs{OnAttached: printAttached(stderr)}, Recording: to.recording(), Sink: to.sink(), Names: to.names,
	})
	if err != nil {
		to.abort()
		return err
	}
	if err := to.finish(cmd, outcome.Result); err != nil {
		return err
	}
	if err := rep.write(stderr); err != nil {
		return err
	}
	printDemoNext(cmd.OutOrStdout(), os.Args[0], files)
	return nil
}

// printDemoNext says where the demo's files are and gives the commands
// that open them, with cudatap named as it was run (./bin/cudatap under
// make demo).
func printDemoNext(w io.Writer, self string, f demoFiles) {
	run := func(args ...string) string {
		words := []string{shellWord(self)}
		for _, a := range args {
			words = append(words, shellWord(a))
		}
		return strings.Join(words, " ")
	}
	fmt.Fprintf(w, "\nThe demo wrote into %s%c:\n", f.dir, filepath.Separator)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintf(tw, "  %s\tthe HTML report: open it in a browser (one file, works offline)\n", f.report)
	fmt.Fprintf(tw, "  %s\tthe recording: every call, for the commands below\n", f.recording)
	fmt.Fprintf(tw, "  %s\tthe timeline: https://ui.perfetto.dev (Open trace file) or chrome://tracing\n", f.trace)
	fmt.Fprintf(tw, "  %s\tthe profile: go tool pprof -http=:8080 %s\n", f.profile, shellWord(f.profile))
	tw.Flush()
	fmt.Fprintln(w, "\nRead the recording again:")
	fmt.Fprintf(tw, "  %s\t# the verdicts, in the terminal\n", run("report", f.recording))
	fmt.Fprintf(tw, "  %s\t# every lint finding, with its examples\n", run("lint", f.recording))
	fmt.Fprintf(tw, "  %s\t# where the host waited for the GPU\n", run("syncs", f.recording))
	fmt.Fprintf(tw, "  %s\t# other formats (.json.gz, .pb.gz)\n", run("export", f.recording, "-o", filepath.Join(f.dir, "trace.json.gz")))
	tw.Flush()
	fmt.Fprintf(w, "Trace your own job: sudo %s\n", run("record", "-o", "run.cudatap", "--report", "report.html", "--", "python3", "train.py"))
}

// shellWord is s as a shell reads it back: quoted when it holds anything
// but letters, digits and -_./=:,+@%.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
