package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/tracer/probe"
)

type doctorOptions struct {
	pids []int
}

func newDoctorCmd(g *globalOptions) *cobra.Command {
	o := &doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor [-p PID]...",
		Short: "Check privileges and kernel support; with -p, show the CUDA libraries found in a process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDoctor(cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().IntSliceVarP(&o.pids, "pid", "p", nil, "process to inspect (repeatable or comma-separated)")
	return cmd
}

func runDoctor(w io.Writer, o *doctorOptions) error {
	failed := 0
	check := func(ok bool, what, detail string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "[%s] %-28s %s\n", mark, what, detail)
	}
	f := probe.Features()
	fmt.Fprintf(w, "kernel %s\n", f.Kernel)

	check(len(f.MissingCapabilities) == 0, "privileges", privDetail(f.MissingCapabilities))
	check(f.BTF, "BTF", detailOr(f.BTF, "/sys/kernel/btf/vmlinux present", "/sys/kernel/btf/vmlinux missing: build the kernel with CONFIG_DEBUG_INFO_BTF=y"))
	check(f.Uprobes, "uprobes", detailOr(f.Uprobes, "supported", "CONFIG_UPROBE_EVENTS=y is needed"))
	if f.Probed {
		check(f.RingBuffer, "BPF ring buffer", detailOr(f.RingBuffer, "supported", "not supported: needs Linux 5.8+"))
		if f.UprobeMulti {
			fmt.Fprintf(w, "[ok  ] %-28s %s\n", "uprobe_multi links", "supported (one link per library, fast detach)")
		} else {
			fmt.Fprintf(w, "[info] %-28s %s\n", "uprobe_multi links", "not available (Linux 6.6+): falling back to one uprobe per symbol, slower to detach")
		}
	}

	cache := objfile.NewCache(128)
	for _, pid := range o.pids {
		fmt.Fprintf(w, "\nprocess %d:\n", pid)
		d, err := probe.Discover(pid, cache, nil)
		if err != nil {
			check(false, "discover", err.Error())
			continue
		}
		if len(d.Libraries) == 0 {
			check(false, "CUDA libraries", d.NoCUDAError().Error())
			continue
		}
		for _, lib := range d.Libraries {
			how := "exported symbols"
			if lib.Static {
				how = "statically linked, .symtab"
			}
			fmt.Fprintf(w, "  %-8s %s (%s; opened via %s)\n", lib.Layer, lib.Path, how, lib.OpenPath)
		}
		if d.LdSo != nil {
			fmt.Fprintf(w, "  loader   %s (library loads are watched)\n", d.LdSo.Path)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d check(s) failed", failed)
	}
	return nil
}

func privDetail(missing []string) string {
	if len(missing) == 0 {
		return "CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE available"
	}
	return probe.CheckPrivileges().Error()
}

func detailOr(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}
