// Package symbolize finds and names code in live processes.
//
// It serves two jobs of the tracer:
//
//   - discovery: find which mapped object of a process defines a symbol
//     (e.g. cudaLaunchKernel), whatever the file is called, and compute the
//     file offset a uprobe must be attached at;
//   - naming: turn a runtime address (a kernel host stub passed to
//     cudaLaunchKernel, a native stack frame) into a demangled function name.
//
// The package is pure Go (no cgo) and needs no privileges beyond being able
// to read /proc/PID/{maps,map_files,root} of the target. ELF symbol tables are
// indexed lazily, on the first lookup, into one compact sorted slice per file
// (no per-symbol allocations), and files are shared between processes through
// a [Cache] keyed by build-id.
package symbolize
