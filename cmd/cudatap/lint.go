package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

type lintOptions struct {
	json bool
}

func newLintCmd(g *globalOptions) *cobra.Command {
	o := &lintOptions{}
	cmd := &cobra.Command{
		Use:   "lint IN.cudatap [--json]",
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
memsets too), and the fix. The exit status is 0 whether or not a lint fired.`,
		Example: `  cudatap lint run.cudatap
  cudatap lint --json run.cudatap`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLint(cmd, o, args[0])
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "write the findings, the rules and the loss account as JSON")
	return cmd
}

func runLint(cmd *cobra.Command, o *lintOptions, in string) error {
	f, err := openRecording(in, "lint")
	if err != nil {
		return err
	}
	defer f.Close()
	col := lint.NewCollector(lint.DefaultOptions())
	res, _, err := recording.Load(f, func(*recording.Replay) model.Sink { return col }, nil)
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
	if truncated {
		return &exitError{code: exitPartial} // said above
	}
	return nil
}

// writeLints writes the summary's lint section (nothing when no lint
// fired); in names the recording `cudatap lint` can read, "" if none.
func writeLints(w io.Writer, res *model.Result, col *lint.Collector, in string) error {
	return lint.WriteText(w, res, col, lint.Findings(res, col), lint.TextOptions{Section: true, Examples: 1, Input: in})
}

// lintInput is the recording this session writes, for the summary's hint
// to `cudatap lint` ("" when it writes none to a file).
func (t *traceOutputs) lintInput() string {
	if len(t.finals) > 0 && !t.spill {
		return t.finals[0]
	}
	return ""
}
