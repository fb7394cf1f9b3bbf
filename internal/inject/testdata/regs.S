// Register checks for target.c: hold known values in every register across
// a system call (guarded_syscall) or a spin loop (spin), then dump them all
// into a struct regs for target.c to compare. Written in assembly so that
// nothing but the kernel, and the injector, can touch them in between.
//
// struct regs: 0 nr, 8 args[6], 56 ret, 64 gpr[16] (by number: rax rbx rcx
// rdx rsi rdi rbp rflags r8 ... r15), 192 vec[16][32].
#define GPR(i) 64+8*i
#define VEC(i) 192+32*i
#ifdef __AVX__
#define VLOAD(i) vmovdqu want_vec+32*i(%rip), %ymm##i
#define VSAVE(i) vmovdqu %ymm##i, VEC(i)(%rcx)
#else
#define VLOAD(i) movdqu want_vec+32*i(%rip), %xmm##i
#define VSAVE(i) movdqu %xmm##i, VEC(i)(%rcx)
#endif
#define VALL(X) X(0); X(1); X(2); X(3); X(4); X(5); X(6); X(7); X(8); X(9); X(10); X(11); X(12); X(13); X(14); X(15)

	.text
	.macro enter
	push %rbx
	push %rbp
	push %r12
	push %r13
	push %r14
	push %r15
	push %rdi
	VALL(VLOAD)
	mov want_gpr+8*1(%rip), %rbx
	mov want_gpr+8*6(%rip), %rbp
	mov want_gpr+8*12(%rip), %r12
	mov want_gpr+8*13(%rip), %r13
	mov want_gpr+8*14(%rip), %r14
	mov want_gpr+8*15(%rip), %r15
	.endm

	// Saves all but rax, rcx and rflags; %rcx is the struct regs.
	.macro dump
	mov %rbx, GPR(1)(%rcx)
	mov %rdx, GPR(3)(%rcx)
	mov %rsi, GPR(4)(%rcx)
	mov %rdi, GPR(5)(%rcx)
	mov %rbp, GPR(6)(%rcx)
	mov %r8, GPR(8)(%rcx)
	mov %r9, GPR(9)(%rcx)
	mov %r10, GPR(10)(%rcx)
	mov %r11, GPR(11)(%rcx)
	mov %r12, GPR(12)(%rcx)
	mov %r13, GPR(13)(%rcx)
	mov %r14, GPR(14)(%rcx)
	mov %r15, GPR(15)(%rcx)
	VALL(VSAVE)
	.endm

	.macro leave_
	pop %rdi
	pop %r15
	pop %r14
	pop %r13
	pop %r12
	pop %rbp
	pop %rbx
#ifdef __AVX__
	vzeroupper
#endif
	ret
	.endm

	// void guarded_syscall(struct regs *s): s->ret = syscall(s->nr, s->args...)
	.globl guarded_syscall
	.type guarded_syscall, @function
guarded_syscall:
	enter
	mov 0(%rdi), %rax
	mov 16(%rdi), %rsi
	mov 24(%rdi), %rdx
	mov 32(%rdi), %r10
	mov 40(%rdi), %r8
	mov 48(%rdi), %r9
	mov 8(%rdi), %rdi
	syscall
	mov (%rsp), %rcx
	mov %rax, 56(%rcx)
	dump
	leave_
	.size guarded_syscall, .-guarded_syscall

	// void spin(struct regs *s): set spinning, and spin with DF set until
	// stop_spin != 0.
	.globl spin
	.type spin, @function
spin:
	enter
	mov want_gpr+8*0(%rip), %rax
	mov want_gpr+8*2(%rip), %rcx
	mov want_gpr+8*3(%rip), %rdx
	mov want_gpr+8*4(%rip), %rsi
	mov want_gpr+8*5(%rip), %rdi
	mov want_gpr+8*8(%rip), %r8
	mov want_gpr+8*9(%rip), %r9
	mov want_gpr+8*10(%rip), %r10
	mov want_gpr+8*11(%rip), %r11
	std
	movl $1, spinning(%rip)
1:	cmpl $0, stop_spin(%rip)
	je 1b
	pushfq
	cld
	push %rcx
	mov 16(%rsp), %rcx
	mov %rax, GPR(0)(%rcx)
	dump
	pop %rax
	mov %rax, GPR(2)(%rcx)
	pop %rax
	mov %rax, GPR(7)(%rcx)
	leave_
	.size spin, .-spin

	// int rseq_spin(uint64_t *rseq_cs): set spinning, and spin inside
	// a restartable sequence (rseq_cs is the thread's struct rseq's
	// field) until stop_spin != 0; return whether the sequence was still
	// armed at the end. A preemption or a signal aborts the sequence (the
	// kernel clears rseq_cs and jumps to the abort handler), which arms it
	// again; nothing else may disarm it.
	.globl rseq_spin
	.type rseq_spin, @function
rseq_spin:
	movl $1, spinning(%rip)
0:	lea spin_cs(%rip), %rax
	mov %rax, (%rdi)
1:	cmpl $0, stop_spin(%rip)
	je 1b
	mov (%rdi), %rax
2:	movq $0, (%rdi)
	lea spin_cs(%rip), %rdx
	cmp %rdx, %rax
	sete %al
	movzbl %al, %eax
	ret
	.long 0x53053053 // RSEQ_SIG, before the abort handler
3:	jmp 0b
	.size rseq_spin, .-rseq_spin

	.data
	.balign 32
spin_cs: // struct rseq_cs
	.long 0, 0 // version, flags
	.quad 1b, 2b-1b, 3b // start_ip, post_commit_offset, abort_ip

	.section .note.GNU-stack,"",@progbits
