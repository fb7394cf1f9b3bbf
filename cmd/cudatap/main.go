// Command cudatap traces the CUDA runtime, driver and NCCL calls of running
// processes with eBPF uprobes and rebuilds what every CUDA stream did.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/tracer/guard"
)

func main() {
	guard.Init() // this binary re-executed as cudatap's guardian or a command's launcher
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := reportError(newRootCmd().ExecuteContext(ctx))
	stop()
	os.Exit(code)
}

type globalOptions struct {
	verbose bool
	quiet   bool
}

func newRootCmd() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "cudatap",
		Short: "See what CUDA programs really do: per-stream traces and hidden synchronizations, via eBPF",
		Long: `cudatap attaches eBPF uprobes to the CUDA runtime, driver and NCCL inside unmodified,
already running processes, rebuilds what every CUDA stream did, finds the synchronizations
that stall the GPU, and writes Chrome/Perfetto traces, pprof profiles and reports.

Data goes to stdout or the -o files (-o - is stdout); the summary goes to stdout, or to
stderr when -o - takes stdout; notes, warnings and errors go to stderr.

Environment: CUDATAP_DEBUG=1 logs at debug level on stderr (each attach, rescan,
kernel and Python frame named; more than -v).

` + exitCodesHelp,
		Version:       readBuildInfo().Version,
		Args:          cobra.ArbitraryArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		// For "did you mean": cobra's default, which SuggestionsFor leaves 0.
		SuggestionsMinimumDistance: 2,
		// Only for what is not a command: `cudatap` alone shows the help.
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					msg += fmt.Sprintf("; did you mean %q?", s[0])
				}
				return usageError(fmt.Errorf("%s (cudatap --help lists the commands)", msg))
			}
			return cmd.Help()
		},
	}
	root.SetVersionTemplate(readBuildInfo().String() + "\n")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "log attach details to stderr")
	root.PersistentFlags().BoolVarP(&g.quiet, "quiet", "q", false, "print no summary, status line or notes; errors still go to stderr")
	root.AddCommand(newRecordCmd(g), newExportCmd(g), newSyncsCmd(g), newDoctorCmd(g, nil), newGPUsCmd(g, nil), newTopCmd(g, traceForTop), newVersionCmd(), newDemoCmd(g), newAgentCmd(g), newDumpCmd(g), newMergeCmd(g), newReportCmd(g), newLintCmd(g), newManCmd())
	// Now rather than when it runs, so that usageErrors covers it too (its
	// scripts go to os.Stdout, not to a later SetOut); runnable, so that an
	// unknown shell is refused rather than answered with its help.
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil {
		c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	usageErrors(root)
	addCompletions(root)
	return root
}

// usageErrors makes every error cobra finds before a command runs (a flag
// it cannot parse, an argument count) a usage error (exit status 2).
func usageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError(fmt.Errorf("%w (see %s --help)", err, c.CommandPath()))
	})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil && c != root {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return usageError(fmt.Errorf("%w (usage: %s; see %s --help)", err, cmd.UseLine(), cmd.CommandPath()))
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func (g *globalOptions) logger() *slog.Logger {
	level := slog.LevelWarn
	if g.verbose {
		level = slog.LevelInfo
	}
	if os.Getenv("CUDATAP_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// notes is where a command's notes go: the attach line, "wrote ...", the
// status line, advice. Stderr; nowhere with --quiet.
func (g *globalOptions) notes(cmd *cobra.Command) io.Writer {
	if g.quiet {
		return io.Discard
	}
	return cmd.ErrOrStderr()
}

// summary is where the end-of-run summary goes: stdout, or stderr when
// stdout carries an output (-o -); nowhere with --quiet, unless asked for
// as JSON.
func (g *globalOptions) summary(cmd *cobra.Command, piped, asJSON bool) io.Writer {
	switch {
	case g.quiet && !asJSON:
		return io.Discard
	case piped:
		return cmd.ErrOrStderr()
	}
	return cmd.OutOrStdout()
}
