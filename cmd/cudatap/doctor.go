package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/tracer/probe"
)

type doctorOptions struct {
	pids []int
	json bool
}

func newDoctorCmd(g *globalOptions) *cobra.Command {
	o := &doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor [-p PID]...",
		Short: "Check privileges and kernel support; with -p, show the CUDA libraries found in a process",
		Long: `doctor checks what tracing needs (privileges, BTF, uprobes, the BPF ring buffer,
uprobe_multi links) and, with -p, which CUDA libraries each process maps.

It exits 0 when every check passed; else with the status of the first failure's
class: 3 privileges, 4 a process that does not exist, 5 a process without CUDA,
1 anything else (cudatap --help lists the exit statuses).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := diagnose(o.pids)
			if o.json {
				if err := writeJSON(cmd.OutOrStdout(), r); err != nil {
					return err
				}
			} else {
				r.writeText(cmd.OutOrStdout())
			}
			return r.err()
		},
	}
	cmd.Flags().IntSliceVarP(&o.pids, "pid", "p", nil, "process to inspect (repeatable or comma-separated)")
	cmd.Flags().BoolVar(&o.json, "json", false, "write JSON: kernel, checks (name, status ok/fail/info, detail), processes (pid, error, libraries), ok")
	return cmd
}

// doctorReport is what doctor found; `doctor --json` writes it as it is.
type doctorReport struct {
	Kernel    string          `json:"kernel"`
	Checks    []doctorCheck   `json:"checks"`
	Processes []doctorProcess `json:"processes,omitempty"`
	OK        bool            `json:"ok"` // every check passed: doctor exits 0
	failures  []error         // each failed check's error, for the exit status
}

type doctorCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"` // "ok", "fail", or "info" (a fallback is used)
	Detail string `json:"detail"`
}

type doctorProcess struct {
	PID       int             `json:"pid"`
	Error     string          `json:"error,omitempty"` // why it cannot be traced (no such process, no CUDA)
	Libraries []doctorLibrary `json:"libraries,omitempty"`
	Loader    string          `json:"loader,omitempty"` // the dynamic linker whose library loads are watched
	err       error
}

type doctorLibrary struct {
	Layer    string `json:"layer"` // runtime, driver, nccl
	Path     string `json:"path"`
	OpenPath string `json:"open_path"` // how cudatap opens it (through /proc/PID/root)
	Static   bool   `json:"static"`    // statically linked: hooked through .symtab
}

func diagnose(pids []int) *doctorReport {
	r := &doctorReport{OK: true}
	check := func(ok bool, name, detail string, err error) {
		status := "ok"
		if !ok {
			status = "fail"
			r.OK = false
			if err == nil {
				err = errors.New(name + ": " + detail)
			}
			r.failures = append(r.failures, err)
		}
		r.Checks = append(r.Checks, doctorCheck{Name: name, Status: status, Detail: detail})
	}
	f := probe.Features()
	r.Kernel = f.Kernel
	check(len(f.MissingCapabilities) == 0, "privileges", privDetail(f.MissingCapabilities), probe.CheckPrivileges())
	check(f.BTF, "BTF", detailOr(f.BTF, "/sys/kernel/btf/vmlinux present", "/sys/kernel/btf/vmlinux missing: build the kernel with CONFIG_DEBUG_INFO_BTF=y"), nil)
	check(f.Uprobes, "uprobes", detailOr(f.Uprobes, "supported", "CONFIG_UPROBE_EVENTS=y is needed"), nil)
	if f.Probed {
		check(f.RingBuffer, "BPF ring buffer", detailOr(f.RingBuffer, "supported", "not supported: needs Linux 5.8+"), nil)
		if f.UprobeMulti {
			r.Checks = append(r.Checks, doctorCheck{"uprobe_multi links", "ok", "supported (one link per library, fast detach)"})
		} else {
			r.Checks = append(r.Checks, doctorCheck{"uprobe_multi links", "info", "not available (Linux 6.6+): falling back to one uprobe per symbol, slower to detach"})
		}
	}

	cache := objfile.NewCache(128)
	for _, pid := range pids {
		p := doctorProcess{PID: pid}
		d, err := probe.Discover(pid, cache, nil)
		if err == nil && len(d.Libraries) == 0 {
			err = d.NoCUDAError()
		}
		if err != nil {
			p.Error, p.err = err.Error(), err
			r.OK = false
			r.failures = append(r.failures, err)
		} else {
			for _, lib := range d.Libraries {
				p.Libraries = append(p.Libraries, doctorLibrary{Layer: lib.Layer.String(), Path: lib.Path, OpenPath: lib.OpenPath, Static: lib.Static})
			}
			if d.LdSo != nil {
				p.Loader = d.LdSo.Path
			}
		}
		r.Processes = append(r.Processes, p)
	}
	return r
}

func (r *doctorReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "kernel %s\n", r.Kernel)
	for _, c := range r.Checks {
		mark := map[string]string{"ok": "ok  ", "fail": "FAIL", "info": "info"}[c.Status]
		fmt.Fprintf(w, "[%s] %-28s %s\n", mark, c.Name, c.Detail)
	}
	for _, p := range r.Processes {
		fmt.Fprintf(w, "\nprocess %d:\n", p.PID)
		if p.Error != "" {
			name := "discover"
			if errors.Is(p.err, probe.ErrNoCUDA) {
				name = "CUDA libraries"
			}
			fmt.Fprintf(w, "[FAIL] %-28s %s\n", name, p.Error)
			continue
		}
		for _, lib := range p.Libraries {
			how := "exported symbols"
			if lib.Static {
				how = "statically linked, .symtab"
			}
			fmt.Fprintf(w, "  %-8s %s (%s; opened via %s)\n", lib.Layer, lib.Path, how, lib.OpenPath)
		}
		if p.Loader != "" {
			fmt.Fprintf(w, "  loader   %s (library loads are watched)\n", p.Loader)
		}
	}
}

// err says how many checks failed; its exit status is the first failure's
// class (exitCode).
func (r *doctorReport) err() error {
	if r.OK {
		return nil
	}
	return withCode(exitCode(r.failures[0]), fmt.Errorf("%d check(s) failed", len(r.failures)))
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
