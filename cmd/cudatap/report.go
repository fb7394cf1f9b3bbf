package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	htmlreport "github.com/cudatap/cudatap/export/html"
	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/tracer/recording"
)

type reportOptions struct {
	output        string
	memoryProfile string
	maxSlices     int
	json          bool
}

func newReportCmd(g *globalOptions) *cobra.Command {
	o := &reportOptions{}
	cmd := &cobra.Command{
		Use:   "report IN.cudatap [-o OUT.html] [--json]",
		Short: "The verdicts, the lines to change and a picture: a terminal report and a self-contained HTML page",
		Long: `report replays a recording and prints the verdicts: where the host waited for the GPU and
what to change, how copies, compute and communication overlapped on each device, the idle
gaps of each stream and what the host did meanwhile, queue depths and launch rates, the top
GPU operations, the device memory the processes reserved (who holds it, what was never
freed), and the lints of cudatap lint, priced and ranked. With -o it also writes one HTML file
that opens offline: the same analyses and a zoomable timeline of every thread and stream with
the NVML samples on the same time axis, and, next to it, the device memory by stack as a pprof
profile (gpu_inuse, gpu_peak, gpu_alloc). With --json the summary is written as JSON instead of
the terminal report (the schema of record --json, lints included).`,
		Example: `  cudatap report run.cudatap
  cudatap report run.cudatap -o report.html
  cudatap report --json run.cudatap > summary.json
  sudo cudatap record --report report.html -- python3 train.py`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return interrupted(cmd.Context(), "report", runReport(cmd, g, o, args[0]))
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "write the HTML report to this file (.html)")
	f.StringVar(&o.memoryProfile, "memory-profile", "", `with -o: where to write the device memory profile (default: next to the report, OUT.gpu_inuse.pb.gz; "none": not at all)`)
	f.IntVar(&o.maxSlices, "max-slices", 20_000, "calls, GPU ops and syncs the timeline shows in full detail; past it, the busiest window that holds that many (the rest as occupancy)")
	f.BoolVar(&o.json, "json", false, "write the summary as JSON (schema: docs/formats.md, \"JSON output\"), not the terminal report; also with --quiet")
	return cmd
}

// memoryProfilePath is where the profile goes beside the report
// OUT.html: OUT.gpu_inuse.pb.gz.
func memoryProfilePath(report, flag string) string {
	switch flag {
	case "none":
		return ""
	case "":
		return strings.TrimSuffix(strings.TrimSuffix(report, ".html"), ".htm") + ".gpu_inuse.pb.gz"
	}
	return flag
}

// checkReportPath refuses, before any work, a report path that is not
// an .html one, cannot be written, or is one of the inputs.
func checkReportPath(path string, inputs ...string) error {
	if !strings.HasSuffix(path, ".html") && !strings.HasSuffix(path, ".htm") {
		return usageError(fmt.Errorf("report %s: give the HTML report a .html name", path))
	}
	return export.CheckPath(path, inputs...)
}

func runReport(cmd *cobra.Command, g *globalOptions, o *reportOptions, in string) error {
	if o.output != "" {
		if err := checkReportPath(o.output, in); err != nil {
			return err
		}
	}
	f, err := openRecording(cmd.Context(), in, "report")
	if err != nil {
		return err
	}
	defer f.Close()
	notes := g.notes(cmd)
	var stragglers *straggler.Collector
	opts := htmlreport.Options{MaxSlices: o.maxSlices}
	if o.json {
		stragglers = straggler.NewCollector()
		opts.Also = stragglers
	}
	rep, err := loadReport(notes, cmd.ErrOrStderr(), f, in, opts)
	if err != nil {
		return err
	}
	out, profile := g.summary(cmd, false, o.json), memoryProfilePath(o.output, o.memoryProfile)
	if o.json {
		err = writeSummaryJSON(out, rep.Result, &export.Aggregates{Syncs: rep.Syncs, Lints: rep.Lint, Stragglers: stragglers, Steps: rep.Steps}, nil, nil)
		if err == nil && o.output != "" {
			err = writePage(notes, rep, o.output, profile)
		}
	} else {
		err = writeReport(out, notes, rep, in, o.output, profile)
	}
	if err != nil {
		return partialError(err)
	}
	if rep.Result.Truncated != "" {
		return &exitError{code: exitPartial} // said when it was read
	}
	return nil
}

// loadReport replays the recording f (named in) into a report, showing
// its progress on notes; a recording cut short is reported on warn (not
// --quiet's to hide: the exit status says it too).
func loadReport(notes, warn io.Writer, f *os.File, in string, opts htmlreport.Options) (*htmlreport.Report, error) {
	status := newStatusLine(notes)
	size := int64(0)
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	opts.Version = version
	rep, err := htmlreport.Load(f, opts, func(pass string, done int64) {
		if size > 0 {
			status.printf("cudatap: report: %s %s: %.0f%%", pass, in, 100*float64(done)/float64(size))
		}
	})
	status.clear()
	switch {
	case errors.Is(err, recording.ErrTruncated) && rep != nil:
		fmt.Fprintf(warn, "cudatap: warning: %s: %v; the report covers what was recorded before the cut (drop counters unknown)\n", in, err)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", in, err)
	}
	return rep, nil
}

// writeReport prints the summary, its lints section and the terminal
// report to out, and writes the page and the memory profile when asked;
// in names the recording for the hint to `cudatap lint`.
func writeReport(out, notes io.Writer, rep *htmlreport.Report, in, page, profile string) error {
	if _, err := io.WriteString(out, rep.Summary); err != nil {
		return err
	}
	if err := lint.WriteText(out, rep.Result, rep.Lint, rep.Lints, lint.TextOptions{Section: true, Examples: 1, Input: in}); err != nil {
		return err
	}
	if _, err := io.WriteString(out, "\n"); err != nil {
		return err
	}
	if err := rep.WriteText(out); err != nil {
		return err
	}
	if page == "" {
		return nil
	}
	return writePage(notes, rep, page, profile)
}

// writePage writes the report's page and, when profile is not "", the
// device memory profile it names.
func writePage(notes io.Writer, rep *htmlreport.Report, page, profile string) error {
	var errs []error
	if profile != "" {
		if err := export.WriteFile(profile, rep.WriteMemoryProfile); err != nil {
			errs = append(errs, err)
			profile = ""
		} else {
			fmt.Fprintf(notes, "wrote %s (device memory profile: go tool pprof -http=: %s)\n", profile, profile)
		}
	}
	if err := export.WriteFile(page, func(w io.Writer) error { return rep.WriteHTML(w, filepath.Base(profile)) }); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(notes, "wrote %s (report: open it in a browser)\n", page)
	}
	return errors.Join(errs...)
}

// recordReport is record's --report: the recording it replays (the
// session's own .cudatap output, or a file of its own beside the report,
// removed at the end), and where the report goes. A nil recordReport does
// nothing.
type recordReport struct {
	page, profile string
	recording     string   // the .cudatap to replay
	own           *os.File // the file of its own, when no .cudatap was asked for
}

// newRecordReport checks the report path before tracing and, when the
// outputs hold no recording file, opens a file beside the report for one.
func newRecordReport(page string, outs []export.Output) (*recordReport, error) {
	if page == "" {
		return nil, nil
	}
	if err := checkReportPath(page); err != nil {
		return nil, err
	}
	r := &recordReport{page: page, profile: memoryProfilePath(page, "")}
	for _, o := range outs {
		if o.Format == export.Recording && o.Path != export.Stdout {
			r.recording = o.Path
			return r, nil
		}
	}
	f, err := os.CreateTemp(filepath.Dir(page), "."+filepath.Base(page)+".*.cudatap")
	if err != nil {
		return nil, fmt.Errorf("cannot write a recording beside the report %s: %w", page, err)
	}
	r.own, r.recording = f, f.Name()
	return r, nil
}

// tee adds the report's own recording to the session's recording writer.
func (r *recordReport) tee(w io.Writer) io.Writer {
	if r == nil || r.own == nil {
		return w
	}
	if w == nil {
		return r.own
	}
	return io.MultiWriter(w, r.own)
}

// write makes the report from the finished recording: the page and the
// memory profile (record prints its summary itself); notes get the
// progress and "wrote" lines.
func (r *recordReport) write(notes io.Writer) error {
	if r == nil {
		return nil
	}
	if r.own != nil {
		if err := r.own.Close(); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	f, err := os.Open(r.recording)
	if err != nil {
		return fmt.Errorf("report: read back the recording: %w", err)
	}
	defer f.Close()
	rep, err := loadReport(notes, notes, f, "the recording", htmlreport.Options{})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return writePage(notes, rep, r.page, r.profile)
}

// cleanup removes the report's own recording.
func (r *recordReport) cleanup() {
	if r != nil && r.own != nil {
		r.own.Close()
		os.Remove(r.own.Name())
	}
}
