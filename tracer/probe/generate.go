package probe

// The BPF objects and their Go bindings are committed; `make generate` rebuilds
// them and CI checks that the result matches what is checked in.
// One object per ABI the programs read arguments by (bpf/cudatap.bpf.c):
// x86-64 (-target amd64: __TARGET_ARCH_x86, the kernel's x86-64 headers) and
// arm64 (-target arm64: __TARGET_ARCH_arm64; its asm/ptrace.h, struct
// user_pt_regs, from Debian's linux-libc-dev-arm64-cross, searched after
// the common headers so that both objects share linux/bpf.h). Each build
// embeds its own; the types are the same in both.
//go:generate go tool bpf2go -cc ${BPF_CLANG} -cflags "-O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu" -target amd64 -type event -type stat -type inflight_key -type py_code -type kernel_args -strip ${BPF_STRIP} cudatap ../../bpf/cudatap.bpf.c -- -I../../bpf
//go:generate go tool bpf2go -cc ${BPF_CLANG} -cflags "-O2 -g -Wall -Werror -idirafter /usr/aarch64-linux-gnu/include" -target arm64 -type event -type stat -type inflight_key -type py_code -type kernel_args -strip ${BPF_STRIP} cudatap ../../bpf/cudatap.bpf.c -- -I../../bpf
