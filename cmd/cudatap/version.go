package main

import (
	"fmt"
	"runtime"

	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print cudatap's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "cudatap %s (%s, %s/%s, recording format v%d)\n",
				version, runtime.Version(), runtime.GOOS, runtime.GOARCH, recording.Version)
			return nil
		},
	}
}
