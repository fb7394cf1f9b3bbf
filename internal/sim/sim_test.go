package sim

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The entry points the tracer hooks, which the runtime must export.
var required = []string{
	"cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cudaStreamDestroy",
	"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
	"cudaMemcpy", "cudaMemcpyAsync", "cudaMemcpy2D", "cudaMemcpy2DAsync", "cudaMemset", "cudaMemsetAsync",
	"cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaEventRecord",
	"cudaEventRecordWithFlags", "cudaStreamWaitEvent", "cudaEventSynchronize", "cudaEventQuery",
	"cudaStreamSynchronize", "cudaStreamQuery", "cudaDeviceSynchronize",
	"cudaMalloc", "cudaFree", "cudaMallocAsync", "cudaFreeAsync",
	"cudaHostAlloc", "cudaMallocHost", "cudaFreeHost", "cudaHostRegister", "cudaHostUnregister",
	"cudaGraphLaunch", "cudaLaunchHostFunc", "cudaGetDevice", "cudaGetLastError", "cudaSetDevice",
	"cudaLaunchKernel_ptsz", "cudaLaunchKernelExC_ptsz", "cudaMemcpyAsync_ptsz", "cudaMemcpy2DAsync_ptsz",
	"cudaMemsetAsync_ptsz", "cudaEventRecord_ptsz", "cudaEventRecordWithFlags_ptsz",
	"cudaStreamWaitEvent_ptsz", "cudaStreamSynchronize_ptsz", "cudaStreamQuery_ptsz",
	"cudaMallocAsync_ptsz", "cudaFreeAsync_ptsz", "cudaGraphLaunch_ptsz", "cudaLaunchHostFunc_ptsz",
	"cudaMemcpy_ptds", "cudaMemset_ptds", "cudaMemcpy2D_ptds",
}

var (
	buildOnce sync.Once
	shared    *Build
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// build compiles once for the whole package (a few hundred ms of cc).
func build(t *testing.T) *Build {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "cudatap-sim-")
		if buildErr == nil {
			shared, buildErr = Compile(buildDir)
		}
	})
	if errors.Is(buildErr, ErrNoCompiler) {
		t.Skip(buildErr)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return shared
}

// runReport runs a driver to completion and parses its report.
func runReport(t *testing.T, name string, args ...string) *Report {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, stderr.String())
	}
	r, err := ParseReport(out)
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", filepath.Base(name), args, err, out)
	}
	if r.PID <= 0 {
		t.Errorf("%s %v: pid %d", filepath.Base(name), args, r.PID)
	}
	return r
}

func assertCalls(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("%s calls:\n got %v\nwant %v", what, got, want)
	}
}

// basicCalls is what scenario basic must report for iters iterations on k
// streams.
func basicCalls(iters, k int) map[string]int {
	return map[string]int{
		"cudaStreamCreateWithFlags":    k - 1,
		"cudaStreamCreateWithPriority": 1,
		"cudaStreamDestroy":            k,
		"cudaLaunchKernel":             iters * (k + 1),
		"cudaMemcpyAsync":              2 * iters,
		"cudaEventRecord":              iters,
		"cudaStreamWaitEvent":          iters,
		"cudaMemsetAsync":              iters,
		"cudaStreamSynchronize":        iters / 10,
		"cudaMalloc":                   1 + iters/10,
		"cudaFree":                     1 + iters/10,
		"cudaHostAlloc":                1,
		"cudaFreeHost":                 1,
		"cudaEventCreate":              1,
		"cudaEventDestroy":             1,
		"cudaDeviceSynchronize":        1,
	}
}

func TestScenarios(t *testing.T) {
	b := build(t)
	t.Run("basic", func(t *testing.T) {
		r := runReport(t, b.Workload, "--iters", "20", "--streams", "3")
		assertCalls(t, "basic", r.Calls, basicCalls(20, 3))
	})
	t.Run("launches", func(t *testing.T) {
		r := runReport(t, b.Workload, "--scenario", "launches", "--iters", "600")
		assertCalls(t, "launches", r.Calls, map[string]int{"cudaLaunchKernel": 600, "cudaDeviceSynchronize": 3})
	})
	t.Run("ptsz", func(t *testing.T) {
		r := runReport(t, b.Workload, "--scenario", "ptsz", "--iters", "10")
		// Two threads, each 10 iterations.
		assertCalls(t, "ptsz", r.Calls, map[string]int{
			"cudaLaunchKernel_ptsz":      40,
			"cudaMemcpyAsync_ptsz":       40,
			"cudaMemsetAsync_ptsz":       20,
			"cudaEventRecord_ptsz":       20,
			"cudaStreamWaitEvent_ptsz":   20,
			"cudaStreamSynchronize_ptsz": 4,
			"cudaMalloc":                 4,
			"cudaFree":                   4,
			"cudaHostAlloc":              2,
			"cudaFreeHost":               2,
			"cudaEventCreate":            2,
			"cudaEventDestroy":           2,
			"cudaDeviceSynchronize":      1,
		})
	})
	t.Run("all", func(t *testing.T) {
		r := runReport(t, b.Workload, "--scenario", "all")
		exported := runtimeExports(t, b.Runtime)
		if got := slices.Sorted(maps.Keys(r.Calls)); !slices.Equal(got, exported) {
			t.Errorf("scenario all called\n%v\nthe runtime exports\n%v", got, exported)
		}
		if n := r.Calls["cudaEventQuery"]; n < 2 {
			t.Errorf("cudaEventQuery polled %d times, want at least 2 (pending, then ready)", n)
		}
	})
}

// TestTiming checks the modeled GPU: scenario timing makes the host wait for
// a 20 ms kernel and exits 1 when a blocking or readiness rule is broken.
func TestTiming(t *testing.T) {
	b := build(t)
	start := time.Now()
	r := runReport(t, b.Workload, "--scenario", "timing")
	if wall := time.Since(start); wall < 19*time.Millisecond {
		t.Errorf("a 20 ms kernel and cudaStreamSynchronize took %v of wall time", wall)
	}
	if r.Calls["cudaStreamSynchronize"] == 0 || r.Calls["cudaLaunchKernel"] == 0 {
		t.Errorf("timing calls: %v", r.Calls)
	}
}

// TestBuilds runs the static and dlopen builds (plain and hashed runtime
// names): the same scenario makes the same calls.
func TestBuilds(t *testing.T) {
	b := build(t)
	want := basicCalls(10, 2)
	assertCalls(t, "static", runReport(t, b.StaticWorkload).Calls, want)
	for _, lib := range []string{b.Runtime, b.HashedRuntime} {
		r := runReport(t, b.DlopenWorkload, "--sleep-ms", "5", "--dlopen", lib)
		assertCalls(t, "dlopen "+filepath.Base(lib), r.Calls, want)
	}
	if err := exec.Command(b.DlopenWorkload).Run(); err == nil {
		t.Error("the dlopen build ran without --dlopen")
	}
}

func TestWaitStdin(t *testing.T) {
	b := build(t)
	cmd := exec.Command(b.Workload, "--wait-stdin", "--scenario", "launches", "--iters", "3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if want := fmt.Sprintf("ready %d\n", cmd.Process.Pid); err != nil || line != want {
		t.Fatalf("first line %q (%v), want %q", line, err, want)
	}
	fmt.Fprintln(stdin, "go")
	rest, _ := out.ReadString(0)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	r, err := ParseReport([]byte(rest))
	if err != nil {
		t.Fatal(err)
	}
	if r.PID != cmd.Process.Pid || r.Calls["cudaLaunchKernel"] != 3 {
		t.Errorf("report %+v", r)
	}
}

func TestWaitFile(t *testing.T) {
	b := build(t)
	flag := filepath.Join(t.TempDir(), "go")
	cmd := exec.Command(b.Workload, "--wait-file", flag, "--scenario", "launches", "--iters", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("exited before %s existed: %v", flag, err)
	case <-time.After(30 * time.Millisecond):
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// runtimeExports returns the cuda* entry points the runtime exports, checking
// each is versioned as the default version libcudart.so.13 and has an address
// of its own (a probe on one never fires for another).
func runtimeExports(t *testing.T, path string) []string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byAddr := map[uint64]string{}
	for _, s := range syms {
		if !strings.HasPrefix(s.Name, "cuda") || s.Section == elf.SHN_UNDEF {
			continue
		}
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || elf.ST_BIND(s.Info) != elf.STB_GLOBAL {
			t.Errorf("%s: not a global function", s.Name)
		}
		if s.Version != RuntimeSoname || !s.HasVersion || s.VersionIndex.IsHidden() {
			t.Errorf("%s: version %q (hidden %v), want %s@@%s", s.Name, s.Version, s.VersionIndex.IsHidden(), s.Name, RuntimeSoname)
		}
		if other, ok := byAddr[s.Value]; ok {
			t.Errorf("%s and %s share address %#x", s.Name, other, s.Value)
		}
		byAddr[s.Value] = s.Name
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

func symtab(t *testing.T, f *elf.File) map[string]bool {
	t.Helper()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			m[s.Name] = true
		}
	}
	return m
}

func dynsym(t *testing.T, f *elf.File) map[string]bool {
	t.Helper()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, s := range syms {
		m[s.Name] = true
	}
	return m
}

func openELF(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func dynString(t *testing.T, f *elf.File, tag elf.DynTag) []string {
	t.Helper()
	s, err := f.DynString(tag)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSymbols(t *testing.T) {
	b := build(t)

	exported := runtimeExports(t, b.Runtime)
	for _, name := range required {
		if _, ok := slices.BinarySearch(exported, name); !ok {
			t.Errorf("the runtime does not export %s", name)
		}
	}
	for lib, soname := range map[string]string{b.Runtime: RuntimeSoname, b.HashedRuntime: HashedRuntimeName} {
		if got := dynString(t, openELF(t, lib), elf.DT_SONAME); !slices.Equal(got, []string{soname}) {
			t.Errorf("%s: soname %v, want %s", lib, got, soname)
		}
		if fi, err := os.Stat(lib); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want 0644", lib, fi.Mode().Perm(), err)
		}
	}
	if got := runtimeExports(t, b.HashedRuntime); !slices.Equal(got, exported) {
		t.Errorf("the hashed runtime exports %v", got)
	}

	dyn := openELF(t, b.Workload)
	if libs, _ := dyn.ImportedLibraries(); !slices.Contains(libs, RuntimeSoname) {
		t.Errorf("workload needs %v, want %s", libs, RuntimeSoname)
	}
	if got := dynString(t, dyn, elf.DT_RUNPATH); !slices.Equal(got, []string{"$ORIGIN"}) {
		t.Errorf("workload runpath %v, want $ORIGIN", got)
	}

	static := openELF(t, b.StaticWorkload)
	st, ds := symtab(t, static), dynsym(t, static)
	for _, name := range []string{"cudaLaunchKernel", "cudaStreamSynchronize", "cudaLaunchKernel_ptsz"} {
		if !st[name] || ds[name] {
			t.Errorf("static workload: %s in .symtab %v, in .dynsym %v; want only .symtab", name, st[name], ds[name])
		}
	}

	dl := openELF(t, b.DlopenWorkload)
	if libs, _ := dl.ImportedLibraries(); slices.Contains(libs, RuntimeSoname) {
		t.Errorf("the dlopen workload links %s", RuntimeSoname)
	}

	for path, f := range map[string]*elf.File{b.Workload: dyn, b.StaticWorkload: static, b.DlopenWorkload: dl} {
		st := symtab(t, f)
		for _, stub := range KernelStubs {
			if !st[stub] {
				t.Errorf("%s: no kernel stub %s in .symtab", filepath.Base(path), stub)
			}
		}
	}
}

func TestPySync(t *testing.T) {
	b := build(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	r := runReport(t, python, b.PySync, b.Runtime, "5")
	assertCalls(t, "pysync", r.Calls, map[string]int{
		"cudaMalloc":            1,
		"cudaMemcpyAsync":       10,
		"cudaStreamSynchronize": 5,
		"cudaLaunchKernel":      5,
		"cudaDeviceSynchronize": 5,
		"cudaFree":              1,
	})
	src, err := os.ReadFile(b.PySync)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	for fn, call := range map[string]string{
		"step_item":     "LIB.cudaStreamSynchronize(",
		"pageable_copy": "LIB.cudaMemcpyAsync(",
		"device_sync":   "LIB.cudaDeviceSynchronize(",
	} {
		n := r.Lines[fn]
		if n < 1 || n > len(lines) || !strings.Contains(lines[n-1], call) {
			t.Errorf("lines[%s] = %d, which is not the line of %s", fn, n, call)
		}
	}
}

func TestMissingCompiler(t *testing.T) {
	t.Setenv("CC", "/nonexistent/cc")
	_, err := Compile(t.TempDir())
	if !errors.Is(err, ErrNoCompiler) || !strings.Contains(err.Error(), "install gcc") {
		t.Errorf("Compile without a compiler: %v, want %v", err, ErrNoCompiler)
	}
}
