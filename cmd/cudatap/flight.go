package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/internal/flight"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/nvml"
)

// flightFlags are the flight recorder's flags, the same for record and
// agent (internal/flight).
type flightFlags struct {
	window, sync, nccl, cooldown time.Duration
	maxBytes, hostMaxBytes       int64
	dirMaxBytes                  int64
	dir                          string
}

// add registers them; dir is --dumps-dir's default.
func (f *flightFlags) add(cmd *cobra.Command, dir string) {
	fs := cmd.Flags()
	fs.DurationVar(&f.window, "flight-recorder", 0, "keep the last DURATION of every traced process's calls in memory and, when something goes wrong (out of memory, an Xid or a throttle, NCCL ranks that stopped arriving, a synchronization blocked past --flight-sync, a death by a signal), write them to --dumps-dir as a .cudatap with its HTML report (docs/flight-recorder.md); 0: off")
	fs.Int64Var(&f.maxBytes, "flight-max-bytes", flight.DefaultMaxBytes, "with --flight-recorder: what it may hold of each process, in bytes (the oldest calls go first, counted)")
	fs.Int64Var(&f.hostMaxBytes, "flight-host-max-bytes", 0, fmt.Sprintf("with --flight-recorder: what the windows of all processes together may hold, in bytes (the largest gives up its oldest calls, counted); 0: %d, or --flight-max-bytes when larger", flight.DefaultHostMaxBytes))
	fs.StringVar(&f.dir, "dumps-dir", dir, "with --flight-recorder: where the dumps go")
	fs.Int64Var(&f.dirMaxBytes, "dumps-max-bytes", flight.DefaultDirMaxBytes, "with --flight-recorder: keep at most this many bytes of dumps in --dumps-dir, removing the oldest")
	fs.DurationVar(&f.sync, "flight-sync", flight.DefaultSyncAfter, "with --flight-recorder: dump a process whose synchronization blocked this long (negative: never)")
	fs.DurationVar(&f.nccl, "flight-nccl", flight.DefaultNCCLAfter, "with --flight-recorder: dump the ranks of an NCCL communicator once some have waited this long in a collective for ranks that stopped arriving (negative: never)")
	fs.DurationVar(&f.cooldown, "flight-cooldown", flight.DefaultCooldown, "with --flight-recorder: the same trigger again for a process within this long writes no second dump")
}

// check refuses flight flags given without --flight-recorder.
func (f *flightFlags) check(cmd *cobra.Command) error {
	if f.window > 0 {
		return nil
	}
	if f.window < 0 {
		return usageError(fmt.Errorf("--flight-recorder %v: want how much of each process's calls to keep, e.g. 30s", f.window))
	}
	for _, name := range []string{"flight-max-bytes", "flight-host-max-bytes", "dumps-dir", "dumps-max-bytes", "flight-sync", "flight-nccl", "flight-cooldown"} {
		if cmd.Flags().Changed(name) {
			return usageError(fmt.Errorf("--%s goes with --flight-recorder DURATION (e.g. --flight-recorder 30s)", name))
		}
	}
	return nil
}

// recorder starts record's flight recorder: its dumps said on notes as
// they are written, the whole recording to also (nil: none), NVML's events
// and samples (unless nvml is negative) until ctx ends.
func (f *flightFlags) recorder(ctx context.Context, notes io.Writer, also io.Writer, nvmlOn bool, log *slog.Logger) (*flight.Recorder, error) {
	r, err := flight.New(flight.Options{Window: f.window, MaxBytes: f.maxBytes, HostMaxBytes: f.hostMaxBytes, Dir: f.dir, DirMaxBytes: f.dirMaxBytes,
		SyncAfter: f.sync, NCCLAfter: f.nccl, Cooldown: f.cooldown, Also: also, Version: version, Logger: log,
		OnDump: func(res *flight.Result) {
			fmt.Fprintf(notes, "cudatap: flight recorder: %s: %s: wrote %s (%d events, %s)", res.Trigger, res.Detail, res.Path, res.Events, units.Bytes(uint64(res.Bytes)))
			if res.Report != "" {
				fmt.Fprintf(notes, ", report %s", res.Report)
			}
			fmt.Fprintln(notes)
		}})
	if err != nil {
		return nil, usageError(err)
	}
	if nvmlOn {
		go func() {
			s, err := nvml.New(nvml.Options{Interval: time.Second, OnEvent: r.GPUEvent, Logger: log})
			if err != nil {
				log.Info("flight recorder: no NVML, no Xid or throttle trigger", "err", err)
				return
			}
			defer s.Close()
			s.Run(ctx, r.GPUSample)
		}()
	}
	return r, nil
}
