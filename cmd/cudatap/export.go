package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/export/merge"
	"github.com/cudatap/cudatap/export/report"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

type exportOptions struct {
	outputs []string
	format  string
	json    bool
}

func newExportCmd(g *globalOptions) *cobra.Command {
	o := &exportOptions{}
	cmd := &cobra.Command{
		Use:   "export IN.cudatap -o OUT...",
		Short: "Make traces, profiles and the summary from a .cudatap recording",
		Example: `  cudatap export run.cudatap -o trace.json.gz -o profile.pb.gz
  cudatap export run.cudatap -o trace.perfetto-trace  # for ui.perfetto.dev: a fraction of the JSON's size
  cudatap export -q run.cudatap -o - --format chrome | gzip > trace.json.gz`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return interrupted(cmd.Context(), "export", runExport(cmd, g, o, args[0]))
		},
	}
	cmd.Flags().StringArrayVarP(&o.outputs, "output", "o", nil, "output file, format from the extension (.json/.json.gz Chrome trace, .perfetto-trace Perfetto trace, .pb.gz pprof) (repeatable); - is stdout (with --format; the summary then goes to stderr)")
	cmd.Flags().StringVar(&o.format, "format", "", "the format of -o - and of outputs whose extension names none: chrome, perfetto or pprof")
	cmd.Flags().BoolVar(&o.json, "json", false, "write the summary as JSON (schema: docs/formats.md, \"JSON output\"); also with --quiet")
	return cmd
}

func runExport(cmd *cobra.Command, g *globalOptions, o *exportOptions, in string) error {
	outs, piped, err := planOutputs(cmd, o.outputs, o.format, in)
	if err != nil {
		return err
	}
	for _, out := range outs {
		if out.Format == export.Recording {
			return usageError(fmt.Errorf("%s: export writes traces and profiles; copy the .cudatap file to duplicate a recording", out.Path))
		}
	}
	summary, notes := g.summary(cmd, piped, o.json), g.notes(cmd)
	f, err := openRecording(cmd.Context(), in, "export")
	if err != nil {
		return err
	}
	defer f.Close()
	agg := export.NewAggregates()
	var chrome *export.ChromeSet
	var merged *merge.Info // a recording `cudatap merge` wrote
	status := newStatusLine(notes)
	res, rp, err := replay.Load(f, func(rp *replay.Replay) model.Sink {
		warnChromeSize(notes, outs, rp.Records, false)
		var merr, cerr error
		if merged, merr = merge.ReadInfo(rp.Header); merr != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "cudatap: warning: %s: %v; processes are named by their pids in the merged trace\n", in, merr)
		}
		opts := export.Options{Version: version}
		if merged != nil {
			opts.Origins, opts.Merge = merged.Origins(), rp.Header.Merge
		}
		if chrome, cerr = export.CreateChrome(outs, rp.Names, opts); cerr != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "cudatap: %v\n", cerr)
		}
		return model.Sinks{agg.Sink(), chrome.Sink()}
	}, progress(status, "reading "+in, f))
	status.clear()
	switch {
	case errors.Is(err, recording.ErrTruncated) && res != nil:
		res.Truncated = err.Error()
		// Not --quiet's to hide: the exit status (6) says it too.
		fmt.Fprintf(cmd.ErrOrStderr(), "cudatap: warning: %s: %v; exporting the %d records before the cut (drop counters unknown)\n", in, err, rp.Records)
	case err != nil:
		chrome.Abort()
		return fmt.Errorf("%s: %w", in, err)
	}
	errs := []error{export.WritePprof(outs, res, agg), chrome.Close(res)}
	if o.json {
		errs = append(errs, writeSummaryJSON(summary, res, agg, outs, nil))
	} else {
		if err := report.Summary(summary, res, agg.Syncs, report.Options{Steps: agg.Steps.Find(res)}); err != nil {
			errs = append(errs, err)
		}
		agg.Stragglers.ReportNamed(summary, straggler.Naming{Result: res, Origins: merged.Where()})
		errs = append(errs, writeLints(summary, res, agg.Lints, in))
	}
	err = errors.Join(errs...)
	wroteExcept(notes, outs, err)
	if err != nil {
		return partialError(err)
	}
	if res.Truncated != "" {
		return &exitError{code: exitPartial} // said above
	}
	return nil
}
