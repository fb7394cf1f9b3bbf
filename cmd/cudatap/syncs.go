package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

type syncsOptions struct {
	pids     []int
	duration time.Duration
	json     bool
	top      int
	full     bool
	wait     bool
}

func newSyncsCmd(g *globalOptions) *cobra.Command {
	o := &syncsOptions{}
	cmd := &cobra.Command{
		Use:   "syncs [FILE.cudatap | -p PID [-d DURATION] | -- COMMAND...]",
		Short: "List where the host waited for the GPU: sync sites by blocked time, at the user's line, with a fix hint",
		Long: `List where the host waited for the GPU: sync sites by blocked time, each at the innermost
line of the user's code (outside the interpreter, installed packages, the standard library and
the CUDA, NCCL and PyTorch libraries), with where the CUDA call was made and a fix hint.
Blocked time counts each thread's time once. Background threads (NCCL's watchdog, threads that
launch no work) are shown apart: they did not hold up the threads that launch work.`,
		Example: `  cudatap syncs run.cudatap
  cudatap syncs --full-stacks run.cudatap
  sudo cudatap syncs -p 4123 -d 20s
  sudo cudatap syncs --json -- python3 train.py`,
		Args: syncsArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			col := syncs.NewCollector()
			res, err := syncsResult(cmd, g, o, args, col)
			if err != nil {
				return err
			}
			sites, hosts := syncs.Sites(res, col), syncs.Hosts(res, col)
			if o.json {
				err = syncs.WriteJSON(cmd.OutOrStdout(), res, sites, hosts)
			} else {
				err = syncs.WriteText(cmd.OutOrStdout(), res, sites, hosts, syncs.TextOptions{Top: o.top, FullStacks: o.full})
			}
			if err == nil && res.Truncated != "" {
				return &exitError{code: exitPartial} // said when it was read
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntSliceVarP(&o.pids, "pid", "p", nil, "trace these running processes (repeatable or comma-separated)")
	f.DurationVarP(&o.duration, "duration", "d", 0, "when tracing live: stop after this long")
	f.BoolVar(&o.json, "json", false, "write JSON instead of a table")
	f.IntVar(&o.top, "top", 20, "show at most this many sites in the table")
	f.BoolVar(&o.full, "full-stacks", false, "show every Python and native frame of each site (the JSON output always has them)")
	f.BoolVar(&o.wait, "wait-for-cuda", false, "accept processes that have not loaded CUDA yet and hook it when they do")
	return cmd
}

// syncsArgs: one recording, or nothing but -p and a command after --.
func syncsArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	pids := cmd.Flags().Changed("pid")
	switch {
	case dash > 0:
		return fmt.Errorf("unexpected arguments %q: put the command to trace after --", args[:dash])
	case dash == 0 && len(args) == 0:
		return errors.New("nothing after --: give the command to trace")
	case dash < 0 && pids && len(args) > 0:
		return fmt.Errorf("unexpected arguments %q: -p traces running processes; give a recording without -p, or a command after --", args)
	case dash < 0 && !pids && len(args) != 1:
		return fmt.Errorf("give one .cudatap recording, -p PID, or a command after -- (%d arguments given)", len(args))
	}
	return nil
}

// syncsResult traces (or replays) with col as the model's sink.
func syncsResult(cmd *cobra.Command, g *globalOptions, o *syncsOptions, args []string, col *syncs.Collector) (*model.Result, error) {
	dash := cmd.ArgsLenAtDash()
	if len(o.pids) == 0 && dash < 0 {
		f, err := openRecording(cmd.Context(), args[0], "syncs")
		if err != nil {
			return nil, err
		}
		defer f.Close()
		res, _, err := replay.Load(f, func(*replay.Replay) model.Sink { return col }, nil)
		if errors.Is(err, recording.ErrTruncated) && res != nil {
			res.Truncated = err.Error()
			fmt.Fprintf(cmd.ErrOrStderr(), "cudatap: warning: %s: %v; the sites of the records before the cut\n", args[0], err)
			err = nil
		}
		return res, interrupted(cmd.Context(), "syncs", err)
	}
	var command []string
	if dash >= 0 {
		command = args[dash:]
	}
	if err := checkTargets(o.pids, command); err != nil {
		return nil, err
	}
	stderr := cmd.ErrOrStderr()
	status := newStatusLine(stderr)
	out, err := tracer.Run(cmd.Context(), tracer.Config{
		PIDs: o.pids, Command: command, Duration: o.duration, Stacks: probe.StacksSync, WaitForCUDA: o.wait,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Logger: g.logger(),
		Observer: tracer.Funcs{OnAttached: printAttached(stderr), OnStatus: status.update},
		Sink:     col,
	})
	status.clear()
	if err != nil {
		return nil, err
	}
	return out.Result, nil
}
