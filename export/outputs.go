// Package export turns a finished model into files: Chrome/Perfetto traces
// (export/chrome), pprof profiles (export/pprofout), text reports
// (export/report). This file picks the exporter for each output path.
package export

import (
	"fmt"
	"os"
	"strings"

	"github.com/cudatap/cudatap/export/chrome"
	"github.com/cudatap/cudatap/export/pprofout"
	"github.com/cudatap/cudatap/tracer/model"
)

// Format of an output file.
type Format string

const (
	Chrome    Format = "chrome"  // .json, .json.gz
	Pprof     Format = "pprof"   // .pb.gz
	Recording Format = "cudatap" // .cudatap
)

// Formats lists the accepted --format values.
var Formats = []Format{Chrome, Pprof, Recording}

// FormatOf picks the format from the path's extension, or from override.
func FormatOf(path, override string) (Format, error) {
	if override != "" {
		for _, f := range Formats {
			if string(f) == override {
				return f, nil
			}
		}
		return "", fmt.Errorf("unknown --format %q: use chrome, pprof or cudatap", override)
	}
	switch {
	case strings.HasSuffix(path, ".json"), strings.HasSuffix(path, ".json.gz"):
		return Chrome, nil
	case strings.HasSuffix(path, ".pb.gz"), strings.HasSuffix(path, ".pb"), strings.HasSuffix(path, ".pprof"):
		return Pprof, nil
	case strings.HasSuffix(path, ".cudatap"):
		return Recording, nil
	}
	return "", fmt.Errorf("cannot tell the format of %q from its extension: use .json/.json.gz (Chrome trace), .pb.gz (pprof) or .cudatap (recording), or pass --format", path)
}

// Output is one requested output file.
type Output struct {
	Path   string
	Format Format
}

// Plan resolves every path's format and makes sure each can be written,
// before any tracing starts: a typo must not cost a recording.
func Plan(paths []string, override string) ([]Output, error) {
	var outs []Output
	for _, p := range paths {
		f, err := FormatOf(p, override)
		if err != nil {
			return nil, err
		}
		fh, err := os.Create(p)
		if err != nil {
			return nil, fmt.Errorf("cannot write output %s: %w", p, err)
		}
		fh.Close()
		outs = append(outs, Output{Path: p, Format: f})
	}
	return outs, nil
}

// Options shared by the exporters.
type Options struct {
	Version  string
	Counters []chrome.Counter
}

// Write writes r to o (not for recordings, which are streamed while tracing).
func Write(o Output, r *model.Result, opts Options) error {
	switch o.Format {
	case Chrome:
		counters := opts.Counters
		for _, c := range r.Counters {
			counters = append(counters, chrome.Counter{Name: c.Name, PID: chrome.DevicePID(c.Device), TS: c.TS, Values: c.Values})
		}
		return chrome.WriteFile(o.Path, r, chrome.Options{Version: opts.Version, Counters: counters})
	case Pprof:
		return pprofout.WriteFile(o.Path, r, pprofout.Options{})
	}
	return fmt.Errorf("%s: format %s is written while recording, not from a model", o.Path, o.Format)
}
