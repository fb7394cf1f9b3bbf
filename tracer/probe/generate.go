package probe

// The BPF objects and their Go bindings are committed; `make generate` rebuilds
// them and CI checks that the result matches what is checked in.
//go:generate go tool bpf2go -cc ${BPF_CLANG} -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target amd64 -type event -type stat -type inflight_key -type py_code -strip ${BPF_STRIP} cudatap ../../bpf/cudatap.bpf.c -- -I../../bpf
