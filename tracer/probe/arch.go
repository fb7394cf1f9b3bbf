package probe

import (
	"errors"
	"runtime"
)

// ErrArch: cudatap's BPF programs read a CUDA call's arguments where the
// x86-64 and arm64 calling conventions put them (bpf/cudatap.bpf.c, one
// object for each). On another architecture they would read the wrong
// registers and record wrong streams and sizes without a sign, so New
// refuses instead.
var ErrArch = errors.New("cudatap's BPF programs read CUDA call arguments as x86-64 and arm64 pass them: tracing on " +
	runtime.GOARCH + " is not supported; run the linux/amd64 or linux/arm64 build")

// CheckArch is nil where the BPF programs read arguments correctly, ErrArch
// elsewhere (New fails with it; doctor can say so before).
func CheckArch() error {
	switch runtime.GOARCH {
	case "amd64", "arm64":
		return nil
	}
	return ErrArch
}

// StackNote says what a captured stack lacks on this architecture, or ""
// where nothing: on arm64 a stack is the kernel's frame-pointer walk only,
// without the .eh_frame unwinding of code built without frame pointers
// (CPython, PyTorch) and without Python frames, which are x86-64's so far
// (docs/arm64.md).
func StackNote() string {
	if runtime.GOARCH == "arm64" {
		return "stacks on arm64 are frame-pointer walks only: no .eh_frame unwinding and no Python frames yet (docs/arm64.md)"
	}
	return ""
}
