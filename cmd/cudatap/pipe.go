package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/internal/units"
)

// planOutputs is export.Plan for a command's -o and --format: how they
// are asked for is checked first (a usage error, exit status 2: a format
// cudatap cannot tell, `-o -` without --format or twice), then whether
// each can be written; `-o -` gets the command's stdout. piped says stdout
// carries an output, so that nothing else goes there.
func planOutputs(cmd *cobra.Command, paths []string, format string, inputs ...string) (outs []export.Output, piped bool, err error) {
	for _, p := range paths {
		if p == export.Stdout {
			switch {
			case piped:
				return nil, false, usageError(errors.New("-o - is given twice: the standard output takes one output"))
			case format == "":
				return nil, false, usageError(errors.New("-o - writes to the standard output, which has no extension: pass --format (chrome, perfetto, pprof or cudatap)"))
			}
			piped = true
		}
		if _, err := export.FormatOf(p, format); err != nil {
			return nil, false, usageError(err)
		}
	}
	if outs, err = export.Plan(paths, format, inputs...); err != nil {
		return nil, false, err
	}
	for i := range outs {
		if outs[i].Path == export.Stdout {
			outs[i].W = cmd.OutOrStdout()
		}
	}
	return outs, piped, nil
}

// chromeBytesPerRecord is about what one record of a recording becomes in
// a Chrome trace: 770-850 bytes on the simulated workloads, whatever
// --stacks (stacks are on the sync slices only: a small part of a trace).
const chromeBytesPerRecord = 850

// chromeWarnBytes: a Chrome trace estimated larger than this gets a
// warning before it is written. Viewers hold the whole trace in memory
// and slow down well before it (a 139 MB trace already takes a while to
// open); chrome://tracing gives up a little above.
const chromeWarnBytes = 256 << 20

// warnChromeSize warns on w, before the Chrome outputs of outs are
// written, when they will be very large: records is the number of records
// of the recording they come from. live says the recording was just made
// (so -d applies to the next one).
func warnChromeSize(w io.Writer, outs []export.Output, records uint64, live bool) {
	chrome := false
	for _, o := range outs {
		chrome = chrome || o.Format == export.Chrome
	}
	size := records * chromeBytesPerRecord
	if !chrome || size < chromeWarnBytes {
		return
	}
	fmt.Fprintf(w, "cudatap: warning: the Chrome trace will be about %s (%d records); trace viewers load traces this large slowly, if at all (.json.gz saves disk, not the viewer's memory). "+
		"A shorter recording makes a smaller trace (-d/--duration%s); for the overview, the pprof profile (-o profile.pb.gz), `cudatap syncs` and the summary need no trace.\n",
		units.Bytes(size), records, map[bool]string{true: ", next time", false: " on record"}[live])
}
