package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

type lintOptions struct {
	json   bool
	failOn string
}

func newLintCmd(g *globalOptions) *cobra.Command {
	o := &lintOptions{}
	cmd := &cobra.Command{
		Use:   "lint IN.cudatap [--json] [--fail-on LEVEL]",
		Short: "Find CUDA usage patterns that cost time or correctness, each with the calls that show it and the fix",
		Long: `lint replays a recording and reports, per process, what practice says to fix:
  legacy-nonblocking-copy  an asynchronous host↔device copy on the legacy default stream
  cross-stream-race        device memory written on one stream and used on another with no event
                           wait or synchronization between (a possible race; copies and memsets only:
                           kernel arguments are not traced)
  many-busy-streams        more than 8 streams with GPU work at once on one device
  pageable-copy-loop       one call site copying pageable host memory 10 times or more
  sync-every-launch        a synchronize after every launch, 10 launches in a row or more
Each finding shows its examples: the calls, when, on which thread and stream, and at which line
(the innermost line of the user's code: record with --stacks all to have one for launches and
memsets too), and the fix.
Each finding is priced: the time it cost (host time blocked, GPU work serialized, time with more
busy streams than hardware queues), measured where the times exist (the host's clock; the GPU's
with record --gpu-times) and "at most" a bound otherwise. Its level: error, a possible race (a
wrong result, whatever it costs); warning, it cost at least 1% of its process's traced time (or
may have); note, less: listed, not raised. Findings are ranked by level, then cost.
The exit status is 0 whether or not a lint fired, unless --fail-on LEVEL: then 7 when a finding
at that level or a more severe one fired (for CI: --fail-on error fails on races, --fail-on
warning also on costly findings, --fail-on note on any). docs/lints.md has the details.`,
		Example: `  cudatap lint run.cudatap
  cudatap lint --json run.cudatap
  cudatap lint --fail-on warning run.cudatap || exit 1   # in CI`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return interrupted(cmd.Context(), "lint", runLint(cmd, o, args[0]))
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "write the findings, the rules and the loss account as JSON")
	cmd.Flags().StringVar(&o.failOn, "fail-on", "", "exit 7 when a finding at this level or a more severe one fires: error, warning or note")
	return cmd
}

func runLint(cmd *cobra.Command, o *lintOptions, in string) error {
	var failOn lint.Level
	if o.failOn != "" {
		l, err := lint.ParseLevel(o.failOn)
		if err != nil {
			return usageError(fmt.Errorf("--fail-on: %w", err))
		}
		failOn = l
	}
	f, err := openRecording(cmd.Context(), in, "lint")
	if err != nil {
		return err
	}
	defer f.Close()
	col := lint.NewCollector(lint.DefaultOptions())
	res, _, err := replay.Load(f, func(*replay.Replay) model.Sink { return col }, nil)
	truncated := false
	switch {
	case errors.Is(err, recording.ErrTruncated) && res != nil:
		res.Truncated = err.Error()
		truncated = true
		fmt.Fprintf(cmd.ErrOrStderr(), "cudatap: warning: %s: %v; linting the records before the cut\n", in, err)
	case err != nil:
		return fmt.Errorf("%s: %w", in, err)
	}
	findings := lint.Findings(res, col)
	if o.json {
		err = lint.WriteJSON(cmd.OutOrStdout(), res, col, findings)
	} else {
		err = lint.WriteText(cmd.OutOrStdout(), res, col, findings, lint.TextOptions{})
	}
	if err != nil {
		return err
	}
	if err := failed(findings, failOn); err != nil {
		return err
	}
	if truncated {
		return &exitError{code: exitPartial} // said above
	}
	return nil
}

// failed is --fail-on's verdict: an error (exit 7) naming the findings
// at level min or a more severe one, nil when none fired ("" : never).
func failed(fs []lint.Finding, min lint.Level) error {
	if min == "" {
		return nil
	}
	var at []lint.Finding
	for _, f := range fs {
		if f.Level.AtLeast(min) {
			at = append(at, f)
		}
	}
	if len(at) == 0 {
		return nil
	}
	names := make([]string, len(at))
	for i, f := range at {
		names[i] = fmt.Sprintf("%s %s in %s", f.Level, f.ID, f.Process)
	}
	n := fmt.Sprintf("%d findings", len(at))
	if len(at) == 1 {
		n = "1 finding"
	}
	return withCode(exitLint, fmt.Errorf("lint: %s at --fail-on %s or above: %s", n, min, strings.Join(names, "; ")))
}

// writeLints writes the summary's lint section (nothing when no lint
// fired); in names the recording `cudatap lint` can read, "" if none.
func writeLints(w io.Writer, res *model.Result, col *lint.Collector, in string) error {
	return lint.WriteText(w, res, col, lint.Findings(res, col), lint.TextOptions{Section: true, Examples: 1, Input: in})
}

// lintInput is the recording this session writes, for the summary's hint
// to `cudatap lint` ("" when it writes none to a file).
func (t *traceOutputs) lintInput() string {
	if len(t.finals) > 0 {
		return t.finals[0]
	}
	return ""
}
