package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/export/merge"
	"github.com/cudatap/cudatap/export/report"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

type exportOptions struct {
	outputs []string
	format  string
}

func newExportCmd(g *globalOptions) *cobra.Command {
	o := &exportOptions{}
	cmd := &cobra.Command{
		Use:     "export IN.cudatap -o OUT...",
		Short:   "Make traces, profiles and the summary from a .cudatap recording",
		Example: "  cudatap export run.cudatap -o trace.json.gz -o profile.pb.gz",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExport(cmd, o, args[0])
		},
	}
	cmd.Flags().StringArrayVarP(&o.outputs, "output", "o", nil, "output file, format from the extension (.json/.json.gz, .pb.gz) (repeatable)")
	cmd.Flags().StringVar(&o.format, "format", "", "force the format of every -o: chrome or pprof")
	return cmd
}

func runExport(cmd *cobra.Command, o *exportOptions, in string) error {
	outs, err := export.Plan(o.outputs, o.format, in)
	if err != nil {
		return err
	}
	for _, out := range outs {
		if out.Format == export.Recording {
			return fmt.Errorf("%s: export writes traces and profiles; copy the .cudatap file to duplicate a recording", out.Path)
		}
	}
	// Before opening: opening a FIFO would block until a writer comes.
	if fi, err := os.Stat(in); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory: give the .cudatap recording inside it", in)
	} else if err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: export reads a .cudatap recording twice (names, then events); copy it to a file first", in)
	}
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("open recording: %w", err)
	}
	defer f.Close()
	agg := export.NewAggregates()
	var chrome *export.ChromeSet
	var merged *merge.Info // a recording `cudatap merge` wrote
	status := newStatusLine(cmd.ErrOrStderr())
	res, rp, err := recording.Load(f, func(rp *recording.Replay) model.Sink {
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
		fmt.Fprintf(cmd.ErrOrStderr(), "cudatap: warning: %s: %v; exporting the %d records before the cut (drop counters unknown)\n", in, err, rp.Records)
	case err != nil:
		chrome.Abort()
		return fmt.Errorf("%s: %w", in, err)
	}
	errs := []error{export.WritePprof(outs, res, agg), chrome.Close(res)}
	if err := report.Summary(cmd.OutOrStdout(), res, agg.Syncs, report.Options{}); err != nil {
		errs = append(errs, err)
	}
	agg.Stragglers.ReportNamed(cmd.OutOrStdout(), straggler.Naming{Result: res, Origins: merged.Where()})
	wrote(cmd, outs)
	return errors.Join(errs...)
}
