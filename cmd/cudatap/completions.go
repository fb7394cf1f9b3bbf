package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/internal/procfs"
)

// addCompletions gives the shell completions (`cudatap completion bash`)
// values, by flag name wherever the flag is: --stacks, --format and
// --fail-on their values, -p the processes that map CUDA, and the commands that read
// recordings .cudatap files.
func addCompletions(root *cobra.Command) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("stacks") != nil {
			c.RegisterFlagCompletionFunc("stacks", fixedValues(
				"none\tno stacks (cheapest)", "sync\tstacks of calls that may block (default)", "all\tstacks of every call"))
		}
		if c.Flags().Lookup("format") != nil {
			formats := []string{"chrome\tChrome/Kineto trace (JSON; HTA reads it)", "perfetto\tPerfetto trace (protobuf, compact)", "pprof\tpprof profile (gzipped protobuf)"}
			if c.Name() != "export" { // export makes no recordings
				formats = append(formats, "cudatap\traw .cudatap recording")
			}
			c.RegisterFlagCompletionFunc("format", fixedValues(formats...))
		}
		if c.Flags().Lookup("fail-on") != nil {
			c.RegisterFlagCompletionFunc("fail-on", fixedValues(
				"error\tfail on possible races", "warning\tand on findings that cost at least 1% of the run", "note\ton any finding"))
		}
		if c.Flags().Lookup("pid") != nil {
			c.RegisterFlagCompletionFunc("pid", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
				return cudaProcesses(), cobra.ShellCompDirectiveNoFileComp
			})
		}
		switch c.Name() {
		case "export", "lint", "report", "syncs", "merge":
			one := c.Name() == "export" || c.Name() == "lint" || c.Name() == "report"
			c.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
				if one && len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return []string{"cudatap"}, cobra.ShellCompDirectiveFilterFileExt
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func fixedValues(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// cudaProcesses lists the processes this user may see that map a CUDA
// runtime, driver or NCCL library, as "PID\tcomm: command line".
func cudaProcesses() []string {
	pids, err := procfs.PIDs()
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []string
	for _, pid := range pids {
		if pid == self {
			continue
		}
		maps, err := procfs.Maps(pid)
		if err != nil || !mapsCUDA(maps) {
			continue
		}
		comm, _ := procfs.Comm(pid)
		desc := comm
		if args, err := procfs.Cmdline(pid); err == nil && len(args) > 0 {
			desc = fmt.Sprintf("%s: %s", comm, strings.Join(args, " "))
			if len(desc) > 80 {
				desc = desc[:77] + "..."
			}
		}
		out = append(out, strconv.Itoa(pid)+"\t"+desc)
	}
	return out
}

// mapsCUDA tells from a process's memory map whether it has loaded a
// library cudatap hooks: a cheap look at file names, where discovery
// (tracer/probe) reads their symbols.
func mapsCUDA(maps []byte) bool {
	for _, lib := range [][]byte{[]byte("/libcudart.so"), []byte("/libcuda.so"), []byte("/libnccl.so")} {
		if bytes.Contains(maps, lib) {
			return true
		}
	}
	return false
}
