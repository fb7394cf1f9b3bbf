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
	"github.com/cudatap/cudatap/tracer/replay"
)

// traceOutputs is what a tracing command writes, and how: aggregates feed
// the profile and the summary while tracing; every raw record goes to the
// .cudatap outputs, or to a spill file next to the first trace when only
// traces (Chrome, Perfetto) were asked for; traces are then written by
// replaying that file. Nothing holds the events in memory.
type traceOutputs struct {
	outs []export.Output
	agg  *export.Aggregates
	// Recordings are written to temporary files in their directory and
	// renamed once the session ends: a session that fails before tracing
	// leaves an existing file of that name untouched.
	recs   []*os.File
	finals []string
	spill  bool      // recs[0] is a spill file, unlinked from the start
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
	t := &traceOutputs{outs: outs, agg: export.NewAggregates()}
	chrome := ""
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
		case o.Format == export.Chrome || o.Format == export.Perfetto:
			if chrome == "" {
				chrome = o.Path
			}
		}
	}
	if len(t.recs) == 0 && chrome != "" {
		// Next to the trace rather than in /tmp, which is often memory.
		dir := filepath.Dir(chrome)
		if chrome == export.Stdout {
			dir = os.TempDir()
		}
		f, err := os.CreateTemp(dir, ".cudatap-spill-*.cudatap")
		if err != nil {
			return nil, fmt.Errorf("cannot write a spill file beside %s: %w", chrome, err)
		}
		// Read back through this descriptor: unlinked now, it is never
		// left behind, however cudatap ends.
		os.Remove(f.Name())
		t.recs, t.spill = []*os.File{f}, true
	}
	return t, nil
}

// guard starts the guardian that puts the recordings in place under their
// names should cudatap be killed before it does (cut where it died, which
// readers say); the session uses it too. anchor: for a launched command
// (guard.Start). nil when there is no recording file.
func (t *traceOutputs) guard(notes io.Writer, anchor bool) *guard.Guardian {
	if t.spill || len(t.recs) == 0 {
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
	t.guardian.Close()
}

// finish writes every output from the session's result: the recordings
// are put in place, the profile comes from the aggregates, the Chrome
// traces from a replay of the recording. One failing output does not stop
// the others; each failure is reported.
func (t *traceOutputs) finish(cmd *cobra.Command, res *model.Result) error {
	var errs []error
	for i, f := range t.recs {
		if t.spill {
			continue
		}
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
	errs = append(errs, t.writeChrome(cmd, res))
	if t.spill {
		t.recs[0].Close()
	}
	summary, notes := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if t.summary != nil {
		summary, notes = t.summary, t.notes
	}
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

// writeChrome replays the recording through a fresh model whose sink
// writes every trace output, Chrome and Perfetto; names come from the
// session.
func (t *traceOutputs) writeChrome(cmd *cobra.Command, res *model.Result) error {
	set, err := export.CreateChrome(t.outs, res.Names, export.Options{Version: version})
	if err != nil || set == nil {
		return err
	}
	f := t.recs[0] // the spill file, unlinked
	if !t.spill {
		var err error
		if f, err = os.Open(t.finals[0]); err != nil {
			set.Abort()
			return fmt.Errorf("read back the recording for the traces: %w", err)
		}
		defer f.Close()
	} else if _, err := f.Seek(0, io.SeekStart); err != nil {
		set.Abort()
		return fmt.Errorf("read back the recording for the traces: %w", err)
	}
	notes := cmd.ErrOrStderr()
	if t.notes != nil {
		notes = t.notes
	}
	warnChromeSize(notes, t.outs, res.Drops.Received, true)
	status := newStatusLine(notes)
	m := model.New(set.Sink())
	_, err = replay.ReadEvents(f, m, progress(status, "writing the trace", f))
	status.clear()
	m.Finish() // lays out what no sync bounded, into the trace
	if err != nil {
		set.Abort()
		return fmt.Errorf("read back the recording for the traces: %w", err)
	}
	return set.Close(res)
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
