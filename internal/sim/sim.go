// Package sim builds a simulated CUDA runtime and workloads that drive it, so
// cudatap can be tested end to end on machines without a GPU.
//
// The runtime (csrc/cudart_sim.c) exports the real libcudart.so.13 entry
// points with the real prototypes and symbol versions
// (cudaLaunchKernel@@libcudart.so.13) on top of a modeled GPU: every stream
// has a clock, operations take modeled time (a kernel takes 1 µs per block of
// its grid), and synchronizing calls block the host until the model says the
// work is done, as real CUDA does.
//
// The workload (csrc/workload.c) and pysync.py print one JSON line with the
// exact number of calls they made to each entry point; ParseReport reads it.
package sim

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// The C sources live in csrc/: the go tool refuses .c files in a package
// directory that does not use cgo.
//
//go:embed csrc/cuda_sim.h csrc/cudart_sim.c csrc/workload.c csrc/libcudart.map csrc/pysync.py
var sources embed.FS

const (
	// RuntimeSoname is the soname and symbol-version node of the runtime.
	RuntimeSoname = "libcudart.so.13"
	// HashedRuntimeName is how auditwheel-repaired wheels vendor a library.
	HashedRuntimeName = "libcudart-3f2a9c1b.so.13"
)

// ErrNoCompiler is what Compile returns when there is no C compiler.
var ErrNoCompiler = errors.New("cudatap needs a C compiler (cc) to build the simulated CUDA workload: install gcc")

// KernelStubs are the workload's kernel host stubs, the symbols a tracer
// should resolve the func argument of its launches to.
var KernelStubs = []string{"sim_gemm_kernel", "sim_relu_kernel", "sim_reduce_kernel"}

// Build is the set of files Compile produced; every path is absolute.
type Build struct {
	Dir string
	// Runtime is the simulated libcudart.so.13, mode 0644 like a pip install.
	Runtime string
	// Workload links Runtime dynamically and finds it through rpath $ORIGIN.
	Workload string
	// StaticWorkload has the runtime compiled in: the cuda* functions are in
	// .symtab but not in .dynsym.
	StaticWorkload string
	// DlopenWorkload links nothing: it dlopen()s the runtime given by
	// --dlopen PATH after --sleep-ms, for tests of late-loaded libraries.
	DlopenWorkload string
	// HashedRuntime is Runtime vendored as a wheel would: named and
	// sonamed HashedRuntimeName, still versioned libcudart.so.13.
	HashedRuntime string
	// PySync is the ctypes driver: python3 PySync RUNTIME [ITERS] [--wait-stdin].
	PySync string
}

// Compile writes the sources into dir (created if needed) and builds
// everything in it with $CC, or cc.
func Compile(dir string) (*Build, error) {
	cc, err := compiler()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := writeSources(dir); err != nil {
		return nil, err
	}
	b := &Build{
		Dir:            dir,
		Runtime:        filepath.Join(dir, RuntimeSoname),
		Workload:       filepath.Join(dir, "workload"),
		StaticWorkload: filepath.Join(dir, "workload-static"),
		DlopenWorkload: filepath.Join(dir, "workload-dlopen"),
		HashedRuntime:  filepath.Join(dir, HashedRuntimeName),
		PySync:         filepath.Join(dir, "pysync.py"),
	}

	// Compile each translation unit once, then link every variant from the
	// objects; -pthread matters to both steps.
	cc = slices.Concat(cc, []string{"-pthread"})
	compile := func(out string, args ...string) func() error {
		return func() error {
			return run(cc, dir, slices.Concat([]string{"-O2", "-Wall", "-Wextra", "-c", "-o", out}, args))
		}
	}
	link := func(out string, args ...string) func() error {
		return func() error { return run(cc, dir, slices.Concat([]string{"-o", out}, args)) }
	}
	sharedLib := func(out string) func() error {
		return link(out, "-shared", "-Wl,-soname,"+filepath.Base(out), "-Wl,--version-script=libcudart.map", "cudart_sim.o")
	}
	steps := [][]func() error{
		{
			compile("cudart_sim.o", "-fPIC", "cudart_sim.c"),
			compile("workload.o", "workload.c"),
			compile("workload-dlopen.o", "-DSIM_DLOPEN", "workload.c"),
		},
		{
			sharedLib(b.Runtime),
			sharedLib(b.HashedRuntime),
			// No -rdynamic: the runtime's symbols stay out of .dynsym.
			link(b.StaticWorkload, "workload.o", "cudart_sim.o"),
			link(b.DlopenWorkload, "workload-dlopen.o", "-ldl"),
		},
		{link(b.Workload, "workload.o", "-L"+dir, "-l:"+RuntimeSoname, "-Wl,-rpath,$ORIGIN")},
	}
	for _, step := range steps {
		if err := parallel(step...); err != nil {
			return nil, err
		}
	}
	for _, lib := range []string{b.Runtime, b.HashedRuntime} {
		if err := os.Chmod(lib, 0o644); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// compiler returns the C compiler command: $CC (which may carry flags) or cc.
func compiler() ([]string, error) {
	cc := strings.Fields(os.Getenv("CC"))
	if len(cc) == 0 {
		cc = []string{"cc"}
	}
	if _, err := exec.LookPath(cc[0]); err != nil {
		return nil, ErrNoCompiler
	}
	return cc, nil
}

func writeSources(dir string) error {
	entries, err := sources.ReadDir("csrc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		data, err := sources.ReadFile("csrc/" + e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func run(cc []string, dir string, args []string) error {
	cmd := exec.Command(cc[0], slices.Concat(cc[1:], args)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}

// parallel runs fns concurrently and returns their errors joined.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Report is the JSON line the workload and pysync.py print at the end.
type Report struct {
	PID int `json:"pid"`
	// Calls counts the calls made to each entry point; a _ptsz/_ptds call
	// counts under its own symbol name. Entry points never called are absent.
	Calls map[string]int `json:"calls"`
	// Lines (pysync.py only) maps a Python function to the line of the call
	// in it that a tracer should name.
	Lines map[string]int `json:"lines,omitempty"`
}

// ParseReport finds the report in a driver's stdout: its last line that
// starts with '{'.
func ParseReport(stdout []byte) (*Report, error) {
	lines := bytes.Split(bytes.TrimSpace(stdout), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if bytes.HasPrefix(lines[i], []byte("{")) {
			var r Report
			if err := json.Unmarshal(lines[i], &r); err != nil {
				return nil, fmt.Errorf("sim report: %w", err)
			}
			return &r, nil
		}
	}
	return nil, errors.New("sim report: no JSON line in the output")
}
