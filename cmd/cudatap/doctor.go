package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/tracer/nvml"
	"github.com/cudatap/cudatap/tracer/probe"
)

type doctorOptions struct {
	pids []int
	json bool
}

// newDoctorCmd: lib is the NVML library (nil: the driver's, libnvidia-ml.so.1).
func newDoctorCmd(g *globalOptions, lib gonvml.Interface) *cobra.Command {
	o := &doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor [-p PID]...",
		Short: "Check privileges, kernel support, NVML and CUPTI; with -p, show the CUDA libraries found in a process",
		Long: `doctor checks what tracing needs (the architecture, privileges, BTF, uprobes, the BPF
ring buffer, uprobe_multi links), what the optional parts need (NVML for GPU counters,
CUPTI for GPU times, on by default: warnings, as on a machine without a GPU) and, with -p, which
CUDA libraries each process maps.

It exits 0 when every check passed (warnings pass); else with the status of the first
failure's class: 3 privileges, 4 a process that does not exist, 5 a process without
CUDA, 1 anything else (cudatap --help lists the exit statuses).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r := diagnose(o.pids, lib, hostCUPTI)
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
	cmd.Flags().BoolVar(&o.json, "json", false, "write JSON: kernel, checks (name, status ok/fail/warn/info, detail), processes (pid, error, libraries), ok")
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
	Status string `json:"status"` // "ok", "fail", "warn" (an optional part will be missing), or "info" (a fallback is used)
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

// diagnose runs every check: lib is the NVML library (nil: the driver's),
// cupti finds the CUPTI library GPU times would use.
func diagnose(pids []int, lib gonvml.Interface, cupti func() (string, string)) *doctorReport {
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
	arch := probe.CheckArch()
	check(arch == nil, "architecture", detailOr(arch == nil, runtime.GOARCH+": the BPF programs read CUDA call arguments where this architecture passes them", fmt.Sprint(arch)), arch)
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
	r.Checks = append(r.Checks, nvmlCheck(lib), cuptiCheck(cupti))

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

// nvmlCheck says whether NVML loads and which GPUs it sees: a warning
// without it (no driver, no GPU), since only the GPU counters need it.
func nvmlCheck(lib gonvml.Interface) doctorCheck {
	c := doctorCheck{Name: "NVML (GPU counters)"}
	s, err := nvml.New(nvml.Options{Lib: lib})
	if err != nil {
		c.Status, c.Detail = "warn", err.Error() // what is missing, and that the rest works
		return c
	}
	defer s.Close()
	var names []string
	for _, d := range s.Devices() {
		names = append(names, d.Name)
	}
	c.Status, c.Detail = "ok", fmt.Sprintf("%d GPU(s) (%s), driver %s", len(names), strings.Join(names, ", "), s.Driver())
	return c
}

// cuptiCheck says whether GPU times (on by default) will find a CUPTI
// library: a warning without one, since tracing goes on without it, ops
// drawn within their proven bounds.
func cuptiCheck(cupti func() (string, string)) doctorCheck {
	c := doctorCheck{Name: "CUPTI (GPU times)"}
	path, searched := cupti()
	if path == "" {
		c.Status, c.Detail = "warn", "none found ("+searched+"): GPU times (on by default) need the CUDA toolkit's CUPTI or pip's nvidia-cuda-cupti in the job's environment, or --cupti PATH; without it GPU ops are drawn within their proven bounds, not measured"
		return c
	}
	c.Status, c.Detail = "ok", path+" (a traced process uses the CUPTI it loaded, or the one beside its libcudart, first)"
	return c
}

// hostCUPTI is cuptiOn for this host and cudatap's environment.
func hostCUPTI() (string, string) { return cuptiOn("/", os.Getenv) }

// cuptiOn finds a CUPTI library under root where the collector of
// GPU times looks (tracer/gputime/collector/csrc/collector.c, find_cupti):
// the toolkit's, and pip's NVIDIA wheels, which it finds beside their
// libcudart (nvidia/cu13/lib for CUDA 13, nvidia/cuda_cupti/lib for CUDA 12),
// in the active virtualenv or conda environment, the system's Python and
// the user's. It returns the path found, or "" and where it looked.
func cuptiOn(root string, getenv func(string) string) (path, searched string) {
	toolkit := []string{"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so", "/usr/lib/x86_64-linux-gnu/libcupti.so"}
	wheels := []string{"nvidia/cu13/lib/libcupti.so.13", "nvidia/cuda_cupti/lib/libcupti.so.12"}
	var envs []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if d := getenv(v); d != "" {
			envs = append(envs, d+"/lib/python3*")
		}
	}
	envs = append(envs, "/usr/lib/python3*", "/usr/lib64/python3*", "/usr/local/lib/python3*", "/opt/conda/lib/python3*")
	if home := getenv("HOME"); home != "" {
		envs = append(envs, home+"/.local/lib/python3*")
	}
	patterns := slices.Clone(toolkit)
	for _, env := range envs {
		for _, wheel := range wheels {
			patterns = append(patterns, env+"/*-packages/"+wheel)
		}
	}
	for _, p := range patterns {
		if m, _ := filepath.Glob(filepath.Join(root, p)); len(m) > 0 {
			rel, _ := filepath.Rel(root, m[0])
			return "/" + rel, ""
		}
	}
	return "", fmt.Sprintf("looked for the toolkit's %s, and pip's %s in %s", strings.Join(toolkit, ", "), strings.Join(wheels, ", "),
		strings.Join(envs, "/*-packages, ")+"/*-packages")
}

func (r *doctorReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "kernel %s\n", r.Kernel)
	for _, c := range r.Checks {
		mark := map[string]string{"ok": "ok  ", "fail": "FAIL", "warn": "warn", "info": "info"}[c.Status]
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
