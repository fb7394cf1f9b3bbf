// Package inject loads a shared library into a running process, the way a
// debugger's "call dlopen(...)" does: it borrows one thread of the target
// with ptrace, makes it call dlopen, and puts it back exactly as it was.
// cudatap uses it to load its CUPTI collector into a live CUDA process.
//
// The first rule is to do the target no harm. Whatever happens, the
// borrowed thread gets back its registers, its floating-point and vector
// state and its signal mask; a system call it was blocked in resumes
// (restarts) as though nothing had happened; no signal meant for it is
// lost; and a callee that crashes is reported, not allowed to kill the
// process. See [Dlopen] for what is left to the caller.
//
// Only x86-64 Linux is supported; elsewhere the calls fail with
// [errors.ErrUnsupported].
package inject

import "errors"

var (
	// ErrNoProcess: the process, or the thread borrowed from it, does not
	// exist or exited.
	ErrNoProcess = errors.New("no such process")
	// ErrNotPermitted: this process may not ptrace the target.
	ErrNotPermitted = errors.New("ptrace not permitted")
	// ErrNoDlopen: the target has no dynamic loader to call (a static
	// binary, or a C library other than glibc).
	ErrNoDlopen = errors.New("no dlopen in the target process")
	// ErrCrashed: the called function faulted. The thread was put back as
	// it was before the call, the fault not delivered, but the function
	// did not finish, and may have left locks held or data half-written.
	ErrCrashed = errors.New("the called function crashed in the target")
)
