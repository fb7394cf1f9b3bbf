package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/session"
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
	outs, err := export.Plan(o.outputs, o.format)
	if err != nil {
		return err
	}
	for _, out := range outs {
		if out.Format == export.Recording {
			return fmt.Errorf("%s: export writes traces and profiles; copy the .cudatap file to duplicate a recording", out.Path)
		}
	}
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("open recording: %w", err)
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	status := newStatusLine(cmd.ErrOrStderr())
	res, rp, err := recording.Load(f, func(done int64) {
		if size > 0 {
			status.printf("cudatap: reading %s: %.0f%% (%s of %s)", in, 100*float64(done)/float64(size), units.Bytes(uint64(done)), units.Bytes(uint64(size)))
		}
	})
	status.clear()
	switch {
	case errors.Is(err, recording.ErrTruncated) && res != nil:
		fmt.Fprintf(cmd.ErrOrStderr(), "cudatap: warning: %s: %v; exporting the %d records before the cut (drop counters unknown)\n", in, err, rp.Records)
	case err != nil:
		return fmt.Errorf("%s: %w", in, err)
	}
	return writeOutputs(cmd, outs, &session.Outcome{Result: res})
}
