package syncs

import "testing"

func TestLibraryPyFrame(t *testing.T) {
	for f, want := range map[string]bool{
		"/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:1162 synchronize":             true,
		"/home/u/venv/lib/python3.12/site-packages/transformers/trainer.py:2240 _inner_training_loop": true,
		"/opt/conda/lib/python3.11/threading.py:1045 _bootstrap_inner":                                true, // the standard library
		"/usr/lib64/python3.9/queue.py:180 get":                                                       true,
		"<frozen runpy>:88 _run_code":                                                                 true,
		"/src/pytorch/torch/cuda/__init__.py:1162 synchronize":                                        true, // torch from a source checkout
		"torch/cuda/__init__.py:1162 synchronize":                                                     true,
		"/home/u/.local/lib/python3.12/site-packages/apex.egg/apex/amp.py:3 f":                        true,
		"/home/u/train.py:57 train_step":                                                              false,
		"/home/u/torchtools/train.py:57 train_step":                                                   false, // not torch's own directory
		"/home/u/lib/train.py:57 train_step":                                                          false, // a lib that is not Python's
		"torch.py:3 f":                                                                                false, // a user's file named torch.py
		"<stdin>:1 <module>":                                                                          false,
		"/tmp/ipykernel_4711/1234.py:5 <module>":                                                      false,
	} {
		if got := LibraryPyFrame(f); got != want {
			t.Errorf("LibraryPyFrame(%q) = %v, want %v", f, got, want)
		}
	}
}

func TestLibraryNativeFrame(t *testing.T) {
	for f, want := range map[string]bool{
		"cudaStreamSynchronize (libcudart.so.13)":                                true,
		"cuStreamSynchronize (libcuda.so.1)":                                     true,
		"ncclAllReduce (libnccl.so.2)":                                           true,
		"at::native::_local_scalar_dense_cuda (libtorch_cuda.so)":                true,
		"c10::cuda::device_synchronize() (libc10_cuda.so)":                       true,
		"THPVariable_item (libtorch_python.so)":                                  true,
		"torch::autograd::THPVariable_item (_C.cpython-312-x86_64-linux-gnu.so)": true,
		"_PyEval_EvalFrameDefault (libpython3.12.so.1.0)":                        true,
		"_PyEval_EvalFrameDefault (python3.12)":                                  true,
		"start_thread (libc.so.6)":                                               true,
		"execute_native_thread_routine (libstdc++.so.6)":                         true,
		"0x7ff8e429824a":                  true, // unresolved
		"train_step (train.py)":           false,
		"main (workload)":                 false,
		"Solver::step() (libmysolver.so)": false,
	} {
		if got := LibraryNativeFrame(f); got != want {
			t.Errorf("LibraryNativeFrame(%q) = %v, want %v", f, got, want)
		}
	}
}

func TestUserSite(t *testing.T) {
	torch := "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:1162 synchronize"
	for _, c := range []struct {
		name       string
		py, native []string
		site, via  string
		user       bool
	}{
		{"user line under torch", []string{torch, "/home/u/train.py:57 train_step", "/home/u/train.py:90 <module>"}, []string{"torch::cuda::synchronize(long) (libtorch_cuda.so)"},
			"/home/u/train.py:57 train_step", torch, true},
		{"the user's own line", []string{"/home/u/train.py:12 step"}, nil, "/home/u/train.py:12 step", "", true},
		{"C++ program", nil, []string{"cudaDeviceSynchronize (libcudart.so.13)", "Solver::step() (solver)", "main (solver)"},
			"Solver::step() (solver)", "cudaDeviceSynchronize (libcudart.so.13)", true},
		{"NCCL watchdog: no user frame", nil, []string{"c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const (libtorch_cuda.so)", "start_thread (libc.so.6)"},
			"c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const (libtorch_cuda.so)", "", false},
		{"DataLoader thread: library Python only", []string{"/usr/lib/python3.12/site-packages/torch/utils/data/_utils/pin_memory.py:20 _pin_memory_loop"}, []string{"THPVariable_pin_memory (libtorch_python.so)"},
			"/usr/lib/python3.12/site-packages/torch/utils/data/_utils/pin_memory.py:20 _pin_memory_loop", "", false},
		{"no stack", nil, nil, "", "", false},
	} {
		site, via, user := UserSite(c.py, c.native)
		if site != c.site || via != c.via || user != c.user {
			t.Errorf("%s: UserSite = %q, %q, %v; want %q, %q, %v", c.name, site, via, user, c.site, c.via, c.user)
		}
	}
}
