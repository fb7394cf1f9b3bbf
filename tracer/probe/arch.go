package probe

import (
	"errors"
	"runtime"
)

// ErrArch: cudatap's BPF programs read a CUDA call's arguments, stack and
// frame pointer as the x86-64 calling convention lays them out
// (bpf/cudatap.bpf.c). Their object is built for every little-endian
// architecture only so that cudatap compiles there (the arm64 release);
// loaded on another architecture they would read the wrong registers and
// record wrong streams and sizes without a sign, so New refuses instead.
var ErrArch = errors.New("cudatap's BPF programs read CUDA call arguments as on x86-64 only: tracing on " +
	runtime.GOARCH + " is not supported yet (issue 27); run the linux/amd64 build on an x86-64 machine")

// CheckArch is nil where the BPF programs read arguments correctly, ErrArch
// elsewhere (New fails with it; doctor can say so before).
func CheckArch() error {
	if runtime.GOARCH != "amd64" {
		return ErrArch
	}
	return nil
}
