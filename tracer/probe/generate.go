package probe

// The BPF objects and their Go bindings are committed; `make generate` rebuilds
// them and CI checks that the result matches what is checked in.
// One object, compiled for x86-64 (__TARGET_ARCH_x86: the programs read
// x86-64 registers), with bindings for every little-endian GOARCH
// (-target bpfel) so that the arm64 release compiles; New refuses to load
// it anywhere but amd64 (arch.go) until the programs read arm64's.
//go:generate go tool bpf2go -cc ${BPF_CLANG} -cflags "-O2 -g -Wall -Werror -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu" -target bpfel -type event -type stat -type inflight_key -type py_code -strip ${BPF_STRIP} cudatap ../../bpf/cudatap.bpf.c -- -I../../bpf
