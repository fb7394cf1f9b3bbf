// Package sim builds a simulated CUDA runtime, driver and NCCL, and workloads
// that drive them, so cudatap can be tested end to end on machines without a
// GPU.
//
// The driver (csrc/cuda_driver_sim.c, libcuda.so.1) exports the real driver
// entry points with the real prototypes, unversioned like the real library,
// on top of a modeled GPU: every stream has a clock, operations take modeled
// time (a kernel takes 1 µs per block of its grid), and synchronizing calls
// block the host until the model says the work is done, as real CUDA does.
// Its device memory is unlimited unless SIM_DEVICE_MEMORY=BYTES sets it:
// then an allocation that does not fit fails with out of memory, as on a
// real device, and frees give memory back (scenarios oom and oom-exit).
// The runtime (csrc/cudart_sim.c) exports the real libcudart.so.13 entry
// points with the real symbol versions (cudaLaunchKernel@@libcudart.so.13)
// as a thin layer that dlopen()s libcuda.so.1 at first use, as real cudart
// does, and makes exactly one driver call underneath each call that reaches
// the GPU (cudaLaunchKernel enters cuLaunchKernel once). NCCL
// (csrc/nccl_sim.c, libnccl.so.2) defines pncclX with ncclX weak aliases, as
// real NCCL does, and enqueues its collectives on the same modeled GPU;
// processes started with one SIM_NCCL_ID play the ranks of one job and wait
// for each other at every collective, as NCCL's ranks do (NCCLSegment; the
// knobs are listed at scenario nccl in csrc/workload.c).
//
// The workloads (csrc/workload.c) and pysync.py print one JSON line with the
// exact number of calls they made to each entry point, and the driver calls
// the runtime made underneath; ParseReport reads it.
package sim

import (
	"bytes"
	"embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cudatap/cudatap/internal/cuptiabi"
)

// The C sources live in csrc/: the go tool refuses .c files in a package
// directory that does not use cgo.
//
//go:embed csrc/cuda_sim.h csrc/cudart_sim.c csrc/workload.c csrc/libcudart.map csrc/pysync.py csrc/flood.c
//go:embed csrc/cuda_driver_sim.h csrc/cuda_driver_sim.c csrc/nccl_sim.h csrc/nccl_sim.c csrc/cupti_sim.c
//go:embed csrc/nvtx_sim.h csrc/nvtx_sim.c
var sources embed.FS

const (
	// RuntimeSoname is the soname and symbol-version node of the runtime.
	RuntimeSoname = "libcudart.so.13"
	// HashedRuntimeName is how auditwheel-repaired wheels vendor a library.
	HashedRuntimeName = "libcudart-3f2a9c1b.so.13"
	// DriverSoname is the soname (and file name) of the driver.
	DriverSoname = "libcuda.so.1"
	// NCCLSoname is the soname (and file name) of NCCL.
	NCCLSoname = "libnccl.so.2"
	// CUPTISoname is the soname (and file name) of CUPTI.
	CUPTISoname = "libcupti.so.13"
	// NVTXSoname is the soname (and file name) of NVTX v2's library.
	NVTXSoname = "libnvToolsExt.so.1"
)

// ErrNoCompiler is what Compile returns when there is no C compiler.
var ErrNoCompiler = errors.New("cudatap needs a C compiler (cc) to build the simulated CUDA workload: install gcc")

// KernelStubs are the workload's kernel host stubs, the symbols a tracer
// should resolve the func argument of its launches to.
var KernelStubs = []string{"sim_gemm_kernel", "sim_relu_kernel", "sim_reduce_kernel"}

// DriverKernels are the kernel names the driver scenarios look up with
// cuModuleGetFunction and cuLibraryGetKernel, the names a tracer should give
// their cuLaunchKernel and cuLaunchKernelEx launches.
var DriverKernels = []string{"triton_matmul_kernel", "triton_softmax_kernel"}

// Build is the set of files Compile produced; every path is absolute.
type Build struct {
	Dir string
	// Flood is a load generator: THREADS threads each make N launches on
	// their own stream as fast as they can (csrc/flood.c).
	Flood string
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
	// Driver is the simulated libcuda.so.1 (mode 0644), unversioned. Every
	// runtime above (Runtime, HashedRuntime, the one in StaticWorkload)
	// dlopen()s it from its own directory at its first call that needs the
	// driver, so it shows up in a process late.
	Driver string
	// NCCL is the simulated libnccl.so.2 (mode 0644); it links Driver.
	NCCL string
	// DriverWorkload links Driver only (rpath $ORIGIN) and adds the
	// scenarios driver and driver-all, which run with no runtime in the
	// process, and mixed; for mixed and the runtime scenarios it dlopen()s
	// Runtime from its directory after the go-ahead.
	DriverWorkload string
	// NCCLWorkload links Runtime and NCCL (rpath $ORIGIN) and adds the
	// scenario nccl.
	NCCLWorkload string
	// PySync is the ctypes driver: python3 PySync RUNTIME [ITERS] [--wait-stdin].
	PySync string
	// CUPTI is the simulated libcupti.so.13 (csrc/cupti_sim.c), next to
	// Runtime as pip's NVIDIA wheels place it: the activity API on the
	// modeled GPU, for cudatap's GPU-time collector.
	CUPTI string
	// NVTX is the simulated libnvToolsExt.so.1 (csrc/nvtx_sim.c): the NVTX
	// API, exported (uprobes can hook it), handed to the injection library
	// NVTX_INJECTION64_PATH names as NVTX v3's headers do.
	NVTX string
	// NVTXWorkload links Runtime and NVTX (rpath $ORIGIN) and adds the
	// scenario train-nvtx.
	NVTXWorkload string
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
		Driver:         filepath.Join(dir, DriverSoname),
		NCCL:           filepath.Join(dir, NCCLSoname),
		DriverWorkload: filepath.Join(dir, "workload-driver"),
		NCCLWorkload:   filepath.Join(dir, "workload-nccl"),
		PySync:         filepath.Join(dir, "pysync.py"),
		Flood:          filepath.Join(dir, "flood"),
		CUPTI:          filepath.Join(dir, CUPTISoname),
		NVTX:           filepath.Join(dir, NVTXSoname),
		NVTXWorkload:   filepath.Join(dir, "workload-nvtx"),
	}
	if err := os.WriteFile(filepath.Join(dir, "cupti_abi.h"), cuptiabi.Header, 0o644); err != nil {
		return nil, err
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
	runtimeLib := func(out string) func() error {
		return link(out, "-shared", "-Wl,-soname,"+filepath.Base(out), "-Wl,--version-script=libcudart.map", "cudart_sim.o", "-ldl")
	}
	// Executables and NCCL find their libraries next to themselves and
	// need each one named even where the linker defaults to --as-needed.
	local := func(libs ...string) []string {
		args := []string{"-L" + dir, "-Wl,-rpath,$ORIGIN", "-Wl,-rpath-link," + dir, "-Wl,--no-as-needed"}
		for _, lib := range libs {
			args = append(args, "-l:"+lib)
		}
		return append(args, "-Wl,--as-needed", "-ldl")
	}
	steps := [][]func() error{
		{
			compile("cuda_driver_sim.o", "-fPIC", "cuda_driver_sim.c"),
			// A runtime copied elsewhere still finds this build's driver.
			compile("cudart_sim.o", "-fPIC", "-DSIM_DRIVER_DIR="+cString(dir), "cudart_sim.c"),
			compile("nccl_sim.o", "-fPIC", "nccl_sim.c"),
			compile("workload.o", "workload.c"),
			compile("workload-dlopen.o", "-DSIM_DLOPEN", "workload.c"),
			compile("workload-driver.o", "-DSIM_DRIVER", "workload.c"),
			compile("workload-nccl.o", "-DSIM_NCCL", "workload.c"),
			compile("flood.o", "flood.c"),
			compile("cupti_sim.o", "-fPIC", "cupti_sim.c"),
			compile("nvtx_sim.o", "-fPIC", "nvtx_sim.c"),
			compile("workload-nvtx.o", "-DSIM_NVTX", "workload.c"),
		},
		{
			// No version script: the real libcuda's symbols are unversioned.
			link(b.Driver, "-shared", "-Wl,-soname,"+DriverSoname, "cuda_driver_sim.o", "-ldl"),
			link(b.CUPTI, "-shared", "-Wl,-soname,"+CUPTISoname, "cupti_sim.o", "-ldl"),
			link(b.NVTX, "-shared", "-Wl,-soname,"+NVTXSoname, "nvtx_sim.o", "-ldl"),
			runtimeLib(b.Runtime),
			runtimeLib(b.HashedRuntime),
			// No -rdynamic: the runtime's symbols stay out of .dynsym.
			link(b.StaticWorkload, "workload.o", "cudart_sim.o", "-ldl"),
			link(b.DlopenWorkload, "workload-dlopen.o", "-ldl"),
		},
		{
			link(b.NCCL, slices.Concat([]string{"-shared", "-Wl,-soname," + NCCLSoname, "nccl_sim.o"}, local(DriverSoname))...),
			link(b.Workload, slices.Concat([]string{"workload.o"}, local(RuntimeSoname))...),
			link(b.DriverWorkload, slices.Concat([]string{"workload-driver.o"}, local(DriverSoname))...),
			link(b.Flood, slices.Concat([]string{"flood.o"}, local(RuntimeSoname))...),
			link(b.NVTXWorkload, slices.Concat([]string{"workload-nvtx.o"}, local(RuntimeSoname, NVTXSoname))...),
		},
		{link(b.NCCLWorkload, slices.Concat([]string{"workload-nccl.o"}, local(RuntimeSoname, NCCLSoname))...)},
	}
	for _, step := range steps {
		if err := parallel(step...); err != nil {
			return nil, err
		}
	}
	for _, lib := range []string{b.Runtime, b.HashedRuntime, b.Driver, b.NCCL, b.CUPTI, b.NVTX} {
		if err := os.Chmod(lib, 0o644); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// cString quotes s as a C string literal.
func cString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
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
	// Calls counts the calls the program itself made to each entry point,
	// runtime, driver and NCCL alike; a _ptsz/_ptds call counts under its own
	// symbol name. Entry points never called are absent.
	Calls map[string]int `json:"calls"`
	// Internal counts the driver calls the runtime made underneath the
	// program's runtime calls (cuLaunchKernel under cudaLaunchKernel, cuInit
	// at the runtime's first use of the driver): calls a tracer that hooks
	// libcuda sees but must not count as the program's own.
	Internal map[string]int `json:"internal,omitempty"`
	// BusyNs is the modeled GPU time of each stream, by handle ("0x0": the
	// legacy stream): what a tracer's busy-time bounds must contain.
	BusyNs map[string]int64 `json:"busy_ns,omitempty"`
	// Lines (pysync.py only) maps a Python function to the line of the call
	// in it that a tracer should name.
	Lines map[string]int `json:"lines,omitempty"`
	// MeetingWaitNs is the host time the workload spent blocked in
	// synchronizing calls on NCCL ranks of other processes that had not
	// arrived yet (scenario nccl of a job: SIM_NCCL_ID).
	MeetingWaitNs int64 `json:"meeting_wait_ns,omitempty"`
	// Profiler is what the program's own profiler got (scenario profiler).
	Profiler *ProfilerReport `json:"profiler,omitempty"`
}

// ProfilerReport is what scenario profiler's own CUPTI client got: its
// cuptiSubscribe status (0: it was let in), whether another client (a
// tracer's collector) held CUPTI before it subscribed and held it again
// after it finalized, the GPU ops it ran while subscribed and the records
// CUPTI gave it.
type ProfilerReport struct {
	SubscribeStatus int   `json:"subscribe_status"`
	HeldBefore      bool  `json:"held_before"`
	Resumed         bool  `json:"resumed"`
	Ops             int64 `json:"ops"`
	Records         int64 `json:"records"`
}

// NCCLSegment is the file through which the simulated NCCL's ranks of one
// job, each in its own process, meet (csrc/nccl_sim.c): run is their
// SIM_NCCL_RUN ("" when unset), id their SIM_NCCL_ID. The last rank to
// destroy its communicator removes it; ranks killed leave it behind.
func NCCLSegment(run string, id uint64) string {
	if run != "" {
		// As nccl_sim.c writes it: 62 characters at most, any but
		// [A-Za-z0-9._-] as '_'.
		b := []byte(run)[:min(len(run), 62)]
		for i, c := range b {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
				b[i] = '_'
			}
		}
		run = string(b) + "-"
	}
	return fmt.Sprintf("/dev/shm/cudatap-sim-nccl-%s%#x", run, id)
}

// NCCLRank is one rank's progress in a job, as its segment shows it.
type NCCLRank struct {
	PID int
	// Joined: the rank's process joined the job (ncclCommInitRank); Left:
	// it destroyed its communicator since.
	Joined, Left bool
	// Arrived counts the collectives it made.
	Arrived uint64
	// BlockedOn is the first meeting (collective, 1-based) not met yet when
	// its host last blocked on one; 0 if it never did.
	BlockedOn uint64
}

// The segment's layout (nccl_sim.c, struct seg): 64-bit words, a header of
// magic, world size and a futex word, then per rank pid, state, arrived,
// cached, blocked_on and ncclRing arrival times.
const (
	ncclMagic     = 0x6c63636e6d697363
	ncclRing      = 64 // 2 * SIM_MEETINGS_MAX
	ncclRankWords = 5 + ncclRing
)

// ReadNCCLSegment reads the ranks' progress from a job's segment.
func ReadNCCLSegment(path string) ([]NCCLRank, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(data[8*i:]) }
	if len(data) < 16 || word(0) != ncclMagic {
		return nil, fmt.Errorf("%s: not a simulated NCCL segment", path)
	}
	n := word(1)
	if n > 1<<16 || uint64(len(data)) != 8*(3+n*ncclRankWords) {
		return nil, fmt.Errorf("%s: %d bytes for %d ranks", path, len(data), n)
	}
	ranks := make([]NCCLRank, n)
	for r := range ranks {
		w := 3 + r*ncclRankWords
		ranks[r] = NCCLRank{PID: int(word(w)), Joined: word(w+1) != 0, Left: word(w+1) == 2, Arrived: word(w + 2),
			BlockedOn: word(w + 4)}
	}
	return ranks, nil
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
