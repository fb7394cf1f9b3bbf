package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/export/merge"
	"github.com/cudatap/cudatap/export/report"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/replay"
)

type mergeOptions struct {
	outputs []string
	format  string
	keep    int
}

func newMergeCmd(g *globalOptions) *cobra.Command {
	o := &mergeOptions{}
	cmd := &cobra.Command{
		Use:   "merge A.cudatap B.cudatap... -o OUT...",
		Short: "Put the recordings of a multi-host job on one timeline, clocks aligned by its NCCL collectives",
		Long: `merge puts several .cudatap recordings (one per host of a distributed job, or
several of one host) on one timeline: one process group per NCCL rank, the slow rank
named by arrival order. Recordings of one boot of one host (the same boot id) share
its clock and are merged on it unshifted. Those of other hosts are placed by their
NCCL collectives: no rank can finish a collective before the last rank arrives, so
each collective bounds the offset between two hosts from both sides; of that range,
the offset nearest the hosts' wall clocks is applied. The offset, the range and the
method are printed and written into the outputs (docs/merge.md).`,
		Example: "  cudatap merge node0.cudatap node1.cudatap -o job.json.gz\n  cudatap merge node*.cudatap -o job.cudatap -o job.json",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return interrupted(cmd.Context(), "merge", runMerge(cmd, o, args))
		},
	}
	cmd.Flags().StringArrayVarP(&o.outputs, "output", "o", nil, "output file, format from the extension (.json/.json.gz Chrome trace, .perfetto-trace Perfetto trace, .cudatap merged recording, .pb.gz pprof) (repeatable)")
	cmd.Flags().StringVar(&o.format, "format", "", "the format of outputs whose extension names none: chrome, perfetto, pprof or cudatap")
	cmd.Flags().IntVar(&o.keep, "meetings", merge.DefaultKeep, "collectives of each rank used to align clocks, at each end of the recording")
	return cmd
}

func runMerge(cmd *cobra.Command, o *mergeOptions, ins []string) error {
	for _, p := range o.outputs {
		if p == export.Stdout {
			// Its summary and alignment report go to the standard output
			// and error: a stream there would mix with them.
			return withCode(exitUsage, fmt.Errorf("merge does not write to the standard output (-o -): give a file (job.json, job.json.gz, job.cudatap, job.pb.gz)"))
		}
	}
	outs, err := export.Plan(o.outputs, o.format, ins...)
	if err != nil {
		return err
	}
	var size int64
	for i, in := range ins {
		fi, err := os.Stat(in)
		switch {
		case err != nil:
			return fmt.Errorf("open recording: %w: give the path of each .cudatap recording to merge", err)
		case fi.IsDir():
			return fmt.Errorf("%s is a directory: give the .cudatap recordings inside it", in)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%s is not a regular file: merge reads each recording twice; copy it to a file first", in)
		}
		for _, prev := range ins[:i] {
			if pfi, err := os.Stat(prev); err == nil && os.SameFile(pfi, fi) {
				return fmt.Errorf("%s and %s are the same file: give each recording once", prev, in)
			}
		}
		size += fi.Size()
	}
	stderr := cmd.ErrOrStderr()
	status := newStatusLine(stderr)
	plan, err := merge.Scan(ins, merge.Options{Keep: o.keep, Progress: func(i int, done int64) {
		status.printf("cudatap: aligning: reading %s (%d of %d): %s", ins[i], i+1, len(ins), units.Bytes(uint64(done)))
	}})
	status.clear()
	if err != nil {
		return err
	}
	plan.Report(stderr)
	info := plan.Info()

	recs, err := createRecordings(outs)
	if err != nil {
		return err
	}
	agg := export.NewAggregates()
	var chrome *export.ChromeSet
	res, err := plan.Replay(cmd.Context(), recs.writer(), func(all *replay.Replay) model.Sink {
		var cerr error
		if chrome, cerr = export.CreateChrome(outs, all.Names, export.Options{Version: version, Origins: info.Origins(), Merge: info.JSON()}); cerr != nil {
			fmt.Fprintf(stderr, "cudatap: %v\n", cerr)
		}
		return model.Sinks{agg.Sink(), chrome.Sink()}
	}, func(done int64) {
		status.printf("cudatap: merging: %.0f%% (%s of %s)", 100*float64(done)/float64(max(size, 1)), units.Bytes(uint64(done)), units.Bytes(uint64(size)))
	})
	status.clear()
	if res == nil {
		chrome.Abort()
		recs.abort()
		return err
	}
	if err != nil {
		recs.abort() // the merged recording failed; the other outputs are still written
	}
	errs := []error{err, recs.commit(), export.WritePprof(outs, res, agg), chrome.Close(res)}
	if err := report.Summary(cmd.OutOrStdout(), res, agg.Syncs, report.Options{Steps: agg.Steps.Find(res)}); err != nil {
		errs = append(errs, err)
	}
	agg.Stragglers.ReportNamed(cmd.OutOrStdout(), straggler.Naming{Result: res, Origins: info.Where()})
	err = errors.Join(errs...)
	wroteExcept(cmd.ErrOrStderr(), outs, err) // not the outputs that failed
	if err != nil {
		return err
	}
	if res.Truncated != "" {
		return &exitError{code: exitPartial} // the alignment report said which input was cut
	}
	return nil
}

// mergedRecordings are the .cudatap outputs being written: temporary
// files beside their targets, renamed over them once complete.
type mergedRecordings struct {
	files  []*os.File
	finals []string
}

func createRecordings(outs []export.Output) (*mergedRecordings, error) {
	r := &mergedRecordings{}
	for _, o := range outs {
		if o.Format != export.Recording {
			continue
		}
		f, err := os.CreateTemp(filepath.Dir(o.Path), "."+filepath.Base(o.Path)+".tmp-*")
		if err != nil {
			r.abort()
			return nil, fmt.Errorf("cannot write output %s: %w", o.Path, err)
		}
		r.files, r.finals = append(r.files, f), append(r.finals, o.Path)
	}
	return r, nil
}

// writer is where the merged recording goes (nil: none asked for).
func (r *mergedRecordings) writer() io.Writer {
	switch len(r.files) {
	case 0:
		return nil
	case 1:
		return r.files[0]
	}
	ws := make([]io.Writer, len(r.files))
	for i, f := range r.files {
		ws[i] = f
	}
	return io.MultiWriter(ws...)
}

func (r *mergedRecordings) abort() {
	for _, f := range r.files {
		f.Close()
		os.Remove(f.Name())
	}
	r.files = nil
}

// commit puts every complete recording in place.
func (r *mergedRecordings) commit() error {
	var errs []error
	for i, f := range r.files {
		err := f.Close()
		if err == nil {
			err = os.Chmod(f.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(f.Name(), r.finals[i])
		}
		if err != nil {
			os.Remove(f.Name())
			errs = append(errs, fmt.Errorf("write %s: %w", r.finals[i], err))
		}
	}
	r.files = nil
	return errors.Join(errs...)
}
