/*
 * stub_amd64.S: the code a borrowed thread runs to make a call in the
 * target (internal/inject). It is written into the unused tail of an
 * executable page of the target, with the slots below filled in, and the
 * thread's rip set to stub. It must not need its tracer to give the thread
 * back: were cudatap and its guardian killed at any instant, the thread
 * finishes the call, restores everything it had, and goes on where it was.
 *
 * While the tracer lives it follows the thread with PTRACE_SYSCALL, takes
 * the results from r12 and r13 at the entry of the system call at marker,
 * and puts the thread back itself (the tail below never runs then).
 *
 * On entry: rsp is 16-byte aligned scratch stack, below what the thread
 * used; r15 is a 64-byte aligned area for XSAVE, as large as the thread's
 * XSAVE state. Position independent: every datum is RIP-relative.
 */
	.text
	.globl	stub
stub:
	cld
	/* The vector state the call may change (glibc's string functions run
	 * on AVX registers). Patched to fxsave64/fxrstor64 without XSAVE. */
	mov	rfbm_lo(%rip), %eax
	mov	rfbm_hi(%rip), %edx
	.globl	save
save:
	xsave64	(%r15)
	/* Asynchronous signals wait until the thread is back: a handler must
	 * not run in the middle of dlopen. Faults stay unblocked. */
	mov	$14, %eax		/* rt_sigprocmask */
	mov	$2, %edi		/* SIG_SETMASK */
	lea	call_mask(%rip), %rsi
	xor	%edx, %edx
	mov	$8, %r10d
	syscall
	mov	arg0(%rip), %rdi
	mov	arg1(%rip), %rsi
	mov	arg2(%rip), %rdx
	mov	arg3(%rip), %rcx
	mov	arg4(%rip), %r8
	mov	arg5(%rip), %r9
	xor	%eax, %eax		/* no vector arguments (variadic callees) */
	call	*fn(%rip)
	mov	%rax, %r12
	xor	%r13d, %r13d
	test	%rax, %rax
	jnz	1f
	mov	errfn(%rip), %rax	/* dlerror, when the call failed */
	test	%rax, %rax
	jz	1f
	call	*%rax
	mov	%rax, %r13
1:
	mov	rfbm_lo(%rip), %eax
	mov	rfbm_hi(%rip), %edx
	.globl	restore
restore:
	xrstor64 (%r15)
	mov	$14, %eax		/* the thread's own mask back */
	mov	$2, %edi
	lea	own_mask(%rip), %rsi
	xor	%edx, %edx
	mov	$8, %r10d
	syscall
	.globl	marker
marker:
	/* Alone from here: the registers as found (rax and rip already
	 * adjusted to restart an interrupted system call, as the kernel would
	 * have), flags first, as nothing below changes them. */
	push	r_flags(%rip)
	popfq
	mov	r_rax(%rip), %rax
	mov	r_rbx(%rip), %rbx
	mov	r_rcx(%rip), %rcx
	mov	r_rdx(%rip), %rdx
	mov	r_rsi(%rip), %rsi
	mov	r_rdi(%rip), %rdi
	mov	r_rbp(%rip), %rbp
	mov	r_r8(%rip), %r8
	mov	r_r9(%rip), %r9
	mov	r_r10(%rip), %r10
	mov	r_r11(%rip), %r11
	mov	r_r12(%rip), %r12
	mov	r_r13(%rip), %r13
	mov	r_r14(%rip), %r14
	mov	r_r15(%rip), %r15
	mov	r_rsp(%rip), %rsp
	jmp	*r_rip(%rip)

	/* The slots, filled in by the tracer; this order is slots in inject. */
	.balign	8
	.globl	slots
slots:
fn:		.quad 0
arg0:		.quad 0
arg1:		.quad 0
arg2:		.quad 0
arg3:		.quad 0
arg4:		.quad 0
arg5:		.quad 0
errfn:		.quad 0
rfbm_lo:	.long 0
rfbm_hi:	.long 0
call_mask:	.quad 0
own_mask:	.quad 0
r_flags:	.quad 0
r_rax:		.quad 0
r_rbx:		.quad 0
r_rcx:		.quad 0
r_rdx:		.quad 0
r_rsi:		.quad 0
r_rdi:		.quad 0
r_rbp:		.quad 0
r_r8:		.quad 0
r_r9:		.quad 0
r_r10:		.quad 0
r_r11:		.quad 0
r_r12:		.quad 0
r_r13:		.quad 0
r_r14:		.quad 0
r_r15:		.quad 0
r_rsp:		.quad 0
r_rip:		.quad 0
	.globl	end
end:
