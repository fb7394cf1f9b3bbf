package merge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

// Tool names `cudatap merge` in the header of the recordings it writes.
const Tool = "cudatap merge"

// Replay reads the inputs again, each on the timeline (Transforms),
// interleaved by time into one model whose sink newSink returns; newSink
// gets the combined replay (every input's names, NVML series, GPU report)
// before the first event. rec, when set, receives the merged recording:
// every record of the inputs, on the timeline, which `cudatap export`
// reads like any other. A truncated input contributes what it holds
// (Result.Truncated says which); any other error stops the replay, and so
// does ctx ending (the inputs are closed under it).
func (p *Plan) Replay(ctx context.Context, rec io.Writer, newSink func(*replay.Replay) model.Sink, progress func(int64)) (*model.Result, error) {
	ts := p.Transforms()
	ins := make([]replay.Input, len(p.Inputs))
	for i, in := range p.Inputs {
		f, err := os.Open(in.Path)
		if err != nil {
			return nil, fmt.Errorf("open recording: %w", err)
		}
		defer f.Close()
		if ctx.Err() != nil {
			f.Close() // at once: AfterFunc's goroutine could come after the reads
		}
		defer context.AfterFunc(ctx, func() { f.Close() })()
		ins[i] = replay.Input{R: f, Transform: ts[i]}
	}
	var w *recording.Writer
	var werr error
	res, all, _, err := replay.LoadInputs(ins, func(all *replay.Replay) model.Sink {
		if rec != nil {
			if w, werr = recording.NewWriter(rec, p.Header(Tool)); werr == nil {
				// Processes are named by their records among the events.
				w.Names(all.Names, false)
			}
		}
		if newSink == nil {
			return nil
		}
		return newSink(all)
	}, replay.LoadOptions{Progress: progress, Record: func(_ int, rs *replay.Records) {
		if w != nil {
			w.Copy(rs.Reader)
		}
	}})
	var truncated []string
	for _, e := range unjoin(err) {
		var ie *replay.InputError
		if errors.As(e, &ie) {
			if !errors.Is(ie.Err, recording.ErrTruncated) {
				return nil, fmt.Errorf("%s: %w", p.Inputs[ie.Input].Path, ie.Err)
			}
			truncated = append(truncated, fmt.Sprintf("%s: %v", p.Inputs[ie.Input].Path, ie.Err))
		} else if errors.Is(e, recording.ErrTruncated) && len(p.Inputs) == 1 {
			truncated = append(truncated, fmt.Sprintf("%s: %v", p.Inputs[0].Path, e))
		} else {
			return nil, e
		}
	}
	if res == nil {
		return nil, errors.New("merge: nothing replayed")
	}
	res.WallOffsetNs = p.WallOffsetNs()
	res.Truncated = strings.Join(truncated, "; ")
	if werr != nil {
		return res, fmt.Errorf("write merged recording: %w", werr)
	}
	if w != nil {
		for _, c := range all.Counters {
			w.Counter(c)
		}
		if all.GPU != nil {
			w.GPU(*all.GPU)
		}
		if all.Drops != nil {
			w.Drops(*all.Drops)
		}
		if err := w.Close(); err != nil {
			return res, err
		}
	}
	return res, nil
}

// unjoin lists the errors errors.Join joined (err itself otherwise).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
