// Command cudatap traces the CUDA runtime, driver and NCCL calls of running
// processes with eBPF uprobes and rebuilds what every CUDA stream did.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "cudatap:", err)
		os.Exit(1)
	}
}

// exitError carries a specific exit status (the traced command's) without
// printing anything more.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

type globalOptions struct {
	verbose bool
}

func newRootCmd() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "cudatap",
		Short: "See what CUDA programs really do: per-stream traces and hidden synchronizations, via eBPF",
		Long: `cudatap attaches eBPF uprobes to the CUDA runtime, driver and NCCL inside unmodified,
already running processes, rebuilds what every CUDA stream did, finds the synchronizations
that stall the GPU, and writes Chrome/Perfetto traces, pprof profiles and reports.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "log attach details to stderr")
	root.AddCommand(newRecordCmd(g), newExportCmd(g), newSyncsCmd(g), newDoctorCmd(g), newGPUsCmd(g), newTopCmd(g, traceForTop), newVersionCmd(), newDemoCmd(g), newAgentCmd(g), newMergeCmd(g))
	return root
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
