package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/export/report"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/guard"
	"github.com/cudatap/cudatap/tracer/model"
)

// traceOutputs is what a tracing command writes, and how: aggregates feed
// the profile and the summary while tracing, the traces (Chrome, Perfetto)
// are written from the same model as it concludes each event, and every
// raw record goes to the .cudatap outputs. The run is modeled once, and
// nothing holds the events in memory.
type traceOutputs struct {
	outs []export.Output
	agg  *export.Aggregates
	// The traces, written live, and the name tables they read: the
	// session's (tracer.Config.Names).
	traces *export.ChromeSet
	names  *model.Names
	// Recordings are written to temporary files in their directory and
	// renamed once the session ends: a session that fails before tracing
	// leaves an existing file of that name untouched.
	recs   []*os.File
	finals []string
	pipe   io.Writer // the recording to stdout (-o - --format cudatap), or nil
	// guardian puts the recordings in place should cudatap be killed
	// before it does (guard).
	guardian *guard.Guardian

	// Where the summary and the notes go (nil: stdout, stderr), the
	// summary as JSON, and how a launched command ended (for the JSON).
	summary, notes io.Writer
	json           bool
	command        *commandJSON
}

// newTraceOutputs opens what the session will stream to.
func newTraceOutputs(outs []export.Output) (*traceOutputs, error) {
	t := &traceOutputs{outs: outs, agg: export.NewAggregates(), names: model.NewNames()}
	for _, o := range outs {
		switch {
		case o.Format == export.Recording && o.Path == export.Stdout:
			t.pipe = o.W
		case o.Format == export.Recording:
			f, err := os.CreateTemp(filepath.Dir(o.Path), "."+filepath.Base(o.Path)+".tmp-*")
			if err != nil {
				t.abort()
				return nil, fmt.Errorf("cannot write output %s: %w", o.Path, err)
			}
			t.recs, t.finals = append(t.recs, f), append(t.finals, o.Path)
		}
	}
	var err error
	if t.traces, err = export.CreateChrome(outs, t.names, export.Options{Version: version, Live: true}); err != nil {
		t.abort()
		return nil, err
	}
	return t, nil
}

// sink is the session's Config.Sink: the aggregates and the traces.
func (t *traceOutputs) sink() model.Sink {
	if t.traces == nil {
		return t.agg.Sink()
	}
	return model.Sinks{t.agg.Sink(), t.traces.Sink()}
}

// guard starts the guardian that puts the recordings in place under their
// names should cudatap be killed before it does (cut where it died, which
// readers say); the session uses it too. anchor: for a launched command
// (guard.Start). nil when there is no recording file.
func (t *traceOutputs) guard(notes io.Writer, anchor bool) *guard.Guardian {
	if len(t.recs) == 0 {
		return nil
	}
	g, err := guard.Start(anchor)
	if err != nil {
		fmt.Fprintf(notes, "cudatap: warning: %v: were cudatap killed, its recording would stay as %s\n", err, t.recs[0].Name())
		return nil
	}
	for i, f := range t.recs {
		g.Output(f.Name(), t.finals[i])
	}
	t.guardian = g
	return g
}

// recording is the session's Config.Recording (nil: none needed).
func (t *traceOutputs) recording() io.Writer {
	var ws []io.Writer
	for _, f := range t.recs {
		ws = append(ws, f)
	}
	if t.pipe != nil {
		ws = append(ws, t.pipe)
	}
	switch len(ws) {
	case 0:
		return nil
	case 1:
		return ws[0]
	}
	return io.MultiWriter(ws...)
}

// abort removes every temporary file (the session failed).
func (t *traceOutputs) abort() {
	for _, f := range t.recs {
		f.Close()
		os.Remove(f.Name())
	}
	t.traces.Abort()
	t.guardian.Close()
}

// finish writes every output from the session's result: the recordings
// are put in place, the profile comes from the aggregates, the traces end
// with the result's track names, counters and loss account. One failing
// output does not stop the others; each failure is reported.
func (t *traceOutputs) finish(cmd *cobra.Command, res *model.Result) error {
	var errs []error
	for i, f := range t.recs {
		err := f.Close()
		if err == nil {
			err = os.Chmod(f.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(f.Name(), t.finals[i])
		}
		if err != nil {
			os.Remove(f.Name())
			errs = append(errs, &export.OutputError{Path: t.finals[i], Err: fmt.Errorf("write %s: %w", t.finals[i], err)})
		}
	}
	t.guardian.Close() // the recordings are in place
	errs = append(errs, export.WritePprof(t.outs, res, t.agg))
	summary, notes := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if t.summary != nil {
		summary, notes = t.summary, t.notes
	}
	warnChromeSize(notes, t.outs, res.Drops.Received, true)
	errs = append(errs, t.traces.Close(res))
	if t.json {
		errs = append(errs, writeSummaryJSON(summary, res, t.agg, t.outs, t.command))
	} else {
		if err := report.Summary(summary, res, t.agg.Syncs, report.Options{Steps: t.agg.Steps.Find(res)}); err != nil {
			errs = append(errs, err)
		}
		t.agg.Stragglers.ReportNamed(summary, straggler.Naming{Result: res})
		reportStalls(summary, t.agg.Progress, "at the end")
		errs = append(errs, writeLints(summary, res, t.agg.Lints, t.lintInput()))
	}
	err := errors.Join(errs...)
	wroteExcept(notes, t.outs, err)
	return err
}

// progress reports how far a pass over f has come on the status line.
func progress(status *statusLine, what string, f *os.File) func(int64) {
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil
	}
	size := fi.Size()
	return func(done int64) {
		status.printf("cudatap: %s: %.0f%% (%s of %s)", what, 100*float64(done)/float64(size), units.Bytes(uint64(done)), units.Bytes(uint64(size)))
	}
}

// wroteExcept says which outputs were written: not those err says failed
// (their file, if any, is what was there before).
func wroteExcept(w io.Writer, outs []export.Output, err error) {
	failed := export.FailedOutputs(err)
	for _, out := range outs {
		if failed[out.Path] {
			continue
		}
		if out.Path == export.Stdout {
			fmt.Fprintf(w, "wrote the %s output to stdout\n", out.Format)
		} else if _, err := os.Stat(out.Path); err == nil {
			fmt.Fprintf(w, "wrote %s (%s)\n", out.Path, out.Format)
		}
	}
}
