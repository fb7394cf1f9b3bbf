package html

import (
	"errors"
	"fmt"
	"io"

	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

// Load makes the report of a recording. It replays the recording into a
// Collector; when the recording holds more slices than opts.MaxSlices it
// replays it once more, keeping only the slices of the busiest window
// (DetailWindow) for the timeline. progress, if set, is told which pass
// runs and how many bytes of it are read. A truncated recording still
// makes a report, of what was recorded before the cut (the result's
// Truncated says so), returned with recording.ErrTruncated. A flight
// recorder's dump leads with what made it.
func Load(f io.ReadSeeker, opts Options, progress func(pass string, done int64)) (*Report, error) {
	prog := func(pass string) func(int64) {
		if progress == nil {
			return nil
		}
		return func(n int64) { progress(pass, n) }
	}
	c := NewCollector(opts)
	var sink model.Sink = c
	if opts.Also != nil {
		sink = model.Sinks{c, opts.Also}
	}
	res, rp, err := replay.Load(f, func(*replay.Replay) model.Sink { return sink }, prog("reading"))
	var truncated error
	switch {
	case errors.Is(err, recording.ErrTruncated) && res != nil:
		res.Truncated = err.Error()
		truncated = err
	case err != nil:
		return nil, err
	}
	if from, to, need := c.DetailWindow(); need {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("rewind the recording for the timeline's detail: %w", err)
		}
		sink := c.DetailPass(from, to)
		if _, _, err := replay.Load(f, func(*replay.Replay) model.Sink { return sink }, prog("timeline detail")); err != nil && !errors.Is(err, recording.ErrTruncated) {
			return nil, fmt.Errorf("timeline detail: %w", err)
		}
	}
	rep := c.Build(res)
	if rp != nil && rp.Header.Flight != nil {
		rep.flightLead(rp.Header.Flight)
	}
	return rep, truncated
}
