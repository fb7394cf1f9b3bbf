// Package symbolize names code in live processes.
//
// A [Process] turns a runtime address (a kernel host stub passed to
// cudaLaunchKernel, a native stack frame) into a demangled function name,
// and finds which mapped object of a process defines a symbol (e.g.
// cudaLaunchKernel), whatever the file is called. [Demangle] and [Shorten]
// make C++ and Rust names readable; symbolize/unwind walks native stacks and
// symbolize/python names Python frames.
//
// The object files themselves (memory maps, opening, ELF symbol indexes,
// the cache that shares them between processes) are internal/objfile's.
// The package is pure Go (no cgo).
package symbolize
