package syncs

import (
	"strings"
)

// A sync site is named by the innermost frame of the user's own code: the
// line that asked for the synchronization, not the library function that
// made the CUDA call (torch/cuda/__init__.py:1162 synchronize is where every
// torch.cuda.synchronize() ends up). Python frames come first: a Python
// program's own frames are all Python; then native frames, for C and C++
// programs.

// libraryDirs are the path components under which a Python file is not
// the user's: installed packages, and the frameworks' own trees when they
// run from a source checkout (torch/cuda/__init__.py).
var libraryDirs = map[string]bool{
	"site-packages": true, "dist-packages": true,
	"torch": true, "torchvision": true, "torchaudio": true, "triton": true, "numpy": true,
}

// LibraryPyFrame reports whether a Python frame ("file:line function") is
// outside the user's code: in the interpreter (<frozen ...>, <built-in>),
// the standard library (.../lib/python3.12/...), an installed package
// (site-packages, dist-packages, an .egg), or torch, torchvision,
// torchaudio, triton or numpy's own directories.
func LibraryPyFrame(f string) bool {
	file := f
	if i := strings.LastIndexByte(file, ':'); i > 0 {
		file = file[:i]
	}
	if strings.HasPrefix(file, "<frozen ") || strings.HasPrefix(file, "<built-in") {
		return true
	}
	dirs := strings.Split(file, "/")
	dirs = dirs[:len(dirs)-1] // the file's own name does not count
	for i, d := range dirs {
		if libraryDirs[d] || strings.HasSuffix(d, ".egg") {
			return true
		}
		// The standard library: lib/python3.12, lib64/python3.11, lib/python3.
		if (d == "lib" || d == "lib64") && i+1 < len(dirs) && strings.HasPrefix(dirs[i+1], "python3") {
			return true
		}
	}
	return false
}

// libraryObjects are the name prefixes of the objects whose native frames
// are not the user's: CUDA, NCCL and the CUDA math libraries, PyTorch and
// Triton, the Python interpreter, and the C and C++ runtimes.
var libraryObjects = []string{
	"libcuda.", "libcudart", "libcublas", "libcudnn", "libcufft", "libcurand", "libcusparse", "libcusolver", "libcupti", "libcufile",
	"libnccl", "libnvrtc", "libnvJitLink", "libnvToolsExt", "libnvidia-",
	"libtorch", "libc10", "libcaffe2", "libtriton", "_C.", "libshm",
	"libpython", "python",
	"libc.", "libc-", "libstdc++", "libgcc_s", "libpthread", "libm.", "libdl.", "ld-linux", "libffi", "libgomp", "libiomp", "libmkl", "libopenblas",
}

// LibraryNativeFrame reports whether a native frame ("function (object)")
// is outside the user's code: in one of the libraries above, or not named
// at all (a bare address).
func LibraryNativeFrame(f string) bool {
	if strings.HasPrefix(f, "0x") || f == "" {
		return true
	}
	obj := ""
	if i := strings.LastIndex(f, " ("); i >= 0 && strings.HasSuffix(f, ")") {
		obj = f[i+2 : len(f)-1]
	}
	for _, p := range libraryObjects {
		if strings.HasPrefix(obj, p) {
			return true
		}
	}
	return false
}

// UserSite picks the frame that names a site from its stacks, innermost
// first: the innermost user Python frame, else the innermost user native
// frame. user is false when neither stack has one (a library's own thread,
// such as NCCL's watchdog); the site is then the innermost frame, Python
// first, as it was before user frames were told apart. via is the innermost
// frame of the site's stack when it is not the site: where the CUDA call
// was made from (torch/cuda/__init__.py:1162 synchronize).
func UserSite(py, native []string) (site, via string, user bool) {
	pick := func(frames []string, library func(string) bool) bool {
		for _, f := range frames {
			if !library(f) {
				site, user = f, true
				if f != frames[0] {
					via = frames[0]
				}
				return true
			}
		}
		return false
	}
	if pick(py, LibraryPyFrame) || pick(native, LibraryNativeFrame) {
		return site, via, true
	}
	switch {
	case len(py) > 0:
		site = py[0]
	case len(native) > 0:
		site = native[0]
	}
	return site, "", false
}
