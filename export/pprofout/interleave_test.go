package pprofout

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

func TestSplitFrame(t *testing.T) {
	for in, want := range map[string][2]string{
		"cudaLaunchKernel (libcudart.so.13)":            {"cudaLaunchKernel", "libcudart.so.13"},
		"at::foo(at::Tensor const&) (libtorch_cuda.so)": {"at::foo(at::Tensor const&)", "libtorch_cuda.so"},
		"f(int (*)(int)) (a.out)":                       {"f(int (*)(int))", "a.out"},
		"0x7f00":                                        {},
		"":                                              {},
		"no object ()":                                  {},
		"_PyEval_EvalFrameDefault.cold (libpython3.12.so.1.0)": {"_PyEval_EvalFrameDefault.cold", "libpython3.12.so.1.0"},
	} {
		fn, obj, ok := splitFrame(in)
		if ok != (want != [2]string{}) || fn != want[0] || obj != want[1] {
			t.Errorf("splitFrame(%q) = %q, %q, %v", in, fn, obj, ok)
		}
	}
}

func TestIsEvalFrame(t *testing.T) {
	for fn, want := range map[string]bool{
		"_PyEval_EvalFrameDefault": true, "_PyEval_EvalFrameDefault.cold": true, "PyEval_EvalFrameEx": true,
		"_PyEval_EvalFrame": false, "PyEval_EvalCode": false, "_PyEval_Vector": false, "PyObject_Call": false,
	} {
		if isEvalFrame(fn) != want {
			t.Errorf("isEvalFrame(%q) = %v", fn, !want)
		}
	}
	for obj, want := range map[string]bool{
		"python3.10": true, "libpython3.9.so.1.0": true, "python2.7": true,
		"python3.11": false, "libpython3.12.so.1.0": false, "python3": false, "python": false,
	} {
		if oneFramePerActivation(obj) != want {
			t.Errorf("oneFramePerActivation(%q) = %v", obj, !want)
		}
	}
}

// TestDecide lays out native stacks given by their frame names against
// Python stacks of n frames.
func TestDecide(t *testing.T) {
	const (
		eval  = "_PyEval_EvalFrameDefault (python3.12)"
		call  = "_PyObject_Call (python3.12)"
		start = "_start (python3.12)"
		leaf  = "cudaStreamSynchronize (libcudart.so.13)"
	)
	for _, tc := range []struct {
		name   string
		native []string
		py     int
		acts   [][2]int // per activation: its Python frames [py0, py1)
		rest   int
		how    outcome
	}{
		{"one activation, whole stack", []string{leaf, eval, "main (python3.12)", start}, 3, [][2]int{{0, 3}}, 3, interleaved},
		{"one activation, stack cut", []string{leaf, eval, call}, 3, nil, 0, unmatched},
		{"as many activations as frames, stack cut", []string{leaf, eval, call, eval}, 2, [][2]int{{0, 1}, {1, 2}}, 2, interleaved},
		{"more activations than frames", []string{leaf, eval, call, eval, call, eval, start}, 2, nil, 0, unmatched},
		{"two activations, three frames", []string{leaf, eval, call, eval, start}, 3, nil, 0, unmatched},
		{"a run of evaluation frames is one activation", []string{leaf, eval, "PyEval_EvalFrameEx (python3.12)", call, start}, 1, [][2]int{{0, 1}}, 1, interleaved},
		{"no evaluation frame", []string{leaf, "main (a.out)"}, 2, nil, 0, noEval},
		{"unresolved evaluation frames", []string{leaf, "", ""}, 2, nil, 0, noEval},
		{"a full Python stack in one activation", []string{leaf, eval, start}, event.MaxPy, [][2]int{{0, event.MaxPy}}, event.MaxPy, interleaved},
		{"Python 3.10, a full Python stack in two activations", []string{leaf, "_PyEval_EvalFrameDefault (python3.10)", call, "_PyEval_EvalFrameDefault (python3.10)", start},
			event.MaxPy, nil, 0, unmatched}, // 3.10 has a frame per activation: 24 frames cannot have run in 2
		{"Python 3.10, more activations than the full Python stack kept", append([]string{leaf},
			slices.Repeat([]string{"_PyEval_EvalFrameDefault (libpython3.10.so.1.0)", call}, event.MaxPy+1)...)[:event.MaxStack],
			event.MaxPy, nil, 0, interleaved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const pid = 1
			n := model.NewNames()
			native := make([]uint64, len(tc.native))
			for i, name := range tc.native {
				native[i] = uint64(0x1000 * (i + 1))
				if name != "" {
					n.Frames[model.NameKey{PID: pid, Key: native[i]}] = name
				}
			}
			py := make([]model.PyKey, tc.py)
			for i := range py {
				py[i] = model.PyKey{Code: uint64(i + 1), Instr: uint64(i + 1)}
			}
			l := newInterleaver(n).decide(pid, native, py, false)
			if l.how != tc.how {
				t.Fatalf("outcome %d, want %d", l.how, tc.how)
			}
			if tc.acts == nil && tc.how == interleaved {
				// Every activation the Python stack reaches runs one frame.
				for i, a := range l.acts {
					if want := [2]int{min(i, tc.py), min(i+1, tc.py)}; [2]int{a.py0, a.py1} != want {
						t.Errorf("activation %d runs %v, want %v", i, [2]int{a.py0, a.py1}, want)
					}
				}
				return
			}
			var got [][2]int
			for _, a := range l.acts {
				got = append(got, [2]int{a.py0, a.py1})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.acts) || l.rest != tc.rest {
				t.Errorf("activations %v rest %d, want %v rest %d", got, l.rest, tc.acts, tc.rest)
			}
		})
	}
}

// TestDecideEntryFlags: with the walkers' entry marks, two activations for
// three frames (unmatched without them) are laid out exactly: the
// innermost frame was entered from C (its own activation), the next was
// called from the outermost in the same activation.
func TestDecideEntryFlags(t *testing.T) {
	const pid = 1
	n := model.NewNames()
	names := []string{"cudaStreamSynchronize (libcudart.so.13)", "_PyEval_EvalFrameDefault (python3.12)",
		"_PyObject_Call (python3.12)", "_PyEval_EvalFrameDefault (python3.12)", "_start (python3.12)"}
	native := make([]uint64, len(names))
	for i, name := range names {
		native[i] = uint64(0x1000 * (i + 1))
		n.Frames[model.NameKey{PID: pid, Key: native[i]}] = name
	}
	py := []model.PyKey{
		{Code: 1, Instr: 0x10 | model.PyInstrEntry | model.PyInstrEntryKnown},
		{Code: 2, Instr: 0x20 | model.PyInstrEntryKnown},
		{Code: 3, Instr: 0x30 | model.PyInstrEntry | model.PyInstrEntryKnown},
	}
	l := newInterleaver(n).decide(pid, native, py, false)
	var got [][2]int
	for _, a := range l.acts {
		got = append(got, [2]int{a.py0, a.py1})
	}
	if l.how != interleaved || fmt.Sprint(got) != "[[0 1] [1 3]]" {
		t.Errorf("outcome %d, activations %v; want interleaved [[0 1] [1 3]]", l.how, got)
	}
	// Without the marks the same stack is not decided.
	for i := range py {
		py[i].Instr &^= model.PyInstrEntry | model.PyInstrEntryKnown
	}
	if l := newInterleaver(n).decide(pid, native, py, false); l.how != unmatched {
		t.Errorf("unmarked: outcome %d, want unmatched", l.how)
	}
}
