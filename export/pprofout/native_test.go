package pprofout

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Frames of a Python 3.12 process (pid py312) and a Python 3.10 one
// (py310): native frames in the interpreter, libc, the CUDA runtime and
// libtorch, by address.
const (
	py312, py310 = 7, 8

	aLaunch   = 0x7f1000001000 // cudaLaunchKernel's entry: the first frame of a stack taken there
	aTorch1   = 0x7f2000002345
	aTorchRaw = 0x7f2000003000 // no symbol, between two libtorch frames
	aTorch2   = 0x7f2000005678
	aEval1    = 0x555500011000 // _PyEval_EvalFrameDefault
	aTpCall   = 0x555500022000
	aEval2    = 0x555500011800 // _PyEval_EvalFrameDefault, another return address
	aRunMain  = 0x555500033000
	aLibc     = 0x7f3000004000
	aStart    = 0x555500000100
	aNowhere  = 0x10000000 // no symbol, no library around it
)

var (
	pyForward  = model.PyKey{Code: 0xc1, Instr: 0x10}
	pyCallImpl = model.PyKey{Code: 0xc2, Instr: 0x20}
	pyTrain    = model.PyKey{Code: 0xc3, Instr: 0x30}
	pyTrain2   = model.PyKey{Code: 0xc3, Instr: 0x38} // train, at another line
	pyModule   = model.PyKey{Code: 0xc4, Instr: 0x40}
)

// The stacks of the py312 process's calls.
const (
	stackWhole  = iota // one activation in a whole stack: it ran every Python frame
	stackLearnt        // two activations: the call from <module> to train is learnt from stackWhole to stay in its activation, so forward was entered through C
	stackTwo           // two activations for three frames, nothing learnt about their calls: not matched
	stackNoEval        // the native frames end before the interpreter
	stackLaunch        // a launch, from its entry
)

// pythonResult builds the two processes, their calls and names. Syncs are
// probed at their return: their stacks start at the return address in
// their caller. Launches are probed at their entry: their stacks start
// there.
func pythonResult(t *testing.T) (*model.Result, *Collector) {
	t.Helper()
	n := model.NewNames()
	n.Procs[py312] = model.ProcessInfo{Comm: "python3", Cmdline: "/usr/bin/python3.12 train.py",
		Libraries: []string{"/venv/site-packages/nvidia/cuda_runtime/lib/libcudart.so.13"}}
	n.Procs[py310] = model.ProcessInfo{Comm: "python3", Cmdline: "python3 old.py"}
	for a, name := range map[uint64]string{
		aLaunch:  "cudaLaunchKernel (libcudart.so.13)",
		aTorch1:  "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)",
		aTorch2:  "at::_ops::_local_scalar_dense::call (libtorch_cuda.so)",
		aEval1:   "_PyEval_EvalFrameDefault (python3.12)",
		aTpCall:  "_PyObject_MakeTpCall (python3.12)",
		aEval2:   "_PyEval_EvalFrameDefault (python3.12)",
		aRunMain: "Py_RunMain (python3.12)",
		aLibc:    "__libc_start_call_main (libc.so.6)",
		aStart:   "_start (python3.12)",
	} {
		n.Frames[model.NameKey{PID: py312, Key: a}] = name
	}
	for a, name := range map[uint64]string{
		aTorch1: "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)",
		aEval1:  "_PyEval_EvalFrameDefault (libpython3.10.so.1.0)",
		aTpCall: "_PyObject_Call (libpython3.10.so.1.0)",
		aEval2:  "_PyEval_EvalFrameDefault (libpython3.10.so.1.0)",
	} {
		n.Frames[model.NameKey{PID: py310, Key: a}] = name
	}
	for _, pid := range []uint32{py312, py310} {
		for k, name := range map[model.PyKey]string{
			pyForward:  "/src/model.py:10 forward",
			pyCallImpl: "/venv/torch/nn/modules/module.py:1500 _call_impl",
			pyTrain:    "/src/train.py:20 train",
			pyTrain2:   "/src/train.py:22 train",
			pyModule:   "/src/train.py:30 <module>",
		} {
			n.Py[model.PyNameKey{PID: pid, PyKey: k}] = name
		}
	}
	whole := func(s ...uint64) []uint64 { return append(s, aRunMain, aLibc, aStart) }
	p := &model.Process{PID: py312, Threads: map[uint32]struct{}{py312: {}},
		Stacks: [][]uint64{
			stackWhole:  whole(aTorch1, aTorchRaw, aTorch2, aEval1),
			stackLearnt: whole(aTorch1, aEval1, aTpCall, aEval2),
			stackTwo:    whole(aTorch2, aEval1, aTpCall, aEval2),
			stackNoEval: {aTorch1, aNowhere},
			stackLaunch: whole(aLaunch, aTorch1, aEval1),
		},
		PyStacks: [][]model.PyKey{
			{pyTrain, pyModule},
			{pyForward, pyTrain2, pyModule},
			{pyForward, pyCallImpl, pyTrain},
		},
	}
	old := &model.Process{PID: py310, Threads: map[uint32]struct{}{py310: {}},
		// Python 3.10: one frame per activation, even in a stack cut
		// short (no _start); the frame left over goes above.
		Stacks:   [][]uint64{{aTorch1, aEval1, aTpCall, aEval2}},
		PyStacks: [][]model.PyKey{{pyForward, pyTrain, pyModule}},
	}
	c := NewCollector()
	sync := func(p *model.Process, api event.API, stack, py int32) {
		c.Call(p, &model.Call{API: api, TID: p.PID, Start: 10, End: 1010, Stream: 0, GPUOp: -1, HasRet: true,
			Sync: model.SyncStream, BlockedNs: 1000, Stack: stack, PyStack: py})
	}
	sync(p, event.CudaStreamSynchronize, stackWhole, 0)
	sync(p, event.CudaStreamSynchronize, stackLearnt, 1)
	sync(p, event.CudaDeviceSynchronize, stackTwo, 2)
	sync(p, event.CudaMemcpy, stackNoEval, 0)
	sync(old, event.CudaStreamSynchronize, 0, 0)
	c.Call(p, &model.Call{API: event.CudaLaunchKernel, TID: p.PID, Start: 20, End: 20, Stream: 0, GPUOp: -1,
		Args: event.Args{Func: 0x4242, HasStream: true}, Stack: stackLaunch, PyStack: 0})
	r := &model.Result{Processes: []*model.Process{p, old}, Start: 10, End: 1010}
	r.Name(n)
	return r, c
}

// writeParse writes the profile, parses it back and checks it.
func writeParse(t *testing.T, r *model.Result, c *Collector, opts Options) (*profile.Profile, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, r, c, opts); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "profile.pb.gz")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return p, file
}

// sampleOf is the sample of pid whose stack starts (leaf first) with
// names.
func sampleOf(t *testing.T, p *profile.Profile, pid string, leaf ...string) *profile.Sample {
	t.Helper()
	for _, s := range p.Sample {
		if s.Label["pid"][0] == pid && slices.Equal(names(s)[:min(len(leaf), len(s.Location))], leaf) {
			return s
		}
	}
	t.Fatalf("no sample of pid %s starting %q", pid, leaf)
	return nil
}

func TestMappingsAndAddresses(t *testing.T) {
	r, c := pythonResult(t)
	p, _ := writeParse(t, r, c, Options{})

	files := map[string]*profile.Mapping{}
	for _, m := range p.Mapping {
		if m.BuildID != "" || !m.HasFunctions || m.Start >= m.Limit || m.Start%pageSize != 0 || m.Limit%pageSize != 0 {
			t.Errorf("mapping %+v", m)
		}
		files[m.File] = m
	}
	// The main binary first, by its path from the command line; the
	// hooked runtime by its full path; others by the name frames give.
	if p.Mapping[0].File != "/usr/bin/python3.12" {
		t.Errorf("main mapping %q", p.Mapping[0].File)
	}
	for _, f := range []string{"/venv/site-packages/nvidia/cuda_runtime/lib/libcudart.so.13", "libtorch_cuda.so", "libc.so.6",
		"libpython3.10.so.1.0"} {
		if files[f] == nil {
			t.Errorf("no mapping of %s", f)
		}
	}
	if len(p.Mapping) != 6 { // python3.12, libtorch, libcudart, libc; libtorch, libpython 3.10
		t.Errorf("%d mappings: %v", len(p.Mapping), p.Mapping)
	}

	// Native locations: a stack taken at an entry starts at the probe's
	// address; every other frame, and the first of a stack taken at a
	// return, is a return address, minus one.
	for _, tc := range []struct {
		s    *profile.Sample
		from int // the sample's first native location
		want []uint64
	}{
		{sampleOf(t, p, "7", "kernel@0x4242"), 2, []uint64{aLaunch, aTorch1 - 1}},
		{sampleOf(t, p, "7", "cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)", "0x7f2000003000"), 1,
			[]uint64{aTorch1 - 1, aTorchRaw - 1, aTorch2 - 1}},
	} {
		for i, a := range tc.want {
			if l := tc.s.Location[tc.from+i]; l.Address != a {
				t.Errorf("%s: address %#x, want %#x", l.Line[0].Function.Name, l.Address, a)
			}
		}
	}
	s := sampleOf(t, p, "7", "cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)", "0x7f2000003000")
	if m := s.Location[2].Mapping; m == nil || m.File != "libtorch_cuda.so" || s.Location[2].Line[0].Function.Filename != "libtorch_cuda.so" {
		t.Errorf("the unnamed frame inside libtorch's frames: mapping %+v", m)
	}
	// Every native location: inside its mapping, the function in the
	// mapping's file.
	for _, l := range p.Location {
		if l.Address == 0 {
			continue
		}
		fn := l.Line[0].Function
		if l.Address == aNowhere-1 {
			if l.Mapping != nil || fn.Filename != "" {
				t.Errorf("frame outside every known module: mapping %+v file %q", l.Mapping, fn.Filename)
			}
			continue
		}
		if m := l.Mapping; m == nil || l.Address < m.Start || l.Address >= m.Limit || fn.Filename != m.File {
			t.Errorf("%s at %#x: mapping %+v, file %q", fn.Name, l.Address, m, fn.Filename)
		}
		if fn.SystemName != "" {
			t.Errorf("%s: system name %q", fn.Name, fn.SystemName)
		}
	}
	if !strings.Contains(strings.Join(p.Comments, "\n"), "mappings inferred from frame names") {
		t.Errorf("comments %q do not say the mappings are inferred", p.Comments)
	}
}

// The caller's exact modules give the mappings their ranges, offsets and
// build IDs, and the frames without a symbol in them their module.
func TestExactModules(t *testing.T) {
	r, c := pythonResult(t)
	mods := []Module{
		{PID: py312, File: "/usr/bin/python3.12", BuildID: "aabbcc", Start: 0x555500000000, Limit: 0x555500040000, Offset: 0x1000},
		{PID: py312, File: "/venv/torch/lib/libtorch_cuda.so", BuildID: "ddeeff", Start: 0x7f2000000000, Limit: 0x7f2000010000, Offset: 0x2000},
	}
	p, _ := writeParse(t, r, c, Options{Modules: mods})
	byFile := map[string]*profile.Mapping{}
	for _, m := range p.Mapping {
		byFile[m.File] = m
	}
	for _, want := range mods {
		m := byFile[want.File]
		if m == nil || m.BuildID != want.BuildID || m.Start != want.Start || m.Limit != want.Limit || m.Offset != want.Offset {
			t.Errorf("mapping of %s: %+v", want.File, m)
		}
	}
	if p.Mapping[0].File != "/usr/bin/python3.12" {
		t.Errorf("main mapping %q", p.Mapping[0].File)
	}
	s := sampleOf(t, p, "7", "cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)", "0x7f2000003000")
	if m := s.Location[2].Mapping; m == nil || m.File != mods[1].File || s.Location[2].Line[0].Function.Filename != mods[1].File {
		t.Errorf("unnamed libtorch frame: mapping %+v", m)
	}
	// Inferred where no module was given: libc.
	if byFile["libc.so.6"] == nil {
		t.Errorf("no inferred libc mapping: %v", p.Mapping)
	}
	if strings.Contains(strings.Join(p.Comments, "\n"), "mappings inferred") {
		t.Errorf("comments %q", p.Comments)
	}
}

func TestPythonInterleaved(t *testing.T) {
	r, c := pythonResult(t)
	p, _ := writeParse(t, r, c, Options{})
	tail := []string{"Py_RunMain (python3.12)", "__libc_start_call_main (libc.so.6)", "_start (python3.12)", "thread 7", "python3 (pid 7)"}
	for _, tc := range []struct {
		name string
		got  *profile.Sample
		want []string
	}{
		{"one activation", sampleOf(t, p, "7", "cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)", "0x7f2000003000"),
			append([]string{"cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)",
				"0x7f2000003000", "at::_ops::_local_scalar_dense::call (libtorch_cuda.so)", "train", "<module>"}, tail...)},
		{"learnt call site", sampleOf(t, p, "7", "cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)", "forward"),
			append([]string{"cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)",
				"forward", "_PyObject_MakeTpCall (python3.12)", "train", "<module>"}, tail...)},
		{"a launch from its entry", sampleOf(t, p, "7", "kernel@0x4242"),
			append([]string{"kernel@0x4242", "cudaLaunchKernel", "cudaLaunchKernel (libcudart.so.13)", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)",
				"train", "<module>"}, tail...)},
		{"not matched: above, as before", sampleOf(t, p, "7", "cudaDeviceSynchronize"),
			[]string{"cudaDeviceSynchronize", "at::_ops::_local_scalar_dense::call (libtorch_cuda.so)", "_PyEval_EvalFrameDefault (python3.12)",
				"_PyObject_MakeTpCall (python3.12)", "_PyEval_EvalFrameDefault (python3.12)", "Py_RunMain (python3.12)",
				"__libc_start_call_main (libc.so.6)", "_start (python3.12)", "forward", "_call_impl", "train", "thread 7", "python3 (pid 7)"}},
		{"no interpreter frames: above", sampleOf(t, p, "7", "cudaMemcpy"),
			[]string{"cudaMemcpy", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)", "0x10000000", "train", "<module>", "thread 7", "python3 (pid 7)"}},
		{"Python 3.10, stack cut short", sampleOf(t, p, "8", "cudaStreamSynchronize"),
			[]string{"cudaStreamSynchronize", "at::native::_local_scalar_dense_cuda (libtorch_cuda.so)",
				"forward", "_PyObject_Call (libpython3.10.so.1.0)", "train", "<module>", "thread 8", "python3 (pid 8)"}},
	} {
		if got := names(tc.got); !slices.Equal(got, tc.want) {
			t.Errorf("%s: stack\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}

	// Python frames: their .py file and line, no mapping or address, and
	// the module-level frame named.
	lines := map[string]int64{}
	for _, l := range p.Location {
		fn := l.Line[0].Function
		if strings.HasSuffix(fn.Filename, ".py") {
			lines[fn.Name+" "+fn.Filename] = l.Line[0].Line
			if l.Mapping != nil || l.Address != 0 || fn.SystemName != "" {
				t.Errorf("Python frame %s: mapping %v address %#x system name %q", fn.Name, l.Mapping, l.Address, fn.SystemName)
			}
		}
	}
	for k, v := range map[string]int64{"<module> /src/train.py": 30, "forward /src/model.py": 10, "_call_impl /venv/torch/nn/modules/module.py": 1500} {
		if lines[k] != v {
			t.Errorf("%s: line %d, want %d (%v)", k, lines[k], v, lines)
		}
	}
	want := "Python frames replace the interpreter's evaluation frames in 4 of 6 stacks (1 by call sites learnt from other stacks); " +
		"above the native frames in 2 (1 whose native frames do not reach the interpreter, 1 whose evaluation frames could not be matched)"
	if !strings.Contains(strings.Join(p.Comments, "\n"), want) {
		t.Errorf("comments %q\nlack %q", p.Comments, want)
	}
}

// A profile without native stacks still names its main binary.
func TestMainMappingWithoutStacks(t *testing.T) {
	p := &model.Process{PID: 3, Threads: map[uint32]struct{}{3: {}}}
	n := model.NewNames()
	n.Procs[3] = model.ProcessInfo{Comm: "workload", Cmdline: "./workload --iters 3"}
	c := NewCollector()
	c.Call(p, &model.Call{API: event.CudaDeviceSynchronize, TID: 3, Start: 1, End: 2, Stream: -1, GPUOp: -1, Stack: -1, PyStack: -1})
	r := &model.Result{Processes: []*model.Process{p}, Start: 1, End: 2}
	r.Name(n)
	prof, file := writeParse(t, r, c, Options{})
	if len(prof.Mapping) != 1 || prof.Mapping[0].File != "./workload" || !prof.Mapping[0].HasFunctions {
		t.Errorf("mappings %v", prof.Mapping)
	}
	if len(prof.Comments) != 1 {
		t.Errorf("comments %q", prof.Comments)
	}
	runPprof(t, file)
}

// go tool pprof reads the profiles without a warning: no "Main binary
// filename not available", no symbolization attempted, "<module>" shown.
func TestPprofTool(t *testing.T) {
	r, c := pythonResult(t)
	_, file := writeParse(t, r, c, Options{})
	out := runPprof(t, file)
	if !strings.Contains(out, "<module>") || strings.Contains(out, "<unknown>") {
		t.Errorf("pprof -traces does not name the module-level frame:\n%s", out)
	}
}

// runPprof runs go tool pprof -top, -traces and -raw on file, fails on
// anything on stderr, and returns what -traces printed.
func runPprof(t *testing.T, file string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: go tool pprof not run")
	}
	var traces string
	for _, view := range []string{"-top", "-traces", "-raw"} {
		cmd := exec.Command(goTool, "tool", "pprof", view, file)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go tool pprof %s: %v\n%s", view, err, stderr.String())
		}
		if stderr.Len() != 0 {
			t.Errorf("go tool pprof %s warns:\n%s", view, stderr.String())
		}
		if view == "-traces" {
			traces = stdout.String()
		}
	}
	return traces
}
